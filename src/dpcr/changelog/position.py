"""The position of an append-only source file: how far earlier runs read it, and the proof
that what they read is still there.

A run that reads a line-format source (JSON lines, Debezium, wal2json, CSV) records a *block
position* ``file2:<bytes>:<root>:<tail>``: the file's size when it was read, cut in blocks of
:data:`BLOCK` (1 MiB); ``root`` is the SHA-256 of the SHA-256 digests of its full blocks and
``tail`` the SHA-256 of the bytes after them (the last, partial block). The full blocks' digests
are kept beside the release's state (``<store>.state/source-blocks``, rewritten by every run,
trusted only when they give ``root``). New records are appended after the position; what is
checked of the bytes before it, and when (:func:`advance`):

* every run: the file still holds at least the consumed bytes ("gone" otherwise); the last,
  partial block of the consumed bytes is unchanged (re-hashed whole: less than 1 MiB); a last
  consumed line without a line end was ended, not extended; and :data:`RECHECK` (4) full blocks
  in turn, from where the previous run stopped, so that a change anywhere in the consumed bytes
  is found within ceil(full blocks / 4) runs (a 1 GB file: 239 runs);
* every run that reads consumed bytes again (the first run on a store that holds a ``file1``
  position, a state rebuilt from the whole file, and sources read whole every run: CSV, the
  Spark engine, ``on_exhausted = "retire"``, ``kind = "exhausted"`` queries), and every run
  whose kept digests are missing or do not give ``root``: every consumed byte, before any of
  them is read;
* ``dpcr verify`` (:mod:`dpcr.release._verify`): every consumed byte, writing nothing;
* a long-running session (:class:`HeldPosition`): every consumed byte at its first run (and
  at its first after the file was replaced or another process moved the position); at its
  other runs the last, partial block (compared byte for byte with the bytes the session read
  there, whose SHA-256 the position holds) and the line end only, no full block.

Bytes a run does not read cannot change what it releases: a run that reads only the bytes after
the position releases what the history as it was consumed gives, whatever the file now holds
before it. A rewrite it did not look at is found by a later run, or by ``dpcr verify``.

A file whose last consumed byte is not a newline ended in a record that was still being
written; a later run that finds the file longer refuses it unless the next byte ends that line
(the record was extended, so a consumed record changed). Stores written before block positions
hold ``file1:<bytes>:<sha256>`` (:func:`read_position`: one SHA-256 of the whole prefix),
checked once in full and then replaced by a block position. Parquet files and SQLite logs are
not append-only byte streams (a Parquet file is rewritten whole; a SQLite database rewrites
pages): they keep the record digest of :func:`dpcr.changelog.raw_digest` (SQLite), checked in
full by every run, or the row-group position of :mod:`dpcr.changelog.parquet_position`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Prefix of a position token.
FILE_POSITION = "file1:"

_CHUNK = 1 << 22
_END = 1 << 16


@dataclass(frozen=True, slots=True)
class FilePosition:
    """``size`` bytes of a file with SHA-256 ``sha256`` (hex) and their last byte ``last``."""

    size: int
    sha256: str
    last: int | None = None

    @property
    def token(self) -> str:
        return f"{FILE_POSITION}{self.size}:{self.sha256}"


def parse_token(token: str) -> FilePosition | BlockPosition | None:
    """The position in ``token`` (a ``file2`` block position, or the ``file1`` position of an
    older store), or None when it is not a line file's position token."""
    if token.startswith(BLOCK_POSITION):
        parts = token[len(BLOCK_POSITION):].split(":")
        if len(parts) != 3 or not parts[0].isdigit() or not all(len(p) == 64 for p in parts[1:]):
            return None
        return BlockPosition(int(parts[0]), parts[1], parts[2])
    if not token.startswith(FILE_POSITION):
        return None
    size, _, sha = token[len(FILE_POSITION):].partition(":")
    if not size.isdigit() or len(sha) != 64:
        return None
    return FilePosition(int(size), sha)


