"""Consistency post-processing: zero negative published counts, histogram keys that add up to
the published total, monotone running values, and published values that never change (appended
data, reruns, restarts)."""

from __future__ import annotations

import itertools
import json
import random
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpcr
from dpcr.config import load_config
from dpcr.errors import ConfigError
from dpcr.noise import simulation_randomness
from dpcr.release._consistency import consistent_series, project_interval

KEYS = ("a", "b", "c", "d", "e", "f")


def _log(path: Path, *, days: int, entries: int = 60, seed: int = 2) -> None:
    rnd = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for e in range(entries):
        day = rnd.randint(1, days)
        row = {"key": rnd.choice(KEYS)}
        rows.append({"entry": f"e{e}", "ts": f"2025-01-{day:02d}T10:00:00Z", "seq": 2 * e,
                     "op": "insert", "before": None, "after": row})
        if rnd.random() < 0.4 and day < days:
            rows.append({"entry": f"e{e}", "ts": f"2025-01-{day + 1:02d}T10:00:00Z",
                         "seq": 2 * e + 1, "op": "delete", "before": row, "after": None})
    rows.sort(key=lambda r: (r["ts"], r["seq"]))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _release(tmp: Path, plan: Any = None, **con: dpcr.Consistency) -> dpcr.ContinualRelease:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=dpcr.AtMostK(k=2),
        plan=plan or dpcr.DisjointRelease(start="2025-01-01", period="1d"),
        queries=[dpcr.Histogram(name="by_key", column="key", categories=KEYS),
                 dpcr.Count(name="all")],
        budget=dpcr.Budget(epsilon=0.3),  # small counts, wide noise: raw negatives are common
        output_dir=tmp / "out",
        consistency=con,
    )


BOTH = {"by_key": dpcr.Consistency(modes=("nonnegative", "sum_to_total"), total="all"),
        "all": dpcr.Consistency(modes=("nonnegative",))}


@pytest.mark.parametrize("plan", [None, dpcr.TreeRelease(start="2025-01-01", period="1d",
                                                         end="2025-01-17")])
def test_nonnegative_and_sum_to_total(tmp_path: Path, plan: Any) -> None:
    _log(tmp_path / "log.jsonl", days=14)
    raw = _release(tmp_path, plan).run(
        until="2025-01-15", rng=simulation_randomness(9))
    assert any(r.estimate < 0 for r in raw.rows)  # the test has something to fix
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "log.jsonl").write_text((tmp_path / "log.jsonl").read_text())
    got = _release(tmp_path / "c", plan, **BOTH).run(until="2025-01-15",
                                                    rng=simulation_randomness(9))
    assert not [r for r in got.rows if r.estimate < 0]
    for i in range(1, 15):
        keys = [r for r in got.rows if r.interval == i and r.query == "by_key"]
        total = next(r for r in got.rows if r.interval == i and r.query == "all")
        assert sum(r.estimate for r in keys) == pytest.approx(total.estimate, abs=1e-9)
        for r in (*keys, total):
            assert 0 <= r.estimate_lo <= r.estimate <= r.estimate_hi
            assert r.change_lo <= r.change <= r.change_hi
            prev = [p for p in got.rows if p.interval == i - 1 and p.query == r.query
                    and p.key == r.key]
            before = prev[0].estimate if prev else 0.0
            assert r.change == pytest.approx(r.estimate - before, abs=1e-9)
    # the same noise: the raw rows are the estimator's, the consistent ones their projection
    assert [r.std_estimate for r in raw.rows] == [r.std_estimate for r in got.rows]


def test_monotone_running_values(tmp_path: Path) -> None:
    _log(tmp_path / "log.jsonl", days=14)
    got = _release(tmp_path, None, all=dpcr.Consistency(modes=("monotone",))).run(
        until="2025-01-15", rng=simulation_randomness(4))
    est = [r.estimate for r in sorted(got.rows, key=lambda r: r.interval) if r.query == "all"]
    assert all(b >= a for a, b in itertools.pairwise(est))


def test_published_values_never_change(tmp_path: Path) -> None:
    """Run to day 6, append the rest of the changelog, run to day 14 in a new process-like
    release object, then rerun: every row of days 1-6 stays as first published."""
    _log(tmp_path / "full.jsonl", days=14)
    full = (tmp_path / "full.jsonl").read_text().splitlines(keepends=True)
    early = [ln for ln in full if json.loads(ln)["ts"] < "2025-01-07"]
    (tmp_path / "log.jsonl").write_text("".join(early))
    first = _release(tmp_path, None, **BOTH).run(until="2025-01-07",
                                                rng=simulation_randomness(11))
    (tmp_path / "log.jsonl").write_text("".join(full))
    second = _release(tmp_path, None, **BOTH).run(until="2025-01-15",
                                                 rng=simulation_randomness(12))
    again = _release(tmp_path, None, **BOTH).run(until="2025-01-15",
                                                rng=simulation_randomness(13))
    assert [r for r in second.rows if r.interval <= 6] == list(first.rows)
    assert again.rows == second.rows
    csv = (tmp_path / "out" / "simulation" / "releases.csv").read_text().splitlines()
    assert csv[0].split(",")[:13] == [
        "query", "key", "interval", "start", "end", "change", "estimate", "std_change",
        "std_estimate", "change_lo", "change_hi", "estimate_lo", "estimate_hi"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-50, 50), min_size=1, max_size=8), st.floats(-20, 200),
       st.booleans())
