"""dpcr.release._terms.closed_form_terms takes the nodes in any order (the plan's order is
compared first, sorted otherwise), gives the probe's terms for a disjoint plan, and none for
nodes that are not the plan's or a layer whose nodes carry different events."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from dpcr.accounting.events import DiscreteLaplaceEvent
from dpcr.mechanisms import noise_variance
from dpcr.plans import DisjointRelease, TreeRelease
from dpcr.release._terms import closed_form_terms
from dpcr.release._uncertainty import _terms, estimator_weights


def _probe(plan: Any, nodes: Any, var: Any, ids: Any, n: int) -> tuple[list[Any], list[Any]]:
    change_w, est_w = estimator_weights(plan, nodes, var, n)
    return [_terms(change_w[i], ids) for i in range(n)], [_terms(est_w[i], ids) for i in range(n)]


def _inputs(plan: Any, n: int) -> tuple[list[Any], dict[Any, float], np.ndarray]:
    nodes = plan.due(0, n)
    event = DiscreteLaplaceEvent(scale=Fraction(7, 2), sensitivity=Fraction(1))
    return nodes, {node: noise_variance(event) for node in nodes}, np.zeros(len(nodes), np.int64)


def test_disjoint_nodes_in_any_order() -> None:
    n = 23
    plan = DisjointRelease(start=0, period=10**6)
    nodes, var, ids = _inputs(plan, n)
    terms = closed_form_terms(plan, nodes, var, ids, n, range(n))
    assert terms is not None
    assert list(terms) == list(_probe(plan, nodes, var, ids, n))
    backwards = nodes[::-1]
    assert closed_form_terms(plan, backwards, var, ids, n, range(n)) == terms
    assert closed_form_terms(plan, tuple(nodes), var, ids, n, range(n)) == terms
    assert closed_form_terms(plan, nodes[:-1], var, ids[:-1], n, range(n)) is None
    assert closed_form_terms(plan, [*nodes, (0, n)], var, np.zeros(n + 1, np.int64), n,
                             range(n)) is None  # fmt: skip
    mixed = ids.copy()
    mixed[5] = 1
    assert closed_form_terms(plan, nodes, var, mixed, n, range(n)) is None


def test_a_tree_layer_with_mixed_events_has_no_closed_form() -> None:
    n = 19
    plan = TreeRelease(start=0, period=10**6, branching=2, estimator="honaker")
    nodes, var, _ = _inputs(plan, n)
    ids = np.array([node[0] for node in nodes], dtype=np.int64)
    terms = closed_form_terms(plan, nodes, var, ids, n, range(n))
    assert terms is not None and list(terms) == list(_probe(plan, nodes, var, ids, n))
    assert closed_form_terms(plan, nodes[::-1], var, ids[::-1], n, range(n)) is not None
    mixed = ids.copy()
    mixed[[i for i, node in enumerate(nodes) if node[0] == 0][3]] = 99
    assert closed_form_terms(plan, nodes, var, mixed, n, range(n)) is None
