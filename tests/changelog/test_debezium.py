"""Debezium envelopes: decimals, tombstones, snapshot reads, keys, timestamps."""

from __future__ import annotations

import json
from decimal import Decimal, getcontext
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import DebeziumSource, load
from dpcr.changelog import _stage as stage_module
from dpcr.errors import ChangelogError

from .helpers import decimal, quarantine, write_jsonl

getcontext().prec = 60
MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z


def env(op: str, before: Any = None, after: Any = None, ts: int = MS, **kw: Any) -> dict:
    payload = {"op": op, "before": before, "after": after, "source": {"ts_ms": ts}, **kw}
    return {"schema": None, "payload": payload}


@pytest.fixture(params=["fast", "line by line"])
def con(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(stage_module, "_force_slow_path", request.param == "line by line")
    return duckdb.connect()


VALUES = [0, 1, -1, 5, -5, 127, 128, -128, -129, 255, -256, 65535, -65536, 10**18, -(10**18),
          2**100, -(2**100), 2**127 - 1, -(2**127 - 1)]  # fmt: skip


@pytest.mark.parametrize("scale", [0, 1, 2, 3, 4])
def test_decimals_decode_exactly(tmp_path: Path, con, scale: int) -> None:
    records = []
    for i, unscaled in enumerate(VALUES):
        value = Decimal(unscaled).scaleb(-scale)
        row = {"id": i, "amount": decimal(value, scale), "other": decimal(-value, scale)}
        records.append(env("c", after=row, ts=MS + i))
    load(DebeziumSource(path=write_jsonl(tmp_path / "d.jsonl", records), key="id"), con)
    got = con.execute("SELECT entry, after::VARCHAR FROM changelog").fetchall()
    assert len(got) == len(VALUES)
    for entry, after in got:
        parsed = json.loads(after, parse_float=Decimal, parse_int=Decimal)
        expected = Decimal(VALUES[int(entry)]).scaleb(-scale)
        # Numbers go through DuckDB's JSON (doubles beyond 2^53): exact up to 15 digits.
        tolerance = abs(expected) * Decimal("1e-15")
        assert abs(parsed["amount"] - expected) <= tolerance, (entry, after)
        assert abs(parsed["other"] + expected) <= tolerance, (entry, after)
        if abs(VALUES[int(entry)]) < 2**53:
            assert parsed["amount"] == expected


def test_decimals_with_value_first_and_in_nested_rows(tmp_path: Path, con) -> None:
    row = {
        "id": 1,
        "a": {"value": decimal(Decimal("-2.5"), 1)["value"], "scale": 1},
        "nested": {"b": decimal(Decimal("0.07"), 2)},
        "list": [decimal(Decimal("1.5"), 1), decimal(Decimal("-3"), 0)],
        "text": 'has "scale": in a string',
        "scale": 3,  # a column called scale is not a decimal
    }
    load(DebeziumSource(path=write_jsonl(tmp_path / "d.jsonl", [env("c", after=row)]), key="id"),
         con)  # fmt: skip
    [(after,)] = con.execute("SELECT after::VARCHAR FROM changelog").fetchall()
    assert json.loads(after) == {
        "id": 1, "a": -2.5, "nested": {"b": 0.07}, "list": [1.5, -3],
        "text": 'has "scale": in a string', "scale": 3,
    }  # fmt: skip


def test_sixteen_bytes_decode_and_more_are_bad_json(tmp_path: Path, con) -> None:
    smallest = {"id": 1, "v": decimal(-(2**127), 0)}  # the most negative 16-byte value
    too_big = {"id": 2, "v": decimal(2**127, 0)}  # needs 17 bytes
    bad_base64 = {"id": 3, "v": {"scale": 2, "value": "!!not base64"}}
    lines = [env("c", after=smallest), env("c", after=too_big), env("c", after=bad_base64)]
    q = tmp_path / "q.jsonl"
    report = load(
        DebeziumSource(path=write_jsonl(tmp_path / "d.jsonl", lines), key="id"),
        con,
        on_error="quarantine",
        quarantine_path=q,
    )
    assert dict(report.quarantined) == {"bad_json": 2}
    assert con.execute("SELECT after ->> 'v' FROM changelog").fetchall() == [(str(-(2**127)),)]
    assert all("undecodable Debezium decimal" in x["message"] for x in quarantine(q))
    with pytest.raises(ChangelogError, match="undecodable Debezium decimal") as info:
        load(DebeziumSource(path=write_jsonl(tmp_path / "e.jsonl", lines[1:]), key="id"), con)
    assert (info.value.reason, info.value.field) == ("bad_json", "after")


def test_ops_tombstones_and_snapshot_reads(tmp_path: Path, con) -> None:
    r1, r2 = {"id": 1, "v": 1}, {"id": 2, "v": 2}
    lines: list[Any] = [
        env("r", after=r1),  # snapshot read: an insert
        env("c", after=r2, ts=MS + 1),
        env("u", before=r1, after=dict(r1, v=5), ts=MS + 2),
        env("d", before=r2, ts=MS + 3),
        "null",  # tombstone forms
        {"payload": None},
        {"schema": {"type": "struct"}, "payload": None},
        "",  # blank lines are not records
        env("d", before=dict(r1, v=5), ts=MS + 4)["payload"],  # no payload wrapper
    ]
    q = tmp_path / "q.jsonl"
    report = load(
        DebeziumSource(path=write_jsonl(tmp_path / "d.jsonl", lines), key="id"),
        con,
        on_error="quarantine",
        quarantine_path=q,
    )
    assert (report.records, report.valid, report.tombstones) == (8, 5, 3)
    assert dict(report.quarantined) == {}
    rows = con.execute("SELECT record, entry, op, seq FROM changelog").fetchall()
    assert rows == [(1, "1", "insert", 1), (2, "2", "insert", 2), (3, "1", "update", 3),
                    (4, "2", "delete", 4), (9, "1", "delete", 9)]  # fmt: skip


def test_truncate_and_empty_envelopes_are_errors_not_tombstones(tmp_path: Path, con) -> None:
    lines = [env("t"), {}, {"payload": {"op": "c", "after": {"id": 1}}}]
    q = tmp_path / "q.jsonl"
    report = load(
        DebeziumSource(path=write_jsonl(tmp_path / "d.jsonl", lines), key="id"),
        con,
        on_error="quarantine",
        quarantine_path=q,
    )
    assert dict(report.quarantined) == {"unknown_op": 2, "bad_timestamp": 1}
    assert report.tombstones == 0
    assert [x["field"] for x in quarantine(q)] == ["op", "op", "source.ts_ms"]


def test_lsn_orders_ties_and_ts_ms_is_the_fallback(tmp_path: Path, con) -> None:
    lines = [
        {"payload": {"op": "u", "before": {"id": 1}, "after": {"id": 1, "v": 2},
                     "source": {"ts_ms": MS, "lsn": 20}}},
        {"payload": {"op": "c", "after": {"id": 1}, "source": {"ts_ms": MS, "lsn": 10}}},
        {"payload": {"op": "d", "before": {"id": 1}, "ts_ms": MS + 5}},
    ]  # fmt: skip
    load(DebeziumSource(path=write_jsonl(tmp_path / "d.jsonl", lines), key="id"), con)
    assert con.execute("SELECT record, ts, seq, op FROM changelog").fetchall() == [
        (2, MS * 1000, 10, "insert"), (1, MS * 1000, 20, "update"),
        (3, (MS + 5) * 1000, 3, "delete"),
    ]  # fmt: skip


def test_composite_and_missing_keys(tmp_path: Path, con) -> None:
    lines = [
        env("c", after={"order": 7, "line": "x", "v": 1}),
        env("c", after={"order": 7, "v": 1}),
        env("d", before={"order": 7, "line": "x"}, ts=MS + 1),
    ]
    q = tmp_path / "q.jsonl"
    report = load(
        DebeziumSource(path=write_jsonl(tmp_path / "d.jsonl", lines), key=("order", "line")),
        con,
        on_error="quarantine",
        quarantine_path=q,
    )
    assert dict(report.quarantined) == {"missing_entry": 1}
    assert quarantine(q)[0]["field"] == "key"
    assert con.execute("SELECT entry, op FROM changelog").fetchall() == [
        ('[7,"x"]', "insert"), ('[7,"x"]', "delete")
    ]  # fmt: skip


def test_unit_column_needs_before_rows(tmp_path: Path, con) -> None:
    """Without REPLICA IDENTITY FULL an update has no before row: under a unit column it cannot
    be attributed from the record alone, so it is quarantined (never guessed from the entry's
    earlier records, which may belong to another unit); a delete with only the key likewise."""
    lines = [
        env("c", after={"id": 1, "rider": "r9", "v": 1}),
        env("u", before=None, after={"id": 1, "rider": "r9", "v": 2}, ts=MS + 1),
        env("d", before={"id": 1}, ts=MS + 2),
    ]
    path = write_jsonl(tmp_path / "d.jsonl", lines)
    with pytest.raises(ChangelogError, match="REPLICA IDENTITY FULL") as info:
        load(DebeziumSource(path=path, key="id"), con, unit_column="rider")
    assert (info.value.record, info.value.field, info.value.reason) == (
        2, "before", "missing_unit"
    )  # fmt: skip
    q = tmp_path / "q.jsonl"
    report = load(
        DebeziumSource(path=path, key="id"),
        con,
        unit_column="rider",
        on_error="quarantine",
        quarantine_path=q,
    )
    assert dict(report.quarantined) == {"missing_unit": 2}
    assert [(r["record"], r["field"]) for r in quarantine(q)] == [(2, "before"), (3, "rider")]
    # With the entry as the unit the before row is reconstructed from the entry's history.
    load(DebeziumSource(path=write_jsonl(tmp_path / "e.jsonl", lines[:2]), key="id"), con)
    assert con.execute("SELECT op, unit, before ->> 'v' FROM changelog").fetchall() == [
        ("insert", "1", None), ("update", "1", "1")
    ]  # fmt: skip


def test_an_update_whose_after_lacks_the_key_names_no_entry(tmp_path: Path, con) -> None:
    """The entry is the key of the row after: an update without it is missing_entry, never the
    key of the row before (the row's key before the change)."""
    records = [
        env("c", after={"id": 1, "z": "a"}, ts=MS),
        env("u", before={"id": 1, "z": "a"}, after={"z": "b"}, ts=MS + 1),
        env("d", before={"id": 1, "z": "a"}, ts=MS + 2),
    ]
    q = tmp_path / "q.jsonl"
    source = DebeziumSource(path=write_jsonl(tmp_path / "d.jsonl", records), key="id")
    report = load(source, con, on_error="quarantine", quarantine_path=q)
    assert dict(report.quarantined) == {"missing_entry": 1}
    [line] = quarantine(q)
    assert (line["record"], line["field"]) == (2, "after.id")
    kept = con.execute("SELECT record, op FROM changelog").fetchall()
    assert kept == [(1, "insert"), (3, "delete")]


def test_a_key_change_is_split_and_each_rejected_half_says_so(tmp_path: Path, con) -> None:
    """An ``u`` event whose before and after hold different keys is a delete of the old entry
    and an insert of the new one (two units when the unit is the entry), each judged on its
    own: the old key was never inserted, so the delete half is quarantined, named as a half,
    and the insert half applied."""
    records = [
        env("c", after={"id": 1, "z": "a"}, ts=MS),
        env("u", before={"id": 2, "z": "a"}, after={"id": 5, "z": "b"}, ts=MS + 1),
    ]
    q = tmp_path / "q.jsonl"
    source = DebeziumSource(path=write_jsonl(tmp_path / "d.jsonl", records), key="id")
    report = load(source, con, on_error="quarantine", quarantine_path=q)
    assert report.split == 1 and dict(report.quarantined) == {"delete_before_insert": 1}
    [line] = quarantine(q)
    assert (line["record"], line["half"]) == (2, "delete")
    assert "other half is judged on its own" in line["message"]
    kept = con.execute("SELECT record, entry, op FROM changelog").fetchall()
    assert kept == [(1, "1", "insert"), (2, "5", "insert")]
