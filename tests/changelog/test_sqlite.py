"""SQLite change capture: the triggers log every change with its rows before and after."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import duckdb
import pytest

from dpcr.changelog import CLOCK_TABLE, SqliteSource, install_triggers, load, raw_digest
from dpcr.errors import ChangelogError, ConfigError
from dpcr.timeutil import parse_timestamp

from .helpers import write_log_table


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


def test_log_is_read_whole_and_digested_as_earlier_versions_did(tmp_path: Path) -> None:
    """Rows in every shape (NULLs, quotes, non-ASCII text, an object with a repeated key, keys
    in another order than the first row's) are staged as written; the raw digest is the one
    stores written by earlier versions hold."""
    db = tmp_path / "app.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
    con.close()
    install_triggers(db, "t", key="id")
    with sqlite3.connect(db) as con:
        con.execute(f"INSERT INTO {CLOCK_TABLE} VALUES ('2025-01-01T00:00:00.000Z')")
        con.execute("INSERT INTO t VALUES (1, 'a \"q\" é', 2.5)")
        con.execute("UPDATE t SET price = 3.0 WHERE id = 1")
        con.execute("INSERT INTO t VALUES (2, NULL, 1)")
        con.execute("DELETE FROM t WHERE id = 1")
        con.execute(
            "INSERT INTO dpcr_changelog (entry, ts, op, before, after) VALUES "
            """('3', 'bad', 'insert', NULL, '{"id":3,"id":4}')"""
        )
    con.close()
    ddb = duckdb.connect()
    report = load(SqliteSource(path=db), ddb, on_error="quarantine",
                  quarantine_path=tmp_path / "q.jsonl")  # fmt: skip
    assert (report.records, report.valid, dict(report.quarantined)) == (5, 4, {"bad_json": 1})
    rows = ddb.execute(
        "SELECT record, entry, op, before::VARCHAR, after::VARCHAR FROM changelog ORDER BY record"
    ).fetchall()
    row1 = '{"id":1,"name":"a \\"q\\" é","price":2.5}'
    assert rows == [
        (1, "1", "insert", None, row1),
        (2, "1", "update", row1, row1.replace("2.5", "3.0")),
        (3, "2", "insert", None, '{"id":2,"name":null,"price":1.0}'),
        (4, "1", "delete", row1.replace("2.5", "3.0"), None),
    ]
    assert raw_digest(ddb, "changelog", 5) == "5:57500896011846044059"
    assert raw_digest(ddb, "changelog", 3) == "3:44199161659177707433"


def test_objects_with_other_keys_than_the_first_are_checked_for_repeats(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    with sqlite3.connect(db) as con:
        con.execute(
            "CREATE TABLE dpcr_changelog (seq INTEGER PRIMARY KEY AUTOINCREMENT, entry TEXT, "
            "ts TEXT, op TEXT, before TEXT, after TEXT)"
        )
        ts = "2025-01-01T00:00:00Z"
        for entry, after in [("1", '{"a":1,"b":2}'), ("2", '{"b":2,"a":1}'),
                             ("3", '{"b":2,"b":1}'), ("4", '{"a":1,"a":1}'), ("5", '[1]'),
                             ("6", '{"a":1,"b":2,"c":3}'), ("7", ' { "a" : 1 , "b" : 2 } ')]:
            con.execute("INSERT INTO dpcr_changelog (entry, ts, op, after) VALUES "
                        "(?, ?, 'insert', ?)", (entry, ts, after))  # fmt: skip
    con.close()
    ddb = duckdb.connect()
    report = load(SqliteSource(path=db), ddb, on_error="quarantine",
                  quarantine_path=tmp_path / "q.jsonl")  # fmt: skip
    assert dict(report.quarantined) == {"bad_json": 3}
    kept = ddb.execute("SELECT entry, after::VARCHAR FROM changelog ORDER BY record").fetchall()
    assert kept == [("1", '{"a":1,"b":2}'), ("2", '{"b":2,"a":1}'),
                    ("6", '{"a":1,"b":2,"c":3}'), ("7", '{"a":1,"b":2}')]  # fmt: skip


def _plain_log(db: Path, rows: list[tuple[object, ...]]) -> None:
    """A log table without a primary key (a hand-made log may repeat a seq)."""
    write_log_table(db, rows, key=False)


def test_batches_give_the_same_load_as_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpcr.changelog import _stage_sqlite

    ts = "2025-01-01T00:00:0{}Z"
    rows: list[tuple[object, ...]] = []
    for i in range(1, 12):
        rows.append((i, str(i % 4), ts.format(i % 10), "insert", None, f'{{"v":{i}}}'))
    rows.insert(5, (5, "x", ts.format(1), "insert", None, '{"v":1,"v":2}'))  # seq 5 twice
    rows.append((12, "1", ts.format(9), "delete", '{"v":1}', None))
    db = tmp_path / "app.sqlite"
    _plain_log(db, rows)

    def run(batch: int, piece: int = 1024) -> tuple[object, ...]:
        monkeypatch.setattr(_stage_sqlite, "BATCH", batch)
        monkeypatch.setattr(_stage_sqlite, "_PIECE", piece)
        con = duckdb.connect()
        report = load(SqliteSource(path=db), con, on_error="quarantine",
                      quarantine_path=tmp_path / f"q{batch}.jsonl")  # fmt: skip
        table = con.execute(
            "SELECT record, unit, entry, ts, seq, op, before::VARCHAR, after::VARCHAR "
            "FROM changelog ORDER BY record, entry"
        ).fetchall()
        quarantine = (tmp_path / f"q{batch}.jsonl").read_text(encoding="utf-8")
        return report.records, dict(report.quarantined), table, quarantine, \
            raw_digest(con, "changelog", len(rows))  # fmt: skip

    whole = run(1 << 17)
    assert whole[0] == len(rows) and whole[1]
    for batch, piece in [(1, 1024), (2, 1024), (5, 1024), (5, 2), (13, 13), (4, 3)]:
        assert run(batch, piece) == whole, (batch, piece)


def test_a_missing_log_table_is_refused_and_text_that_is_not_utf8_names_its_record(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.sqlite"
    _plain_log(db, [(1, "1", "2025-01-01T00:00:00Z", "insert", None, '{"v":1}')])
    with pytest.raises(ConfigError, match="has no table 'nope'"):
        load(SqliteSource(path=db, table="nope"), duckdb.connect())
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO dpcr_changelog VALUES (2, CAST(x'e9' AS TEXT), "
                    "'2025-01-01T00:00:00Z', 'insert', NULL, '{\"v\":1}')")  # fmt: skip
    con.close()
    with pytest.raises(ChangelogError, match=r"record 2: a text value .* is not UTF-8"):
        load(SqliteSource(path=db), duckdb.connect())


def test_a_text_value_that_is_not_utf8_is_quarantined_and_the_log_read(tmp_path: Path) -> None:
    """SQLite stores the bytes it is given: a value that is not UTF-8 once stopped every load
    of the log; now its record is quarantined (its bytes kept) and the position, a digest of
    the records as read, is the same in every load."""
    import base64

    path = tmp_path / "app.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id TEXT PRIMARY KEY, z TEXT)")
    install_triggers(path, "t", key="id")
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO t VALUES ('a', 'x')")
        db.execute("INSERT INTO t VALUES ('b', CAST(X'636166E9' AS TEXT))")
        db.execute("INSERT INTO t VALUES ('c', 'y')")
    digests = []
    for _ in range(2):
        con = duckdb.connect()
        q = tmp_path / "q.jsonl"
        report = load(SqliteSource(path=path), con, on_error="quarantine", quarantine_path=q)
        assert dict(report.quarantined) == {"bad_encoding": 1} and report.valid == 2
        digests.append(raw_digest(con, "changelog", 3))
        [line] = [json.loads(x) for x in q.read_text().splitlines()]
        assert line["record"] == 2 and b"caf\xe9" in base64.b64decode(line["raw_base64"])
    assert digests[0] == digests[1]
