"""Tree release (HDCR, paper section 4.4.4): a c-ary hierarchy of disjoint continual releases.

Base intervals are numbered 0, 1, 2, ... (interval ``j`` is ``(start + j W, start + (j+1) W]``).
Node ``(level, index)`` is the noisy total of base intervals ``[index c^level, (index+1) c^level)``;
it is released once its last base interval closes. ``height`` layers ``0 .. height-1`` are kept;
``height=None`` grows the tree without bound (unbounded horizon: layer ``l`` exists once a node of
it closes, and its budget share must be summable, see :func:`growing_layer_shares`).

Privacy counts come from the filters (erratum 1 in docs/errata.md): one mutation touches one node
per layer, so at most k mutations touch at most ``k`` nodes per layer; a B-time-bounded unit's
mutations lie in ``[x, x + B]``, which meets at most ``ceil(B / (c^l W)) + 1`` nodes of layer ``l``
(every layer attains its maximum at once when ``x`` is the last instant of a top-layer node, so the
sum over layers is exact, not only a bound). The paper's ``sum (ceil(B/W)/c^l + 1)`` is too small.

>>> decompose(0, 7, c=2)
[(0, 6), (1, 2), (2, 0)]
>>> layer_counts_time_bounded(bound=10, base=10, c=2, height=10)
[2, 2, 2, 2, 2, 2, 2, 2, 2, 2]
>>> sum(layer_counts_time_bounded(bound=10, base=10, c=2, height=10))
20
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError
from dpcr.estimators.tree import (
    check_branching,
    decompose,
    honaker_nodes,
    honaker_variances,
    prefix_digits,
    prefix_from_nodes,
    tree_prefix_variances,
)
from dpcr.plans.base import (
    Budgeting,
    Estimates,
    LayerBudget,
    check_release_count,
    check_whole_periods,
    sum_rows,
)
from dpcr.plans.counts import periodic_most_span, touched_base_intervals

if TYPE_CHECKING:
    from dpcr.accounting.guarantee import Participation
    from dpcr.plans.dcr import DisjointRelease
    from dpcr.timeutil import Instant, Span
    from dpcr.tomltable import TomlTable

__all__ = [
    "ESTIMATORS",
    "GROWING_LAYERS",
    "TreeRelease",
    "decompose",
    "growing_layer_shares",
    "layer_counts",
    "layer_counts_at_most_k",
    "layer_counts_time_bounded",
    "max_nodes",
    "paper_time_bounded_count",
    "prefix_digits",
]

Node = tuple[int, int]

ESTIMATORS = ("honaker", "plain")
Estimator = Literal["honaker", "plain"]
#: Layers accounted one by one for an open-ended growing tree; the rest is bounded by the tail
#: (1 / (GROWING_LAYERS + 1) of the budget). c^64 base intervals is never reached in practice.
GROWING_LAYERS = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeRelease:
    """A c-ary tree of disjoint releases over base intervals of length ``period`` (µs, or a
    duration string), HDCR.

    ``height`` is the number of layers (``None``: unbounded, the tree grows; with an ``end`` the
    smallest ``h`` with ``c^h >= T`` base intervals). ``estimator``: how released nodes become
    running totals (post-processing): ``"honaker"`` (variance-optimal) or ``"plain"``.

    >>> TreeRelease(start="2025-01-01", period="7d", end="2025-12-31").height
    6
    """

    kind: ClassVar[str] = "tree"
    mechanisms: ClassVar[tuple[str, ...]] = ("laplace", "gaussian")

    start: int
    period: int
    branching: int = 2
    height: int | None = None
    end: int | None = None
    estimator: Estimator = "honaker"

    if TYPE_CHECKING:  # (what the constructor accepts; the fields hold µs)

        def __init__(
            self, *, start: Instant, period: Span, branching: int = 2, height: int | None = None,
            end: Instant | None = None, estimator: Estimator = "honaker",
        ) -> None: ...

    def __post_init__(self) -> None:
        from dpcr.timeutil import normalize_fields

        normalize_fields(self, timestamps=("start", "end"), durations=("period",))
        check_branching(self.branching)
        if self.estimator not in ESTIMATORS:
            raise ConfigError(
                f"release.estimator must be one of {list(ESTIMATORS)}, got {self.estimator!r}"
            )
        if self.period <= 0:
            raise ConfigError(f"period must be > 0, got {self.period!r}")
        if self.height is not None and not 1 <= self.height <= GROWING_LAYERS:
            raise ConfigError(
                f"height must be 1 .. {GROWING_LAYERS} (or None for a growing tree), got "
                f"{self.height}"
            )
        if self.branching > 1024:
            raise ConfigError(f"branching must be 2 .. 1024, got {self.branching}")
        if self.end is not None and self.end < self.start + self.period:
            raise ConfigError("end must be at least one period after start")
        if self.end is not None:
            check_whole_periods(self.start, self.period, self.end)

        check_release_count(self.base_count(), "the plan")
        if self.height is None and self.end is not None:
            # a known horizon of T base intervals: the smallest h with c^h >= T spends the
            # budget on h layers instead of the open-ended split over ever more layers
            base, height = max(1, (self.end - self.start) // self.period), 1
            while self.branching**height < base:
                height += 1
            object.__setattr__(self, "height", height)

    @classmethod
    def from_toml(cls, table: TomlTable) -> TreeRelease:
        """``[release]`` keys: ``start``, ``period``, optional ``end``, ``branching`` (2),
        ``height``, ``estimator`` (``"honaker"``)."""
        return cls(
            start=table.pop_time("start"),
            period=table.pop_span("period"),
            end=table.pop_time("end", None),
            branching=table.pop("branching", 2, types=(int,)),
            height=table.pop("height", None, types=(int,)),
            estimator=table.pop("estimator", "honaker", types=(str,)),
        )

    def base_count(self) -> int | None:
        return None if self.end is None else (self.end - self.start) // self.period

    def layers(self, base_intervals: int) -> int:
        """Layers with at least one closed node after ``base_intervals`` closed base intervals."""
        if base_intervals <= 0:
            return 0
        n, levels = base_intervals, 0
        while n >= 1 and (self.height is None or levels < self.height):
            levels += 1
            n //= self.branching
        return levels

    def closed_nodes(self, base_intervals: int) -> list[Node]:
        """Every node whose interval is closed once ``base_intervals`` base intervals are."""
        out: list[Node] = []
        for level in range(self.layers(base_intervals)):
            size = self.branching**level
            out.extend((level, j) for j in range(base_intervals // size))
        return out

    def new_nodes(self, before: int, after: int) -> list[Node]:
        """Nodes that close when the closed base intervals go from ``before`` to ``after``."""
        out: list[Node] = []
        closed_before = self.layers(before)
        for level in range(self.layers(after)):
            size = self.branching**level
            first = before // size if level < closed_before else 0
            out.extend((level, j) for j in range(first, after // size))
        return out

    def node_interval(self, node: Node) -> tuple[int, int]:
        """(t_lo, t_hi] of a node in µs."""
        level, j = node
        size = self.branching**level * self.period
        return self.start + j * size, self.start + (j + 1) * size


    # --- the plan protocol (dpcr.plans.base) ----------------------------------------

    def schedule(self) -> DisjointRelease:
        return _tree_grid(self)

    def base_grid(self) -> DisjointRelease:
        return _tree_grid(self)


    def reporting_range(self, i: int) -> tuple[int | None, int]:
        return _tree_grid(self).interval(i)


    def reporting_base(self, i: int) -> tuple[int, int]:
        return i, i


    def base_range(self, before: int, after: int) -> tuple[int, int]:
        """From the first base interval of the earliest new node (a parent sums old intervals)."""
        nodes = self.new_nodes(before, after)
        if not nodes:
            return after + 1, after
        return min(j * self.branching**level for level, j in nodes) + 1, after


    def due(self, before: int, after: int) -> list[Node]:
        return self.new_nodes(before, after)


    def exact(self, base: np.ndarray, first: int, nodes: Sequence[Node]) -> np.ndarray:
        c = self.branching
        return sum_rows(base, first, [(j * c**lv + 1, (j + 1) * c**lv) for lv, j in nodes])


    def instance(self, node: Node) -> Node:
        return node


    def node_range(self, node: Node) -> tuple[int | None, int]:
        return self.node_interval(node)


    def participation(self, constraint: AtMostK | TimeBounded | Hybrid, *, reporting: int | None
    ) -> dict[str, Participation]:
        """Per class, the most nodes per layer one unit touches (erratum 1: ``ceil(B/(c^l W)) + 1``
        under a time bound), for the nodes closed after ``reporting`` base intervals (None: every
        layer the plan accounts)."""
        from dpcr.accounting.guarantee import Participation

        if reporting is None:
            layers, cap = _accounted_layers(self), self.base_count()
        else:
            layers, cap = self.layers(reporting), reporting
        counts = tree_layer_counts(self, constraint, layers=layers, base_intervals=cap)
        return {name: Participation(counts=tuple(v)) for name, v in counts.items()}


    def budgeting(
        self, constraint: AtMostK | TimeBounded | Hybrid, *, clamped: bool = False
    ) -> Budgeting:
        """Layer shares (:func:`tree_node_share`); with a per-base clamp a node of layer ``l``
        has ``m_l = min(c^l, touched)`` times the sensitivity."""

        layers = _accounted_layers(self)

        def factor(layer: int) -> int:
            if not clamped:
                return 1
            span = self.branching**layer
            return touched_base_intervals(constraint, base=self.period, span=span)

        shares = tuple(
            LayerBudget(
                share=tree_node_share(self, constraint, layer),
                l1=Fraction(factor(layer)),
                l2=Fraction(factor(layer) ** 2),
            )
            for layer in range(layers)
        )
        open_ended = self.height is None and self.base_count() is None
        return Budgeting(layers=shares, tail=Fraction(1, layers + 1) if open_ended else Fraction(0))


    def estimate(self, values: Mapping[Node, np.ndarray], variances: Mapping[Node, float], n: int
    ) -> Estimates:
        """Running totals from the released nodes (Honaker's variance-optimal estimate, or plain
        node sums) with exact variances; the change of a base interval is its leaf."""

        c, layers = self.branching, self.layers(n)
        if n == 0:
            empty = np.zeros((0, 0))
            return Estimates(change=empty, estimate=empty, change_var=np.zeros(0),
                             estimate_var=np.zeros(0))
        s: list[float] = []
        levels: list[np.ndarray] = []
        for level in range(layers):
            count = n // c**level
            rows = []
            for j in range(count):
                if (level, j) not in values:
                    raise ConfigError(f"node {(level, j)} is missing from the store")
                rows.append(values[(level, j)])
            levels.append(np.asarray(rows, dtype=np.int64))
            s.append(float(variances[(level, 0)]))
        if self.estimator == "honaker" and min(s) > 0:  # (a zero variance: nodes are exact)
            est = prefix_from_nodes(honaker_nodes(levels, s, c=c), c=c, n=n)
        else:
            est = prefix_from_nodes(levels, c=c, n=n)
        est = np.asarray(est, dtype=np.float64).reshape(n, -1)
        change_var, estimate_var = self.variances(s, n)
        return Estimates(
            change=levels[0].astype(np.float64).reshape(n, -1),
            estimate=est,
            change_var=change_var,
            estimate_var=estimate_var,
        )

    def variances(self, layer_var: Sequence[float], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(change, running value) variances of base intervals ``1 .. n`` from the node variance
        of each layer (as :meth:`estimate`'s)."""

        c, layers = self.branching, self.layers(n)
        if n == 0:
            return np.zeros(0), np.zeros(0)
        if len(layer_var) < layers:
            raise ConfigError(f"{layers} layers of nodes, {len(layer_var)} variances given")
        s = [float(v) for v in layer_var[:layers]]
        m = np.arange(1, n + 1)
        if self.estimator == "honaker" and min(s) > 0:
            var = tree_prefix_variances(m, honaker_variances(s, c=c), c=c)
        else:
            var = tree_prefix_variances(m, s, c=c)
        return np.full(n, s[0]), np.asarray(var, dtype=np.float64)


    def describe(self) -> str:
        from dpcr.timeutil import format_duration, format_timestamp

        height = (
            f"height {self.height}" if self.height is not None else "growing (unbounded height)"
        )
        return (
            f"tree release (HDCR), base interval {format_duration(self.period)} from "
            f"{format_timestamp(self.start)}, branching {self.branching}, {height}; "
            f"estimator {self.estimator}"
        )


