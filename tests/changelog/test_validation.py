"""Every rejection reason, in raise and quarantine mode; nothing is dropped silently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import REASONS, CsvSource, JsonlSource, SqliteSource, load
from dpcr.changelog._set_aside import SET_ASIDE_REASONS
from dpcr.errors import ChangelogError, ConfigError

from .helpers import quarantine, write_csv, write_jsonl

ROW = {"id": 1, "rider": "r1", "fare": 2.5}
T0 = "2025-01-01T00:00:00Z"


def rec(entry: Any = "a", ts: Any = T0, op: Any = "insert", **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"entry": entry, "ts": ts, "op": op}
    if op in ("insert", "update", "i", "u"):
        out["after"] = ROW
    if op in ("update", "delete", "u", "d"):
        out["before"] = ROW
    out.update(kw)
    return out


GOOD = [rec("a"), rec("b", "2025-01-01T01:00:00Z"), rec("a", "2025-01-02T00:00:00Z", "update")]

# (case, the bad record appended after GOOD, reason, field, words of the fix, unit column)
CASES: list[tuple[str, object, str, str, str, str | None]] = [
    ("not json", "{oops", "bad_json", "record", "one JSON object", None),
    ("array line", "[1, 2]", "bad_json", "record", "one JSON object", None),
    ("null line", "null", "bad_json", "record", "one JSON object", None),
    ("after not object", rec("c", after=[1]), "bad_json", "after", "as a JSON object", None),
    ("insert without after", rec("c", after=None), "bad_json", "after", "JSON object", None),
    ("insert with before", rec("c", before=ROW), "bad_json", "before", "set it to null", None),
    ("update before text", rec("a", op="update", before="x"), "bad_json", "before", "or null",
     None),
    ("delete with after", rec("b", op="delete", after=ROW), "bad_json", "after", "set it to null",
     None),
    ("unknown op", rec("c", op="upsert"), "unknown_op", "op", "insert, update or delete", None),
    ("missing op", {"entry": "c", "ts": T0, "after": ROW}, "unknown_op", "op", "insert", None),
    ("empty entry", rec(""), "missing_entry", "entry", "id of the entry", None),
    ("blank entry", rec("\u00a0 "), "missing_entry", "entry", "id of the entry", None),
    ("no entry", {"ts": T0, "op": "insert", "after": ROW}, "missing_entry", "entry", "id", None),
    ("bad ts", rec("c", ts="next tuesday"), "bad_timestamp", "ts", "ISO 8601", None),
    ("impossible date", rec("c", ts="2025-02-30"), "bad_timestamp", "ts", "ISO 8601", None),
    ("missing ts", {"entry": "c", "op": "insert", "after": ROW}, "bad_timestamp", "ts", "epoch",
     None),
    ("bad seq", rec("c", seq="seven"), "bad_seq", "seq", "integer sequence number", None),
    ("fractional seq", rec("c", seq=1.5), "bad_seq", "seq", "integer", None),
    ("no unit", rec("c", after={"id": 3}), "missing_unit", "rider", "fill it in", "rider"),
    ("null unit", rec("c", after={"rider": None}), "missing_unit", "rider", "fill it in", "rider"),
    ("delete unit", rec("a", "2025-01-05T00:00:00Z", "delete", before={"x": 1}), "missing_unit",
     "rider", "row before", "rider"),
    ("duplicate", rec("a", "2025-01-09T00:00:00Z", "update", seq=3), "duplicate", "seq",
     "give it its own seq", None),
    ("update never inserted", rec("z", op="update"), "update_before_insert", "op",
     "insert it first", None),
    ("delete never inserted", rec("z", op="delete"), "delete_before_insert", "op",
     "insert it first", None),
    ("insert twice", rec("b", "2025-01-03T00:00:00Z"), "double_insert", "op",
     "use an update, or delete it first", None),
]  # fmt: skip


def _write(tmp: Path, bad: object) -> Path:
    return write_jsonl(tmp / "c.jsonl", [*GOOD, bad])  # type: ignore[list-item]


@pytest.mark.parametrize(("case", "bad", "reason", "field", "fix", "unit"), CASES)
def test_raise_names_record_field_value_and_fix(
    tmp_path: Path, case: str, bad: object, reason: str, field: str, fix: str, unit: str | None
) -> None:
    con = duckdb.connect()
    path = _write(tmp_path, bad)
    with pytest.raises(ChangelogError) as info:
        load(JsonlSource(path=path), con, unit_column=unit)
    err = info.value
    assert (err.record, err.field, err.reason) == (4, field, reason), case
    message = str(err)
    assert message.startswith(f"jsonl file '{path}': record 4: "), message
    assert fix in message, message
    # The table is only created when the whole changelog is valid.
    assert con.execute("SELECT count(*) FROM duckdb_tables()").fetchall() == [(0,)]


@pytest.mark.parametrize(("case", "bad", "reason", "field", "fix", "unit"), CASES)
def test_quarantine_writes_and_counts(
    tmp_path: Path, case: str, bad: object, reason: str, field: str, fix: str, unit: str | None
) -> None:
    con = duckdb.connect()
    q = tmp_path / "out" / "quarantine.jsonl"
    report = load(
        JsonlSource(path=_write(tmp_path, bad)),
        con,
        on_error="quarantine",
        quarantine_path=q,
        unit_column=unit,
    )
    assert (report.records, report.valid, dict(report.quarantined)) == (4, 3, {reason: 1}), case
    assert report.quarantine_path == q
    [line] = quarantine(q)
    assert (line["record"], line["reason"], line["field"]) == (4, reason, field)
    assert fix in line["message"]
    raw = bad if isinstance(bad, str) else json.dumps(bad)
    assert line["raw"] == raw  # the line exactly as written
    assert con.execute("SELECT count(*) FROM changelog").fetchall() == [(3,)]


def test_messages_show_the_offending_value(tmp_path: Path) -> None:
    with pytest.raises(ChangelogError, match="field 'op' is 'upsert'"):
        load(JsonlSource(path=_write(tmp_path, rec("c", op="upsert"))), duckdb.connect())
    with pytest.raises(ChangelogError, match=r"field 'ts' is 'next tuesday'"):
        load(JsonlSource(path=_write(tmp_path, rec("c", ts="next tuesday"))), duckdb.connect())
    with pytest.raises(ChangelogError, match="repeats seq 3 of record 3"):
        load(JsonlSource(path=_write(tmp_path, rec("a", seq=3))), duckdb.connect())
    with pytest.raises(ChangelogError, match="inserted at record 2"):
        load(JsonlSource(path=_write(tmp_path, rec("b", "2025-01-03"))), duckdb.connect())


def test_the_first_bad_record_is_reported(tmp_path: Path) -> None:
    # A liveness error at record 2 is found after the per-record error at record 3.
    path = write_jsonl(tmp_path / "c.jsonl", [rec("a"), rec("b", op="delete"), rec("c", op="?")])
    with pytest.raises(ChangelogError) as info:
        load(JsonlSource(path=path), duckdb.connect())
    assert (info.value.record, info.value.reason) == (2, "delete_before_insert")


def test_out_of_order_input_is_ordered_by_ts_then_seq(tmp_path: Path) -> None:
    log = [
        rec("a", "2025-01-03T00:00:00Z", "delete", seq=3),
        rec("a", "2025-01-02T00:00:00Z", "update", seq=2),
        rec("a", "2025-01-01T00:00:00Z", "insert", seq=1),
        rec("b", T0, "update", seq=2),  # same ts as its insert; seq puts it after
        rec("b", T0, "insert", seq=1),
    ]
    con = duckdb.connect()
    report = load(JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", log)), con)
    assert report.valid == 5
    assert con.execute("SELECT record FROM changelog").fetchall() == [
        (3,), (5,), (4,), (2,), (1,)
    ]  # fmt: skip


@pytest.mark.parametrize("setting", ["", "compressed_materialization"])
def test_the_connections_optimizer_setting_is_left_as_it_was(tmp_path: Path, setting: str) -> None:
    """The canonical table is joined with one optimizer switched off for that statement only."""
    con = duckdb.connect()
    con.execute(f"SET disabled_optimizers = '{setting}'")
    report = load(JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", GOOD)), con)
    assert report.valid == 3
    assert con.execute("SELECT current_setting('disabled_optimizers')").fetchone() == (setting,)


def test_every_reason_at_once_and_counts_add_up(tmp_path: Path) -> None:
    records = [*GOOD] + [bad for _c, bad, *_ in CASES if _c != "delete unit"]
    path = write_jsonl(tmp_path / "c.jsonl", records)  # type: ignore[arg-type]
    q = tmp_path / "q.jsonl"
    report = load(
        JsonlSource(path=path),
        duckdb.connect(),
        on_error="quarantine",
        quarantine_path=q,
        unit_column="rider",
    )
    assert report.records == len(records)
    assert report.records == report.valid + report.invalid + report.tombstones
    assert set(report.quarantined) == set(REASONS) - set(SET_ASIDE_REASONS)
    lines = quarantine(q)
    assert len(lines) == report.invalid
    assert [x["record"] for x in lines] == sorted(x["record"] for x in lines)


def test_quarantine_file_is_rewritten_and_empty_when_clean(tmp_path: Path) -> None:
    q = tmp_path / "q.jsonl"
    q.write_text("stale\n")
    report = load(
        JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", GOOD)),
        duckdb.connect(),
        on_error="quarantine",
        quarantine_path=q,
    )
    assert dict(report.quarantined) == {} and q.read_text() == ""


def test_tabular_quarantine_keeps_the_fields(tmp_path: Path) -> None:
    log = [dict(rec("a"), seq=1, before=None), dict(rec("b"), op="bogus", seq=2, before=None)]
    q = tmp_path / "q.jsonl"
    report = load(
        CsvSource(path=write_csv(tmp_path / "c.csv", log)),
        duckdb.connect(),
        on_error="quarantine",
        quarantine_path=q,
    )
    assert dict(report.quarantined) == {"unknown_op": 1}
    [line] = quarantine(q)
    assert line["record"] == 2
    assert line["raw"]["op"] == "bogus" and json.loads(line["raw"]["after"]) == ROW


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_error": "ignore"}, "on_error must be 'raise' or 'quarantine'"),
        ({"on_error": "quarantine"}, "needs a quarantine_path"),
        ({"table": "my table"}, "identifier"),
        ({"unit_column": ""}, "unit column"),
    ],
)
def test_option_errors(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    source = JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", GOOD))
    with pytest.raises(ConfigError, match=message):
        load(source, duckdb.connect(), **kwargs)
    with pytest.raises(ConfigError, match="source configuration"):
        load("c.jsonl", duckdb.connect())  # type: ignore[arg-type]
    assert isinstance(SqliteSource(path=tmp_path / "x"), SqliteSource)


def test_utc_offsets_that_do_not_exist_are_bad_timestamps(tmp_path: Path) -> None:
    """+25:00 or +01:60 is no time (offsets run from -12:00 to +14:00), not a shifted one."""
    from dpcr.changelog import JsonlSource, load

    rows = [
        {"entry": e, "ts": ts, "op": "insert", "after": {"x": 1}}
        for e, ts in [("a", "2025-01-01T00:00:00+25:00"), ("b", "2025-01-01T00:00:00+14:00"),
                      ("c", "2025-01-01T00:00:00-05:30"), ("d", "2025-01-01T00:00:00+0160")]
    ]
    path = tmp_path / "l.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    con = duckdb.connect()
    report = load(JsonlSource(path=path), con, on_error="quarantine",
                  quarantine_path=tmp_path / "q.jsonl")
    assert report.quarantined == {"bad_timestamp": 2}
    assert [r[0] for r in con.execute("SELECT entry FROM changelog ORDER BY entry").fetchall()] \
        == ["b", "c"]


def test_blank_entry_shortcut_is_trim() -> None:
    """Phase 1's test for a blank entry trims only entries that do not begin with a printable
    ASCII character other than the space; it agrees with ``trim(entry) = ''`` everywhere."""
    from dpcr.changelog._phase1 import _BLANK_ENTRY

    texts = ["", " ", "  ", "\u00a0", "\u2003", "\u00a0 \u2003", "\t", "\n", "\x0b", " a",
             "a ", "!", "~", "\x7f", "a", " \t", "\u00a0x", "\u3000", "\ufeff", "\u200b",
             "é"]  # fmt: skip
    con = duckdb.connect()
    con.execute("CREATE TABLE t (entry VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?)", [[t] for t in texts])
    rows = con.execute(f"SELECT entry, {_BLANK_ENTRY}, trim(entry) = '' FROM t").fetchall()
    assert [r for r in rows if r[1] != r[2]] == []
    assert sum(r[2] for r in rows) >= 5  # blank texts are among them


@pytest.mark.parametrize("path", ["json reader", "line by line", "parquet text", "parquet struct"])
def test_bare_nan_tokens_in_a_number_column_are_not_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """With ``numbers=("fare",)``: a bare NaN/infinity token in the row after's fare is
    ``bad_json`` (field after), exactly: ``1e999`` (valid JSON), the string ``"NaN"``, a token
    in another column and a token in the row before are kept; a typed Parquet float NaN is a
    value (counted as missing by the queries), not a token."""
    import dpcr.changelog._stage as stage

    lines = [json.dumps(rec("a"))]
    fares = ["NaN", "-Infinity", "inf", "-nan", "1e999", '"NaN"', "null", "3"]
    for i, fare in enumerate(fares):
        lines.append(
            f'{{"entry": "n{i}", "ts": "{T0}", "op": "insert", '
            f'"after": {{"id": {i}, "fare": {fare}, "zone": NaN}}}}'
        )
    lines.append('{"entry": "a", "ts": "2025-01-02T00:00:00Z", "op": "update", '
                 '"before": {"fare": NaN}, "after": {"fare": 1}}')  # fmt: skip
    if path == "line by line":
        lines.append("not json")  # (read line by line because of it)
        monkeypatch.setattr(stage, "_force_slow_path", True)
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    source: Any = JsonlSource(path=jsonl)
    if path.startswith("parquet"):
        from dpcr.changelog import ParquetSource

        kind = "JSON" if path == "parquet text" else "STRUCT(fare DOUBLE)"
        pq = tmp_path / "c.parquet"
        duckdb.sql(
            f"COPY (SELECT entry, ts, op, TRY_CAST(before AS {kind}) AS before, "
            f"TRY_CAST(after AS {kind}) AS after FROM read_json('{jsonl}', format = "
            "'newline_delimited', columns = {'entry': 'VARCHAR', 'ts': 'VARCHAR', "
            "'op': 'VARCHAR', 'before': 'JSON', 'after': 'JSON'})) TO "
            f"'{pq}' (FORMAT parquet)"
        )
        source = ParquetSource(path=pq)
    q = tmp_path / "q.jsonl"
    report = load(source, duckdb.connect(), on_error="quarantine", quarantine_path=q,
                  numbers=("fare",))  # fmt: skip
    bad = [(x["record"], x["reason"], x["field"]) for x in quarantine(q)]
    def strict(token: str) -> None:
        pytest.fail(f"the quarantine file holds {token}, which is not JSON")

    for line in q.read_text().splitlines():  # JSON lines (RFC 8259)
        json.loads(line, parse_constant=strict)
    if path == "parquet struct":
        assert bad == []
    else:
        tokens = [(i + 2, "bad_json", "after") for i in range(4)]
        assert bad == tokens + ([(11, "bad_json", "record")] if path == "line by line" else [])
    assert report.valid == 10 - len([b for b in bad if b[2] == "after"])
