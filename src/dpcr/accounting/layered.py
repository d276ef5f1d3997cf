"""Per-unit worst case of releases made in layers: tree nodes (HDCR) and sliding windows (SWCR).

A layered release publishes, in layer ``l``, nodes (or windows) that each carry a (composed)
event. One privacy unit's kept mutations touch at most ``n_l`` releases of layer ``l``; the counts
come from the filters, per class of the constraint:

* tree, at most k: ``k`` nodes per layer (one mutation touches one node per layer);
* tree, B-time-bounded: ``ceil(B / (c^l W)) + 1`` nodes of layer ``l`` (ARCHITECTURE.md
  erratum 1; never the paper's ``ceil(B/W)/c^l + 1``);
* direct sliding window (one layer): ``k ceil(W / P)`` or ``ceil((B + W) / P)`` (Thm 4.5, 4.6);

all capped by the number of releases the layer has (:func:`dpcr.plans.tree.layer_counts`,
:meth:`dpcr.plans.window.SlidingWindowRelease.direct_count`, both checked against brute-force
histories in tests/plans). A unit's loss is at most the composition, over layers, of the ``n_l``
costliest releases of each layer (exact when a layer's releases carry equal events, an upper
bound otherwise); the guarantee is the worst class (Thm 4.10).

An unbounded growing tree has infinitely many layers; layer ``l`` is calibrated to at most the
share ``1 / ((l+1)(l+2))`` of the budget, so the layers from ``L`` on cost at most ``1 / (L+1)``
of it together (:func:`tail_cost`).

>>> from fractions import Fraction
>>> from dpcr.accounting.events import DiscreteLaplaceEvent
>>> e = DiscreteLaplaceEvent(scale=Fraction(10), sensitivity=Fraction(1))     # ε = 0.1 per node
>>> g, _ = layered_guarantee([[e] * 8, [e] * 4], {"all": [2, 2]}, delta=0.0)  # 2 per layer
>>> g.epsilon
0.4
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from dpcr.accounting.composition import (
    Guarantee,
    PrivacyCost,
    cost_of,
    guarantee_of_cost,
    round_up,
    worst_guarantee,
)
from dpcr.accounting.events import DpEvent
from dpcr.accounting.filters import check_budget
from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import BudgetExhaustedError, ConfigError
from dpcr.plans.tree import TreeRelease, growing_layer_shares, layer_counts
from dpcr.plans.window import SlidingWindowRelease

__all__ = [
    "NodeFilter",
    "layered_guarantee",
    "tail_cost",
    "tree_layer_counts",
    "tree_node_share",
    "window_counts",
]

Constraint = AtMostK | TimeBounded | Hybrid


def tree_layer_counts(
    tree: TreeRelease, constraint: Constraint, *, layers: int, base_intervals: int | None
) -> dict[str, list[int]]:
    """Per class, the most nodes of each layer ``0 .. layers-1`` one unit touches, when
    ``base_intervals`` base intervals are closed (None: no cap, the whole open-ended plan)."""
    return layer_counts(
        constraint,
        base=tree.period,
        c=tree.branching,
        height=layers,
        base_intervals=base_intervals,
    )


def tree_node_share(tree: TreeRelease, constraint: Constraint, layer: int) -> Fraction:
    """Fraction of the budget one node of ``layer`` is calibrated to (data-independent).

    Fixed height ``h``: every node gets ``1 / N``, ``N = max over classes of sum_l n_l`` (``h k``
    at most k). Growing: layer ``l`` gets ``1 / ((l+1)(l+2))``, split over its worst-class count.
    """
    if layer < 0 or (tree.height is not None and layer >= tree.height):
        raise ConfigError(f"layer {layer} is outside the tree (height {tree.height})")
    cap = tree.base_count()
    if tree.height is not None:
        counts = tree_layer_counts(tree, constraint, layers=tree.height, base_intervals=cap)
        return Fraction(1, max(1, max(sum(v) for v in counts.values())))
    counts = tree_layer_counts(tree, constraint, layers=layer + 1, base_intervals=cap)
    worst = max(1, max(v[layer] for v in counts.values()))
    return growing_layer_shares(layer + 1)[layer] / worst


def window_counts(
    window: SlidingWindowRelease, constraint: Constraint, *, releases: int | None
) -> dict[str, list[int]]:
    """Per class, the most windows one unit touches (one layer), capped by ``releases``."""
    classes = constraint.all_classes() if isinstance(constraint, Hybrid) else {"all": constraint}
    out: dict[str, list[int]] = {}
    for name, con in classes.items():
        n = window.direct_count(con)
        out[name] = [n if releases is None else min(n, releases)]
    return out


def tail_cost(
    *, layers: int, epsilon: Fraction | None = None, rho: Fraction | None = None
) -> PrivacyCost:
    """Upper bound on the cost of layers ``layers, layers+1, ...`` of a growing tree whose layer
    ``l`` costs at most ``1 / ((l+1)(l+2))`` of ``epsilon`` (pure) or ``rho`` (zCDP): the shares
    telescope to ``1 / (layers + 1)``. For pure DP the ε²/2 part is bounded by the square of the
    sum (all parts are positive)."""
    share = Fraction(1, layers + 1)
    cost = PrivacyCost()
    if epsilon is not None:
        cost = cost + PrivacyCost.pure(epsilon * share)
    if rho is not None:
        cost = cost + PrivacyCost.zcdp(rho * share)
    return cost


def _top_sum(costs: list[PrivacyCost], n: int) -> PrivacyCost:
    def top(parts: list[Fraction]) -> Fraction:
        return sum(sorted(parts, reverse=True)[:n], Fraction(0))

    return PrivacyCost(
        pure_epsilon=top([c.pure_epsilon for c in costs]),
        pure_rho=top([c.pure_rho for c in costs]),
        rho=top([c.rho for c in costs]),
    )


def layered_guarantee(
    layer_events: Sequence[Sequence[DpEvent]],
    counts: Mapping[str, Sequence[int]],
    *,
    delta: float,
    tail: PrivacyCost | None = None,
) -> tuple[Guarantee, dict[str, Guarantee]]:
    """The guarantee (worst class) and each class's, when layer ``l`` has released
    ``layer_events[l]`` (one composed event per node) and a unit of class ``name`` touches at
    most ``counts[name][l]`` of them; ``tail`` is added to every class (layers not listed)."""
    per_layer = [[cost_of(e) for e in events] for events in layer_events]
    per_class: dict[str, Guarantee] = {}
    for name, ns in counts.items():
        if len(ns) < len(per_layer):
            raise ConfigError(
                f"class {name!r}: {len(ns)} layer counts for {len(per_layer)} layers of events"
            )
        cost = tail if tail is not None else PrivacyCost()
        for costs, n in zip(per_layer, ns, strict=False):
            cost = cost + _top_sum(costs, n)
        per_class[name] = guarantee_of_cost(cost, delta=delta)
    if not per_class:
        raise ConfigError("no constraint class to account for")
    return worst_guarantee(list(per_class.values())), per_class


def _within(value: float, budget: float) -> bool:
    return value <= round_up(Fraction(repr(float(budget))))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFilter:
    """Refuses a layered release whose per-unit guarantee would exceed the budget.

    Holds configuration only; :meth:`check` is called with every released and about-to-be
    released event BEFORE any value is written, and raises (changing nothing) when over budget.
    """

    epsilon_budget: float
    delta_budget: float

    def __post_init__(self) -> None:
        check_budget(self.epsilon_budget, self.delta_budget)

    def check(
        self,
        layer_events: Sequence[Sequence[DpEvent]],
        counts: Mapping[str, Sequence[int]],
    ) -> Guarantee:
        if self.delta_budget == 0 and any(
            cost_of(e).rho > 0 for events in layer_events for e in events
        ):
            raise BudgetExhaustedError(
                "Gaussian (zCDP) releases need a delta budget > 0; set privacy.delta (e.g. 1e-6) "
                "or use Laplace noise"
            )
        g, _ = layered_guarantee(layer_events, counts, delta=self.delta_budget)
        if not (_within(g.epsilon, self.epsilon_budget) and _within(g.delta, self.delta_budget)):
            raise BudgetExhaustedError(
                f"releasing these nodes would bring the per-unit guarantee to ε = {g.epsilon:.6g} "
                f"(δ = {g.delta:.3g}), over the budget ε = {self.epsilon_budget:.6g} "
                f"(δ = {self.delta_budget:.3g}); nothing was released"
            )
        return g
