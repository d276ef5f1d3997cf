"""Brute-force oracles for the privacy counts of a disjoint continual release.

Every possible history of one unit is enumerated: a set of mutation times on a small integer grid
(each subset of the grid, as a bitmask), filtered by the constraint (span <= B for time-bounded,
size <= k for at-most-k). The most distinct released intervals any allowed history touches must
equal the count computed by :mod:`dpcr.plans.counts`.
"""

from __future__ import annotations

import doctest
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpcr.plans.counts as counts_module
from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError
from dpcr.plans.counts import (
    max_affected,
    max_affected_by_class,
    most_span,
    periodic_most_span,
    reachable_runs,
)
from dpcr.plans.dcr import DisjointRelease

GRID = 14  # grid points; 2**14 histories per plan


def interval_of(times: tuple[int, ...] | None, t: int, *, start: int = 0, period: int = 0) -> int:
    """1-based release index of time t; 0 when after the last release (never released)."""
    if times is None:  # unbounded periodic plan: t_i = start + i * period
        i = 1
        while start + i * period < t:
            i += 1
        return i
    for i, ti in enumerate(times, start=1):
        if t <= ti:
            return i
    return 0


@cache
def _subset_tables(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every bitmask over ``size`` grid points: popcount, lowest and highest set bit."""
    n = 1 << size
    pop = np.zeros(n, dtype=np.int64)
    low = np.full(n, -1, dtype=np.int64)
    high = np.full(n, -1, dtype=np.int64)
    for g in range(size):
        lo, hi = 1 << g, 1 << (g + 1)
        pop[lo:hi] = pop[: hi - lo] + 1
        low[lo:hi] = np.where(low[: hi - lo] >= 0, low[: hi - lo], g)
        high[lo:hi] = g
    return pop, low, high


def touched_per_history(grid: list[int], interval_ids: list[int]) -> np.ndarray:
    """Number of distinct released intervals each history (bitmask over ``grid``) touches."""
    size = len(grid)
    masks = np.zeros(1 << size, dtype=np.int64)
    for g in range(size):
        bit = 0 if interval_ids[g] == 0 else 1 << (interval_ids[g] - 1)
        lo, hi = 1 << g, 1 << (g + 1)
        masks[lo:hi] = masks[: hi - lo] | bit
    return _popcount(masks)


def _popcount(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    x = x.copy()
    while np.any(x):
        out += x & 1
        x >>= 1
    return out


def brute_force(grid: list[int], interval_ids: list[int], constraint: AtMostK | TimeBounded) -> int:
    touched = touched_per_history(grid, interval_ids)
    pop, low, high = _subset_tables(len(grid))
    allowed = pop > 0
    if isinstance(constraint, AtMostK):
        allowed &= pop <= constraint.k
    else:
        g = np.asarray(grid)
        span = np.where(pop > 0, g[np.maximum(high, 0)] - g[np.maximum(low, 0)], 0)
        allowed &= span <= constraint.bound
    return int(touched[allowed].max())


def grid_around(times: tuple[int, ...]) -> list[int]:
    """GRID consecutive integers starting one before t_1, so the first interval and the time
    after the last release are both represented when the plan is short."""
    return list(range(times[0] - 1, times[0] - 1 + GRID))


EXPLICIT_PLANS = [
    (3,),  # one release
    (2, 3),  # adjacent times: an interval holding one integer
    (1, 4, 5, 9),  # uneven gaps
    (0, 2, 4, 6, 8, 10),  # periodic-looking, more releases than fit in most B
    (3, 4, 5, 6, 7, 8, 9, 10, 11),
    (1, 7, 8, 12),
]


@pytest.mark.parametrize("times", EXPLICIT_PLANS)
@pytest.mark.parametrize("bound", range(0, GRID))
def test_time_bounded_explicit_matches_brute_force(times: tuple[int, ...], bound: int) -> None:
    grid = grid_around(times)
    ids = [interval_of(times, t) for t in grid]
    plan = DisjointRelease(times=times)
    expected = brute_force(grid, ids, TimeBounded(bound=bound))
    assert most_span(times, bound) == expected
    assert max_affected(plan, TimeBounded(bound=bound)) == expected


@pytest.mark.parametrize("times", EXPLICIT_PLANS)
@pytest.mark.parametrize("k", [1, 2, 3, 4, 7])
def test_at_most_k_explicit_matches_brute_force(times: tuple[int, ...], k: int) -> None:
    grid = grid_around(times)
    ids = [interval_of(times, t) for t in grid]
    expected = brute_force(grid, ids, AtMostK(k=k))
    assert max_affected(DisjointRelease(times=times), AtMostK(k=k)) == expected


@pytest.mark.parametrize(
    ("start", "period", "end"), [(0, 3, 12), (-2, 2, 8), (1, 5, 11), (0, 1, 6)]
)
@pytest.mark.parametrize("bound", range(0, GRID))
def test_time_bounded_bounded_periodic_matches_brute_force(
    start: int, period: int, end: int, bound: int
) -> None:
    plan = DisjointRelease(start=start, period=period, end=end)
    times = tuple(plan.release_times())
    grid = grid_around(times)
    ids = [interval_of(times, t) for t in grid]
    expected = brute_force(grid, ids, TimeBounded(bound=bound))
    assert max_affected(plan, TimeBounded(bound=bound)) == expected
    assert most_span(times, bound) == expected


@pytest.mark.parametrize(("start", "period"), [(0, 1), (0, 2), (5, 3), (-4, 4), (0, 5)])
def test_time_bounded_unbounded_periodic_closed_form(start: int, period: int) -> None:
    plan = DisjointRelease(start=start, period=period)
    grid = list(range(start + 1, start + 1 + GRID))
    ids = [interval_of(None, t, start=start, period=period) for t in grid]
    # the grid holds a window [p, p + B] for every phase p of the period (p = start + 1 ..
    # start + period) when period + B <= GRID, so by periodicity it sees the unbounded worst case
    for bound in range(0, GRID - period + 1):
        expected = brute_force(grid, ids, TimeBounded(bound=bound))
        assert periodic_most_span(bound, period) == expected, bound
        assert max_affected(plan, TimeBounded(bound=bound)) == expected, bound


@pytest.mark.parametrize("k", [1, 2, 5, 100])
def test_at_most_k_unbounded_is_k(k: int) -> None:
    assert max_affected(DisjointRelease(start=0, period=7), AtMostK(k=k)) == k


def test_interval_semantics_agree_with_plan() -> None:
    for times in EXPLICIT_PLANS:
        plan = DisjointRelease(times=times)
        grid = grid_around(times)
        got = plan.interval_index(np.asarray(grid)).tolist()
        assert got == [interval_of(times, t) for t in grid]
    plan = DisjointRelease(start=5, period=3)
    grid = list(range(0, 30))
    got = plan.interval_index(np.asarray(grid)).tolist()
    assert got == [interval_of(None, t, start=5, period=3) for t in grid]


def paper_most_span(t_array: list[int], bound: int) -> int:
    """The paper's reference code (section 4.4.3), kept to document erratum 2."""
    res = 0
    for i in range(0, len(t_array) - 1):
        for j in range(i + 1, len(t_array)):
            if t_array[j] - t_array[i] >= bound:
                res = max(res, j - i + 1)
                break
    return res


def test_paper_code_is_wrong_where_the_errata_say() -> None:
    times = [0, 10, 20]
    # no two releases are B apart: the paper claims no loss, the truth is every release
    assert paper_most_span(times, 100) == 0
    assert most_span(times, 100) == 3
    # B = 0: one mutation time, one interval
    assert paper_most_span(times, 0) == 2
    assert most_span(times, 0) == 1
    # a single release
    assert paper_most_span([5], 3) == 0
    assert most_span([5], 3) == 1


def test_edge_cases() -> None:
    assert most_span([], 5) == 0
    assert reachable_runs([], 5) == []
    assert most_span([7], 0) == 1
    assert max_affected(DisjointRelease(start=0, period=10, end=30), AtMostK(k=10)) == 3
    assert max_affected(DisjointRelease(times=(1, 2)), TimeBounded(bound=10**9)) == 2
    # `until`: only releases made so far
    plan = DisjointRelease(start=0, period=10)
    assert max_affected(plan, AtMostK(k=5), until=25) == 2
    assert max_affected(plan, TimeBounded(bound=100), until=25) == 2
    assert max_affected(plan, TimeBounded(bound=100), until=5) == 0
    assert max_affected(DisjointRelease(times=(1, 5, 9)), TimeBounded(bound=100), until=6) == 2


def test_invalid_inputs_name_the_fix() -> None:
    with pytest.raises(ConfigError, match="strictly increasing"):
        most_span([1, 1], 3)
    with pytest.raises(ConfigError, match=">= 0"):
        most_span([1, 2], -1)
    with pytest.raises(ConfigError, match="period"):
        periodic_most_span(3, 0)
    with pytest.raises(ConfigError, match="integer"):
        most_span([1.5, 2], 3)  # type: ignore[list-item]


def test_hybrid_is_worst_class() -> None:
    plan = DisjointRelease(start=0, period=7 * 24)
    hybrid = Hybrid(
        column="fare",
        classes={"ride10": AtMostK(k=10), "monthly": TimeBounded(bound=30 * 24)},
        default=AtMostK(k=2),
    )
    by_class = max_affected_by_class(plan, hybrid)
    assert by_class == {"ride10": 10, "monthly": 6, "*": 2}
    assert max_affected(plan, hybrid) == 10
    assert max_affected_by_class(plan, AtMostK(k=3)) == {"all": 3}
    bounded = DisjointRelease(start=0, period=7 * 24, end=4 * 7 * 24)
    assert max_affected_by_class(bounded, hybrid) == {"ride10": 4, "monthly": 4, "*": 2}


def test_doctests() -> None:
    failures, _ = doctest.testmod(counts_module)
    assert failures == 0


# --- properties -------------------------------------------------------------------------------

release_times = st.lists(st.integers(-50, 50), min_size=1, max_size=12, unique=True).map(sorted)


@given(times=release_times, b1=st.integers(0, 120), b2=st.integers(0, 120))
def test_most_span_monotone_in_bound(times: list[int], b1: int, b2: int) -> None:
    lo, hi = sorted((b1, b2))
    assert 1 <= most_span(times, lo) <= most_span(times, hi) <= len(times)


@given(times=release_times, extra=st.integers(-60, 60), bound=st.integers(0, 120))
def test_most_span_monotone_under_refinement(times: list[int], extra: int, bound: int) -> None:
    """Adding a release time splits an interval (or extends the plan): never fewer touched."""
    finer = sorted(set([*times, extra]))
    assert most_span(finer, bound) >= most_span(times, bound)


@given(
    start=st.integers(-100, 100),
    period=st.integers(1, 30),
    k1=st.integers(1, 40),
    k2=st.integers(1, 40),
    n=st.one_of(st.none(), st.integers(1, 20)),
)
def test_at_most_k_monotone_in_k(start: int, period: int, k1: int, k2: int, n: int | None) -> None:
    end = None if n is None else start + n * period
    plan = DisjointRelease(start=start, period=period, end=end)
    lo, hi = sorted((k1, k2))
    a, b = max_affected(plan, AtMostK(k=lo)), max_affected(plan, AtMostK(k=hi))
    assert a <= b
    assert a == (lo if n is None else min(lo, n))


@settings(max_examples=60, deadline=None)
@given(
    times=st.lists(st.integers(0, 11), min_size=1, max_size=8, unique=True).map(sorted),
    bound=st.integers(0, 12),
)
def test_most_span_random_plans_match_brute_force(times: list[int], bound: int) -> None:
    t = tuple(times)
    grid = list(range(-1, -1 + GRID))
    ids = [interval_of(t, g) for g in grid]
    assert most_span(times, bound) == brute_force(grid, ids, TimeBounded(bound=bound))


@given(
    start=st.integers(-1000, 1000),
    period=st.integers(1, 50),
    bound=st.integers(0, 500),
    n=st.integers(1, 40),
)
def test_periodic_closed_form_matches_definition(
    start: int, period: int, bound: int, n: int
) -> None:
    plan = DisjointRelease(start=start, period=period, end=start + n * period)
    assert max_affected(plan, TimeBounded(bound=bound)) == most_span(plan.release_times(), bound)
    assert most_span(plan.release_times(), bound) == min(n, periodic_most_span(bound, period))


def test_numpy_integers_are_accepted() -> None:
    assert most_span(np.array([10, 20, 30], dtype=np.int64), 11) == 3  # type: ignore[arg-type]
