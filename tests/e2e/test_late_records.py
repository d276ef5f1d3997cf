"""Late records through the release loop: excluded for good with their (unit, entry)'s later
history, so released changes keep adding up to the kept state; they never block later runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dpcr
import dpcr.release._draw as release_draw
from dpcr.noise import simulation_randomness
from dpcr.timeutil import parse_timestamp
from e2e.helpers import mutations, write_jsonl

CUT = "2025-01-07T00:00:00Z"
END = "2025-01-17T00:00:00Z"


def release(tmp: Path) -> dpcr.ContinualRelease:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=dpcr.AtMostK(k=100),
        plan=dpcr.DisjointRelease(start="2025-01-01", period="1d", end=END),
        queries=[dpcr.Count(name="active")],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
    )


def live(log: list[dict[str, Any]], t: int, *, skip: set[int]) -> int:
    alive: set[str] = set()
    for i, m in enumerate(log):
        if i in skip or parse_timestamp(m["ts"], name="ts") > t:
            continue
        if m["op"] == "delete":
            alive.discard(m["entry"])
        else:
            alive.add(m["entry"])
    return len(alive)


@pytest.fixture(autouse=True)
def noise_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(release_draw, "add_noise", lambda values, event, rng: values)


def test_late_records_freeze_their_entry_and_running_totals_add_up(tmp_path: Path) -> None:
    log = mutations()
    first = [m for m in log if m["ts"] < CUT]
    rest = [m for m in log if m["ts"] >= CUT]
    victim = next(m for m in first if m["op"] == "insert")
    row = {"ticket_id": "x", "rider_id": "r1", "kind": "multi", "zone": "A", "fare": 5.0,
           "rides": 0}
    late = [
        # a late insert, then (after the cut) its delete: the delete must not count either
        {"entry": "late-x", "ts": "2025-01-02T05:00:00Z", "seq": 90_001, "op": "insert",
         "before": None, "after": row},
        {"entry": "late-x", "ts": "2025-01-09T05:00:00Z", "seq": 90_002, "op": "delete",
         "before": row, "after": None},
        # a late delete of an entry already released live: it stays live (frozen)
        {"entry": victim["entry"], "ts": "2025-01-06T23:00:00Z", "seq": 90_003, "op": "delete",
         "before": victim["after"], "after": None},
    ]
    write_jsonl(tmp_path / "log.jsonl", first)
    r = release(tmp_path)
    r.run(until=CUT, rng=simulation_randomness(1))
    full = first + late + rest
    write_jsonl(tmp_path / "log.jsonl", full)
    second = r.run(until=END, rng=simulation_randomness(2))
    assert second.diagnostics["changelog"]["late"] >= 2
    third = r.run(until=END, rng=simulation_randomness(3))  # never blocked afterwards
    assert third.rows == second.rows
    # brute force: the late records and everything of their entries after them never happened
    skip = {i for i, m in enumerate(full) if m["entry"] == "late-x"}
    skip |= {
        i for i, m in enumerate(full)
        if m["entry"] == victim["entry"] and m["seq"] >= 90_003
    }
    skip |= {
        i for i, m in enumerate(full)
        if m["entry"] == victim["entry"] and m["ts"] >= CUT
    }
    for row_ in second.rows:
        end = parse_timestamp(row_.end, name="end")
        assert row_.estimate == live(full, end, skip=skip), row_


def test_a_late_record_invalidating_a_consumed_one_does_not_block(tmp_path: Path) -> None:
    """Appending a late delete that makes an already consumed (released) delete invalid changes
    no digest of what was consumed: later runs go on."""
    log = mutations()
    first = [m for m in log if m["ts"] < CUT]
    deleted = next(m for m in first if m["op"] == "delete")
    ins = next(m for m in first if m["entry"] == deleted["entry"] and m["op"] == "insert")
    late = {"entry": deleted["entry"], "ts": ins["ts"], "seq": ins["seq"] + 100_000,
            "op": "delete", "before": ins["after"], "after": None}
    write_jsonl(tmp_path / "log.jsonl", first)
    r = release(tmp_path)
    r.run(until=CUT, rng=simulation_randomness(1))
    write_jsonl(tmp_path / "log.jsonl", [*first, late])
    r.run(until=CUT, rng=simulation_randomness(2))
    write_jsonl(tmp_path / "log.jsonl", [*first, late, *[m for m in log if m["ts"] >= CUT]])
    result = r.run(until=END, rng=simulation_randomness(3))
    assert result.summary["released_intervals"] == 16
