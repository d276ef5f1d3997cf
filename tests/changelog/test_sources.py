"""Every source format loads the same changelog into the same canonical table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import (
    CsvSource,
    DebeziumSource,
    JsonlSource,
    LoadReport,
    ParquetSource,
    SqliteSource,
    from_config,
    load,
)
from dpcr.changelog import _stage as stage_module
from dpcr.errors import ChangelogError, ConfigError
from dpcr.timeutil import parse_timestamp

from .helpers import (
    quarantine,
    small_log,
    table,
    write_csv,
    write_debezium,
    write_jsonl,
    write_parquet,
    write_sqlite,
)


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


def _all_sources(tmp: Path) -> dict[str, object]:
    log = small_log()
    return {
        "jsonl": JsonlSource(path=write_jsonl(tmp / "c.jsonl", log)),
        "csv": CsvSource(path=write_csv(tmp / "c.csv", log)),
        "parquet": ParquetSource(path=write_parquet(tmp / "c.parquet", log)),
        "debezium": DebeziumSource(path=write_debezium(tmp / "d.jsonl", log), key="id"),
        "sqlite": SqliteSource(path=write_sqlite(tmp / "s.sqlite", log)),
    }


def test_the_canonical_table_has_the_contract_columns(tmp_path: Path, con) -> None:
    load(JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", small_log())), con)
    described = con.execute("DESCRIBE changelog").fetchall()
    assert [(r[0], r[1]) for r in described] == [
        ("record", "BIGINT"), ("unit", "VARCHAR"), ("entry", "VARCHAR"), ("ts", "BIGINT"),
        ("seq", "BIGINT"), ("op", "VARCHAR"), ("before", "JSON"), ("after", "JSON"),
    ]  # fmt: skip


def test_every_format_loads_the_same_table(tmp_path: Path, con) -> None:
    sources = _all_sources(tmp_path)
    tables = {}
    for name, source in sources.items():
        report = load(source, con, table=f"t_{name}", unit_column="rider")  # type: ignore[arg-type]
        assert (report.records, report.valid, dict(report.quarantined)) == (9, 9, {}), name
        tables[name] = table(con, f"t_{name}")
    for name, rows in tables.items():
        assert rows == tables["jsonl"], name
    first = tables["jsonl"][0]
    assert first[:6] == (1, "r1", "1", parse_timestamp("2025-01-01T08:00:00Z"), 1, "insert")
    assert first[6] is None
    assert json.loads(first[7]) == {"id": 1, "rider": "r1", "zone": "A", "fare": 14.5, "rides": 0}


def test_rows_are_minified_json_objects_and_numbers_stay_numbers(tmp_path: Path, con) -> None:
    load(DebeziumSource(path=write_debezium(tmp_path / "d.jsonl", small_log()), key="id"), con)
    fares = con.execute(
        "SELECT DISTINCT (after ->> 'fare')::DOUBLE, json_type(after -> 'fare') "
        "FROM changelog WHERE after IS NOT NULL ORDER BY 1"
    ).fetchall()
    assert fares == [(-3.25, "DOUBLE"), (14.5, "DOUBLE"), (100.0, "DOUBLE")]


def test_the_json_reader_and_the_line_by_line_path_agree(tmp_path: Path, con, monkeypatch) -> None:
    log = small_log()
    lines: list[object] = [*log[:3], "", "   ", *log[3:]]  # blank lines are not records
    sources = [
        JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", lines)),  # type: ignore[arg-type]
        DebeziumSource(path=write_debezium(tmp_path / "d.jsonl", log, tombstones=True), key="id"),
    ]
    for source in sources:
        load(source, con, table="fast")
        monkeypatch.setattr(stage_module, "_force_slow_path", True)
        load(source, con, table="slow")
        monkeypatch.setattr(stage_module, "_force_slow_path", False)
        assert table(con, "fast") == table(con, "slow")
    # Record numbers are line numbers: the fourth log entry is on line 6.
    assert con.execute("SELECT record FROM slow WHERE seq = 4").fetchall() != []
    load(sources[0], con)
    assert con.execute("SELECT record FROM changelog WHERE seq = 4").fetchall() == [(6,)]


def test_crlf_line_ends(tmp_path: Path, con) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"".join(json.dumps(m).encode() + b"\r\n" for m in small_log()))
    assert load(JsonlSource(path=path), con).valid == 9


def _on_both_paths(
    path: Path, con, monkeypatch
) -> list[tuple[LoadReport, list[dict[str, object]]]]:
    """Load a JSON-lines file with quarantine on DuckDB's JSON reader and on the line-by-line
    path: each load's report and quarantined records."""
    out = []
    q = path.with_name("q.jsonl")
    for slow in (False, True):
        monkeypatch.setattr(stage_module, "_force_slow_path", slow)
        report = load(JsonlSource(path=path), con, on_error="quarantine", quarantine_path=q)
        out.append((report, [json.loads(line) for line in q.read_text().splitlines()]))
    return out


