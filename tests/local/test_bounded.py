"""New local protocols: B-time-bounded, any tree fanout, sliding windows. Exact privacy on all
pairs of small histories, client bounding, and a weekly year-long time-bounded workload."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2

from dpcr.bounding.constraints import AtMostK, TimeBounded
from dpcr.errors import ConfigError
from dpcr.local import (
    LocalClient,
    LocalProtocol,
    all_protocols,
    bound_states,
    exact_variance,
    local_dcr_count,
    local_tree_count,
    local_window_count,
    simulate,
    true_histogram,
)
from dpcr.local._oracles import FrequencyOracle
from dpcr.noise import simulation_randomness
from dpcr.plans.dcr import DisjointRelease

from .test_protocols import _histories, _worst_ratio


def _bounded_histories(domain: int, horizon: int, bound: int) -> list[tuple[int, ...]]:
    """Every state sequence (null = domain) whose changes all lie in ``[x, x + bound]``, x the
    first change (the insertion)."""
    out = []
    for seq in itertools.product(range(domain + 1), repeat=horizon):
        changes = [t for t, (a, b) in enumerate(zip((domain, *seq), seq, strict=False)) if a != b]
        if not changes or changes[-1] - changes[0] <= bound:
            out.append(seq)
    return out


def _log_table(oracle: FrequencyOracle) -> np.ndarray:
    """ln of the exact sup-ratio of one report for every pair of inputs (enumerated)."""
    k = oracle.categories
    return np.array(
        [[math.log(oracle.max_ratio(a, b)) if a != b else 0.0 for b in range(k)] for a in range(k)]
    )


def _assignments(proto: LocalProtocol) -> list[int | None]:
    if proto.schedule == "random-level":
        return list(range(proto.levels))
    if proto.schedule == "random-period":
        return list(range(proto.horizon))
    return [None]


def _exact_worst(proto: LocalProtocol, hist: list[tuple[int, ...]]) -> Fraction:
    """The exact sup over pairs of histories, transcripts and assignments of the likelihood
    ratio: every pair is scored by summing each report's exact log sup-ratio (vectorised); the
    worst pair is then recomputed in exact rationals by the at-most-K suite's ``_worst_ratio``."""
    states = np.array(hist)
    best, arg = -1.0, (0, 0)
    for a in _assignments(proto):
        total = np.zeros((len(hist), len(hist)))
        for level in range(proto.levels):
            if proto.schedule == "random-level" and level != a:
                continue
            tables = [_log_table(o) for o in proto.oracles(level)]
            for index in range(proto.node_count(level)):
                if proto.schedule == "random-period" and index != a:
                    continue
                for tab, x in zip(tables, proto.node_inputs(states, (level, index)), strict=True):
                    total += tab[x[:, None], x[None, :]]
        i, j = np.unravel_index(int(total.argmax()), total.shape)
        if total[i, j] > best:
            best, arg = float(total[i, j]), (int(i), int(j))
    return _worst_ratio(proto, hist[arg[0]], hist[arg[1]])


def _check(proto: LocalProtocol, hist: list[tuple[int, ...]]) -> None:
    worst = _exact_worst(proto, hist)
    assert worst <= math.exp(proto.epsilon), proto.name
    assert proto.per_entry_epsilon() == pytest.approx(proto.epsilon, abs=1e-6), proto.name
    if proto.encoding == "split":
        # conservative, as for at most K: an insert or a delete changes one half only
        assert math.log(worst) <= proto.per_entry_epsilon() + 1e-12, proto.name
    else:
        assert math.log(worst) == pytest.approx(proto.per_entry_epsilon(), abs=1e-6), proto.name


@pytest.mark.parametrize(("horizon", "bound"), [(6, 0), (6, 1), (6, 2), (5, 3)])
def test_time_bounded_protocols_meet_their_guarantee_exactly(horizon: int, bound: int) -> None:
    hist = _bounded_histories(2, horizon, bound)
    protos = list(
        all_protocols(
            domain=2, horizon=horizon, bound=bound, epsilon=2.0, fanouts=(2, 3), window=2, step=1
        )
    )
    assert len(protos) == 28
    for proto in protos:
        _check(proto, hist)


@pytest.mark.parametrize("mutations", [1, 2])
def test_fanout_and_window_protocols_meet_their_guarantee_exactly(mutations: int) -> None:
    hist = _histories(2, 6, mutations)
    for proto in all_protocols(
        domain=2, horizon=6, mutations=mutations, epsilon=2.0, fanouts=(3, 4), window=2
    ):
        if proto.schedule in ("tree", "random-level", "window"):
            _check(proto, hist)


