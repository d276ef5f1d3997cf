"""Sliding-window counts (Thm 4.5/4.6) and the window from a tree, against brute force."""

from __future__ import annotations

from itertools import combinations

import pytest

from dpcr.bounding.constraints import AtMostK, TimeBounded
from dpcr.plans.tree import decompose
from dpcr.plans.window import (
    SlidingWindowRelease,
    window_tree_layer_nodes,
    window_tree_shape,
)


def touched(plan: SlidingWindowRelease, times: list[int], n: int) -> int:
    hit = set()
    for i in range(1, n + 1):
        lo, hi = plan.window_of(i)
        if any(lo < t <= hi for t in times):
            hit.add(i)
    return len(hit)


@pytest.mark.parametrize("window,period", [(1, 1), (3, 1), (4, 2), (5, 2), (2, 3), (6, 4), (7, 3)])
def test_direct_counts_vs_brute_force(window: int, period: int) -> None:
    plan = SlidingWindowRelease(start=0, window=window, period=period)
    n = 12
    horizon = n * period
    for bound in range(0, 9):
        worst = max(
            touched(plan, list(range(x, x + bound + 1)), n) for x in range(0, horizon - bound)
        )
        assert worst == plan.direct_count(TimeBounded(bound=bound))
    for k in (1, 2):
        worst = max(
            touched(plan, list(ts), n) for ts in combinations(range(1, horizon - window + 1), k)
        )
        assert worst == plan.direct_count(AtMostK(k=k))


@pytest.mark.parametrize("window,period,c", [(14, 7, 2), (12, 8, 2), (9, 3, 3), (10, 4, 4)])
def test_window_from_tree_covers_each_window(window: int, period: int, c: int) -> None:
    g, w, s, h = window_tree_shape(window=window, period=period, c=c)
    assert window % g == 0 and period % g == 0
    for i in range(20):
        lo = i * s
        nodes = decompose(lo, lo + w, c=c, max_level=h - 1)
        covered = sorted(j for lv, k in nodes for j in range(k * c**lv, (k + 1) * c**lv))
        assert covered == list(range(lo, lo + w))
        assert all(lv < h for lv, _ in nodes)
    worst = max(sum(x) for x in window_tree_layer_nodes(w=w, s=s, c=c, height=h))
    brute = max(len(decompose(i * s, i * s + w, c=c, max_level=h - 1)) for i in range(64))
    assert worst == brute
