"""Layered accounting of tree and window releases (dpcr.accounting.guarantee with the plans'
participation) against brute force."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from dpcr.accounting.composition import cost_of
from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.accounting.guarantee import Participation, PrivacyFilter, tail_event
from dpcr.accounting.guarantee import layered_guarantee as _layered
from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import BudgetExhaustedError
from dpcr.plans.tree import (
    TreeRelease,
    paper_time_bounded_count,
    tree_layer_counts,
    tree_node_share,
)
from dpcr.plans.window import SlidingWindowRelease


def layered_guarantee(events, counts, *, delta):  # type: ignore[no-untyped-def]
    """Counts per class and layer as lists, as the plans compute them."""
    return _layered(events, {k: Participation(counts=tuple(v)) for k, v in counts.items()},
                    delta=delta)


def window_counts(sw: SlidingWindowRelease, con, *, releases):  # type: ignore[no-untyped-def]
    return {k: list(p.counts) for k, p in sw.participation(con, reporting=releases).items()}


def lap(eps: Fraction) -> DiscreteLaplaceEvent:
    return DiscreteLaplaceEvent(scale=1 / eps, sensitivity=Fraction(1))


def touched(times: list[int], *, w: int, c: int, height: int, n: int) -> set[tuple[int, int]]:
    """Nodes (layer, index) of a tree over base intervals 0..n-1 that mutations at ``times``
    touch (time t >= 1 lies in base interval (t - 1) // w); only closed nodes count."""
    out = set()
    for t in times:
        b = (t - 1) // w
        if b >= n:
            continue
        for level in range(height):
            j = b // c**level
            if (j + 1) * c**level <= n:
                out.add((level, j))
    return out


def brute_worst(con: AtMostK | TimeBounded, eps: list[Fraction], *, w: int, c: int, height: int,
                n: int) -> Fraction:
    """Most ε one unit's history can collect (layer l nodes cost eps[l])."""
    horizon = n * w
    histories: list[list[int]]
    if isinstance(con, AtMostK):
        histories = [list(h) for h in itertools.combinations(range(1, horizon + 1), con.k)]
    else:  # mutating at every instant of [x, x + B] touches every node a window can
        histories = [list(range(x, min(x + con.bound, horizon) + 1)) for x in range(1, horizon + 1)]
    return max(
        sum((eps[lv] for lv, _ in touched(h, w=w, c=c, height=height, n=n)), Fraction(0))
        for h in histories
    )


@pytest.mark.parametrize("c,height,n", [(2, 3, 8), (2, 4, 11), (3, 2, 9)])
@pytest.mark.parametrize(
    "con", [AtMostK(k=1), AtMostK(k=2), TimeBounded(bound=0), TimeBounded(bound=3),
            TimeBounded(bound=7)]
)
def test_layered_guarantee_equals_brute_force_for_uniform_layers(
    con: AtMostK | TimeBounded, c: int, height: int, n: int
) -> None:
    w = 2
    eps = [Fraction(1, 10 * (lv + 1)) for lv in range(height)]  # layers cost differently
    tree = TreeRelease(start=0, period=w, branching=c, height=height)
    counts = tree_layer_counts(tree, con, layers=height, base_intervals=n)
    nodes = [n // c**lv for lv in range(height)]
    events = [[lap(eps[lv])] * nodes[lv] for lv in range(height)]
    g, _ = layered_guarantee(events, counts, delta=0.0)
    assert g.epsilon == pytest.approx(float(brute_worst(con, eps, w=w, c=c, height=height, n=n)))


def test_paper_count_is_too_small_and_ours_is_attained() -> None:
    """Erratum 1: c = 2, h = 10, B = W: the paper claims about 12 nodes, the truth is 20."""
    tree = TreeRelease(start=0, period=10, branching=2, height=10)
    counts = tree_layer_counts(tree, TimeBounded(bound=10), layers=10, base_intervals=None)
    assert sum(counts["all"]) == 20
    assert paper_time_bounded_count(bound=10, base=10, c=2, height=10) < 12  # 11.998
    one = lap(Fraction(1))
    g, _ = layered_guarantee([[one] * 2] * 10, counts, delta=0.0)
    assert g.epsilon == 20.0


def test_uneven_layers_are_bounded_by_the_costliest_nodes() -> None:
    events = [[lap(Fraction(1, 10)), lap(Fraction(3, 10)), lap(Fraction(2, 10))]]
    g, per_class = layered_guarantee(events, {"a": [1], "b": [2]}, delta=0.0)
    assert per_class["a"].epsilon == pytest.approx(0.3)
    assert per_class["b"].epsilon == pytest.approx(0.5) == g.epsilon


def test_node_shares_spend_at_most_the_budget() -> None:
    con = Hybrid(column="kind", classes={"a": AtMostK(k=3), "b": TimeBounded(bound=25)})
    fixed = TreeRelease(start=0, period=10, branching=2, height=5)
    counts = tree_layer_counts(fixed, con, layers=5, base_intervals=None)
    share = tree_node_share(fixed, con, 0)
    assert all(tree_node_share(fixed, con, lv) == share for lv in range(5))
    assert max(sum(v) for v in counts.values()) * share == 1  # h k = 15 vs 4+3+2+2+2 = 13
    growing = TreeRelease(start=0, period=10, branching=2)
    layers = 30
    counts = tree_layer_counts(growing, con, layers=layers, base_intervals=None)
    spent = max(
        sum(n * tree_node_share(growing, con, lv) for lv, n in enumerate(v))
        for v in counts.values()
    )
    assert spent <= 1 - Fraction(1, layers + 1)  # the tail holds the rest
    k3 = AtMostK(k=3)
    single = tree_layer_counts(growing, k3, layers=layers, base_intervals=None)["all"]
    spent = sum(n * tree_node_share(growing, k3, lv) for lv, n in enumerate(single))
    assert spent == 1 - Fraction(1, layers + 1)
    tail = tail_event(share=Fraction(1, layers + 1), epsilon=Fraction(2))
    assert cost_of(tail).pure_epsilon >= Fraction(2, layers + 1)


def test_window_counts_are_theorems_4_5_and_4_6() -> None:
    sw = SlidingWindowRelease(start=0, window=14, period=7)
    con = Hybrid(column="kind", classes={"a": AtMostK(k=2), "b": TimeBounded(bound=7)})
    assert window_counts(sw, con, releases=None) == {"a": [4], "b": [3]}
    assert window_counts(sw, con, releases=2) == {"a": [2], "b": [2]}


def test_filter_refuses_before_anything_is_released() -> None:
    guard = PrivacyFilter(epsilon_budget=0.3, delta_budget=0.0)
    e = lap(Fraction(1, 10))

    def part(*counts: int) -> dict[str, Participation]:
        return {"all": Participation(counts=counts)}

    assert guard.check([[e] * 5, [e] * 2], part(2, 1)).epsilon == pytest.approx(0.3)
    with pytest.raises(BudgetExhaustedError, match="nothing was released"):
        guard.check([[e] * 5, [e] * 2, [e]], part(2, 1, 1))
    gauss = DiscreteGaussianEvent(sigma2=Fraction(100), sensitivity2=Fraction(1))
    assert cost_of(gauss).rho > 0
    with pytest.raises(BudgetExhaustedError, match="delta"):
        guard.check([[gauss]], part(1))


@pytest.mark.parametrize("branching, height", [(2, None), (3, None), (8, None), (2, 3), (4, 1)])
def test_new_nodes_are_the_closed_nodes_gained(branching: int, height: int | None) -> None:
    """The nodes that close between two counts of base intervals are exactly those closed
    after and not before, in level then index order (every pair up to 70, either way)."""
    tree = TreeRelease(start=0, period=1, branching=branching, height=height)
    for before, after in itertools.product(range(71), repeat=2):
        old = set(tree.closed_nodes(before))
        assert tree.new_nodes(before, after) == [
            n for n in tree.closed_nodes(after) if n not in old
        ], (before, after)