@pytest.mark.parametrize(("window", "step"), [(1, 1), (3, 1), (2, 2), (3, 2), (2, 3)])
def test_window_strides_meet_their_guarantee_exactly(window: int, step: int) -> None:
    for constraint, hist in [
        ({"mutations": 1}, _histories(2, 6, 1)),
        ({"bound": 1}, _bounded_histories(2, 6, 1)),
    ]:
        for proto in all_protocols(
            domain=2, horizon=6, epsilon=1.5, window=window, step=step, **constraint
        ):
            if proto.schedule == "window":
                _check(proto, hist)


def test_time_bounded_counts_are_the_corollaries_on_long_horizons() -> None:
    # the enumerated count equals Cor 5.2 (2 MostSpan), Cor 5.3 with erratum 1 and Cor 5.5
    horizon, bound = 52, 2
    tb = TimeBounded(bound=bound)

    def proto(schedule: str, **kw: int) -> LocalProtocol:
        return LocalProtocol(
            domain=3,
            horizon=horizon,
            bound=bound,
            epsilon=1.0,
            encoding="mutation",
            schedule=schedule,
            **kw,
        )

    dcr = DisjointRelease(start=0, period=1, end=horizon)
    assert proto("flat").level_count(0) == local_dcr_count(dcr, tb) == 6
    for c in (2, 3, 4, 7):
        p = proto("tree", fanout=c)
        cor = local_tree_count(levels=p.levels, fanout=c, width=1, constraint=tb, horizon=horizon)
        assert p.level_count(0) == cor
        rl = proto("random-level", fanout=c)

        def upto(levels: int, c: int = c) -> int:
            if levels == 0:
                return 0
            return local_tree_count(
                levels=levels, fanout=c, width=1, constraint=tb, horizon=horizon
            )

        for lv in range(rl.levels):  # one level of erratum 1's sum
            assert rl.level_count(lv) == upto(lv + 1) - upto(lv)
    for window, step in [(4, 1), (7, 2), (3, 3)]:
        w = proto("window", window=window, step=step)
        releases = horizon // step
        cor = local_window_count(period=step, window=window, constraint=tb, releases=releases)
        assert w.level_count(0) == cor
    # at most K: the window protocol uses Cor 5.4
    k4 = LocalProtocol(
        domain=3,
        horizon=horizon,
        mutations=4,
        epsilon=1.0,
        encoding="split",
        schedule="window",
        window=4,
    )
    assert (
        k4.level_count(0) == local_window_count(period=1, window=4, constraint=AtMostK(k=4)) == 32
    )


# ---- bounding ------------------------------------------------------------------------------
def test_bound_states_keeps_a_prefix_and_counts_drops() -> None:
    d = 2
    states = np.array(
        [
            [2, 0, 1, 0, 1, 2],  # inserted at 1, changes at 2, 3, 4, deleted at 5
            [0, 0, 0, 0, 0, 0],  # never changes after insertion
            [2, 2, 2, 2, 2, 2],  # never inserted
        ]
    )
    k2 = bound_states(states, AtMostK(k=2), domain=d)
    assert k2.states.tolist()[0] == [2, 0, 1, 1, 1, 1]
    assert k2.dropped.tolist() == [3, 0, 0]
    b1 = bound_states(states, TimeBounded(bound=1), domain=d)
    assert b1.states.tolist()[0] == [2, 0, 1, 1, 1, 1]
    b3 = bound_states(states, TimeBounded(bound=3), domain=d)
    assert b3.states.tolist()[0] == [2, 0, 1, 0, 1, 1] and b3.dropped.tolist() == [1, 0, 0]
    np.testing.assert_array_equal(
        bound_states(states[1:], TimeBounded(bound=0), domain=d).states, states[1:]
    )


def test_protocol_needs_exactly_one_constraint() -> None:
    kw = {"domain": 2, "horizon": 4, "epsilon": 1.0, "encoding": "mutation", "schedule": "flat"}
    with pytest.raises(ConfigError, match="exactly one constraint"):
        LocalProtocol(**kw)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="exactly one constraint"):
        LocalProtocol(mutations=2, bound=1, **kw)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="fanout"):
        LocalProtocol(mutations=2, fanout=3, **kw)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="window"):
        LocalProtocol(
            domain=2, horizon=4, epsilon=1.0, encoding="mutation", schedule="window", bound=1
        )


# ---- a weekly release over a year, B = 2 weeks ------------------------------------------------
WEEKS, BOUND, DAYS = 52, 2, 7.0


