"""Change capture for SQLite: triggers that log every INSERT/UPDATE/DELETE of a table.

:func:`install_triggers` creates the log table ::

    seq    INTEGER PRIMARY KEY AUTOINCREMENT  -- order of the changes; the record number
    entry  TEXT     -- the key column (composite keys: a JSON array)
    ts     TEXT     -- ISO 8601 UTC, millisecond resolution
    op     TEXT     -- 'insert' | 'update' | 'delete'
    before TEXT     -- json_object of every column before (NULL for inserts)
    after  TEXT     -- json_object of every column after (NULL for deletes)

and AFTER triggers that fill it. An UPDATE that changes the key is logged as a delete of the old
entry and an insert of the new one. Timestamps come from, in this order: the row's ``time_column``
(inserts and updates only, when configured), the one-row table ``dpcr_clock`` when it holds a row
(for replaying history with simulated times), else the current time.

>>> import sqlite3, tempfile, os
>>> db = os.path.join(tempfile.mkdtemp(), "app.sqlite")
>>> with sqlite3.connect(db) as c:
...     _ = c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v REAL)")
>>> install_triggers(db, "t", key="id")
>>> with sqlite3.connect(db) as c:
...     _ = c.execute("INSERT INTO t VALUES (1, 2.5)")
...     c.execute("SELECT entry, op, after FROM dpcr_changelog").fetchall()
[('1', 'insert', '{"id":1,"v":2.5}')]
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from dpcr.changelog._sources import check_identifier
from dpcr.errors import ConfigError

CLOCK_TABLE = "dpcr_clock"
_LOG_COLUMNS = ["seq", "entry", "ts", "op", "before", "after"]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _s(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def install_triggers(
    db_path: str | Path,
    table: str,
    *,
    key: str | Sequence[str],
    log_table: str = "dpcr_changelog",
    time_column: str | None = None,
) -> None:
    """Log every change of ``table`` in ``db_path`` into ``log_table`` (idempotent).

    Re-installing replaces the triggers (so they pick up columns added since) and keeps the log.
    """
    path = Path(db_path)
    if not path.exists():
        raise ConfigError(f"no SQLite database at '{path}'; check the path")
    check_identifier(log_table, key="log_table")
    if not isinstance(table, str) or not table:
        raise ConfigError(f"table must be the name of a table, got {table!r}")
    keys = [key] if isinstance(key, str) else list(key)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ConfigError(f"key must name the column(s) that identify a row, got {key!r}")
    if table in (log_table, CLOCK_TABLE):
        raise ConfigError(f"table {table!r} is dpcr's own table; name the table to watch")

    if not path.is_file():
        raise ConfigError(f"'{path}' is not a file; give the SQLite database file")
    try:
        _install(path, table, keys, log_table, time_column)
    except sqlite3.Error as exc:
        raise ConfigError(
            f"cannot install triggers in '{path}' ({exc}); check that it is a SQLite database "
            "that this user can write, and run again"
        ) from None


def _install(
    path: Path, table: str, keys: list[str], log_table: str, time_column: str | None
) -> None:
    con = sqlite3.connect(path)
    try:
        info = con.execute(f"PRAGMA table_info({_q(table)})").fetchall()
        if not info:
            tables = [
                r[0]
                for r in con.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                    "'sqlite_%' ORDER BY name"
                )
            ]
            raise ConfigError(
                f"'{path}' has no table {table!r}; tables: {', '.join(tables) or '(none)'}"
            )
        columns = [(str(r[1]), str(r[2] or "")) for r in info]
        names = [c for c, _ in columns]
        for k in keys:
            if k not in names:
                raise ConfigError(
                    f"key column {k!r} is not a column of {table!r}; columns: {', '.join(names)}"
                )
        if time_column is not None and time_column not in names:
            raise ConfigError(
                f"time_column {time_column!r} is not a column of {table!r}; "
                f"columns: {', '.join(names)}"
            )
        existing = [r[1] for r in con.execute(f"PRAGMA table_info({_q(log_table)})")]
        if existing and existing != _LOG_COLUMNS:
            raise ConfigError(
                f"table {log_table!r} exists with columns {existing}, not a dpcr change log "
                f"({_LOG_COLUMNS}); choose another log_table"
            )
        with con:
            con.executescript(_script(table, columns, keys, log_table, time_column))
    finally:
        con.close()


def _script(
    table: str,
    columns: list[tuple[str, str]],
    keys: list[str],
    log_table: str,
    time_column: str | None,
) -> str:
    def row(alias: str) -> str:
        parts = []
        for name, decl in columns:
            value = f"{alias}.{_q(name)}"
            if "BLOB" in decl.upper() or not decl:  # json_object rejects blobs: log their hex
                value = f"CASE WHEN typeof({value}) = 'blob' THEN hex({value}) ELSE {value} END"
            parts.append(f"{_s(name)}, {value}")
        return f"json_object({', '.join(parts)})"

    def entry(alias: str) -> str:
        if len(keys) == 1:
            return f"CAST({alias}.{_q(keys[0])} AS TEXT)"
        return f"json_array({', '.join(f'{alias}.{_q(k)}' for k in keys)})"

    now = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
    clock = f"(SELECT ts FROM {CLOCK_TABLE} ORDER BY rowid LIMIT 1)"
    base_ts = f"coalesce({clock}, {now})"
    new_ts = f"coalesce(CAST(NEW.{_q(time_column)} AS TEXT), {base_ts})" if time_column else base_ts
    same_key = " AND ".join(f"OLD.{_q(k)} IS NEW.{_q(k)}" for k in keys)
    log, t = _q(log_table), _q(table)
    name = f"{log_table}_{table}"
    insert = f"INSERT INTO {log} (entry, ts, op, before, after)"

    def trigger(suffix: str, event: str, when: str, body: str) -> str:
        trig = _q(f"{name}_{suffix}")
        return (
            f"DROP TRIGGER IF EXISTS {trig};\n"
            f"CREATE TRIGGER {trig} AFTER {event} ON {t} {when}BEGIN\n{body}\nEND;\n"
        )

    return (
        f"CREATE TABLE IF NOT EXISTS {log} (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
        "entry TEXT, ts TEXT, op TEXT, before TEXT, after TEXT);\n"
        f"CREATE TABLE IF NOT EXISTS {CLOCK_TABLE} (ts TEXT);\n"
        + trigger(
            "insert", "INSERT", "",
            f"{insert} VALUES ({entry('NEW')}, {new_ts}, 'insert', NULL, {row('NEW')});",
        )
        + trigger(
            "update", "UPDATE", f"WHEN {same_key} ",
            f"{insert} VALUES ({entry('NEW')}, {new_ts}, 'update', {row('OLD')}, {row('NEW')});",
        )
        + trigger(
            "rekey", "UPDATE", f"WHEN NOT ({same_key}) ",
            f"{insert} VALUES ({entry('OLD')}, {base_ts}, 'delete', {row('OLD')}, NULL);\n"
            f"{insert} VALUES ({entry('NEW')}, {new_ts}, 'insert', NULL, {row('NEW')});",
        )
        + trigger(
            "delete", "DELETE", "",
            f"{insert} VALUES ({entry('OLD')}, {base_ts}, 'delete', {row('OLD')}, NULL);",
        )
    )  # fmt: skip
