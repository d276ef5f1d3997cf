"""A query or constraint column that no valid row has (usually a typo) is refused before
anything is released, however far into the source the first row with it lies, and a column
that only rejected rows have counts as missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dpcr
from dpcr.queries import Sum
from dpcr.timeutil import format_timestamp

T0 = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
HOUR = 3_600_000_000


def _write(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _insert(i: int, after: dict[str, object]) -> dict[str, object]:
    return {"entry": f"e{i}", "ts": format_timestamp(T0 + i), "op": "insert", "after": after}


def _run(tmp: Path, column: str) -> dpcr.RunResult:
    release = dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=dpcr.AtMostK(k=2),
        plan=dpcr.DisjointRelease(start="2025-01-01T00:00:00Z", period="1d"),
        queries=[Sum(name="fares", column=column, lower=0, upper=10)],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
        on_error="quarantine",
        until="2025-01-03T00:00:00Z",
    )
    return release.run(rng=dpcr.noise.simulation_randomness(1))


def test_a_column_first_seen_far_into_the_source_is_found(tmp_path: Path) -> None:
    rows = [_insert(i, {"other": 1}) for i in range(12_000)]
    rows.append(_insert(12_000, {"fare": 2.5}))
    _write(tmp_path / "log.jsonl", rows)
    result = _run(tmp_path, "fare")
    assert result.diagnostics["changelog"]["valid"] == 12_001
    assert result.rows


def test_a_misspelt_column_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "log.jsonl", [_insert(i, {"fare": 1}) for i in range(50)])
    with pytest.raises(dpcr.ConfigError, match=r"'fair'.*appear in no row"):
        _run(tmp_path, "fair")
    assert not (tmp_path / "out" / "public" / "releases.csv").exists()


def test_a_column_only_rejected_rows_have_is_missing(tmp_path: Path) -> None:
    rows = [_insert(i, {"other": 1}) for i in range(50)]
    # an update of an entry never inserted: quarantined, its row does not count
    rows.append({"entry": "ghost", "ts": format_timestamp(T0 + HOUR), "op": "update",
                 "before": {"fare": 1}, "after": {"fare": 2}})  # fmt: skip
    _write(tmp_path / "log.jsonl", rows)
    with pytest.raises(dpcr.ConfigError, match=r"'fare'.*appear in no row"):
        _run(tmp_path, "fare")