def _weekly_year(entries: int, domain: int, seed: int) -> list[list[tuple[float, int | None]]]:
    """Raw mutations per entry, (day, value or None for a delete), in time order: an insertion at
    a uniform day of the year, then 3 to 30 more mutations at uniform days within 14 days (B =
    2 weeks) of it, the last a delete for 40 % of entries. Days past the year never happen."""
    g = np.random.default_rng(seed)
    out = []
    for _ in range(entries):
        start = float(g.uniform(0, WEEKS * DAYS))
        times = np.sort(g.uniform(start, start + BOUND * DAYS, int(g.integers(3, 31))))
        values: list[int | None] = [int(v) for v in g.integers(0, domain, times.size + 1)]
        if g.random() < 0.4:
            values[-1] = None
        events = list(zip([start, *times.tolist()], values, strict=True))
        out.append([(t, v) for t, v in events if t < WEEKS * DAYS])
    return out


def _states(events: list[list[tuple[float, int | None]]], domain: int) -> np.ndarray:
    states = np.full((len(events), WEEKS), domain, dtype=np.int64)
    for i, evs in enumerate(events):
        for t, v in evs:
            states[i, int(t // DAYS) :] = domain if v is None else v
    return states


def test_clients_drop_nothing_that_obeys_the_bound() -> None:
    d, n = 3, 60
    events = _weekly_year(n, d, seed=3)
    assert sum(len(e) for e in events) >= 10 * n  # many mutations per entry within B
    proto = LocalProtocol(
        domain=d, horizon=WEEKS, bound=BOUND, epsilon=2.0, encoding="mutation", schedule="flat"
    )
    rng = simulation_randomness(4)
    clients = [LocalClient.for_simulation(proto, rng=rng) for _ in range(n)]
    for week in range(WEEKS):
        for client, evs in zip(clients, events, strict=True):
            for t, v in evs:
                if week * DAYS <= t < (week + 1) * DAYS:
                    client.set(v)
            client.report(week)
    assert [c.dropped for c in clients] == [0] * n
    states = _states(events, d)
    kept = bound_states(states, proto.constraint, domain=d)
    np.testing.assert_array_equal(kept.states, states)
    assert kept.dropped.sum() == 0
    # a mutation 3 weeks after insertion breaks the bound: dropped, counted, state frozen
    late = LocalClient.for_simulation(proto, rng=rng)
    for week, value in enumerate([0, 1, 1, 1, 2, 2]):
        late.set(value)
        late.report(week)
    assert late.dropped == 1


# R runs per protocol. The estimate of one bin is a sum of >= 3000 independent bounded reports,
# normal to within a negligible error, with known mean (the truth) and variance σ² (exact), so
# R · (mean squared error) / σ² ~ χ²_R and R (mean - truth)² / σ² ~ χ²_1. Each check is two-sided
# at α = 1e-8 (chi-square quantiles); 3 bins × 2 periods × 2 protocols × 2 checks = 24 checks:
# false-failure rate < 2.4e-7.
ALPHA = 1e-8


@pytest.mark.slow
@pytest.mark.parametrize(("schedule", "oracle"), [("flat", "grr"), ("tree", "oue")])
def test_time_bounded_error_matches_the_corollary_counts(schedule: str, oracle: str) -> None:
    d, n, reps = 3, 3000, 400
    states = _states(_weekly_year(n, d, seed=5), d)
    proto = LocalProtocol(
        domain=d,
        horizon=WEEKS,
        bound=BOUND,
        epsilon=2.0,
        encoding="mutation",
        schedule=schedule,
        oracle=oracle,
    )
    tb = TimeBounded(bound=BOUND)
    cor = (
        local_dcr_count(DisjointRelease(start=0, period=1, end=WEEKS), tb)
        if schedule == "flat"
        else local_tree_count(levels=proto.levels, fanout=2, width=1, constraint=tb, horizon=WEEKS)
    )
    assert proto.level_count(0) == cor == (6 if schedule == "flat" else 25)
    rng = simulation_randomness(6)
    times = (25, WEEKS - 1)
    runs = [simulate(proto, states, rng=rng) for _ in range(reps)]
    lo, hi = chi2.ppf(ALPHA / 2, reps) / reps, chi2.isf(ALPHA / 2, reps) / reps
    for t in times:
        truth = true_histogram(states, t, d)
        err = np.array([r.estimate(t).histogram for r in runs]) - truth
        var = exact_variance(proto, states, t)  # from the nodes' ε = ε / cor
        mse = (err**2).mean(axis=0)
        assert np.all((lo <= mse / var) & (mse / var <= hi)), (t, mse / var)
        assert np.all(reps * err.mean(axis=0) ** 2 / var <= chi2.isf(ALPHA, 1))
