"""Estimates from released tree nodes (post-processing; no privacy cost), with exact variances.

Nodes are given per layer: ``levels[l]`` has shape ``(nodes_l, *keys)`` (a histogram is one column
per key; everything is vectorised over keys). Node noise is independent with variance
``node_var[l]`` in layer ``l``.

* **Plain**: a range is the sum of its canonical nodes; variance ``sum_l digits_l * node_var[l]``.
* **Honaker (online)**: every closed node is replaced by the best linear unbiased estimate (BLUE) of
  its subtree total from the node and its closed descendants, bottom-up:
  ``V_0 = s_0``, ``V_l = 1 / (1/s_l + 1/(c V_{l-1}))`` (``s_l`` = node variance). Canonical nodes of
  a range have disjoint subtrees, so their estimates are independent and the variance of a range
  is ``sum_l digits_l * V_l`` -- exact.

>>> import numpy as np
>>> levels = tree_nodes(np.arange(1, 9), c=2, height=3)
>>> [lv.tolist() for lv in levels]
[[1, 2, 3, 4, 5, 6, 7, 8], [3, 7, 11, 15], [10, 26]]
>>> prefix_from_nodes(levels, c=2, n=8).tolist()
[1, 3, 6, 10, 15, 21, 28, 36]
>>> [round(v, 4) for v in honaker_variances([1.0, 1.0, 1.0], c=2)]
[1.0, 0.6667, 0.5714]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpcr.errors import ConfigError

__all__ = [
    "Node",
    "TreeStream",
    "check_branching",
    "decompose",
    "honaker_nodes",
    "honaker_variances",
    "prefix_digits",
    "prefix_from_nodes",
    "range_from_nodes",
    "range_variance",
    "tree_nodes",
    "tree_prefix_variances",
]


#: A tree node ``(level, index)``: the total of base intervals
#: ``[index c^level, (index+1) c^level)``.
Node = tuple[int, int]


def check_branching(c: int) -> None:
    if isinstance(c, bool) or not isinstance(c, int) or c < 2:
        raise ConfigError(f"branching factor c must be an integer >= 2, got {c!r}")


def decompose(lo: int, hi: int, *, c: int, max_level: int | None = None) -> list[Node]:
    """Disjoint nodes whose union is base intervals ``[lo, hi)``; canonical (fewest nodes).

    At each level the unaligned ends (at most ``c - 1`` each side) are taken, then the rest moves
    up; at ``max_level`` (the top layer) the remaining nodes are listed one by one.
    """
    check_branching(c)
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


def tree_nodes(changes: np.ndarray, *, c: int, height: int) -> list[np.ndarray]:
    """Exact node totals of per-base-interval ``changes`` (axis 0); only complete nodes."""
    x = np.asarray(changes)
    levels = [x]
    for _ in range(1, height):
        prev = levels[-1]
        m = prev.shape[0] // c
        levels.append(prev[: m * c].reshape((m, c, *prev.shape[1:])).sum(axis=1))
    return levels


def honaker_variances(node_var: Sequence[float], *, c: int) -> list[float]:
    """``V_l``: variance of the bottom-up BLUE of a layer-``l`` node's subtree total."""
    out: list[float] = []
    for level, s in enumerate(node_var):
        if level == 0:
            out.append(float(s))
        else:
            out.append(1.0 / (1.0 / float(s) + 1.0 / (c * out[-1])))
    return out


def honaker_nodes(
    levels: Sequence[np.ndarray], node_var: Sequence[float], *, c: int
) -> list[np.ndarray]:
    """Replace every node by the BLUE of its subtree total (bottom-up, online: uses only the
    node and its descendants, all closed when the node is)."""
    if len(node_var) < len(levels):
        raise ConfigError("give one node variance per layer")
    v = honaker_variances(node_var[: len(levels)], c=c)
    out = [np.asarray(levels[0], dtype=np.float64)]
    for level in range(1, len(levels)):
        y = np.asarray(levels[level], dtype=np.float64)
        m = y.shape[0]
        child = out[-1][: m * c].reshape((m, c, *y.shape[1:])).sum(axis=1)
        w = c * v[level - 1] / (float(node_var[level]) + c * v[level - 1])
        out.append(w * y + (1.0 - w) * child)
    return out


