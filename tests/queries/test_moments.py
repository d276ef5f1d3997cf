"""Mean and variance of a clamped column (:mod:`dpcr.queries._moments`): read from TOML, refused
unless their inputs are a count, a sum and a sum of squares of the same rows, computed from
the released values only -- with the noise off, exactly the mean and population variance of
the clamped, grid-rounded values of the live rows -- with a delta-method uncertainty."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpcr
import dpcr.release._draw as release_draw
from dpcr.config import parse_config
from dpcr.errors import ConfigError
from dpcr.noise import simulation_randomness
from dpcr.queries import DERIVED_KINDS, Count, Mean, Sum, SumSquares, Variance
from e2e.helpers import mutations, write_jsonl
from queries.kinds import DERIVED_EXAMPLES, derived_example

START, END = "2025-01-01", "2025-01-11"


def raw_config(*extra: dict[str, Any], plan: str = "tree") -> dict[str, Any]:
    return {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 3.0},
        "constraint": {"at_most_k": 6},
        "release": {"plan": plan, "start": START, "end": END, "period": "1d"}
        | ({"window": "3d"} if plan == "window" else {}),
        "query": [
            {"name": "n", "kind": "count"},
            {"name": "s", "kind": "sum", "column": "fare", "lower": 0, "upper": 100,
             "grid": 0.5},
            {"name": "ss", "kind": "sum_squares", "column": "fare", "lower": 0, "upper": 100,
             "grid": 0.5},
            {"name": "fare_mean", "kind": "mean", "count": "n", "sum": "s"},
            {"name": "fare_var", "kind": "variance", "count": "n", "sum": "s",
             "sum_squares": "ss"},
            *extra,
        ],
    }  # fmt: skip


def test_every_derived_kind_has_a_contract_example() -> None:
    assert set(DERIVED_EXAMPLES) == set(DERIVED_KINDS)
    for kind in DERIVED_KINDS:
        d = derived_example(kind)
        assert type(d).kind == kind and d.describe() and d.inputs


def test_the_toml_declares_them_beside_their_inputs(tmp_path: Path) -> None:
    cfg = parse_config(raw_config(), base_dir=tmp_path)
    assert [q.name for q in cfg.queries] == ["n", "s", "ss"]
    assert cfg.derived == (
        Mean(name="fare_mean", count="n", sum="s"),
        Variance(name="fare_var", count="n", sum="s", sum_squares="ss"),
    )
    # they cost nothing: the budget's split and the guarantee are those of the three inputs
    without = raw_config()
    without["query"] = without["query"][:3]
    assert cfg.explain().epsilon == parse_config(without, base_dir=tmp_path).explain().epsilon
    assert cfg.fingerprint() != parse_config(without, base_dir=tmp_path).fingerprint()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"weight": 2}, "unknown key"),
        ({"sum": "missing"}, "must name a 'sum' query"),
        ({"sum": "ss"}, "must name a 'sum' query"),
        ({"sum_squares": "s"}, "must name a 'sum_squares' query"),
        ({"count": "s"}, "must name a 'count' query"),
        ({"name": "n"}, "distinct"),
    ],
)
def test_a_variance_of_other_inputs_is_refused(
    tmp_path: Path, change: dict[str, Any], match: str
) -> None:
    raw = raw_config()
    raw["query"][4] |= change
    with pytest.raises(ConfigError, match=match):
        parse_config(raw, base_dir=tmp_path)


@pytest.mark.parametrize(
    ("index", "change", "match"),
    [
        (2, {"upper": 50}, "column, lower, upper, grid and where"),
        (2, {"where": {"zone": "A"}}, "column, lower, upper, grid and where"),
        (0, {"where": {"zone": "A"}}, "same where"),
    ],
)
def test_inputs_over_other_rows_or_bounds_are_refused(
    tmp_path: Path, index: int, change: dict[str, Any], match: str
) -> None:
    raw = raw_config()
    raw["query"][index] |= change
    with pytest.raises(ConfigError, match=match):
        parse_config(raw, base_dir=tmp_path)


def test_a_window_plan_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="window plan"):
        parse_config(raw_config(plan="window"), base_dir=tmp_path)


def test_the_delta_method_std_is_the_gradient_times_the_input_stds() -> None:
    """Against central differences of the formulas themselves."""
    v = Variance(name="v", count="n", sum="s", sum_squares="ss")
    m = Mean(name="m", count="n", sum="s")
    point = [np.array([40.0]), np.array([1000.0]), np.array([30000.0])]
    sds = [np.array([3.0]), np.array([70.0]), np.array([2000.0])]

    def numeric(kind: Any, k: int) -> float:
        grad = []
        for i in range(k):
            h = 1e-4 * float(point[i][0])
            up = [p + (h if j == i else 0) for j, p in enumerate(point[:k])]
            down = [p - (h if j == i else 0) for j, p in enumerate(point[:k])]
            zero = [np.zeros(1)] * k
            grad.append(float(kind.combine([], up, zero)[0][0] - kind.combine([], down, zero)[0][0])
                        / (2 * h))  # fmt: skip
        return math.sqrt(sum((g * float(s[0])) ** 2 for g, s in zip(grad, sds, strict=False)))

    assert float(v.combine([], point, sds)[1][0]) == pytest.approx(numeric(v, 3), rel=1e-6)
    assert float(m.combine([], point[:2], sds[:2])[1][0]) == pytest.approx(numeric(m, 2), rel=1e-6)
    # no released count above 0: no value
    value, std = v.combine([], [np.array([0.0, -2.0])] * 3, [np.ones(2)] * 3)
    assert np.isnan(value).all() and np.isnan(std).all()


def _exact(log: list[dict[str, Any]], end: str) -> list[float]:
    """The clamped, grid-rounded fares (half away from zero, as DuckDB's round) of the rows
    live at ``end``."""
    state: dict[str, Any] = {}
    for m in log:
        if m["ts"] <= end:
            state[m["entry"]] = m["after"]
    return [math.floor(min(max(r["fare"], 0), 100) / 0.5 + 0.5) * 0.5
            for r in state.values() if r is not None]  # fmt: skip


@pytest.mark.parametrize("plan", ["tree", "disjoint"])
def test_with_the_noise_off_they_are_the_exact_mean_and_variance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: str
) -> None:
    monkeypatch.setattr(release_draw, "add_noise", lambda values, event, rng: values)
    log = mutations(120, 10, 5)
    write_jsonl(tmp_path / "log.jsonl", log)
    cfg = parse_config(raw_config(plan=plan), base_dir=tmp_path)
    rows = {(r.query, r.interval): r for r in cfg.run(until=END, rng=simulation_randomness(0))}
    for i in range(1, 11):
        fares = _exact(log, f"2025-01-{i + 1:02d}T00:00:00Z")
        assert rows[("n", i)].estimate == len(fares)
        assert rows[("fare_mean", i)].estimate == pytest.approx(statistics.fmean(fares), abs=1e-9)
        var = rows[("fare_var", i)]
        assert var.estimate == pytest.approx(statistics.pvariance(fares), abs=1e-6)
        assert var.estimate_lo <= var.estimate <= var.estimate_hi
        assert math.isnan(var.std_estimate) and math.isnan(var.std_change)
    assert rows[("fare_var", 10)].estimate_hi - rows[("fare_var", 10)].estimate_lo > 0


def test_with_noise_the_interval_is_cut_to_where_the_value_lies(tmp_path: Path) -> None:
    log = mutations(40, 10, 5)
    write_jsonl(tmp_path / "log.jsonl", log)
    raw = raw_config()
    raw["privacy"]["epsilon"] = 0.2
    cfg = parse_config(raw, base_dir=tmp_path)
    result = cfg.run(until=END, rng=simulation_randomness(1))
    for r in result:
        if r.query == "fare_var" and not math.isnan(r.estimate):
            assert 0 <= r.estimate_lo <= r.estimate <= r.estimate_hi <= 100**2 / 4
        if r.query == "fare_mean" and not math.isnan(r.estimate):
            assert 0 <= r.estimate_lo <= r.estimate <= r.estimate_hi <= 100
    assert result.summary is not None


def test_the_python_api_takes_them_as_derived(tmp_path: Path) -> None:
    q = [Count(name="n"), Sum(name="s", column="x", lower=-1, upper=1),
         SumSquares(name="ss", column="x", lower=-1, upper=1)]  # fmt: skip
    release = dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp_path / "log.jsonl"),
        constraint=dpcr.AtMostK(k=2),
        plan=dpcr.DisjointRelease(start=START, period="1d", end=END),
        queries=q,
        derived=[Variance(name="v", count="n", sum="s", sum_squares="ss")],
        budget=dpcr.Budget(epsilon=1.0),
    )
    assert release.derived[0].name == "v"
    with pytest.raises(ConfigError, match="derived statistics must be"):
        dpcr.ContinualRelease(
            source=dpcr.sources.Jsonl(path=tmp_path / "log.jsonl"),
            constraint=dpcr.AtMostK(k=2),
            plan=dpcr.DisjointRelease(start=START, period="1d", end=END),
            queries=q,
            derived=[q[0]],  # type: ignore[list-item]
            budget=dpcr.Budget(epsilon=1.0),
        )


def test_the_plan_lists_them_as_derived(tmp_path: Path) -> None:
    from dpcr.report.text import plan_lines

    cfg = parse_config(raw_config(), base_dir=tmp_path)
    lines = plan_lines(cfg, cfg.explain())
    at = lines.index("Derived from released values (no budget, no noise of their own):")
    assert lines[at + 2].startswith("  fare_var: variance ss / n - (s / n)^2")


def test_every_key_a_derived_kind_reads_is_a_parameter_of_its_python_value() -> None:
    import inspect

    from dpcr.tomltable import TomlTable

    for kind, cls in DERIVED_KINDS.items():
        table = TomlTable(dict(DERIVED_EXAMPLES[kind]), "query")
        cls.from_toml(table, name=kind)
        assert table.asked and set(table.asked) <= set(inspect.signature(cls).parameters)