def max_nodes(length: int, *, c: int) -> int:
    """Thm 4.4 bound: a range of ``length`` base intervals needs at most ``2(c-1)h_min`` nodes,
    ``h_min = ceil(log_c length)`` (1 node for length 1)."""
    if length <= 1:
        return max(length, 0)
    h, size = 0, 1
    while size < length:
        size *= c
        h += 1
    return 2 * (c - 1) * h


def _layer_nodes(level: int, c: int, base_intervals: int | None) -> int | None:
    return None if base_intervals is None else base_intervals // c**level


def layer_counts_at_most_k(
    k: int, *, c: int, height: int, base_intervals: int | None = None
) -> list[int]:
    """Most nodes per layer one unit with at most ``k`` mutations touches."""
    out = []
    for level in range(height):
        cap = _layer_nodes(level, c, base_intervals)
        out.append(k if cap is None else min(k, cap))
    return out


def layer_counts_time_bounded(
    *, bound: int, base: int, c: int, height: int, base_intervals: int | None = None
) -> list[int]:
    """Most nodes per layer a B-time-bounded unit touches: ``ceil(B / (c^l W)) + 1`` per layer
    (capped by the nodes the layer has)."""
    out = []
    for level in range(height):
        span = periodic_most_span(bound, base * c**level)
        cap = _layer_nodes(level, c, base_intervals)
        out.append(span if cap is None else min(span, cap))
    return out


