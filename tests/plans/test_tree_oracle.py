"""Tree release: node decomposition and privacy counts against brute force."""

from __future__ import annotations

from fractions import Fraction
from functools import cache

import pytest

from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.plans.tree import (
    decompose,
    growing_layer_shares,
    layer_counts,
    max_nodes,
    paper_time_bounded_count,
)


def min_cover(lo: int, hi: int, c: int, max_level: int) -> int:
    """Fewest aligned nodes whose disjoint union is [lo, hi) (dynamic programming)."""

    @cache
    def best(a: int) -> int:
        if a == hi:
            return 0
        out = 10**9
        for level in range(max_level + 1):
            size = c**level
            if a % size == 0 and a + size <= hi:
                out = min(out, 1 + best(a + size))
        return out

    return best(lo)


@pytest.mark.parametrize("c", [2, 3, 4])
def test_decomposition_exact_minimal_and_bounded(c: int) -> None:
    for lo in range(0, 40):
        for hi in range(lo, 70):
            nodes = decompose(lo, hi, c=c)
            covered = sorted(j for lv, i in nodes for j in range(i * c**lv, (i + 1) * c**lv))
            assert covered == list(range(lo, hi))
            assert len(nodes) == min_cover(lo, hi, c, 10)
            assert len(nodes) <= max_nodes(hi - lo, c=c)  # Thm 4.4
            top = decompose(lo, hi, c=c, max_level=1)
            assert len(top) == min_cover(lo, hi, c, 1)


def brute_layer_max(con: AtMostK | TimeBounded, *, base: int, c: int, height: int, n: int) -> int:
    """Most distinct nodes (all layers) one unit's history touches; layer l node j covers
    (j c^l W, (j+1) c^l W]; base intervals 0..n-1 released, so nodes with (j+1)c^l <= n."""

    def nodes_of(t: int) -> set[tuple[int, int]]:
        out = set()
        b = (t - 1) // base  # base interval of time t >= 1
        if b >= n:
            return out
        for level in range(height):
            j = b // c**level
            if (j + 1) * c**level <= n:
                out.add((level, j))
        return out

    horizon = n * base
    best = 0
    if isinstance(con, TimeBounded):
        for x in range(1, horizon + 1):  # worst history: a mutation at every instant of [x, x+B]
            s: set[tuple[int, int]] = set()
            for t in range(x, min(x + con.bound, horizon) + 1):
                s |= nodes_of(t)
            best = max(best, len(s))
    else:
        # k mutations: greedy is exact here since layers are nested; enumerate k-subsets of bases
        from itertools import combinations

        for ts in combinations(range(1, horizon + 1, base), min(con.k, n)):
            s = set()
            for t in ts:
                s |= nodes_of(t)
            best = max(best, len(s))
    return best


@pytest.mark.parametrize("c,height,base", [(2, 4, 1), (2, 3, 3), (3, 3, 2), (4, 2, 1)])
@pytest.mark.parametrize("bound", [0, 1, 2, 3, 5, 8, 13])
def test_time_bounded_counts_vs_brute_force(c: int, height: int, base: int, bound: int) -> None:
    n = c ** (height - 1) * 3
    got = sum(
        layer_counts(TimeBounded(bound=bound), base=base, c=c, height=height, base_intervals=n)[
            "all"
        ]
    )
    assert got == brute_layer_max(TimeBounded(bound=bound), base=base, c=c, height=height, n=n)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_at_most_k_counts_vs_brute_force(k: int) -> None:
    n = 8
    got = sum(layer_counts(AtMostK(k=k), base=1, c=2, height=4, base_intervals=n)["all"])
    assert got == brute_layer_max(AtMostK(k=k), base=1, c=2, height=4, n=n)
    assert sum(layer_counts(AtMostK(k=k), base=1, c=2, height=4)["all"]) == 4 * k  # h k


def test_erratum_1_paper_count_too_small() -> None:
    # c=2, h=10, B=W: the paper says 12, the truth is 20
    assert paper_time_bounded_count(bound=10, base=10, c=2, height=10) == 2 - 2 / 2**10 + 10
    assert sum(layer_counts(TimeBounded(bound=10), base=10, c=2, height=10)["all"]) == 20
    assert brute_layer_max(TimeBounded(bound=1), base=1, c=2, height=10, n=2**9 * 2) == 20


def test_hybrid_worst_class() -> None:
    con = Hybrid(column="kind", classes={"a": AtMostK(k=2)}, default=TimeBounded(bound=3))
    counts = layer_counts(con, base=1, c=2, height=3)
    assert sum(counts["a"]) == 6 and sum(counts["*"]) == 4 + 3 + 2


def test_growing_shares_sum() -> None:
    shares = growing_layer_shares(50)
    assert sum(shares) == 1 - Fraction(1, 51)  # the tail after 50 layers is exactly 1/51
