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
from collections.abc import Sequence
from dataclasses import dataclass

from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError
from dpcr.plans.tree import decompose

__all__ = [
    "SlidingWindowRelease",
    "window_tree_height",
    "window_tree_layer_nodes",
    "window_tree_shape",
    "window_tree_variance",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SlidingWindowRelease:
    start: int
    window: int
    period: int
    end: int | None = None

    def __post_init__(self) -> None:
        for name in ("window", "period"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"{name} must be an integer > 0 (µs), got {v!r}")
        if self.end is not None and self.end < self.start + self.period:
            raise ConfigError("end must be at least one period after start")

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


def window_tree_variance(*, w: int, s: int, c: int, layer_var: Sequence[float]) -> float:
    """Exact worst variance of a window estimate from canonical nodes with the given per-layer
    estimate variances (node variances, or Honaker's ``V_l``)."""
    height = len(layer_var)
    return max(
        sum(n * v for n, v in zip(counts, layer_var, strict=True))
        for counts in window_tree_layer_nodes(w=w, s=s, c=c, height=height)
    )
