"""The store's tables (:data:`SCHEMA`, and the migration from schema 1), its row types and
the guard that turns a SQLite error inside a store method into one :class:`StoreError`."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from dpcr.errors import StoreError
from dpcr.store._files import disk_full, full_error

__all__ = ["MIGRATE_1_TO_2", "PUBLISHED", "SCHEMA", "SCHEMA_VERSION", "UNPUBLISHED", "AlertRow",
           "Node", "NodeEvent", "ReleasedNode", "SourceState", "check_schema", "guarded",
           "guarded_iter", "has_table", "migrate_from_1", "refuse_newer"]  # fmt: skip

#: The store's schema number (``meta.schema``). 3: open histograms' values kept by key id
#: (``open_keysets`` (query, first, n, keys), ``open_values`` by range of key ids,
#: ``open_commits``: :mod:`dpcr.store._open_store`); 2: released values and the ledger by node
#: (below), open histograms' values (when any) one list of every key per run; 1: values by
#: interval. A store of schema 1 or 2 is brought to 3 by the first run that opens it; a
#: snapshot or ``dpcr verify`` reads it as it is and writes nothing.
SCHEMA_VERSION = 3

# Schema 2: one table of released values and one ledger for every plan kind, keyed by node
# (layer, index); the ledger is keyed by mechanism instance. Schema 1 kept disjoint/window values
# in `releases`/`ledger` (by interval) and tree nodes in `nodes`/`node_ledger`; opening such a
# store migrates it in one transaction (interval i becomes node (0, i)).
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS released (
    layer INTEGER NOT NULL, idx INTEGER NOT NULL, t_lo INTEGER, t_hi INTEGER NOT NULL,
    query TEXT NOT NULL, key TEXT NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (query, key, layer, idx)
);
CREATE TABLE IF NOT EXISTS release_ledger (
    layer INTEGER NOT NULL, idx INTEGER NOT NULL, query TEXT NOT NULL, event TEXT NOT NULL,
    released_at REAL NOT NULL, PRIMARY KEY (layer, idx, query)
);
CREATE TABLE IF NOT EXISTS units (
    unit TEXT PRIMARY KEY, class TEXT NOT NULL, first_ts INTEGER NOT NULL,
    kept INTEGER NOT NULL, dropped INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run INTEGER PRIMARY KEY AUTOINCREMENT, started REAL NOT NULL, finished REAL NOT NULL,
    summary TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS alert_state (rule TEXT PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS heads (n INTEGER PRIMARY KEY AUTOINCREMENT, head TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS frozen (
    unit TEXT NOT NULL, entry TEXT NOT NULL, record INTEGER NOT NULL, PRIMARY KEY (unit, entry)
);
CREATE TABLE IF NOT EXISTS open_keys (
    query TEXT NOT NULL, key TEXT NOT NULL, appeared INTEGER NOT NULL, selected INTEGER,
    PRIMARY KEY (query, key)
);
CREATE INDEX IF NOT EXISTS open_keys_by_appeared ON open_keys (appeared, query, key);
CREATE INDEX IF NOT EXISTS open_keys_selected ON open_keys (query, key, selected)
    WHERE selected IS NOT NULL;
CREATE TABLE IF NOT EXISTS alerts (
    rule TEXT NOT NULL, interval INTEGER NOT NULL, key TEXT NOT NULL, answer INTEGER NOT NULL,
    value INTEGER, PRIMARY KEY (rule, interval, key)
);
"""

#: (layer, index) of a released node
Node = tuple[int, int]

# (rule, interval, key, answer 1 = above / 0 = below, NumericSparse value or None)
AlertRow = tuple[str, int, str, int, int | None]


_F = TypeVar("_F", bound=Callable[..., Any])


