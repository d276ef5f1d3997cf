"""A unit column: every mutation is charged to the unit its own rows name, and each (unit, entry)
is validated on its own; an update that changes the unit is a delete plus an insert."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import JsonlSource, load
from dpcr.errors import ChangelogError

from .helpers import quarantine, write_jsonl


def rec(entry: str, ts: int, op: str, before: Any = None, after: Any = None, **kw: Any) -> dict:
    return {"entry": entry, "ts": ts, "op": op, "before": before, "after": after, **kw}


def row(rider: str, v: int = 1) -> dict[str, Any]:
    return {"rider": rider, "v": v}


def _load(tmp: Path, records: list[Any]) -> tuple[Any, duckdb.DuckDBPyConnection, list[dict]]:
    con = duckdb.connect()
    q = tmp / "q.jsonl"
    report = load(JsonlSource(path=write_jsonl(tmp / "c.jsonl", records)), con,
                  unit_column="rider", on_error="quarantine", quarantine_path=q)  # fmt: skip
    return report, con, quarantine(q)


def test_an_update_that_changes_the_unit_is_a_delete_and_an_insert(tmp_path: Path) -> None:
    report, con, bad = _load(
        tmp_path,
        [
            rec("t", 1, "insert", after=row("A", 1)),
            rec("t", 2, "update", before=row("A", 1), after=row("B", 2)),
            rec("t", 3, "update", before=row("B", 2), after=row("B", 3)),
            rec("t", 4, "delete", before=row("B", 3)),
        ],
    )
    assert (report.records, report.split, report.valid, report.invalid, bad) == (4, 1, 5, 0, [])
    rows = con.execute(
        "SELECT record, unit, op, before ->> 'v', after ->> 'v', ts, seq FROM changelog"
    ).fetchall()
    second = 2_000_000  # ts in microseconds
    assert rows == [
        (1, "A", "insert", None, "1", 1 * 1_000_000, 1),
        (2, "A", "delete", "1", None, second, 2),  # the old unit's half first
        (2, "B", "insert", None, "2", second, 2),
        (3, "B", "update", "2", "3", 3 * 1_000_000, 3),
        (4, "B", "delete", "3", None, 4 * 1_000_000, 4),
    ]


def test_each_unit_validates_its_own_history_of_an_entry(tmp_path: Path) -> None:
    report, con, bad = _load(
        tmp_path,
        [
            rec("t", 1, "insert", after=row("A")),
            # B updates t, which B never inserted: not live for B, whatever A did.
            rec("t", 2, "update", before=row("B"), after=row("B", 2)),
            # A moves t to C while C holds it already: A's delete is valid, C's insert is not.
            rec("t", 3, "insert", after=row("C")),
            rec("t", 4, "update", before=row("A"), after=row("C", 5)),
            # The same seq in another unit is no duplicate.
            rec("u", 5, "insert", after=row("A"), seq=1),
        ],
    )
    assert dict(report.quarantined) == {"update_before_insert": 1, "double_insert": 1}
    assert report.records + report.split == report.valid + report.invalid
    assert [(b["record"], b["reason"]) for b in bad] == [
        (2, "update_before_insert"), (4, "double_insert")
    ]  # fmt: skip
    assert "of entry 't' of unit 'B'" in bad[0]["message"]
    assert "moving it into unit 'C' (an insert there)" in bad[1]["message"]
    assert "already live in unit 'C' (inserted at record 3)" in bad[1]["message"]
    assert con.execute("SELECT record, unit, op FROM changelog ORDER BY ts, unit").fetchall() == [
        (1, "A", "insert"), (3, "C", "insert"), (4, "A", "delete"), (5, "A", "insert")
    ]  # fmt: skip


def test_duplicates_are_per_unit_and_entry(tmp_path: Path) -> None:
    report, _con, bad = _load(
        tmp_path,
        [
            rec("t", 1, "insert", after=row("A"), seq=7),
            rec("t", 2, "insert", after=row("B"), seq=7),
            rec("t", 3, "update", before=row("A"), after=row("A", 2), seq=7),
        ],
    )
    assert report.valid == 2
    assert [(b["record"], b["reason"]) for b in bad] == [(3, "duplicate")]
    assert "of unit 'A' repeats seq 7 of record 1" in bad[0]["message"]


@pytest.mark.parametrize(
    ("record", "field", "fix"),
    [
        (rec("t", 2, "update", after=row("A", 2)), "before", "REPLICA IDENTITY FULL"),
        (rec("t", 2, "delete"), "before", "REPLICA IDENTITY FULL"),
        (rec("t", 2, "update", before={"v": 1}, after=row("A", 2)), "rider", "before or after"),
        (rec("t", 2, "update", before=row("A"), after={"v": 2}), "rider", "before or after"),
    ],
)
def test_updates_and_deletes_name_their_unit_in_their_own_rows(
    tmp_path: Path, record: dict, field: str, fix: str
) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [rec("t", 1, "insert", after=row("A")), record])
    with pytest.raises(ChangelogError) as info:
        load(JsonlSource(path=path), duckdb.connect(), unit_column="rider")
    assert (info.value.record, info.value.field, info.value.reason) == (2, field, "missing_unit")
    assert fix in str(info.value)


def test_a_record_unit_field_keys_validation_by_unit_and_entry(tmp_path: Path) -> None:
    records = [
        rec("t", 1, "insert", after={"v": 1}, person="p"),
        rec("t", 2, "update", before=None, after={"v": 2}, person="q"),  # q never inserted t
        rec("t", 3, "update", before=None, after={"v": 3}, person="p"),
    ]
    con = duckdb.connect()
    report = load(JsonlSource(path=write_jsonl(tmp_path / "c.jsonl", records), unit="person"),
                  con, on_error="quarantine", quarantine_path=tmp_path / "q.jsonl")  # fmt: skip
    assert dict(report.quarantined) == {"update_before_insert": 1}
    # The before row is reconstructed from the same (unit, entry)'s previous valid mutation.
    assert con.execute("SELECT record, before ->> 'v' FROM changelog").fetchall() == [
        (1, None), (3, "1")
    ]  # fmt: skip
