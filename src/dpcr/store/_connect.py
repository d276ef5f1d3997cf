"""Opening the store's SQLite file: for writing (created when missing, its tables made or
checked, write-ahead logged, durable commits), or as a read-only snapshot."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dpcr.errors import StoreError
from dpcr.store._files import create_store, disk_full, full_error, open_snapshot
from dpcr.store._open_heads import has_legacy_layout
from dpcr.store._open_store import OPEN_SCHEMA
from dpcr.store._schema import SCHEMA, refuse_newer

__all__ = ["connect"]


def connect(path: Path, *, snapshot: bool, any_thread: bool) -> sqlite3.Connection:
    """The connection to the store at ``path`` (the caller holds its lock unless
    ``snapshot``); ``any_thread``: usable from another thread than this one. A store of a
    newer schema is refused before anything is written; a file that is no store, or a full
    disk, is refused in one line."""
    con: sqlite3.Connection | None = None
    try:
        if snapshot:
            con = open_snapshot(path)
            refuse_newer(con, path)
            return con
        if not path.exists():  # operator-only: per-unit state, alert values
            create_store(path)
        con = sqlite3.connect(path, isolation_level=None, check_same_thread=not any_thread)
        refuse_newer(con, path)  # (before anything is written)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
        con.executescript(SCHEMA)
        if not has_legacy_layout(con):
            con.executescript(OPEN_SCHEMA)
        return con
    except BaseException as exc:
        if con is not None:
            con.close()
        if not isinstance(exc, sqlite3.DatabaseError | UnicodeDecodeError):
            raise
        if disk_full(exc):  # (UnicodeDecodeError: a damaged schema's text)
            raise full_error(path) from None
        raise StoreError(f"{path}: not a usable dpcr store ({exc})") from None
