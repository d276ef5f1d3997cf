"""A kind defined outside dpcr, in one class and one registry entry, runs through the whole
release (TOML, accounting, engine, outputs): what a new kind costs. A clamped sum of absolute
values (a query kind) and a standard deviation (a derived kind) are defined here, registered
with ``monkeypatch.setitem`` and checked against the exact values with the noise off."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import dpcr.release._draw as release_draw
from dpcr.config import parse_config
from dpcr.noise import simulation_randomness
from dpcr.queries import DERIVED_KINDS, QUERY_KINDS, Sum, Variance
from e2e.helpers import mutations, write_jsonl
from queries.test_moments import END, raw_config


@dataclass(frozen=True, slots=True, kw_only=True)
class SumAbs(Sum):
    """Σ |x| of the clamped, grid-rounded x."""

    kind: ClassVar[str] = "sum_abs"

    @property
    def steps_range(self) -> tuple[int, int]:
        a, b = self.lower_steps, self.upper_steps
        return (0 if a <= 0 <= b else min(abs(a), abs(b))), max(abs(a), abs(b))

    def steps_sql(self, number: str) -> str:
        return f"abs({Sum.steps_sql(self, number)})"

    def describe(self) -> str:
        return f"sum of |{self.column}|"


@dataclass(frozen=True, slots=True, kw_only=True)
class StdDev(Variance):
    """The square root of the population variance."""

    kind: ClassVar[str] = "stddev"

    def combine(self, inputs: Any, values: Any, stds: Any) -> tuple[np.ndarray, np.ndarray]:
        var, sd = Variance.combine(self, inputs, values, stds)
        root = np.sqrt(np.maximum(var, 0))
        return root, sd / (2 * np.where(root > 0, root, np.nan))

    def value_range(self, inputs: Any) -> tuple[float, float]:
        return 0.0, math.sqrt(Variance.value_range(self, inputs)[1])


def test_a_kind_and_a_derived_kind_from_one_class_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(QUERY_KINDS, "sum_abs", SumAbs)
    monkeypatch.setitem(DERIVED_KINDS, "stddev", StdDev)
    monkeypatch.setattr(release_draw, "add_noise", lambda values, event, rng: values)
    log = mutations(60, 10, 8)
    for m in log:  # fares from -60 to 60
        for row in (m["before"], m["after"]):
            if row is not None:
                row["fare"] = round(row["fare"] - 60.0, 2)
    write_jsonl(tmp_path / "log.jsonl", log)
    raw = raw_config(
        {"name": "abs", "kind": "sum_abs", "column": "fare", "lower": -50, "upper": 20},
        {"name": "sd", "kind": "stddev", "count": "n", "sum": "s", "sum_squares": "ss"},
    )
    for q in raw["query"][1:3]:
        q["lower"] = -50
        q["upper"] = 20
    cfg = parse_config(raw, base_dir=tmp_path)
    assert cfg.queries[3] == SumAbs(name="abs", column="fare", lower=-50, upper=20)
    assert cfg.queries[3].l1_sensitivity == 50  # max(|a|, |b|) (grid 1)
    rows = {(r.query, r.interval): r for r in cfg.run(until=END, rng=simulation_randomness(0))}
    state: dict[str, Any] = {}
    for m in log:
        if m["ts"] <= "2025-01-11T00:00:00Z":
            state[m["entry"]] = m["after"]
    live = [min(max(r["fare"], -50), 20) for r in state.values() if r]
    # (rounded half away from zero, as DuckDB's round: on grid 1 for abs, 0.5 for the sd)
    assert rows[("abs", 10)].estimate == sum(math.floor(abs(x) + 0.5) for x in live)
    halves = [math.copysign(math.floor(abs(x) / 0.5 + 0.5) * 0.5, x) for x in live]
    assert rows[("sd", 10)].estimate == pytest.approx(statistics.pstdev(halves), abs=1e-9)
