"""What spares a store's content head from being computed again: the rows it hashes, encoded
in batches, and the stores this process closed and has not seen changed since."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["VERIFIED", "file_key", "files_state", "json_rows", "unchanged_since"]


def json_rows(rows: Sequence[tuple[Any, ...]], encoder: Any) -> str:
    """``"".join(json.dumps(r) for r in rows)``, through the C encoder when there is one."""
    if encoder is None:
        return "".join(json.dumps(r) for r in rows)
    default = json.JSONEncoder().default
    it = encoder(None, default, json.encoder.encode_basestring_ascii, None,
                 ": ", ", ", False, False, True)  # fmt: skip
    return "".join("".join(it(r, 0)) for r in rows)


#: Stores this process verified or committed and then closed: the key of the file -> (the
#: state of its files when it was closed, the content head it held then). A store opened again
#: whose files are exactly as they were is not hashed again (a session's steps, the report
#: after a run): any write since changes their size or modification time.
VERIFIED: dict[tuple[int, int], tuple[tuple[tuple[int, int, int], ...], str]] = {}


def file_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def files_state(path: Path) -> tuple[tuple[int, int, int], ...]:
    """(inode, size, modification time in ns) of the store and its write-ahead log (zeros
    for a file that does not exist)."""
    out = []
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            st = p.stat()
        except FileNotFoundError:
            out.append((0, 0, 0))
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def unchanged_since(
    path: Path, files: tuple[tuple[int, int, int], ...], recorded: str
) -> bool:
    """Whether this process closed the store at ``path`` holding ``recorded`` and its files
    were still as it left them (``files``, taken before they were opened again)."""
    seen = VERIFIED.get(file_key(path))
    return seen is not None and seen == (files, recorded)
