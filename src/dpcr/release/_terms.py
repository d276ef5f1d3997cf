"""The noise terms of every published row of a disjoint or tree plan, in closed form.

:func:`dpcr.release._uncertainty.row_intervals` needs, per published change and running value,
its noise as groups ``(|weight|, event id, copies)``. Probing the estimator with one unit vector
per node costs O(n²) time and memory over n reporting intervals (an hourly release over a year:
minutes and gigabytes on every run). For the plans whose estimator is known in closed form the
weights follow from the tree's shape alone, O(height²) per row, and are the very numbers the
probe computes (the same floating-point products, no sums of nonzero weights):

* disjoint intervals: the change of interval i is node i, the running value the sum of nodes
  1..i, every weight 1;
* sliding windows: the change and the window's value of release i are node i, weight 1;
* a c-ary tree (plain node sums or Honaker's bottom-up estimator): the change is the leaf; the
  running value after i base intervals sums, per layer l below the top, the ``(i // c^l) % c``
  closed nodes of the open group and, in the top layer, every closed node. Honaker's estimate of
  a layer-l node gives each layer-l' node of its subtree the weight
  ``(1 - w_l) (1 - w_{l-1}) ... (1 - w_{l'+1}) w_{l'}`` (``w_0 = 1``) of
  :func:`dpcr.estimators.tree.honaker_nodes`; the plain sum gives its own node 1.

Other plans (factorizations without their weight aggregates) are probed as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress
from operator import itemgetter
from typing import Any

import numpy as np

from dpcr._lastused import LastUsed
from dpcr.plans.base import Node

__all__ = ["CLOSED_FORM_KINDS", "closed_form_terms"]

#: The plan kinds whose rows' noise terms :func:`closed_form_terms` gives without probing.
CLOSED_FORM_KINDS = ("disjoint", "tree", "window")

Terms = tuple[tuple[float, int, int], ...]


def _layer_ids(nodes: Sequence[Node], ids: Any) -> dict[int, int] | None:
    """The event id of each layer, or None when a layer's nodes carry different events."""
    layer = np.fromiter(map(itemgetter(0), nodes), dtype=np.int64, count=len(nodes))
    ids = np.asarray(ids, dtype=np.int64)
    if layer.min() == layer.max():  # (one layer: a disjoint or window plan's)
        return {int(layer[0]): int(ids[0])} if ids.min() == ids.max() else None
    levels, first = np.unique(layer, return_index=True)
    out: dict[int, int] = {}
    for j in np.argsort(first, kind="stable"):  # (the layers in the order of their nodes)
        of = ids[layer == levels[j]]
        if of.min() != of.max():
            return None
        out[int(levels[j])] = int(of[0])
    return out


def closed_form_terms(
    plan: Any, nodes: Sequence[Node], variances: Mapping[Node, float], ids: Any, n: int,
    picked: Sequence[int],
) -> tuple[list[Terms], list[Terms]] | None:
    """Per picked row (0-based): the change's and the running value's terms, sorted as
    :func:`dpcr.release._uncertainty._terms` sorts them; None for a plan without a closed form
    (or nodes that are not exactly the plan's, or a layer with mixed events)."""
    kind = getattr(plan, "kind", None)
    if kind not in CLOSED_FORM_KINDS or not nodes:
        return None
    due = plan.due(0, n)
    if nodes != due and sorted(nodes) != sorted(due):  # (in the plan's order: not sorted)
        return None
    layer_id = _layer_ids(nodes, ids)
    if layer_id is None:
        return None
    if kind in ("disjoint", "window"):
        if set(layer_id) != {0}:
            return None
        e = layer_id[0]
        if kind == "window":  # each window's released node, alone
            return [((1.0, e, 1),) for _ in picked], [((1.0, e, 1),) for _ in picked]
        return [((1.0, e, 1),) for _ in picked], [((1.0, e, i + 1),) for i in picked]
    return _tree_terms(plan, variances, layer_id, n, picked)


