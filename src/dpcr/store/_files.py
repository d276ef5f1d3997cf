"""The store's files: the lock, the folder and file checks, the connection of a read-only
snapshot, what a full disk looks like, and what a store is bound to, read without opening it
(:mod:`dpcr.store._store` opens the store itself)."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpcr._fs import PARENT_MODE, create_or_open, ensure_dir, refuse_link, refuse_world_writable
from dpcr.errors import DiskFullError, DpcrError, OutputError, RewrittenError, StoreError

__all__ = [
    "RELEASE_TABLES", "Binding", "acquire_lock", "create_store", "disk_full", "full_error",
    "holds_release", "open_snapshot", "prepare", "read_binding", "store_error",
]

#: The tables whose rows make a store hold a release: a value, a ledger row or an alert answer.
RELEASE_TABLES = ("released", "release_ledger", "alerts")


#: SQLite's result codes of a full disk: a write (SQLITE_FULL) or the growth of the
#: shared-memory file beside a WAL store (SQLITE_IOERR_SHMSIZE).
_FULL_CODES = frozenset({"SQLITE_FULL", "SQLITE_IOERR_SHMSIZE"})


def disk_full(exc: BaseException) -> bool:
    """Whether a SQLite error is a full disk (or an exhausted quota)."""
    return isinstance(exc, sqlite3.Error) and (
        getattr(exc, "sqlite_errorname", None) in _FULL_CODES or "disk is full" in str(exc)
    )


def full_error(path: Path) -> DiskFullError:
    return DiskFullError(
        f"{path}: the disk is full. Nothing was released by this run and the store is intact "
        "(a release is written in one transaction, rolled back whole): free space and run "
        "again. Do not restore a backup: an older store would draw published values again"
    )


def edited_error(path: Path) -> RewrittenError:
    """The refusal of a store whose rows no longer match the heads its last commit recorded."""
    return RewrittenError(
        f"{path}: the released values, ledger or settings no longer match the head recorded at "
        "the last commit: the store was edited or is corrupt. Restore it from a backup "
        "(docs/store.md); releasing from it could under-count the privacy spent"
    )


def store_error(exc: OutputError | DiskFullError, path: Path) -> DpcrError:
    """A StoreError naming ``path`` for an OutputError of :mod:`dpcr._fs` (a full disk stays
    a DiskFullError)."""
    if isinstance(exc, DiskFullError):
        return full_error(path)
    return StoreError(str(exc))


def holds_release(con: sqlite3.Connection, meta: dict[str, str]) -> bool:
    """Whether the store holds anything released: a value, a ledger row or an alert answer
    (a store of schema 1 is taken to). A sparse vector's state without an answer (a run
    that no interval had closed for) has published nothing."""
    if meta.get("schema") == "1":
        return True
    return any(
        con.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None
        for table in RELEASE_TABLES
    )


def acquire_lock(path: Path) -> Any:
    """An exclusive lock on ``<store>.lock`` for as long as the store is open: a second run on
    the same store is refused at once (it would race on what is released). The lock file is
    created owner-only (0600) without following a link; an existing one is used as it is."""
    import fcntl

    lock_path = path.with_name(path.name + ".lock")
    try:
        fd, _created = create_or_open(lock_path, 0o600)
    except (OutputError, DiskFullError) as exc:
        raise store_error(exc, lock_path) from None
    handle = os.fdopen(fd, "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise StoreError(
            f"another dpcr run is using the store {str(path)!r} (lock {lock_path.name}); wait "
            "for it to finish and run again"
        ) from None
    return handle


def prepare(path: Path, *, create: bool = True) -> None:
    """The store's folder (created 0755 when missing and ``create``; refused when every user
    may write to it) and its files checked before anything is written: the store, its
    write-ahead log, shared memory and lock are never symbolic links."""
    try:
        if create:
            ensure_dir(path.parent, PARENT_MODE, follow=True)
        refuse_world_writable(path.parent, "the store")
        for name in ("", "-wal", "-shm", ".lock"):
            refuse_link(path.with_name(path.name + name))
    except (OutputError, DiskFullError) as exc:
        raise store_error(exc, path) from None


def open_snapshot(path: Path) -> sqlite3.Connection:
    """A connection to the store at ``path`` that changes nothing (``query_only``) inside one
    read transaction (in WAL mode a reader sees the last commit before its first read until
    the transaction ends). Not opened read-only: a read-only connection could not remove the
    write-ahead log it found when it closes last, as every other connection does."""
    if not path.exists():
        raise StoreError(f"no store at {path}: run `dpcr run` first")
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA query_only = ON")
        con.execute("BEGIN")
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()  # (the snapshot starts)
    except BaseException:
        con.close()
        raise
    return con


def create_store(path: Path) -> None:
    """Create the (empty) store file owner-only, 0600: SQLite creates its log and shared memory
    with the store's mode."""
    try:
        fd, _created = create_or_open(path, 0o600)
    except (OutputError, DiskFullError) as exc:
        raise store_error(exc, path) from None
    os.close(fd)


@dataclass(frozen=True, slots=True, kw_only=True)
class Binding:
    """What a store is bound to, read without opening it for a run (:func:`read_binding`):
    the plan's ``fingerprint`` and the ``mode``; ``released``: whether it holds a release (only
    then does the fingerprint bind it); ``schema``: the store's schema number as written."""

    fingerprint: str | None
    mode: str | None
    released: bool
    schema: str | None = None


def read_binding(path: str | Path) -> Binding | None:
    """The :class:`Binding` of the store at ``path``, read only (no lock is taken and nothing
    is written: a run may be using the store); None when there is no store or it cannot be
    read."""
    path = Path(path)
    beside = [path.with_name(path.name + end) for end in ("-wal", "-shm")]
    if not path.is_file() or any(p.is_symlink() for p in [path, *beside]):
        return None
    # Without a write-ahead log (no run is using the store), read the file as it is: SQLite
    # then creates no log and no shared memory beside it. With one, read through it.
    immutable = "" if any(os.path.lexists(p) for p in beside) else "&immutable=1"
    try:
        uri = f"file:{path}?mode=ro{immutable}"
        with closing(sqlite3.connect(uri, uri=True, isolation_level=None)) as con:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
            released = meta.get("schema") == "1" or any(
                con.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone() is not None
                for t in RELEASE_TABLES if t in tables
            )  # fmt: skip
    except sqlite3.Error:
        return None
    return Binding(fingerprint=meta.get("fingerprint"), mode=meta.get("mode"),
                   released=released, schema=meta.get("schema"))  # fmt: skip


