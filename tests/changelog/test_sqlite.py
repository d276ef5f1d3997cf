"""SQLite change capture: the triggers log every change with its rows before and after."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import duckdb
import pytest

from dpcr.changelog import CLOCK_TABLE, SqliteSource, install_triggers, load
from dpcr.errors import ConfigError
from dpcr.timeutil import parse_timestamp


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "app.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, price REAL, img BLOB)")
    con.close()
    return path


def _log(db: Path, log_table: str = "dpcr_changelog") -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as con:
        rows = con.execute(
            f"SELECT seq, entry, ts, op, before, after FROM {log_table} ORDER BY seq"
        ).fetchall()
    con.close()
    return rows


def test_triggers_capture_insert_update_delete(db: Path) -> None:
    install_triggers(db, "t", key="id")
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO t VALUES (1, 'a', 2.5, x'00ff')")
        con.execute("UPDATE t SET price = 3.0 WHERE id = 1")
        con.execute("DELETE FROM t WHERE id = 1")
    con.close()
    log = _log(db)
    assert [(r[0], r[1], r[3]) for r in log] == [(1, "1", "insert"), (2, "1", "update"),
                                                  (3, "1", "delete")]  # fmt: skip
    first = {"id": 1, "name": "a", "price": 2.5, "img": "00FF"}  # blobs are logged as hex
    assert (log[0][4], json.loads(log[0][5])) == (None, first)
    assert (json.loads(log[1][4]), json.loads(log[1][5])) == (first, dict(first, price=3.0))
    assert (json.loads(log[2][4]), log[2][5]) == (dict(first, price=3.0), None)
    for r in log:  # real times: ISO 8601 UTC with milliseconds
        assert isinstance(r[2], str) and r[2].endswith("Z") and parse_timestamp(r[2]) > 0


def test_key_change_is_a_delete_and_an_insert(db: Path) -> None:
    install_triggers(db, "t", key="id")
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO t (id, name) VALUES (1, 'a')")
        con.execute("UPDATE t SET id = 2 WHERE id = 1")
    con.close()
    assert [(r[1], r[3]) for r in _log(db)] == [("1", "insert"), ("1", "delete"), ("2", "insert")]
    report = load(SqliteSource(path=db), duckdb.connect())
    assert report.valid == 3


def test_clock_table_and_time_column(db: Path, tmp_path: Path) -> None:
    install_triggers(db, "t", key="id")
    with sqlite3.connect(db) as con:
        con.execute(f"INSERT INTO {CLOCK_TABLE} VALUES ('2025-03-01T10:00:00.000Z')")
        con.execute("INSERT INTO t (id, name) VALUES (1, 'a')")
        con.execute(f"UPDATE {CLOCK_TABLE} SET ts = '2025-03-02T10:00:00.000Z'")
        con.execute("DELETE FROM t")
    con.close()
    assert [r[2] for r in _log(db)] == ["2025-03-01T10:00:00.000Z", "2025-03-02T10:00:00.000Z"]

    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE events (k TEXT, part INTEGER, at TEXT, PRIMARY KEY (k, part))")
    con.close()
    install_triggers(other, "events", key=["k", "part"], log_table="log", time_column="at")
    with sqlite3.connect(other) as con:
        con.execute("INSERT INTO events VALUES ('x', 1, '2025-01-05T00:00:00Z')")
        con.execute("UPDATE events SET at = '2025-01-06T00:00:00Z'")
    con.close()
    log = _log(other, "log")
    assert [(r[1], r[2], r[3]) for r in log] == [
        ('["x",1]', "2025-01-05T00:00:00Z", "insert"),
        ('["x",1]', "2025-01-06T00:00:00Z", "update"),
    ]
    con2 = duckdb.connect()
    load(SqliteSource(path=other, table="log"), con2)
    assert con2.execute("SELECT entry, ts FROM changelog").fetchall() == [
        ('["x",1]', parse_timestamp("2025-01-05")), ('["x",1]', parse_timestamp("2025-01-06"))
    ]  # fmt: skip


def test_reinstall_is_idempotent_and_picks_up_new_columns(db: Path) -> None:
    install_triggers(db, "t", key="id")
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO t (id, name) VALUES (1, 'a')")
        con.execute("ALTER TABLE t ADD COLUMN zone TEXT")
    con.close()
    install_triggers(db, "t", key="id")
    install_triggers(db, "t", key="id")
    with sqlite3.connect(db) as con:
        con.execute("UPDATE t SET zone = 'B'")
        triggers = con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'")
        assert triggers.fetchone() == (4,)
    con.close()
    log = _log(db)
    assert len(log) == 2  # the log survived; one row per change
    assert json.loads(log[1][5])["zone"] == "B"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"table": "missing", "key": "id"}, "has no table 'missing'; tables: t"),
        ({"table": "t", "key": "nope"}, "key column 'nope' is not a column of 't'"),
        ({"table": "t", "key": "id", "time_column": "when"}, "time_column 'when'"),
        ({"table": "t", "key": "id", "log_table": "bad name"}, "identifier"),
        ({"table": "t", "key": []}, "key must name"),
        ({"table": "dpcr_changelog", "key": "id"}, "dpcr's own table"),
    ],
)
def test_errors(db: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        install_triggers(db, **kwargs)  # type: ignore[arg-type]


def test_errors_for_missing_database_and_foreign_log_table(db: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no SQLite database"):
        install_triggers(tmp_path / "nope.sqlite", "t", key="id")
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE dpcr_changelog (x INTEGER)")
    con.close()
    with pytest.raises(ConfigError, match="not a dpcr change log"):
        install_triggers(db, "t", key="id")
