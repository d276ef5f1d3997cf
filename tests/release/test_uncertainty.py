"""The published 95 % intervals cover the truth at their nominal rate, through the real release
path (seeded simulation) against the noise-free exact release of the same data.

A histogram with 250 keys releases every key with its own independent noise draws, so one
simulation is 250 independent simulation runs of each key's series. For each reporting interval
the number of keys whose interval covers the truth is Binomial(250, p) with p >= 0.95 (the
intervals' proven coverage); for the ``exact`` method p is known (``Interval.coverage``, exact up
to 1e-9), and the count must also not exceed its upper quantile. Quantiles are scipy's exact
binomial ones at 10^-6 / (2 x checks) per tail (Bonferroni over intervals and the change and
running columns): a correct release fails a case with probability at most 10^-6.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import binom

import dpcr
from dpcr.mechanisms import half_width
from dpcr.noise import simulation_randomness
from dpcr.release._uncertainty import row_intervals
from dpcr.report.truth import exact_series

KEYS = tuple(f"k{i:03d}" for i in range(250))
FALSE_FAILURE = 1e-6
DAYS = 12


def _changelog(path: Path, *, entries: int = 4000, seed: int = 7) -> None:
    rnd = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for e in range(entries):
        day, hour = rnd.randint(1, DAYS), rnd.randint(0, 23)
        row = {"key": rnd.choice(KEYS)}
        rows.append({"entry": f"e{e}", "ts": f"2025-01-{day:02d}T{hour:02d}:00:00Z",
                     "seq": 3 * e + 1, "op": "insert", "before": None, "after": row})
        if rnd.random() < 0.3 and day < DAYS - 1:
            rows.append({"entry": f"e{e}", "ts": f"2025-01-{day + 1:02d}T{hour:02d}:00:00Z",
                         "seq": 3 * e + 3, "op": "delete", "before": row, "after": None})
    rows.sort(key=lambda r: (r["ts"], r["seq"]))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _release(tmp: Path, plan: Any, noise: Any, **kw: Any) -> dpcr.ContinualRelease:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=dpcr.AtMostK(k=2),
        plan=plan,
        queries=[dpcr.Histogram(name="by_key", column="key", categories=KEYS),
                 dpcr.Count(name="all")],
        budget=dpcr.Budget(epsilon=1.0, delta=1e-6 if noise.name == "gaussian" else 0.0),
        noise=noise,
        output_dir=tmp / "out",
        **kw,
    )


CASES = {
    "disjoint-laplace": (dpcr.DisjointRelease(start="2025-01-01", period="1d"),
                         dpcr.DiscreteLaplace()),
    "disjoint-gaussian": (dpcr.DisjointRelease(start="2025-01-01", period="1d"),
                          dpcr.DiscreteGaussian()),
    "tree-laplace": (dpcr.TreeRelease(start="2025-01-01", period="1d", end="2025-01-17"),
                     dpcr.DiscreteLaplace()),
    # intervals from the plan's weight aggregates, not from probing the estimator
    "blt-gaussian": (dpcr.FactorizationRelease(start="2025-01-01", period="1d", horizon=None,
                                               factorization="blt", planning_horizon=16,
                                               fit_participations=2),
                     dpcr.DiscreteGaussian()),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_intervals_cover_the_truth_at_the_nominal_rate(tmp_path: Path, case: str) -> None:
    plan, noise = CASES[case]
    _changelog(tmp_path / "log.jsonl")
    release = _release(tmp_path, plan, noise)
    until = f"2025-01-{DAYS + 1:02d}"
    result = release.run(until=until, rng=simulation_randomness(20261124))
    truth = exact_series(release)
    rows = [r for r in result.rows if r.query == "by_key"]
    n = max(r.interval for r in rows)
    assert n == DAYS and len(rows) == n * len(KEYS)
    # the intervals the rows carry are the plan's, from its events alone
    cal = release.explain().calibration
    assert cal is not None
    nodes = plan.due(0, n)
    events = {nd: cal.layers[plan.instance(nd)[0]]["by_key"] for nd in nodes}
    from dpcr.mechanisms import noise_variance

    var = {nd: noise_variance(e) for nd, e in events.items()}
    c_iv, e_iv = row_intervals(plan, nodes, events, var, n)
    checks = 2 * n
    tail = FALSE_FAILURE / (2 * checks)
    for col, ivs in (("change", c_iv), ("estimate", e_iv)):
        for i in range(n):
            iv = ivs[i]
            assert iv.coverage >= 0.95
            # no needless width: a single Laplace draw needs ln(20)/sqrt(2) = 2.12 std
            assert iv.half_width <= 2.13 * iv.std + 1.0
            covered = 0
            for r in (r for r in rows if r.interval == i + 1):
                t = truth[("by_key", r.key)]
                value = t[i] - (t[i - 1] if i and col == "change" else 0.0)
                if col == "change" and plan.kind == "disjoint" and i == 0:
                    value = t[0]
                lo, hi = getattr(r, f"{col}_lo"), getattr(r, f"{col}_hi")
                assert hi - lo == pytest.approx(2 * iv.half_width)
                covered += lo <= value <= hi
            low = binom.ppf(tail, len(KEYS), 0.95)
            assert covered >= low, (case, col, i + 1, covered, iv)
            if iv.method == "exact":
                assert covered <= binom.isf(tail, len(KEYS), iv.coverage), (case, col, i, iv)


def test_exact_intervals_are_the_exact_quantiles() -> None:
    """One discrete Laplace node: u is the smallest integer with P(X > u) <= 0.025, from the
    closed form P(X > u) = q^(u+1) / (1 + q); n iid nodes: against brute-force convolution."""
    from fractions import Fraction

    from dpcr.accounting.events import DiscreteLaplaceEvent

    for scale in (Fraction(1, 2), Fraction(2), Fraction(37, 3)):
        q = math.exp(-1 / float(scale))
        want = next(u for u in range(10**6) if q ** (u + 1) / (1 + q) <= 0.025)
        e = DiscreteLaplaceEvent(scale=scale, sensitivity=Fraction(1))
        iv = half_width([(1.0, e, 1)])
        assert iv.method == "exact" and iv.half_width == want
        assert iv.coverage == pytest.approx(1 - 2 * q ** (want + 1) / (1 + q), abs=1e-8)
        k = np.arange(-400, 401)
        pmf = (1 - q) / (1 + q) * q ** np.abs(k)
        conv = pmf
        for _ in range(4):
            conv = np.convolve(conv, pmf)
        kk = np.arange(-(conv.size // 2), conv.size // 2 + 1)
        tail = np.array([conv[kk > u].sum() for u in range(0, 300)])
        want5 = int(np.argmax(tail <= 0.025))
        assert half_width([(1.0, e, 5)]).half_width == want5


def test_grid_intervals_cover_by_monte_carlo() -> None:
    """Real weights (grid method): coverage of 2 x 10^5 exact draws is at least 0.95 (one-sided
    binomial quantile at 10^-6) and the slack keeps it below 0.96."""
    from fractions import Fraction

    from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
    from dpcr.noise import discrete_gaussian, discrete_laplace

    rng = simulation_randomness(3)
    draws = 200_000
    for make, sample in (
        (lambda: DiscreteLaplaceEvent(scale=Fraction(3), sensitivity=Fraction(1)),
         lambda e, size: discrete_laplace(e.scale, size, rng)),
        (lambda: DiscreteGaussianEvent(sigma2=Fraction(9), sensitivity2=Fraction(1)),
         lambda e, size: discrete_gaussian(e.sigma2, size, rng)),
    ):
        e = make()
        weights = (0.61, 0.37, 0.37, 0.15, 0.9)
        iv = half_width([(w, e, 1) for w in weights])
        assert iv.method == "grid"
        y = sum(w * sample(e, draws).astype(np.float64) for w in weights)
        covered = int((np.abs(y) <= iv.half_width).sum())
        assert covered >= binom.ppf(FALSE_FAILURE / 2, draws, 0.95), (covered, iv)
        assert covered <= binom.isf(FALSE_FAILURE / 2, draws, 0.96), (covered, iv)


def test_normal_intervals_cover_by_monte_carlo() -> None:
    """Many real weights on wide discrete Gaussian nodes (a factorization's running value): the
    normal method with its Esseen error bound; 2 x 10^5 exact draws cover at least 0.95 and at
    most 0.96 of the time (binomial quantiles at 10^-6)."""
    from fractions import Fraction

    from dpcr.accounting.events import DiscreteGaussianEvent
    from dpcr.noise import discrete_gaussian

    rng = simulation_randomness(5)
    e = DiscreteGaussianEvent(sigma2=Fraction(10**6), sensitivity2=Fraction(1))
    weights = [1 / math.sqrt(k) for k in range(1, 41)]
    iv = half_width([(w, e, 1) for w in weights])
    assert iv.method == "normal"
    assert 1.96 * iv.std <= iv.half_width <= 1.975 * iv.std  # D = 4.7e-4 here
    draws = 200_000
    y = np.zeros(draws)
    for w in weights:
        y += w * discrete_gaussian(e.sigma2, draws, rng).astype(np.float64)
    covered = int((np.abs(y) <= iv.half_width).sum())
    assert binom.ppf(FALSE_FAILURE / 2, draws, 0.95) <= covered
    assert covered <= binom.isf(FALSE_FAILURE / 2, draws, 0.96)


def test_wide_laplace_node_by_cells_is_close_to_exact() -> None:
    """A node too wide to tabulate point by point (scale 10^5) goes by cells from the closed
    form: u is at least the exact quantile and at most 3 % above it."""
    from fractions import Fraction

    from dpcr.accounting.events import DiscreteLaplaceEvent

    scale = 10**5
    q = math.exp(-1 / scale)
    exact = math.ceil(math.log(0.025 * (1 + q)) / math.log(q)) - 1
    e = DiscreteLaplaceEvent(scale=Fraction(scale), sensitivity=Fraction(1))
    iv = half_width([(1.0, e, 1)])
    assert q ** (exact + 1) / (1 + q) <= 0.025 < q**exact / (1 + q)
    assert exact <= iv.half_width <= 1.03 * exact, (iv, exact)


@pytest.mark.parametrize("scale", ["1/1024", "1/3", "6", "600"])
@pytest.mark.parametrize("w", [1.0, 3.0, 0.5])
def test_running_totals_of_equal_nodes_are_computed_together_bit_for_bit(
    scale: str, w: float
) -> None:
    from fractions import Fraction

    from dpcr.accounting.events import DiscreteLaplaceEvent
    from dpcr.mechanisms._intervals import half_widths_iid

    event = DiscreteLaplaceEvent(scale=Fraction(scale), sensitivity=Fraction(1))
    counts = [1, 2, 3, 7, 30, 31, 52, 120, 3]
    together = half_widths_iid(w, event, counts)
    assert together == [half_width([(w, event, c)]) for c in counts]
    assert {i.method for i in together} <= {"exact", "grid", "chernoff"}


@pytest.mark.parametrize("kind", ["sqrt", "rescaled", "blt"])
def test_factorization_intervals_from_weight_aggregates_equal_the_probed_ones(kind: str) -> None:
    """A factorization's rows are computed from ``weight_stats`` (no probing); they equal
    ``half_width`` on the probed weights of every row (same method, rounding aside)."""
    from fractions import Fraction

    from dpcr.accounting.events import DiscreteGaussianEvent
    from dpcr.release._uncertainty import estimator_weights

    n = 40
    plan = dpcr.FactorizationRelease(start=0, period=10, horizon=None if kind == "blt" else n,
                                     factorization=kind)
    nodes = plan.due(0, n)
    for sigma2 in (10**4, 10**12):
        event = DiscreteGaussianEvent(sigma2=Fraction(sigma2), sensitivity2=Fraction(1))
        events = {node: event for node in nodes}
        var = {(0, 1): float(sigma2)}
        fast = row_intervals(plan, nodes, events, var, n, method="1")
        probed = estimator_weights(plan, nodes, var, n)
        for ivs, weights in zip(fast, probed, strict=True):
            for iv, row in zip(ivs, weights, strict=True):
                want = half_width([(float(w), event, 1) for w in row if w], level=0.95)
                assert iv.method == want.method
                assert iv.method == "normal" or sigma2 < 10**6  # else from the aggregates
                assert iv.half_width == pytest.approx(want.half_width, rel=1e-12)
                assert iv.std == pytest.approx(want.std, rel=1e-12)
    # a small sigma^2 is not for the normal method: the probed path decides (same answer)
    small = DiscreteGaussianEvent(sigma2=Fraction(4), sensitivity2=Fraction(1))
    c_iv, _ = row_intervals(plan, nodes[:3], {nd: small for nd in nodes[:3]}, {(0, 1): 4.0}, 3)
    assert [iv.method for iv in c_iv] != ["normal"] * 3


def test_terms_of_one_event_equal_the_general_grouping() -> None:
    """Rows whose noise comes from one event are grouped by weight alone: the same groups, in
    the same order, as grouping (weight, event) pairs."""
    import numpy as np

    from dpcr.release._uncertainty import _terms

    rng = np.random.default_rng(5)
    for _ in range(200):
        row = rng.choice([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5], size=int(rng.integers(1, 40)))
        ids = np.full(row.size, int(rng.integers(0, 3)), dtype=np.int64)
        nz = np.flatnonzero(row)
        if nz.size:
            pairs = np.stack([np.abs(row[nz]), ids[nz].astype(np.float64)], axis=1)
            groups, counts = np.unique(pairs, axis=0, return_counts=True)
            general = tuple((float(w), int(e), int(c))
                            for (w, e), c in zip(groups, counts, strict=True))  # fmt: skip
        else:
            general = ()
        assert _terms(row, ids) == general
        mixed = ids.copy()
        mixed[::2] += 1  # two events: the general grouping
        assert sum(c for _, _, c in _terms(row, mixed)) == nz.size


@pytest.mark.parametrize("branching", [2, 3, 5, 16])
@pytest.mark.parametrize("estimator", ["honaker", "plain"])
def test_closed_form_terms_equal_the_probe(branching: int, estimator: str) -> None:
    """The closed-form noise terms of tree and disjoint plans are exactly (bit for bit) the
    groups probing the estimator with unit vectors gives, for every row."""
    from fractions import Fraction

    import numpy as np

    from dpcr.accounting.events import DiscreteLaplaceEvent
    from dpcr.mechanisms import noise_variance
    from dpcr.plans import DisjointRelease, TreeRelease
    from dpcr.release._terms import closed_form_terms
    from dpcr.release._uncertainty import _terms, estimator_weights

    plans: list[Any] = [
        TreeRelease(start=0, period=10**6, branching=branching, estimator=estimator),
        TreeRelease(start=0, period=10**6, branching=branching, height=2, estimator=estimator),
        DisjointRelease(start=0, period=10**6),
    ]
    for plan in plans:
        for n in (1, branching - 1, branching, 37, 130):
            if n < 1:
                continue
            nodes = plan.due(0, n)
            layer_events = {lv: DiscreteLaplaceEvent(scale=Fraction(3 + lv, 2),
                                                     sensitivity=Fraction(1))
                            for lv in {node[0] for node in nodes}}  # fmt: skip
            var = {node: noise_variance(layer_events[node[0]]) for node in nodes}
            ids = np.array([node[0] for node in nodes], dtype=np.int64)
            closed = closed_form_terms(plan, nodes, var, ids, n, range(n))
            assert closed is not None
            change_w, est_w = estimator_weights(plan, nodes, var, n)
            assert closed[0] == [_terms(change_w[i], ids) for i in range(n)]
            assert closed[1] == [_terms(est_w[i], ids) for i in range(n)], (plan, n)


def test_an_event_object_shared_by_every_node_is_described_once() -> None:
    """The rows of a release share a few event objects: :func:`row_intervals` takes the repr
    (which names the noise) of each object once, not once per node (a year of daily rows
    took 730 reprs of one event per run)."""
    from fractions import Fraction

    from dpcr.accounting.events import DiscreteLaplaceEvent

    calls: list[int] = []

    class Counted(DiscreteLaplaceEvent):
        def __repr__(self) -> str:
            calls.append(1)
            return super().__repr__()

    plan = dpcr.DisjointRelease(start=0, period=10)
    n = 200
    nodes = plan.due(0, n)
    event = Counted(scale=Fraction(2), sensitivity=Fraction(1))
    events, var = {nd: event for nd in nodes}, {nd: 8.0 for nd in nodes}
    c_iv, e_iv = row_intervals(plan, nodes, events, var, n)
    assert len(c_iv) == len(e_iv) == n
    assert len(calls) <= 3  # (the distinct events, and the cache's key of them)