def prefix_from_nodes(levels: Sequence[np.ndarray], *, c: int, n: int) -> np.ndarray:
    """Running totals after base intervals ``1 .. n`` (batch, vectorised; shape ``(n, *keys)``).

    The prefix ``[0, m)`` sums, in each layer below the top, the first ``digit_l(m)`` nodes of its
    parent's group (a within-group cumulative sum), and in the top layer all closed nodes.
    """
    height = len(levels)
    first = np.asarray(levels[0])
    total = np.zeros((n + 1, *first.shape[1:]), dtype=np.result_type(first, np.int64))
    for level, a in enumerate(levels):
        a = np.asarray(a)
        size = c**level
        m = min(a.shape[0], n // size)
        if m == 0:
            continue
        cs = np.zeros((m + 1, *a.shape[1:]), dtype=total.dtype)
        cs[1:] = np.cumsum(a[:m], axis=0)
        if level < height - 1:
            # nodes c*floor(q/c) .. q-1: the closed nodes of the open group
            q = np.arange(m + 1)
            v = cs - cs[q // c * c]
        else:
            v = cs
        rep = np.repeat(v, size, axis=0)[: n + 1]
        total[: rep.shape[0]] += rep
    return total[1:]


def tree_prefix_variances(n: np.ndarray, layer_var: Sequence[float], *, c: int) -> np.ndarray:
    """Exact variance of each prefix ``[0, n)`` given per-layer estimate variances (node variances
    for plain sums, :func:`honaker_variances` for Honaker)."""
    digits = prefix_digits(np.asarray(n), c=c, height=len(layer_var))
    out: np.ndarray = np.asarray(layer_var, dtype=np.float64) @ digits
    return out


def range_from_nodes(levels: Sequence[np.ndarray], lo: int, hi: int, *, c: int) -> np.ndarray:
    """Total over base intervals ``[lo, hi)`` from its canonical nodes."""
    nodes = decompose(lo, hi, c=c, max_level=len(levels) - 1)
    first = np.asarray(levels[0])
    total = np.zeros(first.shape[1:], dtype=np.result_type(first, np.float64))
    for level, j in nodes:
        if j >= len(levels[level]):
            raise ConfigError(f"node {(level, j)} is not released yet")
        total = total + levels[level][j]
    return total


def range_variance(lo: int, hi: int, layer_var: Sequence[float], *, c: int) -> float:
    nodes = decompose(lo, hi, c=c, max_level=len(layer_var) - 1)
    return float(sum(layer_var[level] for level, _ in nodes))


class TreeStream:
    """Streaming binary-counter form of a tree release (per key, vectorised over keys).

    ``update(noisy_nodes)`` is called once per closed base interval with, per layer that closes a
    node at this step, its released (noisy) value; ``get()`` is the running-count estimate. Memory
    and time O(c h) per key and step. With ``node_var`` the Honaker BLUE is used.
    """

    def __init__(self, *, c: int, height: int, keys: int, node_var: Sequence[float] | None = None):
        self.c = c
        self.height = height
        self.node_var = list(node_var) if node_var is not None else None
        self._v = honaker_variances(node_var, c=c) if node_var is not None else None
        self._n = 0
        # per layer: running sum of the estimates of the closed nodes of the open group
        self._group = np.zeros((height, keys))
        self._top = np.zeros(keys)

    def closing_layers(self) -> int:
        """How many layers close a node at the next step."""
        n, levels = self._n + 1, 1
        while levels < self.height and n % self.c == 0:
            n //= self.c
            levels += 1
        return levels

    def update(self, nodes: np.ndarray) -> None:
        """``nodes[l]`` (shape ``(layers_closing, keys)``): the noisy layer-l node closing now."""
        c = self.c
        layers = nodes.shape[0]
        est = nodes[0]
        for level in range(layers):
            if level > 0:
                child = self._group[level - 1]
                if self._v is not None and self.node_var is not None:
                    w = c * self._v[level - 1] / (self.node_var[level] + c * self._v[level - 1])
                    est = w * nodes[level] + (1 - w) * child
                else:
                    est = nodes[level]
                self._group[level - 1] = 0
            if level == self.height - 1:
                self._top += est
            else:
                self._group[level] += est
        self._n += 1

    def get(self) -> np.ndarray:
        out: np.ndarray = self._top + self._group[: self.height - 1].sum(axis=0)
        return out
