"""Inversion tables kept in a folder between processes.

A table's floors (:class:`dpcr.noise._tables.InversionTable`) are a pure function of its
distribution's exact parameters and of the code that computes them, and every process that
draws from a distribution computes them again: 17 ms of CPU for a discrete Laplace of scale 600,
63 ms for scale 2000, 0.37 s for a discrete Gaussian of variance 10^8. Within
:func:`table_cache`, a table that has a key is read from a file of the folder instead, and a
table computed is written there (owner-only, ``O_EXCL | O_NOFOLLOW``, renamed into place).

A file is used only when its header names the same key, the same number of boundaries and the
same code (the SHA-256 of the source of the modules that compute tables), when the SHA-256 of
its header and floors matches the one it holds, and when its floors are sorted; anything else is
a cold cache: the table is computed as without a folder, and the file replaced. The file holds
no data (the distribution's parameters are public), only what the parameters determine.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = ["load_floors", "save_floors", "table_cache"]

_FOLDER: ContextVar[Path | None] = ContextVar("dpcr_noise_tables", default=None)
_MAGIC = b"dpcr inversion table 1\n"
#: The modules whose source determines a table's floors (the boundaries, the exact arithmetic,
#: the floors' search): a change to any of them makes every file of the folder a miss.
_SOURCES = ("_exact.py", "_fast.py", "_tables.py")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


@contextmanager
def table_cache(folder: Path) -> Iterator[None]:
    """Read and write keyed inversion tables in ``folder`` (created owner-only when a table is
    first written there) within the block."""
    token = _FOLDER.set(Path(folder))
    try:
        yield
    finally:
        _FOLDER.reset(token)


@lru_cache(maxsize=1)
def _code() -> str | None:
    """The SHA-256 (hex) of the table modules' source, None when it cannot be read (then
    nothing is cached)."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    try:
        for name in _SOURCES:
            h.update((here / name).read_bytes())
    except OSError:
        return None
    return h.hexdigest()


def _header(key: str, m: int) -> bytes | None:
    code = _code()
    return None if code is None else _MAGIC + f"{key}\n{m}\n{code}\n".encode()


def _path(folder: Path, key: str) -> Path:
    return folder / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".table")


def load_floors(key: str, m: int) -> np.ndarray | None:
    """The ``m`` floors of table ``key`` from the folder of :func:`table_cache`, or None (no
    folder, no file, or a file that is not exactly this table's: see the module docstring)."""
    folder = _FOLDER.get()
    header = _header(key, m) if folder is not None else None
    if folder is None or header is None:
        return None
    try:
        fd = os.open(_path(folder, key), os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(len(header) + 32 + 8 * m + 1)
    body = data[len(header) + 32 :]
    digest = data[len(header) : len(header) + 32]
    if (not data.startswith(header) or len(body) != 8 * m
            or hashlib.sha256(header + body).digest() != digest):  # fmt: skip
        return None
    floors = np.frombuffer(body, dtype="<u8").astype(np.uint64)
    if m > 1 and not bool(np.all(floors[1:] >= floors[:-1])):
        return None
    return floors


def save_floors(key: str, floors: np.ndarray) -> None:
    """Write table ``key``'s floors to the folder of :func:`table_cache` (nothing without one;
    a failure to write only leaves the cache cold)."""
    folder = _FOLDER.get()
    header = _header(key, int(floors.size)) if folder is not None else None
    if folder is None or header is None:
        return
    body = np.ascontiguousarray(floors, dtype="<u8").tobytes()
    content = header + hashlib.sha256(header + body).digest() + body
    path = _path(folder, key)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with suppress(OSError):
        with suppress(FileExistsError):
            folder.mkdir(mode=0o700)
            os.chmod(folder, 0o700)  # (whatever the umask)
        if not stat.S_ISDIR(os.lstat(folder).st_mode):  # (a link: nothing written through it)
            return
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o600)  # (whatever the umask)
                f.write(content)
            os.replace(tmp, path)
        finally:
            with suppress(OSError):
                tmp.unlink()
