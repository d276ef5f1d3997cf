"""Files and folders dpcr writes: created without following symbolic links, with explicit modes.

A file is written as ``<name>.tmp`` in its folder, created new (``O_CREAT | O_EXCL |
O_NOFOLLOW``), given its mode explicitly (whatever the umask), written, flushed to the disk and
renamed over ``<name>``. The folder is opened once without following a link, and the file is
created and renamed relative to that descriptor, so a link swapped in meanwhile cannot redirect
the write. A folder dpcr creates gets its mode explicitly; a folder or file that exists keeps its
mode: dpcr changes the mode of nothing it did not create. A symbolic link where dpcr writes is
refused with one line (:class:`~dpcr.errors.OutputError`); a full disk says so, and what to do
(:class:`~dpcr.errors.DiskFullError`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TextIO

from dpcr.errors import DiskFullError, OutputError

__all__ = [
    "create_or_open",
    "ensure_dir",
    "full",
    "is_full",
    "read_nofollow",
    "refuse_link",
    "refuse_world_writable",
    "write_atomic",
]

#: Folders dpcr creates above the ones it names (``output.dir`` and its parents).
PARENT_MODE = 0o755
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a full disk or an exhausted quota."""
    return isinstance(exc, OSError) and exc.errno in _FULL


def full(path: Path | str, *, then: str | None = None) -> DiskFullError:
    """The error of a full disk while writing ``path``; ``then`` says what is intact and what
    the next run does (by default: the store is never left half-written)."""
    return DiskFullError(
        f"cannot write {str(path)!r}: the disk is full. "
        + (then or "The store is intact (it is never left half-written): free space and run again")
    )


def _failure(path: Path, exc: OSError, doing: str) -> OutputError | DiskFullError:
    if is_full(exc):
        return full(path)
    if exc.errno == errno.ELOOP:
        return _link(path)
    return OutputError(
        f"cannot {doing} {str(path)!r} ({exc.strerror or exc}); choose an output.dir you can "
        "write to"
    )


def _link(path: Path) -> OutputError:
    return OutputError(
        f"{str(path)!r} is a symbolic link where dpcr writes its own files: dpcr never writes "
        "through a link. Remove the link (dpcr creates the file or folder itself, with "
        "owner-only or public modes as docs/store.md says), or choose another output.dir"
    )


def refuse_link(path: Path) -> None:
    """Refuse a symbolic link at ``path`` (nothing there is fine)."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return  # nothing there (creating it reports what stands in the way)
    except OSError as exc:
        raise _failure(path, exc, "inspect") from None
    if stat.S_ISLNK(info.st_mode):
        raise _link(path)


def ensure_dir(path: Path, mode: int, *, follow: bool = False) -> Path:
    """``path`` as a folder: created with ``mode`` when missing (missing parents with 0755),
    kept as it is when it exists. A symbolic link at ``path`` is refused unless ``follow`` (the
    operator's own ``output.dir`` may be a link; nothing dpcr creates inside it may)."""
    path = path if isinstance(path, Path) else Path(path)  # (a Path as it is: parsed once)
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        info = None
    except OSError as exc:
        raise _failure(path, exc, "create the folder") from None
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            if not follow:
                raise _link(path)
            if path.is_dir():
                return path
        if not path.is_dir():
            raise OutputError(
                f"cannot create the folder {str(path)!r}: a file is in its place; choose an "
                "output.dir you can write to"
            )
        return path
    if path.parent != path:
        ensure_dir(path.parent, PARENT_MODE, follow=True)
    try:
        os.mkdir(path, 0o700)  # never more open than its final mode, set below
    except FileExistsError:
        return ensure_dir(path, mode, follow=follow)  # created meanwhile: look again
    except OSError as exc:
        raise _failure(path, exc, "create the folder") from None
    try:
        fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        raise _failure(path, exc, "create the folder") from None
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path


def _open_dir(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        raise _failure(path, exc, "open the folder") from None


def write_atomic(
    path: Path, content: str | bytes | Callable[[TextIO], None], *, mode: int,
    durable: bool = True,
) -> None:
    """Replace ``path`` (in an existing folder that is not a link) with ``content`` (text, its
    UTF-8 bytes, or a function writing text), file mode ``mode``; flushed to the disk first
    when ``durable``."""
    path = path if isinstance(path, Path) else Path(path)  # (a Path as it is: parsed once)
    folder, name, tmp = path.parent, path.name, path.name + ".tmp"
    dfd = _open_dir(folder)
    try:
        with suppress(FileNotFoundError):
            info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                raise _link(path)
        fd = _create_new(tmp, dfd)
        try:
            os.fchmod(fd, mode)
            if isinstance(content, str | bytes):
                _write_all(fd, content.encode("utf-8") if isinstance(content, str) else content)
                if durable:
                    os.fsync(fd)
                os.close(fd)
                fd = -1
            else:
                with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                    fd = -1  # owned by fh
                    content(fh)
                    fh.flush()
                    if durable:
                        os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    except OSError as exc:
        raise _failure(path, exc, "write") from None
    finally:
        os.close(dfd)


def _create_new(name: str, dfd: int) -> int:
    """``name`` in the folder ``dfd``, created new (mode 0600, not following a link): what a
    killed run left there (a file or a link) is removed first."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    try:
        return os.open(name, flags, 0o600, dir_fd=dfd)
    except FileExistsError:
        os.unlink(name, dir_fd=dfd)  # (a link there is removed, not followed)
        return os.open(name, flags, 0o600, dir_fd=dfd)


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (a short write continues)."""
    view, done = memoryview(data), 0
    while done < len(data):
        done += os.write(fd, view[done:])


def create_or_open(path: Path, mode: int) -> tuple[int, bool]:
    """A read-write descriptor of ``path`` and whether it was created: created new with
    ``mode`` (set explicitly), or the existing file opened as it is. A link is refused."""
    flags = os.O_RDWR | _NOFOLLOW | _CLOEXEC
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            return os.open(path, flags), False
        except OSError as exc:
            raise _failure(path, exc, "open") from None
    except OSError as exc:
        raise _failure(path, exc, "create") from None
    try:
        os.fchmod(fd, mode)
    except OSError as exc:
        os.close(fd)
        raise _failure(path, exc, "create") from None
    return fd, True


def read_nofollow(path: Path) -> bytes:
    """The bytes of ``path``, refusing a link (:class:`OutputError`)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        raise _failure(path, exc, "read") from None
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def refuse_world_writable(folder: Path, what: str) -> None:
    """Refuse a folder every local user may write to (without the sticky bit): anyone could
    replace ``what`` in it."""
    try:
        info = os.stat(folder)
    except OSError:
        return  # created by dpcr next (0755), or reported when it is used
    if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
        raise OutputError(
            f"the folder {str(folder)!r} holding {what} is writable by every local user (mode "
            f"{stat.S_IMODE(info.st_mode):04o}): anyone could replace {what} there. Run `chmod "
            f"o-w {folder}` and run again"
        )
