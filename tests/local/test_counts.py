"""Brute-force oracles for the per-entry (local) counts of DCR, tree and window releases.

An entry's history is a set of mutation times; a query is touched when its filter holds one of
them. Values are free, so two histories make a query differ iff either touches it; the local count
is the largest union of touched sets over pairs of admissible histories.
"""

from __future__ import annotations

import itertools

import pytest

from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.local import (
    lifecycle_mutations,
    local_dcr_count,
    local_tree_count,
    local_window_count,
)
from dpcr.plans.dcr import DisjointRelease


def _histories(constraint: AtMostK | TimeBounded, horizon: int) -> list[frozenset[int]]:
    times = range(horizon)
    if isinstance(constraint, AtMostK):
        return [
            frozenset(c)
            for r in range(1, constraint.k + 1)
            for c in itertools.combinations(times, r)
        ]
    # time-bounded: insertion at x, all mutations within [x, x + B] (all of them: the maximum)
    return [frozenset(range(x, min(x + constraint.bound, horizon - 1) + 1)) for x in times]


def _pair_max(filters: list[tuple[int, int]], histories: list[frozenset[int]]) -> int:
    touched = {
        frozenset(i for i, (lo, hi) in enumerate(filters) if any(lo < t <= hi for t in h))
        for h in histories
    }
    return max(len(a | b) for a in touched for b in touched)


def _dcr_filters(times: tuple[int, ...]) -> list[tuple[int, int]]:
    return [(-(10**9) if i == 0 else times[i - 1], t) for i, t in enumerate(times)]


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("period", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 3, 7])
def test_dcr_at_most_k_matches_brute_force(k: int, period: int, n: int) -> None:
    plan = DisjointRelease(start=0, period=period, end=n * period)
    times = tuple(plan.release_times())
    expected = _pair_max(_dcr_filters(times), _histories(AtMostK(k=k), n * period + 1))
    assert local_dcr_count(plan, AtMostK(k=k)) == expected


@pytest.mark.parametrize("bound", [0, 1, 2, 3, 5, 8])
@pytest.mark.parametrize("period", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_dcr_time_bounded_matches_brute_force(bound: int, period: int, n: int) -> None:
    plan = DisjointRelease(start=0, period=period, end=n * period)
    times = tuple(plan.release_times())
    expected = _pair_max(_dcr_filters(times), _histories(TimeBounded(bound=bound), n * period + 1))
    assert local_dcr_count(plan, TimeBounded(bound=bound)) == expected


@pytest.mark.parametrize(
    "times", [(1, 2, 4, 8, 16), (3, 4, 5, 11, 12, 20), (2, 9), (1, 5, 6, 7, 30, 31, 32)]
)
@pytest.mark.parametrize("bound", [0, 1, 3, 6, 10])
def test_dcr_explicit_times_time_bounded(times: tuple[int, ...], bound: int) -> None:
    plan = DisjointRelease(times=times)
    expected = _pair_max(_dcr_filters(times), _histories(TimeBounded(bound=bound), times[-1] + 1))
    assert local_dcr_count(plan, TimeBounded(bound=bound)) == expected


def test_open_ended_and_hybrid() -> None:
    plan = DisjointRelease(start=0, period=7)
    assert local_dcr_count(plan, AtMostK(k=4)) == 8
    assert local_dcr_count(plan, TimeBounded(bound=14)) == 2 * 3
    hybrid = Hybrid(column="kind", classes={"a": AtMostK(k=1)}, default=AtMostK(k=3))
    assert local_dcr_count(plan, hybrid) == 6


def test_lifecycle_counts_insert_and_delete() -> None:
    # two value changes plus insert and delete: four mutations, 2k = 8 periods can differ
    assert lifecycle_mutations(2) == 4
    plan = DisjointRelease(start=0, period=1, end=64)
    assert local_dcr_count(plan, AtMostK(k=lifecycle_mutations(2))) == 8


def _tree_filters(levels: int, fanout: int, width: int, horizon: int) -> list[tuple[int, int]]:
    out = []
    for i in range(levels):
        length = fanout**i * width
        out += [(j * length, (j + 1) * length) for j in range(-(-horizon // length))]
    return out


@pytest.mark.parametrize(
    "levels,fanout,width", [(1, 2, 1), (3, 2, 1), (4, 2, 1), (3, 3, 1), (3, 2, 2)]
)
@pytest.mark.parametrize("k", [1, 2])
def test_tree_at_most_k_matches_brute_force(levels: int, fanout: int, width: int, k: int) -> None:
    horizon = fanout ** (levels - 1) * width * 2
    expected = _pair_max(
        _tree_filters(levels, fanout, width, horizon), _histories(AtMostK(k=k), horizon + 1)
    )
    got = local_tree_count(
        levels=levels, fanout=fanout, width=width, constraint=AtMostK(k=k), horizon=horizon
    )
    assert got == expected


@pytest.mark.parametrize("levels,fanout,width", [(3, 2, 1), (4, 2, 1), (3, 3, 1), (3, 2, 3)])
@pytest.mark.parametrize("bound", [0, 1, 2, 4, 7])
def test_tree_time_bounded_matches_brute_force(
    levels: int, fanout: int, width: int, bound: int
) -> None:
    # a long horizon (4 top-level nodes), so the unbounded closed form applies per level
    horizon = fanout ** (levels - 1) * width * 8
    filters = _tree_filters(levels, fanout, width, horizon)
    expected = _pair_max(filters, _histories(TimeBounded(bound=bound), horizon + 1))
    got = local_tree_count(
        levels=levels,
        fanout=fanout,
        width=width,
        constraint=TimeBounded(bound=bound),
        horizon=horizon,
    )
    assert got == expected


def test_tree_erratum_1() -> None:
    # c = 2, h = 10, B = W: 2 * 20 nodes, not the paper's 2 * 12.0
    assert local_tree_count(levels=10, fanout=2, width=5, constraint=TimeBounded(bound=5)) == 40


def _window_filters(period: int, window: int, n: int) -> list[tuple[int, int]]:
    return [((i + 1) * period - window, (i + 1) * period) for i in range(n)]


@pytest.mark.parametrize("period,window", [(1, 1), (1, 3), (2, 3), (3, 2), (2, 6)])
@pytest.mark.parametrize("k", [1, 2])
def test_window_at_most_k_matches_brute_force(period: int, window: int, k: int) -> None:
    n = 12
    horizon = n * period
    expected = _pair_max(_window_filters(period, window, n), _histories(AtMostK(k=k), horizon))
    got = local_window_count(period=period, window=window, constraint=AtMostK(k=k), releases=n)
    assert got == expected


@pytest.mark.parametrize("period,window", [(1, 1), (1, 3), (2, 3), (3, 2), (2, 6)])
@pytest.mark.parametrize("bound", [0, 1, 2, 5])
def test_window_time_bounded_matches_brute_force(period: int, window: int, bound: int) -> None:
    n = 16
    horizon = n * period
    expected = _pair_max(
        _window_filters(period, window, n), _histories(TimeBounded(bound=bound), horizon)
    )
    got = local_window_count(
        period=period, window=window, constraint=TimeBounded(bound=bound), releases=n
    )
    assert got == expected
