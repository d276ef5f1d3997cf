"""Resuming: late mutations freeze their (unit, entry) for good; the raw digest of consumed
records ignores what validation decides and what is appended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import DebeziumSource, JsonlSource, load, raw_digest
from dpcr.errors import ConfigError

from .helpers import write_jsonl

S = 1_000_000  # one second in microseconds


def rec(entry: str, ts: int, op: str, v: int = 1, **kw: Any) -> dict[str, Any]:
    row = {"id": entry, "v": v}
    return {
        "entry": entry,
        "ts": ts,
        "op": op,
        "before": None if op == "insert" else row,
        "after": None if op == "delete" else row,
        **kw,
    }


def _load(path: Path, con: duckdb.DuckDBPyConnection, **kw: Any) -> Any:
    return load(JsonlSource(path=path), con, on_error="quarantine",
                quarantine_path=path.with_suffix(".q"), **kw)  # fmt: skip


def _rows(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    return con.execute("SELECT record, entry, op FROM changelog ORDER BY record").fetchall()


def test_a_late_mutation_freezes_its_entry_for_good(tmp_path: Path) -> None:
    consumed = [rec("a", 1, "insert"), rec("b", 2, "insert"), rec("a", 15, "update", 2)]
    path = write_jsonl(tmp_path / "c.jsonl", consumed)
    con = duckdb.connect()
    first = _load(path, con)
    assert (first.late, first.frozen) == (0, ())
    # Records 4-6 arrive after a run that consumed 3 records and released up to t = 10 s.
    appended = [rec("a", 5, "update", 3), rec("a", 20, "update", 4), rec("b", 20, "update", 5)]
    write_jsonl(path, consumed + appended)
    report = _load(path, con, exclude_late=(3, 10 * S))
    assert report.frozen == (("a", "a", 4),)
    assert report.late == 2  # a's late update and its later one; b is untouched
    assert report.records + report.split == report.valid + report.invalid + report.late
    assert _rows(con) == [(1, "a", "insert"), (2, "b", "insert"), (3, "a", "update"),
                          (6, "b", "update")]  # fmt: skip
    # Next run: nothing new is late, but a stays frozen from record 4 on.
    write_jsonl(path, [*consumed, *appended, rec("a", 30, "delete", 4)])
    again = _load(path, con, exclude_late=(6, 20 * S), frozen=report.frozen)
    assert (again.frozen, again.late) == (report.frozen, 3)
    assert _rows(con)[-1] == (6, "b", "update")


def test_late_mutations_leave_consumed_records_as_they_were(tmp_path: Path) -> None:
    """A late delete would make a consumed delete invalid; a late insert would make a consumed
    (rejected) delete valid. Frozen mutations take no part in validation, so neither happens."""
    consumed = [rec("a", 1, "insert"), rec("a", 8, "delete"), rec("b", 15, "delete")]
    path = write_jsonl(tmp_path / "c.jsonl", consumed)
    con = duckdb.connect()
    before = _load(path, con)
    assert dict(before.quarantined) == {"delete_before_insert": 1}
    rows = _rows(con)
    write_jsonl(path, [*consumed, rec("a", 5, "delete"), rec("b", 5, "insert")])
    after = _load(path, con, exclude_late=(3, 10 * S))
    assert _rows(con) == rows
    assert dict(after.quarantined) == {"delete_before_insert": 1}
    assert after.frozen == (("a", "a", 4), ("b", "b", 5))
    # Without the late records left out, validation would change the consumed records.
    _load(path, con)
    assert _rows(con) != rows


def test_rejected_late_records_freeze_nothing(tmp_path: Path) -> None:
    consumed = [rec("a", 1, "insert", seq=1)]
    path = write_jsonl(tmp_path / "c.jsonl", consumed)
    write_jsonl(path, [*consumed, rec("a", 2, "update", seq=1), rec("a", "soon", "update")])
    report = _load(path, duckdb.connect(), exclude_late=(1, 10 * S))
    assert dict(report.quarantined) == {"duplicate": 1, "bad_timestamp": 1}
    assert (report.frozen, report.late) == ((), 0)


def test_records_seen_counts_records_not_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    write_jsonl(path, ["", rec("a", 1, "insert"), "", rec("a", 5, "update", 2)])  # type: ignore[list-item]
    report = _load(path, duckdb.connect(), exclude_late=(1, 10 * S))
    assert report.frozen == (("a", "a", 4),)  # the second record (line 4) is the new one


@pytest.mark.parametrize(
    "bad",
    [(1, 2, 3), ("a", "a"), ("a", 1, 2), ("a", "a", True), "aa1"],
)
def test_frozen_points_are_checked(tmp_path: Path, bad: Any) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [rec("a", 1, "insert")])
    with pytest.raises(ConfigError, match="frozen point"):
        _load(path, duckdb.connect(), frozen=[bad])
    with pytest.raises(ConfigError, match="records_seen"):
        _load(path, duckdb.connect(), exclude_late=(-1, 0))


def test_raw_digest_ignores_validation_and_appended_records(tmp_path: Path) -> None:
    consumed: list[Any] = [rec("a", 1, "insert"), rec("a", 8, "delete"), "not json",
                           rec("b", 3, "update")]  # fmt: skip
    path = write_jsonl(tmp_path / "c.jsonl", consumed)
    con = duckdb.connect()
    assert "delete_before_insert" not in _load(path, con).quarantined
    digest = raw_digest(con, "changelog", 4)
    assert digest.startswith("4:")
    assert raw_digest(con, "changelog", 3) != digest
    # An appended late delete invalidates the consumed delete; the digest does not move.
    write_jsonl(path, [*consumed, rec("a", 5, "delete"), ""])
    report = _load(path, con)
    assert report.quarantined["delete_before_insert"] == 1  # record 2, consumed
    assert raw_digest(con, "changelog", 4) == digest
    assert raw_digest(con, "changelog", 99).startswith("5:")
    # Rewriting any consumed record changes it: a valid one, and a rejected one.
    for i, changed in [(1, rec("a", 8, "delete", 2)), (2, "not json either")]:
        edited = list(consumed)
        edited[i] = changed
        write_jsonl(path, edited)
        _load(path, con)
        assert raw_digest(con, "changelog", 4) != digest, i


def test_raw_digest_counts_tombstones_and_needs_a_load(tmp_path: Path) -> None:
    env = {"payload": {"op": "c", "after": {"id": 1}, "source": {"ts_ms": 1}}}
    path = write_jsonl(tmp_path / "d.jsonl", [env, {"payload": None}])  # type: ignore[list-item]
    con = duckdb.connect()
    report = load(DebeziumSource(path=path, key="id"), con, table="d")
    assert (report.records, report.tombstones) == (2, 1)
    assert raw_digest(con, "d", 2).startswith("2:")
    with pytest.raises(ConfigError, match="load the changelog"):
        raw_digest(con, "changelog", 2)