def test_projection_is_the_euclidean_projection(raw: list[float], total: float,
                                                bounded: bool) -> None:
    """KKT: x = max(lower, raw + tau) with sum x = total (when feasible) is the projection onto
    {x >= lower, sum x = total}; no feasible point is closer (checked on random points)."""
    r = np.array(raw)
    lower = np.zeros(r.size) if bounded else None
    x = project_interval(r, lower=lower, total=total)
    if bounded and total < 0:
        assert np.array_equal(x, np.zeros(r.size))
        return
    assert x.sum() == pytest.approx(total, abs=1e-6)
    if bounded:
        assert (x >= -1e-9).all()
    rng = np.random.default_rng(len(raw))
    for _ in range(20):
        y = rng.dirichlet(np.ones(r.size)) * total if bounded else (
            rng.normal(size=r.size) + (total - rng.normal(size=r.size).sum()) / r.size)
        if not bounded:
            y = y + (total - y.sum()) / r.size
        assert np.linalg.norm(x - r) <= np.linalg.norm(y - r) + 1e-6


def test_online_series_depends_on_the_past_only() -> None:
    est = np.random.default_rng(1).normal(size=(30, 4)) * 5
    full = consistent_series(est, modes=("nonnegative", "monotone"), total=None)
    for n in (1, 7, 19):
        assert np.array_equal(consistent_series(est[:n], modes=("nonnegative", "monotone"),
                                                total=None), full[:n])


BASE = """
[source]
format = "jsonl"
path = "log.jsonl"
[privacy]
epsilon = 1.0
[constraint]
at_most_k = 2
[release]
plan = "disjoint"
start = "2025-01-01"
period = "1d"
[[query]]
name = "all"
kind = "count"
"""


@pytest.mark.parametrize(("extra", "message"), [
    ('consistency = ["positive"]', "consistency mode 'positive' is unknown"),
    ('consistency = ["sum_to_total"]', "needs total"),
    ('consistency = ["monotone", "monotone"]', "twice"),
])
def test_bad_consistency_config_names_the_key(tmp_path: Path, extra: str, message: str) -> None:
    (tmp_path / "dpcr.toml").write_text(BASE + extra + "\n")
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / "dpcr.toml")


def test_consistency_config_parses(tmp_path: Path) -> None:
    text = BASE + textwrap.dedent("""
        consistency = ["nonnegative", "monotone"]
        [[query]]
        name = "zones"
        kind = "histogram"
        column = "zone"
        keys = ["A", "B"]
        consistency = ["nonnegative", "sum_to_total"]
        total = "all"
        """)
    (tmp_path / "dpcr.toml").write_text(text)
    s = load_config(tmp_path / "dpcr.toml")
    assert s.consistency == {
        "all": dpcr.Consistency(modes=("nonnegative", "monotone")),
        "zones": dpcr.Consistency(modes=("nonnegative", "sum_to_total"), total="all")}
    bad = text.replace('total = "all"', 'total = "zones"')
    (tmp_path / "dpcr.toml").write_text(bad)
    with pytest.raises(ConfigError, match="must name a count query"):
        load_config(tmp_path / "dpcr.toml")


def test_changing_consistency_on_a_released_store_is_refused(tmp_path: Path) -> None:
    from dpcr.errors import StoreError

    _log(tmp_path / "log.jsonl", days=6)
    _release(tmp_path, None).run(until="2025-01-05", rng=simulation_randomness(1))
    with pytest.raises(StoreError, match="different plan"):
        _release(tmp_path, None, **BOTH).run(until="2025-01-06", rng=simulation_randomness(2))
    assert _release(tmp_path, None).fingerprint() != _release(tmp_path, None, **BOTH).fingerprint()


@pytest.mark.parametrize("plan", [
    dpcr.DisjointRelease(start="2025-01-01", period="1d"),
    dpcr.TreeRelease(start="2025-01-01", period="1d", end="2025-03-01"),
    dpcr.TreeRelease(start="2025-01-01", period="1d", branching=3),
    dpcr.SlidingWindowRelease(start="2025-01-01", window="3d", period="2d"),
    dpcr.FactorizationRelease(start="2025-01-01", period="1d", horizon=64),
])
def test_estimators_are_prefix_stable(plan: Any) -> None:
    """What online consistency relies on: interval i's estimate (its weight on every node) is
    the same whether the estimator sees n or n' > n intervals."""
    from dpcr.release._uncertainty import estimator_weights

    def weights(n: int) -> tuple[list[Any], np.ndarray, np.ndarray]:
        nodes = sorted(set(plan.due(0, n)))
        var = {nd: 1.0 + nd[0] for nd in {*nodes, *(plan.instance(x) for x in nodes)}}
        return (nodes, *estimator_weights(plan, nodes, var, n))

    for n1, n2 in ((5, 9), (8, 16), (13, 40)):
        a, ca, ea = weights(n1)
        b, cb, eb = weights(n2)
        idx = [b.index(x) for x in a]
        rest = [j for j in range(len(b)) if j not in idx]
        for small, big in ((ca, cb), (ea, eb)):
            assert np.array_equal(big[:n1][:, idx], small)
            assert not big[:n1][:, rest].any()
