"""Tree release (HDCR, paper section 4.4.4): a c-ary hierarchy of disjoint continual releases.

Base intervals are numbered 0, 1, 2, ... (interval ``j`` is ``(start + j W, start + (j+1) W]``).
Node ``(level, index)`` is the noisy total of base intervals ``[index c^level, (index+1) c^level)``;
it is released once its last base interval closes. ``height`` layers ``0 .. height-1`` are kept;
``height=None`` grows the tree without bound (unbounded horizon: layer ``l`` exists once a node of
it closes, and its budget share must be summable, see :func:`growing_layer_shares`).

Privacy counts come from the filters (erratum 1 in ARCHITECTURE.md): one mutation touches one node
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

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError
from dpcr.plans.counts import periodic_most_span

__all__ = [
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


def _check_c(c: int) -> None:
    if isinstance(c, bool) or not isinstance(c, int) or c < 2:
        raise ConfigError(f"branching factor c must be an integer >= 2, got {c!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeRelease:
    """A c-ary tree of disjoint releases over base intervals of length ``period`` (µs).

    ``height`` is the number of layers (``None``: unbounded, the tree grows).
    """

    start: int
    period: int
    branching: int = 2
    height: int | None = None
    end: int | None = None

    def __post_init__(self) -> None:
        _check_c(self.branching)
        if self.period <= 0:
            raise ConfigError(f"period must be > 0, got {self.period!r}")
        if self.height is not None and self.height < 1:
            raise ConfigError(
                f"height must be >= 1 (or None for a growing tree), got {self.height}"
            )
        if self.end is not None and self.end < self.start + self.period:
            raise ConfigError("end must be at least one period after start")

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
        old = set(self.closed_nodes(before))
        return [n for n in self.closed_nodes(after) if n not in old]

    def node_interval(self, node: Node) -> tuple[int, int]:
        """(t_lo, t_hi] of a node in µs."""
        level, j = node
        size = self.branching**level * self.period
        return self.start + j * size, self.start + (j + 1) * size


def decompose(lo: int, hi: int, *, c: int, max_level: int | None = None) -> list[Node]:
    """Disjoint nodes whose union is base intervals ``[lo, hi)``; canonical (fewest nodes).

    At each level the unaligned ends (at most ``c - 1`` each side) are taken, then the rest moves
    up; at ``max_level`` (the top layer) the remaining nodes are listed one by one.
    """
    _check_c(c)
    if lo < 0 or hi < lo:
        raise ConfigError(f"range [{lo}, {hi}) must satisfy 0 <= lo <= hi")
    out: list[Node] = []
    level = 0
    while lo < hi:
        if max_level is not None and level == max_level:
            out.extend((level, j) for j in range(lo, hi))
            break
        while lo % c and lo < hi:
            out.append((level, lo))
            lo += 1
        while hi % c and hi > lo:
            hi -= 1
            out.append((level, hi))
        lo //= c
        hi //= c
        level += 1
    return sorted(out)


def prefix_digits(n: np.ndarray, *, c: int, height: int) -> np.ndarray:
    """Nodes per layer in the decomposition of each prefix ``[0, n)`` (vectorised).

    Shape ``(height, len(n))``: the base-c digits of ``n``, the top layer taking the rest.
    """
    n = np.asarray(n, dtype=np.int64)
    out = np.empty((height, n.size), dtype=np.int64)
    rest = n.copy()
    for level in range(height - 1):
        out[level] = rest % c
        rest //= c
    out[height - 1] = rest
    return out


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
