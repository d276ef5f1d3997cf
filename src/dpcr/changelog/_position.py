"""The position of an append-only source file: how far earlier runs read it, and a proof that
what they read is still there, byte for byte.

A run that reads a line-format source (JSON lines, Debezium, wal2json, CSV) records a *position
token* ``file1:<bytes>:<sha256>``: the file's size when it was read and the SHA-256 of those
bytes. The next run accepts the source only if the file still begins with exactly those bytes
(new records appended after them are what is new). Hashing runs at about 2 GB/s, so the check
costs a fraction of reading the file, and it needs no record-by-record digest.

A file whose last consumed byte is not a newline ended in a record that was still being
written; a later run that finds the file longer refuses it (the record was extended, so a
consumed record changed). Parquet files and SQLite logs are not append-only byte streams (a
Parquet file is rewritten whole; a SQLite database rewrites pages): they keep the record digest
of :func:`dpcr.changelog.raw_digest`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

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


def read_position(path: Path, size: int, *, check: FilePosition | None = None) -> FilePosition:
    """The position of the first ``size`` bytes of ``path``, hashing them once. With ``check``
    (an earlier position), raise :class:`SourceRewritten` unless those bytes begin with the
    bytes ``check`` describes."""
    h = hashlib.sha256()
    done = 0
    last: int | None = None
    checked = check is None or check.size == 0
    if check is not None and check.size > size:
        raise SourceRewritten(
            f"the file now has {size} bytes but earlier runs read {check.size}: records they "
            "consumed are gone"
        )
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
                    # The consumed part ended inside a line: the next byte must end that line,
                    # or the last consumed record has been extended.
                    nxt = f.read(1)
                    f.seek(done)
                    if nxt not in (b"\n", b"\r"):
                        raise SourceRewritten(
                            "the last record earlier runs read had no line end and has since "
                            "been extended"
                        )
                checked = True
    return FilePosition(size, h.hexdigest(), last)


class SourceRewritten(Exception):
    """The source no longer begins with what earlier runs consumed."""