def layer_counts(
    constraint: AtMostK | TimeBounded | Hybrid,
    *,
    base: int,
    c: int,
    height: int,
    base_intervals: int | None = None,
) -> dict[str, list[int]]:
    """Per class (``"all"`` for a simple constraint), the most nodes per layer one unit touches."""
    classes = constraint.all_classes() if isinstance(constraint, Hybrid) else {"all": constraint}
    out: dict[str, list[int]] = {}
    for name, con in classes.items():
        if isinstance(con, AtMostK):
            out[name] = layer_counts_at_most_k(
                con.k, c=c, height=height, base_intervals=base_intervals
            )
        elif isinstance(con, TimeBounded):
            out[name] = layer_counts_time_bounded(
                bound=con.bound, base=base, c=c, height=height, base_intervals=base_intervals
            )
        else:
            raise ConfigError(f"unsupported constraint {con!r}")
    return out


def paper_time_bounded_count(*, bound: int, base: int, c: int, height: int) -> Fraction:
    """The paper's (wrong, too small) count ``sum_l (ceil(B/W)/c^l + 1)`` (Thm 4.3; erratum 1)."""
    q = -(-bound // base)
    return sum((Fraction(q, c**level) + 1 for level in range(height)), Fraction(0))


def growing_layer_shares(levels: int) -> list[Fraction]:
    """Budget share of layers ``0 .. levels-1`` of a growing tree: ``1 / ((l+1)(l+2))``.

    The shares of all layers sum to 1 (telescoping), and the unspent tail after layer ``m - 1`` is
    exactly ``1 / (m + 1)``, so an unbounded tree has a finite, exactly known total cost.
    """
    return [Fraction(1, (level + 1) * (level + 2)) for level in range(levels)]


# --- the plan protocol (dpcr.plans.base) ------------------------------------------------------


def _tree_grid(tree: TreeRelease) -> DisjointRelease:
    from dpcr.plans.dcr import DisjointRelease

    return DisjointRelease(start=tree.start, period=tree.period, end=tree.end)


def _accounted_layers(tree: TreeRelease) -> int:
    cap = tree.base_count()
    if tree.height is not None:
        return tree.height if cap is None else max(1, min(tree.height, tree.layers(cap)))
    return GROWING_LAYERS if cap is None else max(1, tree.layers(cap))


def tree_layer_counts(
    tree: TreeRelease,
    constraint: AtMostK | TimeBounded | Hybrid,
    *,
    layers: int,
    base_intervals: int | None,
) -> dict[str, list[int]]:
    """Per class, the most nodes of each layer ``0 .. layers-1`` one unit touches, when
    ``base_intervals`` base intervals are closed (None: no cap, the whole open-ended plan)."""
    return layer_counts(
        constraint, base=tree.period, c=tree.branching, height=layers, base_intervals=base_intervals
    )


def tree_node_share(
    tree: TreeRelease, constraint: AtMostK | TimeBounded | Hybrid, layer: int
) -> Fraction:
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