def guarded(method: _F) -> _F:
    """A SQLite error inside a store method (a corrupt or truncated file, a dropped table, a
    value of the wrong type) becomes one StoreError naming the store and the fix; a full disk,
    one DiskFullError saying the store is intact."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except _ERRORS as exc:
            raise _damaged(self.path, exc) from None

    return cast(_F, wrapper)


_ERRORS = (sqlite3.Error, ValueError, TypeError, KeyError)
_T = TypeVar("_T")


def _damaged(path: Any, exc: BaseException) -> Exception:
    if disk_full(exc):
        return full_error(path)
    return StoreError(f"{path}: the store is damaged ({type(exc).__name__}: {exc}); restore it "
                      "from a backup (docs/store.md)")  # fmt: skip


def guarded_iter(path: Any, items: Iterator[_T]) -> Iterator[_T]:
    """``items``, an error while they are read turned into one StoreError as by
    :func:`guarded`."""
    try:
        yield from items
    except _ERRORS as exc:
        raise _damaged(path, exc) from None


#: SQL true for a row ``r`` of ``released`` that is published: not a value of an open
#: histogram's key that is not selected.
PUBLISHED = (
    "NOT EXISTS (SELECT 1 FROM open_keys o WHERE o.query = r.query AND o.key = r.key "
    "AND o.selected IS NULL)"
)

#: The rows of ``released`` that are not published (a store written before the values of
#: open histograms' keys were kept columnar holds such rows).
UNPUBLISHED = (
    "SELECT layer, idx, t_lo, t_hi, query, key, value FROM released r "
    f"WHERE NOT ({PUBLISHED}) ORDER BY query, key, layer, idx"
)


def has_table(con: sqlite3.Connection, name: str) -> bool:
    """Whether the store at ``con`` has the table ``name`` (a store of an earlier schema, read
    as a snapshot, lacks the later ones)."""
    sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return con.execute(sql, (name,)).fetchone() is not None


MIGRATE_1_TO_2 = """
INSERT INTO released (layer, idx, t_lo, t_hi, query, key, value)
    SELECT 0, interval, t_lo, t_hi, query, key, value FROM releases;
INSERT INTO released (layer, idx, t_lo, t_hi, query, key, value)
    SELECT layer, idx, t_lo, t_hi, query, key, value FROM nodes;
INSERT INTO release_ledger (layer, idx, query, event, released_at)
    SELECT 0, interval, query, event, released_at FROM ledger;
INSERT INTO release_ledger (layer, idx, query, event, released_at)
    SELECT layer, idx, query, event, released_at FROM node_ledger;
DROP TABLE releases; DROP TABLE nodes; DROP TABLE ledger; DROP TABLE node_ledger;
"""


def refuse_newer(con: sqlite3.Connection, path: object) -> None:
    """Refuse, before anything is written, a store whose schema number is above
    :data:`SCHEMA_VERSION`: a newer dpcr made it, and this one cannot tell what it holds."""
    has = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'")
    if has.fetchone() is None:
        return
    row = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    number = str(row[0]) if row is not None else ""
    if number.isdigit() and int(number) > SCHEMA_VERSION:
        raise StoreError(f"{path}: store schema {number} was made by a newer dpcr; upgrade dpcr "
                         f"(this one reads schemas 1 to {SCHEMA_VERSION}; it changed nothing)")


def check_schema(number: str | None, path: object, *, writes: bool) -> None:
    """Refuse a schema number this dpcr does not know, and a store of schema 1 opened by what
    writes nothing (a snapshot, ``dpcr verify``): its values are read once a run moved them."""
    if number not in ("1", "2", str(SCHEMA_VERSION)):
        raise StoreError(f"{path}: store schema {number} is not supported")
    if number == "1" and not writes:
        raise StoreError(f"{path} was written by an older dpcr: run `dpcr run` once to upgrade "
                         "it, then read it")  # fmt: skip


def migrate_from_1(con: sqlite3.Connection) -> None:
    """Move the tables of schema 1 into those of schema 2, and record the store's schema as
    :data:`SCHEMA_VERSION` (in the caller's transaction; the tables of open histograms are
    created in the key-id layout beside them)."""
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for name, ddl in (
        ("releases", "CREATE TABLE releases (interval INTEGER, t_lo INTEGER, t_hi INTEGER,"
                     " query TEXT, key TEXT, value INTEGER)"),
        ("ledger", "CREATE TABLE ledger (interval INTEGER, query TEXT, event TEXT,"
                   " released_at REAL)"),
        ("nodes", "CREATE TABLE nodes (layer INTEGER, idx INTEGER, t_lo INTEGER,"
                  " t_hi INTEGER, query TEXT, key TEXT, value INTEGER)"),
        ("node_ledger", "CREATE TABLE node_ledger (layer INTEGER, idx INTEGER,"
                        " query TEXT, event TEXT, released_at REAL)"),
    ):  # fmt: skip
        if name not in tables:
            con.execute(ddl)
    for statement in MIGRATE_1_TO_2.split(";"):
        if statement.strip():
            con.execute(statement)
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(SCHEMA_VERSION),))


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleasedNode:
    """A released value: node ``(layer, index)`` of one query and key over ``(t_lo, t_hi]``
    (``t_lo`` None: from the beginning)."""

    layer: int
    index: int
    t_lo: int | None
    t_hi: int
    query: str
    key: str
    value: int


# (layer, index, query, event as dict): one ledger row per mechanism instance and query
NodeEvent = tuple[int, int, str, dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceState:
    """What earlier runs consumed: records numbered <= ``records`` and intervals <= ``interval``."""

    records: int = 0
    interval: int = 0
    t_last: int | None = None
    digest: str = ""
