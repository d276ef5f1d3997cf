"""The position of an append-only source file: how far earlier runs read it, and a proof that
what they read is still there, byte for byte.

A run that reads a line-format source (JSON lines, Debezium, wal2json, CSV) records a *position
token* ``file1:<bytes>:<sha256>``: the file's size when it was read and the SHA-256 of those
bytes. The next run accepts the source only if the file still begins with exactly those bytes
(new records appended after them are what is new). Hashing runs at about 2 GB/s, so the check
costs a fraction of reading the file, and it needs no record-by-record digest. A process that
reads the same file again from the position it hashed last (``dpcr follow``'s release steps)
continues its hash over the new bytes only, after checking that the first and last 64 KiB
before that position are unchanged: each new process verifies the whole prefix once.

A file whose last consumed byte is not a newline ended in a record that was still being
written; a later run that finds the file longer refuses it (the record was extended, so a
consumed record changed). Parquet files and SQLite logs are not append-only byte streams (a
Parquet file is rewritten whole; a SQLite database rewrites pages): they keep the record digest
of :func:`dpcr.changelog.raw_digest` (SQLite) or a hash of their rows (:func:`parquet_position`).
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


@dataclass(frozen=True, slots=True)
class FilePosition:
    """``size`` bytes of a file with SHA-256 ``sha256`` (hex) and their last byte ``last``."""

    size: int
    sha256: str
    last: int | None = None

    @property
    def token(self) -> str:
        return f"{FILE_POSITION}{self.size}:{self.sha256}"


def parse_token(token: str) -> FilePosition | None:
    """The position in ``token``, or None when it is not a file position token."""
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


#: Per file (path, device, inode): the bytes this process hashed last, their hash state, last
#: byte and the digest of their ends (:func:`_ends`). A later read of the same file in this
#: process that continues from exactly that position (a long-running follower's next release
#: step) hashes only the bytes after it, once the ends still match.
_HASHED: dict[tuple[str, int, int], tuple[int, Any, int | None, str]] = {}
_END = 1 << 16


def _ends(f: Any, size: int) -> str:
    """SHA-256 of the first and the last 64 KiB of the first ``size`` bytes of ``f``."""
    f.seek(0)
    head = f.read(min(_END, size))
    f.seek(max(0, size - _END))
    tail = f.read(min(_END, size))
    return hashlib.sha256(head + b"\0" + tail).hexdigest()


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


def read_position(path: Path, size: int, *, check: FilePosition | None = None) -> FilePosition:
    """The position of the first ``size`` bytes of ``path``, hashing them once. With ``check``
    (an earlier position), raise :class:`SourceRewritten` unless those bytes begin with the
    bytes ``check`` describes.

    Within one process, a check at the position this process hashed last in the same file (same
    device and inode, same size and digest) trusts those bytes and hashes only what follows:
    every new process verifies the whole prefix once."""
    h = hashlib.sha256()
    done = 0
    last: int | None = None
    checked = check is None or check.size == 0
    if check is not None and check.size > size:
        raise SourceRewritten(
            f"the file now has {size} bytes but earlier runs read {check.size}: records they "
            "consumed are gone; dpcr needs the whole append-only changelog"
        )
    st = os.stat(path)
    key = (str(path), st.st_dev, st.st_ino)
    known = _HASHED.get(key)
    with open(path, "rb") as f:
        if (
            known is not None and check is not None and check.size == known[0] <= size
            and known[1].hexdigest() == check.sha256 and _ends(f, known[0]) == known[3]
        ):  # fmt: skip
            h, done, last, checked = known[1].copy(), known[0], known[2], True
            if size > done and last not in (None, 0x0A):
                _line_ended(f, done)
        f.seek(done)
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
        ends = _ends(f, size)
    if len(_HASHED) > 64:
        _HASHED.clear()
    _HASHED[key] = (size, h.copy(), last, ends)
    return FilePosition(size, h.hexdigest(), last)


class SourceRewritten(Exception):
    """The source no longer begins with what earlier runs consumed."""


#: Prefix of a Parquet position token.
PARQUET_POSITION = "pq1:"


@dataclass(frozen=True, slots=True)
class ParquetPosition:
    """A Parquet file as earlier runs read it: the DuckDB version that hashed it, its size and
    SHA-256, its number of rows and the sum of the rows' hashes (each row hashed with its row
    number, so reordering shows).

    A Parquet file is rewritten whole when rows are added, so the bytes cannot be compared; the
    rows can. DuckDB's ``hash`` is fast but may change between DuckDB versions: when the file
    is byte-identical no row hash is needed, and when it changed under a different DuckDB
    version the rows cannot be compared and the run is refused.
    """

    duckdb_version: str
    size: int
    sha256: str
    rows: int
    row_hash: int

    @property
    def token(self) -> str:
        return (
            f"{PARQUET_POSITION}{self.duckdb_version}:{self.size}:{self.sha256}:{self.rows}:"
            f"{self.row_hash}"
        )


def parse_parquet_token(token: str) -> ParquetPosition | None:
    if not token.startswith(PARQUET_POSITION):
        return None
    parts = token[len(PARQUET_POSITION):].split(":")
    if len(parts) != 5 or not all(p.isdigit() for p in parts[1:2] + parts[3:]):
        return None
    return ParquetPosition(parts[0], int(parts[1]), parts[2], int(parts[3]), int(parts[4]))


def _row_hash(con: Any, path: Path, rows: int | None) -> tuple[int, int]:
    """(rows, sum of row hashes) of the first ``rows`` rows of a Parquet file (all: None)."""
    columns = [
        str(r[0])
        for r in con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(path)]).fetchall()
    ]
    args = ", ".join(['file_row_number'] + ['"' + c.replace('"', '""') + '"' for c in columns])
    where = "" if rows is None else f"WHERE file_row_number < {int(rows)}"
    row = con.execute(
        f"SELECT count(*), coalesce(sum(hash({args})), 0)::VARCHAR FROM "
        f"read_parquet(?, file_row_number = true) {where}",
        [str(path)],
    ).fetchone()
    return int(row[0]), int(row[1])


def parquet_position(
    con: Any, path: Path, *, check: ParquetPosition | None = None
) -> ParquetPosition:
    """The position of the Parquet file at ``path`` (read through the DuckDB connection
    ``con``). With ``check``, raise :class:`SourceRewritten` unless the file's first
    ``check.rows`` rows are the rows ``check`` describes."""
    import duckdb

    version = duckdb.__version__
    whole = read_position(path, os.stat(path).st_size)
    if check is not None and check.rows and whole.sha256 != check.sha256:
        if check.duckdb_version != version:
            raise SourceRewritten(
                f"the Parquet file was rewritten and DuckDB changed from {check.duckdb_version} "
                f"to {version} since the last run, so its first {check.rows} rows cannot be "
                f"compared with those released; run once more with duckdb=={check.duckdb_version}"
            )
        rows, row_hash = _row_hash(con, path, check.rows)
        if rows < check.rows:
            raise SourceRewritten(
                f"the Parquet file now has {rows} rows but earlier runs read {check.rows}; dpcr "
                "needs the whole append-only changelog"
            )
        if row_hash != check.row_hash:
            raise SourceRewritten("rows earlier runs read have changed (rewritten history)")
    if check is not None and whole.sha256 == check.sha256 and check.duckdb_version == version:
        rows, row_hash = check.rows, check.row_hash
    else:
        rows, row_hash = _row_hash(con, path, None)
    return ParquetPosition(version, whole.size, whole.sha256, rows, row_hash)


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