@pytest.mark.parametrize("end", [b"\r\r\n", b"\r", b"\n\r\n", b"\t\r\n"])
def test_odd_line_ends_read_alike_on_both_paths(
    tmp_path: Path, con, monkeypatch, end: bytes
) -> None:
    """Whatever ends the lines, the JSON reader and the line-by-line path agree (a CR CR LF
    file once loaded on one path and was quarantined whole on the other)."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"".join(json.dumps(m).encode() + end for m in small_log()))
    results = []
    for slow in (False, True):
        monkeypatch.setattr(stage_module, "_force_slow_path", slow)
        report = load(JsonlSource(path=path), con, on_error="quarantine",
                      quarantine_path=tmp_path / "q.jsonl")  # fmt: skip
        results.append((report.valid, dict(report.quarantined), table(con, "changelog")))
    assert results[0] == results[1]
    assert results[0][0] == 9


@pytest.mark.parametrize(
    ("ts", "epoch_unit", "expected"),
    [
        ("2025-01-06T08:30:00Z", "s", "2025-01-06T08:30:00Z"),
        ("2025-01-06 08:30:00", "s", "2025-01-06T08:30:00Z"),  # naive = UTC
        ("2025-01-06", "s", "2025-01-06T00:00:00Z"),
        ("2025-01-06T09:30:00+01:00", "s", "2025-01-06T08:30:00Z"),
        ("2025-01-06T03:30:00-05", "s", "2025-01-06T08:30:00Z"),
        ("2025-01-06T08:30:00.123456Z", "s", "2025-01-06T08:30:00.123456Z"),
        (1736152200, "s", "2025-01-06T08:30:00Z"),
        ("1736152200", "s", "2025-01-06T08:30:00Z"),
        (1736152200.5, "s", "2025-01-06T08:30:00.5Z"),
        (1736152200123, "ms", "2025-01-06T08:30:00.123Z"),
        (1736152200123456, "us", "2025-01-06T08:30:00.123456Z"),
    ],
)
def test_timestamps(tmp_path: Path, con, ts: object, epoch_unit: str, expected: str) -> None:
    con.execute("SET TimeZone = 'America/New_York'").fetchall()  # must not matter
    record = {"entry": "e", "ts": ts, "op": "insert", "after": {"x": 1}}
    source = JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", [record]), epoch_unit=epoch_unit)
    load(source, con)
    assert con.execute("SELECT ts FROM changelog").fetchall() == [(parse_timestamp(expected),)]


def test_field_names_can_be_renamed(tmp_path: Path, con) -> None:
    names = {"entry": "id", "ts": "time", "seq": "n", "op": "kind", "before": "old", "after": "new"}
    log = [{names[k]: v for k, v in m.items()} for m in small_log()]
    source = JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", log), **names)
    load(source, con)
    reference = duckdb.connect()
    load(JsonlSource(path=write_jsonl(tmp_path / "r.jsonl", small_log())), reference)
    assert table(con) == table(reference)


def test_unit_from_a_column_of_the_row(tmp_path: Path, con) -> None:
    load(JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", small_log())), con, unit_column="rider")
    rows = con.execute("SELECT entry, op, unit FROM changelog").fetchall()
    assert ("2", "delete", "r2") in rows  # a delete's unit is in its row before
    assert ("1", "delete", "r1") in rows
    assert {unit for _e, _op, unit in rows} == {"r1", "r2"}


def test_missing_before_rows_are_reconstructed_for_the_entry_unit_only(
    tmp_path: Path, con
) -> None:
    log = small_log()
    for m in log:  # a source without before rows
        m["before"] = None
    path = write_jsonl(tmp_path / "c.jsonl", log)
    load(JsonlSource(path=path), con)
    with_before = duckdb.connect()
    load(JsonlSource(path=write_jsonl(tmp_path / "b.jsonl", small_log())), with_before)
    assert con.execute("SELECT before::VARCHAR FROM changelog ORDER BY record").fetchall() == (
        with_before.execute("SELECT before::VARCHAR FROM changelog ORDER BY record").fetchall()
    )
    # Under a unit column the unit of an update/delete must come from its own before row.
    q = tmp_path / "q.jsonl"
    report = load(
        JsonlSource(path=path),
        con,
        unit_column="rider",
        on_error="quarantine",
        quarantine_path=q,
    )
    ops = [m["op"] for m in log]
    # ... and entry 2's second insert is then a double insert (its delete was rejected).
    missing = ops.count("update") + ops.count("delete")
    assert dict(report.quarantined) == {"missing_unit": missing, "double_insert": 1}
    unattributed = [line for line in quarantine(q) if line["reason"] == "missing_unit"]
    assert {line["field"] for line in unattributed} == {"before"}
    assert all("REPLICA IDENTITY FULL" in line["message"] for line in unattributed)


def test_unit_from_a_field_of_the_record(tmp_path: Path, con) -> None:
    log = [dict(m, person=f"p{m['entry']}") for m in small_log()]
    source = JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", log), unit="person")
    load(source, con)
    assert con.execute("SELECT DISTINCT unit FROM changelog ORDER BY 1").fetchall() == [
        ("p1",), ("p2",), ("p3",)
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="unit is given twice"):
        load(source, con, unit_column="rider")


def test_without_a_unit_the_unit_is_the_entry(tmp_path: Path, con) -> None:
    load(JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", small_log())), con)
    assert con.execute("SELECT count(*) FROM changelog WHERE unit <> entry").fetchall() == [(0,)]


def test_csv_options_and_errors(tmp_path: Path, con) -> None:
    path = write_csv(tmp_path / "c.csv", small_log())
    with pytest.raises(ConfigError, match=r"no column 'ticket' \(the entry field\)"):
        load(CsvSource(path=path, entry="ticket"), con)
    broken = tmp_path / "broken.csv"
    broken.write_text('entry,ts,op,after\n1,2025-01-01,insert,"{""a"": 1}",extra,more\n')
    with pytest.raises(ChangelogError, match="not a well-formed CSV"):
        load(CsvSource(path=broken), con)
    tabbed = tmp_path / "t.csv"
    tabbed.write_text('entry\tts\top\tafter\n1\t2025-01-01\tinsert\t{"a": 1}\n')
    assert load(CsvSource(path=tabbed, delimiter="\t"), con).valid == 1


def test_parquet_with_struct_rows_and_timestamp_column(tmp_path: Path, con) -> None:
    path = tmp_path / "c.parquet"
    con.execute(
        "COPY (SELECT 'e' || i AS entry, TIMESTAMP '2025-01-01 00:00:00' + INTERVAL (i) HOUR "
        "AS ts, 'insert' AS op, {'x': i, 'zone': 'A'} AS after FROM range(3) t(i)) "
        f"TO '{path}' (FORMAT parquet)"
    ).fetchall()
    report = load(ParquetSource(path=path), con, unit_column="zone")
    assert report.valid == 3
    assert con.execute("SELECT entry, ts, seq, unit, after::VARCHAR FROM changelog").fetchall()[
        1
    ] == ("e1", parse_timestamp("2025-01-01T01:00:00Z"), 2, "A", '{"x":1,"zone":"A"}')


def test_missing_files_and_tables(tmp_path: Path, con) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load(JsonlSource(path=tmp_path / "nope.jsonl"), con)
    db = tmp_path / "app.sqlite"
    import sqlite3

    sqlite3.connect(db).close()
    with pytest.raises(ConfigError, match="sqlite-install-triggers"):
        load(SqliteSource(path=db), con)
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchall() == [
        (0,)
    ]  # no temporary tables are left behind


def test_load_replaces_the_table_and_leaves_no_temporary_tables(tmp_path: Path, con) -> None:
    source = JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", small_log()))
    load(source, con)
    load(source, con)
    assert con.execute("SELECT count(*) FROM changelog").fetchall() == [(9,)]
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchall() == [
        (0,)
    ]  # fmt: skip


def test_from_config(tmp_path: Path) -> None:
    src = from_config({"format": "jsonl", "path": "c.jsonl", "ts": "time"}, base_dir=tmp_path)
    assert src == JsonlSource(path=tmp_path / "c.jsonl", ts="time")
    assert from_config({"format": "csv", "path": "/x.csv", "delimiter": ";"}) == CsvSource(
        path=Path("/x.csv"), delimiter=";"
    )
    dbz = from_config({"format": "debezium", "path": "d.jsonl", "key": ["a", "b"]})
    assert isinstance(dbz, DebeziumSource) and dbz.key_columns == ("a", "b")
    assert from_config({"format": "sqlite", "path": "a.db", "table": "log"}) == SqliteSource(
        path=Path("a.db"), table="log"
    )
    assert isinstance(from_config({"format": "parquet", "path": "p"}), ParquetSource)


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"path": "c.jsonl"}, "needs format"),
        ({"format": "xml", "path": "c"}, "format = 'xml' is not supported"),
        ({"format": "jsonl"}, "needs path"),
        ({"format": "jsonl", "path": "c", "delim": ","}, "key 'delim' is not an option"),
        ({"format": "debezium", "path": "d"}, "needs key"),
        ({"format": "jsonl", "path": "c", "epoch_unit": "h"}, "epoch_unit"),
        ({"format": "jsonl", "path": "c", "ts": ""}, r"\[source\] ts"),
        ({"format": "jsonl", "path": "c", "entry": 'a"b'}, "double quotes"),
        ({"format": "csv", "path": "c", "delimiter": ";;"}, "one character"),
        ({"format": "sqlite", "path": "c", "table": "x; drop"}, "identifier"),
        ({"format": "jsonl", "path": 5}, "path"),
    ],
)
def test_from_config_errors(mapping: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        from_config(mapping)


@pytest.mark.parametrize("where", ["first line", "deep inside"])
@pytest.mark.parametrize("fmt", ["jsonl", "debezium", "csv"])
def test_text_that_is_not_utf8_names_the_file_line_and_fix(
    tmp_path: Path, fmt: str, where: str
) -> None:
    padding = 0 if where == "first line" else 20_000
    # (the records before the bad one are valid: a record is reported, the first invalid one)
    if fmt == "csv":
        good = b"".join(b'a%d,2025-01-01,insert,"{""z"": ""c""}"\n' % i for i in range(padding))
        bad = b'b,2025-01-01,insert,"{""z"": ""caf\xe9""}"\n'
        data = b"entry,ts,op,after\n" + good + bad
        source: Any = CsvSource(path=tmp_path / "c.csv")
        record = padding + 1  # (data rows: the header is not a record)
    else:
        good = b"".join(b'{"entry": "a%d", "ts": 1, "op": "insert", "after": {"z": "c%d"}, '
                        b'"ts_ms": 1}\n' % (i, i) for i in range(padding))  # fmt: skip
        bad = b'{"entry": "b", "ts": 1, "op": "insert", "after": {"z": "caf\xe9"}}\n'
        data = good + bad
        path = tmp_path / "c.jsonl"
        source = JsonlSource(path=path) if fmt == "jsonl" else DebeziumSource(path=path, key="z")
        record = padding + 1
    source.path.write_bytes(data)
    with pytest.raises(ChangelogError) as info:
        load(source, duckdb.connect())
    message = str(info.value)
    assert info.value.reason == "bad_encoding"
    assert str(source.path) in message
    assert f"record {record}: the {'row' if fmt == 'csv' else 'line'} is not UTF-8" in message
    assert "0xe9" in message and "iconv" in message


def test_parquet_struct_rows_load_like_the_same_rows_as_json_text(tmp_path: Path, con) -> None:
    """The typed path (STRUCT before/after read as JSON directly) gives the same table, the
    same quarantine reasons and the same unit attribution as JSON text columns."""
    rows = [
        ("a", 1, "insert", None, "{'v': 1, 'z': 'A'}"),
        ("a", 2, "update", "{'v': 1, 'z': 'A'}", "{'v': NULL, 'z': 'B'}"),  # moves A -> B
        ("b", 3, "update", None, "{'v': 2, 'z': 'A'}"),  # no before: missing_unit / filled
        ("c", 4, "insert", "{'v': 0, 'z': 'A'}", "{'v': 3, 'z': 'A'}"),  # before on an insert
        ("a", 5, "delete", "{'v': NULL, 'z': 'B'}", None),
        ("d", 6, "delete", None, None),  # delete of an entry never inserted
    ]
    values = ", ".join(
        f"('{e}', {t}, '{op}', {b or 'NULL'}, {a or 'NULL'})" for e, t, op, b, a in rows
    )
    struct = tmp_path / "struct.parquet"
    text = tmp_path / "text.parquet"
    con.execute(
        "CREATE TEMP TABLE src AS SELECT * FROM (VALUES " + values + ") "
        "t(entry, ts, op, before, after)"
    ).fetchall()
    con.execute(f"COPY (SELECT * FROM src) TO '{struct}' (FORMAT parquet)").fetchall()
    con.execute(
        "COPY (SELECT entry, ts, op, to_json(before)::VARCHAR AS before, "
        f"to_json(after)::VARCHAR AS after FROM src) TO '{text}' (FORMAT parquet)"
    ).fetchall()
    con.execute("DROP TABLE src").fetchall()
    for unit_column in (None, "z"):
        got = []
        for path in (struct, text):
            report = load(
                ParquetSource(path=path, epoch_unit="s"), con, unit_column=unit_column,
                on_error="quarantine", quarantine_path=tmp_path / "q.jsonl",
            )  # fmt: skip
            table = con.execute(
                "SELECT record, unit, entry, ts, op, before::VARCHAR, after::VARCHAR "
                "FROM changelog ORDER BY record, unit"
            ).fetchall()
            got.append((report.valid, dict(report.quarantined), report.split, table))
        assert got[0] == got[1], unit_column
        assert got[0][1], "the fixture has invalid records"
    assert con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE temporary AND NOT internal"
    ).fetchall() == [(0,)]


@pytest.mark.parametrize(
    ("sql_type", "values", "epoch_unit"),
    [
        ("BIGINT", ["1735689600", "NULL", "-99999999999999", "253402300800", "0"], "s"),
        ("INTEGER", ["1735689600", "1735689601", "NULL", "-1", "7"], "s"),
        ("BIGINT", ["1735689600000", "9223372036854775807", "NULL", "1", "2"], "ms"),
        ("TIMESTAMP", ["'2025-01-01 00:00:00'", "'0001-01-01 00:00:00'", "NULL",
                       "'9999-12-31 23:59:59.999999'", "'2025-06-30 12:34:56.789'"], "s"),
        ("TIMESTAMPTZ", ["'2025-01-01 00:00:00+02'", "'2025-01-01 00:00:00Z'", "NULL",
                         "'2025-03-01 10:00:00-05:30'", "'1970-01-01 00:00:00Z'"], "s"),
    ],
)
def test_parquet_typed_time_columns_parse_like_their_text(
    tmp_path: Path, con, sql_type: str, values: list[str], epoch_unit: str
) -> None:
    """A number or timestamp time column is read directly; the times, and which records are
    bad_timestamp, are those of the same values written as text."""
    typed, text = tmp_path / "typed.parquet", tmp_path / "text.parquet"
    select = " UNION ALL ".join(
        f"SELECT 'e{i}' AS entry, {v}::{sql_type} AS ts, 'insert' AS op, "
        f"{{'x': {i}}} AS after" for i, v in enumerate(values)
    )
    con.execute(f"COPY ({select}) TO '{typed}' (FORMAT parquet)").fetchall()
    as_text = (
        "strftime(timezone('UTC', ts), '%Y-%m-%dT%H:%M:%S.%fZ')" if sql_type == "TIMESTAMPTZ"
        else "strftime(ts, '%Y-%m-%dT%H:%M:%S.%f')" if sql_type == "TIMESTAMP"
        else "ts::VARCHAR"
    )  # fmt: skip
    con.execute(
        f"COPY (SELECT entry, {as_text} AS ts, op, after FROM ({select})) TO '{text}' "
        "(FORMAT parquet)"
    ).fetchall()
    got = []
    for path in (typed, text):
        report = load(
            ParquetSource(path=path, epoch_unit=epoch_unit), con, on_error="quarantine",
            quarantine_path=tmp_path / "q.jsonl",
        )  # fmt: skip
        got.append((dict(report.quarantined), con.execute(
            "SELECT entry, ts FROM changelog ORDER BY entry").fetchall()))
    assert got[0] == got[1]


def test_a_row_with_a_key_given_twice_is_bad_json_on_both_paths(
    tmp_path: Path, con, monkeypatch
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(
        '{"entry":"a","ts":"2025-01-01T00:00:00Z","op":"insert","after":{"v":1}}\n'
        '{"entry":"b","ts":"2025-01-01T00:00:00Z","op":"insert","after":{"v":2,"v":3}}\n'
        '{"entry":"a","ts":"2025-01-02T00:00:00Z","op":"update","before":{"v":1,"v":1},'
        '"after":{"v":4}}\n'
    )
    for report, bad in _on_both_paths(path, con, monkeypatch):
        assert (report.valid, dict(report.quarantined)) == (1, {"bad_json": 2})
        assert [(b["record"], b["field"]) for b in bad] == [(2, "after"), (3, "before")]
        assert "'v' more than once" in bad[0]["message"]
    with pytest.raises(ChangelogError, match="more than once"):
        load(JsonlSource(path=path), con)


def test_a_record_with_a_field_given_twice_is_bad_json(tmp_path: Path, con, monkeypatch) -> None:
    """DuckDB's JSON reader refuses such a file; the line-by-line path then quarantines the
    record instead of reading the first copy."""
    path = tmp_path / "c.jsonl"
    path.write_text(
        '{"entry":"a","ts":"2025-01-01T00:00:00Z","op":"insert","after":{"v":1}}\n'
        '{"entry":"b","ts":"2025-01-01T00:00:00Z","op":"insert","op":"delete","after":{}}\n'
    )
    for report, bad in _on_both_paths(path, con, monkeypatch):
        assert (report.valid, dict(report.quarantined)) == (1, {"bad_json": 1})
        assert len(bad) == 1
        assert bad[0]["record"] == 2 and "the record gives the key 'op'" in bad[0]["message"]


def test_rows_with_a_repeated_key_are_rejected_alike_on_both_paths(
    tmp_path: Path, con, monkeypatch
) -> None:
    """Most rows have the first row's keys and skip the search for a repeated key; a row with
    a repeated key (whatever its other keys), or with the same keys in another order, is
    judged as on the line-by-line path; so are rows of one member, whose text without a comma
    skips the search too, or with a comma in a text or a nested object."""
    row = '{"fare": 1, "zone": "A"}'
    lines = [
        f'{{"entry": "a", "ts": "2025-01-01", "op": "insert", "after": {row}}}',
        '{"entry": "b", "ts": "2025-01-01", "op": "insert", "after": {"zone": "A", "fare": 1}}',
        '{"entry": "c", "ts": "2025-01-01", "op": "insert", '
        '"after": {"fare": 1, "fare": 2, "zone": "A"}}',
        '{"entry": "d", "ts": "2025-01-01", "op": "insert", "after": {"fare": 1, "fare": 1}}',
        f'{{"entry": "a", "ts": "2025-01-02", "op": "update", '
        f'"before": {{"zone": "A", "zone": "B"}}, "after": {row}}}',
        '{"entry": "e", "ts": "2025-01-01", "op": "insert", "after": {"fare": 1}}',
        '{"entry": "f", "ts": "2025-01-01", "op": "insert", "after": {"zone": "A,B"}}',
        '{"entry": "g", "ts": "2025-01-01", "op": "insert", "after": {"z": {"x": 1, "x": 2}}}',
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (fast, fast_q), (slow, slow_q) = _on_both_paths(path, con, monkeypatch)
    assert (fast.valid, dict(fast.quarantined)) == (slow.valid, dict(slow.quarantined))
    assert fast_q == slow_q
    assert fast.valid == 5 and dict(fast.quarantined) == {"bad_json": 3}