def _coefficients(plan: Any, s: list[float], layers: int) -> list[list[float]]:
    """``coef[l][l']``: the weight of a layer-l' node in the estimate of a layer-l node."""
    from dpcr.estimators.tree import honaker_variances

    c = plan.branching
    coef = [[0.0] * layers for _ in range(layers)]
    if plan.estimator == "honaker" and min(s) > 0:
        v = honaker_variances(s, c=c)
        w = [1.0] + [c * v[lv - 1] / (float(s[lv]) + c * v[lv - 1]) for lv in range(1, layers)]
        for low in range(layers):
            x = w[low]
            coef[low][low] = x
            for high in range(low + 1, layers):
                x = (1.0 - w[high]) * x
                coef[high][low] = x
    else:
        for lv in range(layers):
            coef[lv][lv] = 1.0
    return coef


#: The terms of the trees used last, by everything they are computed from (a run computes its
#: rows' terms while it computes their intervals, and again to publish them): the
#: :data:`_TREES_KEPT` used last (an hourly year's rows: about 30 MB). The intervals of a
#: session's step are computed in a thread beside the step's (``dpcr.release._loop``), which
#: may still be computing while the next step's thread publishes: a :class:`~dpcr._lastused.
#: LastUsed` (the terms are computed outside its lock; two threads computing one tree's compute
#: the same terms).
_TREES_KEPT = 4
_TREE_TERMS: LastUsed[tuple[Any, ...], tuple[list[Terms], list[Terms]]] = LastUsed(_TREES_KEPT)


def _tree_terms(
    plan: Any, variances: Mapping[Node, float], layer_id: dict[int, int], n: int,
    picked: Sequence[int],
) -> tuple[list[Terms], list[Terms]] | None:
    c, layers = plan.branching, plan.layers(n)
    if sorted(layer_id) != list(range(layers)):
        return None
    s = [float(variances[(lv, 0)]) for lv in range(layers)]
    rows = (picked.start, picked.stop, picked.step) if isinstance(picked, range) else tuple(picked)
    key = (c, plan.estimator, layers, tuple(s), tuple(sorted(layer_id.items())), n, rows)
    known = _TREE_TERMS.made(key, lambda: _tree_terms_of(plan, s, layer_id, layers, picked))
    return known[0].copy(), known[1].copy()


def _tree_terms_of(
    plan: Any, s: list[float], layer_id: dict[int, int], layers: int, picked: Sequence[int],
) -> tuple[list[Terms], list[Terms]]:
    """:func:`_tree_terms`' computation: ``s`` is each layer's noise variance."""
    c = plan.branching
    coef = _coefficients(plan, s, layers)
    # the groups of one layer-l node's subtree: (|weight|, event) -> copies
    subtree: list[dict[tuple[float, int], int]] = []
    for high in range(layers):
        groups: dict[tuple[float, int], int] = {}
        for low in range(high + 1):
            x = abs(coef[high][low])
            if x != 0.0:
                key = (x, layer_id[low])
                groups[key] = groups.get(key, 0) + c ** (high - low)
        subtree.append(groups)
    # Row i (1-based) holds (i // c^lv) % c whole subtrees of layer lv (the top layer: every
    # one it has): its terms are those counts times the subtrees' copies, summed per group and
    # listed in the groups' order, for all rows at once.
    import numpy as np

    if not len(picked):
        return [], []
    keys = sorted({key for groups in subtree for key in groups})
    copies = np.zeros((layers, len(keys)), dtype=np.int64)
    for lv, groups in enumerate(subtree):
        for key, k in groups.items():
            copies[lv, keys.index(key)] = k
    i = np.asarray(picked, dtype=np.int64) + 1
    counts = np.stack([i // c**lv if lv == layers - 1 else (i // c**lv) % c
                       for lv in range(layers)], axis=1)  # fmt: skip
    totals = (counts @ copies).tolist()
    ws, es = [w for w, _ in keys], [e for _, e in keys]
    estimate: list[Terms] = [
        tuple(zip(compress(ws, row), compress(es, row), compress(row, row), strict=True))
        for row in totals
    ]
    leaf = ((1.0, layer_id[0], 1),)
    return [leaf] * len(estimate), estimate
