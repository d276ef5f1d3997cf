"""Sliding-window release (SWCR, paper section 4.5) and the window from a tree (4.5.3).

Window release ``i >= 1`` at ``t_i = start + i P`` is the change over ``(t_i - W, t_i]`` (µs).

Privacy counts on the integer timeline (µs), checked against brute-force histories in the tests:

* a mutation at ``t`` is in window ``i`` iff ``t_i`` lies in ``[t, t + W - 1]`` (``W`` integers),
  so it touches at most ``ceil(W / P)`` windows and at most k mutations touch ``k ceil(W / P)``
  (Thm 4.5);
* a B-time-bounded unit mutates in ``[x, x + B]``, so ``t_i`` lies in ``[x, x + B + W - 1]``:
  at most ``ceil((B + W) / P)`` windows (Thm 4.6).

From a tree (Thm 4.7): base interval ``g = GCD(W, P)``; window ``i`` is the range of base intervals
``[i s, i s + w)`` with ``w = W / g``, ``s = P / g`` (the tree starts at ``t_1 - W``), answered from
its canonical nodes in a tree of ``ceil(log_c w)`` layers (the top layer repeats as needed).

>>> SlidingWindowRelease(start=0, window=14, period=7).direct_count(AtMostK(k=2))
4
>>> SlidingWindowRelease(start=0, window=14, period=7).direct_count(TimeBounded(bound=7))
3
>>> window_tree_shape(window=14, period=7, c=2)
(7, 2, 1, 1)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError
from dpcr.plans.base import (
    MAX_RELEASES,
    Budgeting,
    Estimates,
    LayerBudget,
    Node,
    check_release_count,
    check_whole_periods,
    interval_series,
    sum_rows,
)
from dpcr.plans.counts import touched_base_intervals
from dpcr.plans.tree import decompose

if TYPE_CHECKING:
    from dpcr.accounting.guarantee import Participation
    from dpcr.plans.dcr import DisjointRelease
    from dpcr.timeutil import Instant, Span
    from dpcr.tomltable import TomlTable

__all__ = [
    "SlidingWindowRelease",
    "window_tree_height",
    "window_tree_layer_nodes",
    "window_tree_shape",
    "window_tree_variance",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SlidingWindowRelease:
    """Release ``i`` at ``start + i period`` is the change over the last ``window`` (SWCR,
    direct: each window noised once). Times and durations in µs or as strings.

    Base intervals have length ``g = GCD(window, period)``: base interval ``j >= 2`` is
    ``(s0 + (j-2) g, s0 + (j-1) g]`` with ``s0 = t_1 - window``, and base interval 1 is
    ``(-inf, s0]``; window ``i`` is base intervals ``(i-1) s + 2 .. (i-1) s + w + 1``
    (``s = period / g``, ``w = window / g``).
    """

    kind: ClassVar[str] = "window"
    mechanisms: ClassVar[tuple[str, ...]] = ("laplace", "gaussian")

    start: int
    window: int
    period: int
    end: int | None = None

    if TYPE_CHECKING:  # (what the constructor accepts; the fields hold µs)

        def __init__(
            self, *, start: Instant, window: Span, period: Span, end: Instant | None = None
        ) -> None: ...

    def __post_init__(self) -> None:
        from dpcr.timeutil import normalize_fields

        normalize_fields(self, timestamps=("start", "end"), durations=("window", "period"))
        for name in ("window", "period"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"{name} must be an integer > 0 (µs), got {v!r}")
        if self.end is not None and self.end < self.start + self.period:
            raise ConfigError("end must be at least one period after start")
        if self.end is not None:
            check_whole_periods(self.start, self.period, self.end)
        check_release_count(self.release_count(), "the plan")
        _, _, w = self._shape()
        if w > MAX_RELEASES:
            raise ConfigError(
                f"a window of {w:,} base intervals (GCD of window and period) is too fine; "
                "choose a window that is a multiple of a coarser period"
            )

    @classmethod
    def from_toml(cls, table: TomlTable) -> SlidingWindowRelease:
        """``[release]`` keys: ``start``, ``period``, ``window``, optional ``end``."""
        return cls(start=table.pop_time("start"), period=table.pop_span("period"),
                   window=table.pop_span("window"), end=table.pop_time("end", None))

    def release_count(self) -> int | None:
        return None if self.end is None else (self.end - self.start) // self.period

    def release_time(self, index: int) -> int:
        if index < 1:
            raise ConfigError(f"release index must be >= 1, got {index}")
        return self.start + index * self.period

    def window_of(self, index: int) -> tuple[int, int]:
        t = self.release_time(index)
        return t - self.window, t

    def direct_count(self, constraint: AtMostK | TimeBounded | Hybrid) -> int:
        """Most windows one unit touches (worst class for a hybrid constraint)."""
        if isinstance(constraint, Hybrid):
            return max(self.direct_count(c) for c in constraint.all_classes().values())
        if isinstance(constraint, AtMostK):
            count = constraint.k * -(-self.window // self.period)
        elif isinstance(constraint, TimeBounded):
            count = -(-(constraint.bound + self.window) // self.period)
        else:
            raise ConfigError(f"unsupported constraint {constraint!r}")
        n = self.release_count()
        return count if n is None else min(count, n)


    # --- the plan protocol (dpcr.plans.base) ----------------------------------------------

    def _shape(self) -> tuple[int, int, int]:
        g = math.gcd(self.window, self.period)
        return g, self.period // g, self.window // g

    def schedule(self) -> DisjointRelease:
        from dpcr.plans.dcr import DisjointRelease

        return DisjointRelease(start=self.start, period=self.period, end=self.end)

    def base_grid(self) -> DisjointRelease:
        from dpcr.plans.dcr import DisjointRelease

        g, _, _ = self._shape()
        return DisjointRelease(start=self.start + self.period - self.window - g, period=g)

    def reporting_range(self, i: int) -> tuple[int | None, int]:
        return self.window_of(i)

    def reporting_base(self, i: int) -> tuple[int, int]:
        """Period ``i``, ``(t_i - period, t_i]`` (everything up to ``t_1`` for ``i = 1``)."""
        _, s, w = self._shape()
        hi = (i - 1) * s + w + 1
        return (1 if i == 1 else hi - s + 1), hi

    def base_range(self, before: int, after: int) -> tuple[int, int]:
        _, s, w = self._shape()
        if after <= before:
            return after * s + 2, after * s + 1
        return before * s + 2, (after - 1) * s + w + 1

    def due(self, before: int, after: int) -> list[Node]:
        return [(0, i) for i in range(before + 1, after + 1)]

    def exact(self, base: np.ndarray, first: int, nodes: Sequence[Node]) -> np.ndarray:
        _, s, w = self._shape()
        return sum_rows(base, first, [((i - 1) * s + 2, (i - 1) * s + w + 1) for _, i in nodes])

    def instance(self, node: Node) -> Node:
        return node

    def node_range(self, node: Node) -> tuple[int | None, int]:
        return self.window_of(node[1])

    def participation(
        self, constraint: AtMostK | TimeBounded | Hybrid, *, reporting: int | None
    ) -> dict[str, Participation]:
        """Per class, the most windows one unit touches (Thm 4.5, 4.6), capped by the windows
        released (``reporting``; None: the whole plan)."""
        from dpcr.accounting.guarantee import Participation

        classes = constraint.all_classes() if isinstance(constraint, Hybrid) else {
            "all": constraint
        }
        cap = self.release_count() if reporting is None else reporting
        out: dict[str, Participation] = {}
        for name, con in classes.items():
            n = self.direct_count(con)
            out[name] = Participation(counts=(n if cap is None else min(n, cap),))
        return out

    def budgeting(
        self, constraint: AtMostK | TimeBounded | Hybrid, *, clamped: bool = False
    ) -> Budgeting:
        """Each window spends 1/N (N windows per unit, worst class); with a per-base clamp a
        window of ``w`` base intervals has ``m`` times the sensitivity (``m`` of them touched)."""
        worst = max(p.total for p in self.participation(constraint, reporting=None).values())
        g, _, w = self._shape()
        m = touched_base_intervals(constraint, base=g, span=w) if clamped else 1
        return Budgeting(layers=(LayerBudget(
            share=Fraction(1, max(1, worst)), l1=Fraction(m), l2=Fraction(m * m)
        ),))

    def estimate(
        self, values: Mapping[Node, np.ndarray], variances: Mapping[Node, float], n: int
    ) -> Estimates:
        """Each window's released change; no smoothing across windows."""
        change, var = interval_series(values, variances, n)
        return Estimates(change=change, estimate=change, change_var=var, estimate_var=var)

    def variances(self, layer_var: Sequence[float], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(change, window value) variances of windows ``1 .. n`` (as :meth:`estimate`'s)."""
        var = np.full(n, float(layer_var[0]))
        return var, var

    def describe(self) -> str:
        from dpcr.timeutil import format_duration, format_timestamp

        return (
            f"sliding window (SWCR), window {format_duration(self.window)} every "
            f"{format_duration(self.period)} from {format_timestamp(self.start)}"
        )


def window_tree_height(w: int, c: int) -> int:
    """``ceil(log_c w)``, at least 1 (Thm 4.7)."""
    h, size = 0, 1
    while size < w:
        size *= c
        h += 1
    return max(h, 1)


def window_tree_shape(*, window: int, period: int, c: int) -> tuple[int, int, int, int]:
    """``(g, w, s, h)``: base interval GCD(W, P), window and stride in base intervals, height."""
    g = math.gcd(window, period)
    w, s = window // g, period // g
    return g, w, s, window_tree_height(w, c)


def window_tree_layer_nodes(*, w: int, s: int, c: int, height: int) -> list[list[int]]:
    """Per distinct window position (mod the top node size), the nodes used per layer."""
    top = c ** (height - 1)
    cycle = top // math.gcd(s, top)
    out = []
    for i in range(cycle):
        lo = i * s
        counts = [0] * height
        for level, _ in decompose(lo, lo + w, c=c, max_level=height - 1):
            counts[level] += 1
        out.append(counts)
    return out


#: Window positions :func:`window_tree_variance` evaluates exactly (vectorised, in blocks);
#: beyond, its per-layer bound.
EXACT_POSITIONS = 1 << 20


def _position_counts(lo: np.ndarray, w: int, c: int, height: int) -> np.ndarray:
    """Nodes per layer (rows) of the canonical decomposition of ``[lo, lo + w)`` for each
    ``lo``: :func:`~dpcr.plans.tree.decompose`'s steps, vectorised (at each layer below the
    top the unaligned ends, at most ``c - 1`` each side; the top layer takes the rest)."""
    out = np.zeros((height, lo.size), dtype=np.int64)
    a, b = lo.copy(), lo + w
    for level in range(height - 1):
        left = np.minimum((c - a % c) % c, b - a)
        a = a + left
        right = np.minimum(b % c, b - a)
        b = b - right
        out[level] = left + right
        a, b = a // c, b // c
    out[height - 1] = b - a
    return out


def window_tree_variance(*, w: int, s: int, c: int, layer_var: Sequence[float]) -> float:
    """Exact worst variance of a window estimate from canonical nodes with the given per-layer
    estimate variances (node variances, or Honaker's ``V_l``), over the distinct window
    positions (:func:`window_tree_layer_nodes`, vectorised in blocks). Past
    :data:`EXACT_POSITIONS` positions: the bound ``Σ_{l<top} 2(c−1) V_l + (⌈w/c^top⌉ + 1)
    V_top`` (a window meets at most c − 1 unaligned nodes each side per layer)."""
    height = len(layer_var)
    weights = np.asarray(layer_var, dtype=np.float64)
    top = c ** (height - 1)
    cycle = top // math.gcd(s, top)
    if cycle > EXACT_POSITIONS:
        return float(sum(2 * (c - 1) * weights[:-1]) + (-(-w // top) + 1) * weights[-1])
    best = 0.0
    for start in range(0, cycle, 1 << 16):
        lo = np.arange(start, min(cycle, start + (1 << 16)), dtype=np.int64) * s
        best = max(best, float(np.max(weights @ _position_counts(lo, w, c, height))))
    return best