def snapshot(path: Path) -> tuple[int, int]:
    """(size, modification time in ns) of ``path``: compared before and after a read to notice
    a file that grew while it was read."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _line_ended(f: Any, done: int) -> None:
    """The consumed part (``done`` bytes) ended inside a line: the next byte must end that line,
    or the last consumed record has been extended. Leaves ``f`` at ``done``."""
    f.seek(done)
    nxt = f.read(1)
    f.seek(done)
    if nxt not in (b"\n", b"\r"):
        raise SourceRewritten(
            "the last record earlier runs read had no line end and has since been extended"
        )


def _gone(size: int, consumed: int) -> SourceRewritten:
    return SourceRewritten(
        f"the file now has {size} bytes but earlier runs read {consumed}: records they "
        "consumed are gone; dpcr needs the whole append-only changelog"
    )


def read_position(path: Path, size: int, *, check: FilePosition | None = None) -> FilePosition:
    """The position of the first ``size`` bytes of ``path`` as one SHA-256 (a ``file1`` token,
    which stores written before block positions hold; a Parquet file's bytes), hashing them
    once. With ``check`` (an earlier position), raise :class:`SourceRewritten` unless those
    bytes begin with the bytes ``check`` describes."""
    h = hashlib.sha256()
    done = 0
    last: int | None = None
    checked = check is None or check.size == 0
    if check is not None and check.size > size:
        raise _gone(size, check.size)
    with open(path, "rb") as f:
        while done < size:
            want = min(_CHUNK, size - done)
            if not checked and check is not None:
                want = min(want, check.size - done)
            block = f.read(want)
            if not block:
                raise SourceRewritten(f"the file ended at byte {done} while {size} were expected")
            h.update(block)
            done += len(block)
            last = block[-1]
            if not checked and check is not None and done == check.size:
                if h.hexdigest() != check.sha256:
                    raise SourceRewritten(
                        "the bytes earlier runs read have changed (rewritten history)"
                    )
                if size > check.size and last != 0x0A:
                    _line_ended(f, done)
                checked = True
    return FilePosition(size, h.hexdigest(), last)


class SourceRewritten(Exception):
    """The source no longer begins with what earlier runs consumed."""


#: Prefix of a block position token: ``file2:<bytes>:<root>:<tail>``.
BLOCK_POSITION = "file2:"
#: Bytes per block of a block position (1 MiB).
BLOCK = 1 << 20
#: Full blocks that every check re-hashes in turn, besides the last, partial one.
RECHECK = 4
_BLOCKS_HEADER = "dpcr-source-blocks"


@dataclass(frozen=True, slots=True)
class BlockPosition:
    """``size`` bytes of a file in blocks of :data:`BLOCK` bytes: ``root`` is the SHA-256 of the
    SHA-256 digests of its ``size // BLOCK`` full blocks (concatenated, 32 bytes each), ``tail``
    the SHA-256 of the bytes after them (fewer than a block); ``last`` their last byte."""

    size: int
    root: str
    tail: str
    last: int | None = None

    @property
    def token(self) -> str:
        return f"{BLOCK_POSITION}{self.size}:{self.root}:{self.tail}"


@dataclass(slots=True)
class BlockDigests:
    """The digests of a file's first full blocks (32 bytes each, in order), as a run keeps them
    beside its state, and the full block the next check re-hashes first (``turn``)."""

    digests: list[bytes]
    turn: int = 0


def root_of(digests: list[bytes]) -> str:
    """The ``root`` of a :class:`BlockPosition` whose full blocks have ``digests``."""
    return hashlib.sha256(b"".join(digests)).hexdigest()


def load_blocks(path: Path | None) -> BlockDigests:
    """The block digests kept at ``path`` (none when there is no such file or it is not one
    dpcr wrote: the check then re-hashes every consumed byte)."""
    if path is None:
        return BlockDigests([])
    from dpcr._fs import read_nofollow
    from dpcr.errors import OutputError

    try:
        lines = read_nofollow(path).decode("ascii").split("\n")
        name, size, turn = lines[0].split(" ")
        if name != _BLOCKS_HEADER or int(size) != BLOCK or lines[-1] != "":
            return BlockDigests([])
        return BlockDigests([bytes.fromhex(x) for x in lines[1:-1]], int(turn))
    except (OutputError, ValueError, UnicodeDecodeError):
        return BlockDigests([])


def save_blocks(path: Path, blocks: BlockDigests) -> None:
    """Keep ``blocks`` at ``path`` (owner-only, in an owner-only folder; replaced atomically). A
    lost or stale file costs one full check; what it holds is checked against the position."""
    from dpcr._fs import ensure_dir, write_atomic

    ensure_dir(path.parent, 0o700)
    text = f"{_BLOCKS_HEADER} {BLOCK} {blocks.turn}\n" + "".join(
        d.hex() + "\n" for d in blocks.digests
    )
    write_atomic(path, text, mode=0o600, durable=False)


def _changed(start: int, end: int) -> SourceRewritten:
    return SourceRewritten(
        f"the bytes earlier runs read have changed (rewritten history, in bytes {start} .. {end})"
    )


def _full_blocks(f: Any, blocks: range) -> list[bytes]:
    """The digests of the full blocks ``blocks`` of ``f``."""
    out = []
    for i in blocks:
        f.seek(i * BLOCK)
        data = f.read(BLOCK)
        if len(data) != BLOCK:
            raise SourceRewritten(f"the file ended inside block {i} while it was checked")
        out.append(hashlib.sha256(data).digest())
    return out


def _check_blocks(
    f: Any, check: BlockPosition, known: BlockDigests, *, every: bool, recheck: int = RECHECK
) -> list[bytes]:
    """Re-hash the full blocks of the consumed bytes ``check`` describes (every one, or
    ``recheck`` of them in turn when ``known`` holds their digests) and return the digests
    of all of them; raise :class:`SourceRewritten` when one differs."""
    k = check.size // BLOCK
    trusted = len(known.digests) >= k and root_of(known.digests[:k]) == check.root
    if not trusted or every:
        digests = _full_blocks(f, range(k))
        if not trusted:
            if root_of(digests) != check.root:
                raise _changed(0, k * BLOCK)
            return digests
        for i, (a, b) in enumerate(zip(digests, known.digests, strict=False)):
            if a != b:
                raise _changed(i * BLOCK, (i + 1) * BLOCK)
        return digests
    for j in range(min(recheck, k)):
        i = (known.turn + j) % k
        if _full_blocks(f, range(i, i + 1))[0] != known.digests[i]:
            raise _changed(i * BLOCK, (i + 1) * BLOCK)
    return known.digests[:k]


def advance(
    path: Path,
    size: int,
    *,
    check: FilePosition | BlockPosition | None,
    blocks: Path | None = None,
    every: bool = False,
    save: bool = True,
) -> BlockPosition:
    """The block position of the first ``size`` bytes of ``path``, after checking that they
    begin with the bytes ``check`` (an earlier position, None for none) describes; raise
    :class:`SourceRewritten` otherwise. ``blocks``: where the digests of the full blocks are
    kept between runs (read, then replaced unless ``save`` is false).

    What is read: with the digests of ``check``'s full blocks kept at ``blocks``, only
    :data:`RECHECK` of those blocks in turn (all of them with ``every``), ``check``'s last,
    partial block and the bytes after it; otherwise every byte (a ``file1`` position of an
    older store is checked by its SHA-256 of the whole prefix). See the module docstring for
    what each check finds."""
    return _advance_kept(path, size, check, blocks, every=every, save=save)[0]


def _advance_kept(
    path: Path, size: int, check: FilePosition | BlockPosition | None, blocks: Path | None,
    *, every: bool, save: bool = True,
) -> tuple[BlockPosition, BlockDigests, Tail]:
    """:func:`advance` with the digests kept at ``blocks``; returns the position, the
    digests of its full blocks with the next turn (saved at ``blocks`` unless ``save`` is
    false) and its last, partial block (:class:`Tail`)."""
    known = load_blocks(blocks)
    position, digests, tail = _advance(path, size, check, known, every=every)
    k = len(digests)
    kept = BlockDigests(digests, (known.turn + RECHECK) % k if k else 0)
    if blocks is not None and save:
        save_blocks(blocks, kept)
    return position, kept, tail


@dataclass(frozen=True, slots=True)
class Tail:
    """The bytes of a block position's last, partial block, and the SHA-256 object that
    hashed them (its ``tail``; not to be updated: copied)."""

    data: bytes
    state: Any


def _advance(
    path: Path, size: int, check: FilePosition | BlockPosition | None, known: BlockDigests,
    *, every: bool, recheck: int = RECHECK, held: Tail | None = None,
) -> tuple[BlockPosition, list[bytes], Tail]:
    """:func:`advance` with the digests ``known`` (``recheck`` of the full blocks re-hashed
    in turn); returns the position, the digests of its full blocks and its last, partial
    block. ``held``: the last, partial block of ``check`` as this process read and hashed
    it (its SHA-256 is ``check.tail``): the file's bytes there are compared with it, byte
    for byte, instead of hashed again."""
    if check is not None and check.size > size:
        raise _gone(size, check.size)
    if isinstance(check, FilePosition):  # (one more pass over the prefix, once per store)
        read_position(path, size, check=check)
        check = None
    with open(path, "rb") as f:
        start, digests = 0, []
        if isinstance(check, BlockPosition):
            digests = _check_blocks(f, check, known, every=every, recheck=recheck)
            start = len(digests) * BLOCK
        h, done, last = hashlib.sha256(), start, None
        part: list[bytes] = []  # (the bytes read since the last full block)
        if check is not None and check.size == start:  # (its tail is empty)
            _check_tail(f, h, check, size)
        elif check is not None and held is not None and len(held.data) == check.size - start:
            h, done, last = _compare_tail(f, held, start, size), check.size, held.data[-1]
            part.append(held.data)
        f.seek(done)
        while done < size:
            want = min(BLOCK - done % BLOCK, size - done)
            if check is not None and done < check.size:
                want = min(want, check.size - done)
            data = f.read(want)
            if not data:
                raise SourceRewritten(f"the file ended at byte {done} while {size} were expected")
            h.update(data)
            part.append(data)
            done += len(data)
            last = data[-1]
            if check is not None and done == check.size:
                _check_tail(f, h, check, size)
            if done % BLOCK == 0:
                digests.append(h.digest())
                h, part = hashlib.sha256(), []
        if last is None and size:
            f.seek(size - 1)
            last = f.read(1)[0]
    position = BlockPosition(size, root_of(digests), h.hexdigest(), last)
    return position, digests, Tail(part[0] if len(part) == 1 else b"".join(part), h)


def _compare_tail(f: Any, held: Tail, start: int, size: int) -> Any:
    """The last, partial block of the consumed bytes (from ``start``) compared with the bytes
    ``held`` holds (what :func:`_check_tail` checks, by the bytes instead of their SHA-256),
    and the line end checked; returns the SHA-256 object of those bytes (a copy of the held
    one). Leaves ``f`` where it was."""
    at, end = f.tell(), start + len(held.data)
    f.seek(start)
    data = f.read(len(held.data))
    if len(data) < len(held.data):
        raise SourceRewritten(f"the file ended at byte {start + len(data)} while {size} were "
                              "expected")  # fmt: skip
    if data != held.data:
        raise _changed(start, end)
    _check_end(f, end, size)
    f.seek(at)
    return held.state.copy()


class HeldPosition:
    """What a long-running process (a release session) holds of a line file's position
    between its runs: the position it last reached, of which file (device and inode), the
    digests of its full blocks and the bytes of its last, partial block (:class:`Tail`). Its
    first check (:meth:`advance`), and the first after the file was replaced (another inode)
    or after a position it did not reach itself, re-hashes every consumed byte; each later one
    compares the last, partial block of the consumed bytes with the bytes it holds (byte for
    byte: what their SHA-256, the position's ``tail``, would find, without hashing them again)
    and hashes the bytes after them (the full blocks before were checked by the session's
    first check: a rewrite of one of them since is found by the next process's check in turn,
    or by ``dpcr verify``). The digests kept at ``blocks`` are rewritten when a full block is
    added."""

    def __init__(self) -> None:
        self._at: tuple[str, tuple[int, int], str, BlockDigests] | None = None
        #: the last, partial block of the position of that token
        self._tail: tuple[str, Tail] | None = None

    def advance(
        self, path: Path, size: int, *, check: FilePosition | BlockPosition | None, token: str,
        blocks: Path | None = None, every: bool = False,
    ) -> BlockPosition:
        """:func:`advance` of ``path`` from ``check`` (the store's position, whose token is
        ``token``), checking what the class docstring says."""
        st = os.stat(path)
        ident = (st.st_dev, st.st_ino)
        held, self._at = self._at, None
        tail, self._tail = self._tail, None
        if (
            held is None or not isinstance(check, BlockPosition) or every
            or held[:3] != (str(path), ident, token)
        ):  # fmt: skip
            position, known, got = _advance_kept(path, size, check, blocks, every=True)
        else:
            known = held[3]
            position, digests, got = _advance(
                path, size, check, known, every=False, recheck=0,
                held=tail[1] if tail is not None and tail[0] == token else None,
            )
            if digests != known.digests:
                known = BlockDigests(digests, known.turn % len(digests) if digests else 0)
                if blocks is not None:
                    save_blocks(blocks, known)
        self._at = (str(path), ident, position.token, known)
        self._tail = position.token, got
        return position


def _check_tail(f: Any, h: Any, check: BlockPosition, size: int) -> None:
    """At the end of the consumed bytes (``h``: the hash of their last, partial block): it must
    be the one ``check`` holds, and a last consumed line without a line end must not have been
    extended (:func:`_check_end`). Leaves ``f`` where it was."""
    if h.hexdigest() != check.tail:
        raise _changed(check.size // BLOCK * BLOCK, check.size)
    _check_end(f, check.size, size)


def _check_end(f: Any, consumed: int, size: int) -> None:
    """A last consumed line (of ``consumed`` bytes) without a line end must not have been
    extended in the file of ``size`` bytes. Leaves ``f`` where it was."""
    if size > consumed and consumed:
        at = f.tell()
        f.seek(consumed - 1)
        if f.read(1) != b"\n":
            _line_ended(f, consumed)
        f.seek(at)


def nothing_past(path: Path, token: str, *, blocks: Path | None = None) -> BlockPosition | None:
    """The block position of ``path`` when the file holds nothing past the block position
    ``token`` (the same size, its last byte a line end), after the check :func:`advance` makes
    of a run that reads only the bytes after a position (``every`` false: the last, partial
    block and :data:`RECHECK` full blocks in turn; the digests kept at ``blocks`` move on).
    None when ``token`` is no block position, the file is longer or shorter, or its last
    consumed byte ends no line: then the file is read. Raises :class:`SourceRewritten` as
    :func:`advance` does."""
    check = parse_token(token)
    if not isinstance(check, BlockPosition) or not check.size:
        return None
    try:
        if os.stat(path).st_size != check.size or _byte(path, check.size - 1) != 0x0A:
            return None
    except OSError:
        return None
    return advance(path, check.size, check=check, blocks=blocks)


def between(path: Path, start: BlockPosition, end: BlockPosition, *,
            blocks: Path | None = None) -> bytes:  # fmt: skip
    """The bytes of ``path`` from ``start.size`` to ``end.size``, read once, after checking
    that the file's first ``end.size`` bytes are the ones the position ``end`` describes and
    its first ``start.size`` the ones ``start`` describes; raise :class:`SourceRewritten`
    otherwise. The full blocks before ``start``'s last, partial block are taken from the
    digests kept at ``blocks`` when those give ``end``'s root (a run reading past ``end``
    re-hashes them in turn, as :func:`advance` does), else re-hashed; every byte from there on
    is read and hashed."""
    if start.size > end.size:
        raise _gone(end.size, start.size)
    known = load_blocks(blocks)
    k0, k1 = start.size // BLOCK, end.size // BLOCK
    with open(path, "rb") as f:
        if len(known.digests) >= k1 and root_of(known.digests[:k1]) == end.root:
            digests = known.digests[:k0]
        else:
            digests = _full_blocks(f, range(k0))
        f.seek(k0 * BLOCK)
        data = f.read(end.size - k0 * BLOCK)
    if len(data) != end.size - k0 * BLOCK:
        raise _gone(k0 * BLOCK + len(data), end.size)
    cut = start.size - k0 * BLOCK
    if root_of(digests) != start.root or hashlib.sha256(data[:cut]).hexdigest() != start.tail:
        raise _changed(0, start.size)
    digests = digests + [hashlib.sha256(data[i:i + BLOCK]).digest()
                         for i in range(0, (k1 - k0) * BLOCK, BLOCK)]  # fmt: skip
    tail = hashlib.sha256(data[(k1 - k0) * BLOCK:]).hexdigest()
    if root_of(digests) != end.root or tail != end.tail:
        raise _changed(start.size, end.size)
    return data[cut:]


def _byte(path: Path, at: int) -> int | None:
    with open(path, "rb") as f:
        f.seek(at)
        b = f.read(1)
    return b[0] if b else None


def complete_lines(path: Path, size: int) -> int:
    """The end of the last complete line (just after its line feed) among the first ``size``
    bytes of ``path``; 0 when they hold no line feed."""
    with open(path, "rb") as f:
        end = size
        while end > 0:
            start = max(0, end - _END)
            f.seek(start)
            block = f.read(end - start)
            i = block.rfind(b"\n")
            if i >= 0:
                return start + i + 1
            end = start
    return 0


@contextmanager
def copy_range(
    path: Path, start: int, end: int, *, prefix: str = "dpcr-tail-",
    directory: Path | None = None,
) -> Iterator[tuple[Path, int]]:
    """A private copy (0600, in ``directory``, deleted afterwards) of bytes ``start .. end`` of
    ``path``, and how many bytes it holds (fewer when the file is shorter)."""
    import tempfile

    fd, name = tempfile.mkstemp(prefix=prefix, suffix=path.suffix, dir=directory)
    try:
        copied = 0
        with open(path, "rb") as f, os.fdopen(fd, "wb") as out:
            f.seek(start)
            while copied < end - start:
                block = f.read(min(_CHUNK, end - start - copied))
                if not block:
                    break
                out.write(block)
                copied += len(block)
        yield Path(name), copied
    finally:
        with suppress(OSError):
            os.unlink(name)


@contextmanager
def complete_prefix(
    path: Path, size: int, directory: Path | None = None
) -> Iterator[tuple[Path, int]]:
    """A private copy (0600, in ``directory``, deleted afterwards) of the complete lines among
    the first ``size`` bytes of the line file ``path`` (all of them when they hold no line
    feed), and its size: what a run reads when a writer is appending to the file while it is
    read (the copy holds still; the position then covers the copy)."""
    cut = complete_lines(path, size) or size
    with copy_range(path, 0, cut, prefix="dpcr-prefix-", directory=directory) as copy:
        yield copy


