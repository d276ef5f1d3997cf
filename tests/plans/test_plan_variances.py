"""``plan.variances(layer_var, n)`` (what ``dpcr plan`` predicts) is the variance that
``plan.estimate`` publishes with the values, for every plan kind (exactly, or up to rounding for
a factorization, whose prediction uses FFTs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dpcr
from dpcr.plans import PLAN_TYPES

START = "2025-01-01T00:00:00Z"
PLANS: list[Any] = [
    dpcr.DisjointRelease(start=START, period="1d", end="2025-03-01T00:00:00Z"),
    dpcr.DisjointRelease(start=START, period="1d"),
    dpcr.TreeRelease(start=START, period="1d", end="2025-03-01T00:00:00Z"),
    dpcr.TreeRelease(start=START, period="1d", branching=3, estimator="plain"),
    dpcr.TreeRelease(start=START, period="1d", branching=4),
    dpcr.SlidingWindowRelease(start=START, window="3d", period="2d"),
    dpcr.FactorizationRelease(start=START, period="1d", horizon=59),
    dpcr.FactorizationRelease(start=START, period="1d", horizon=59, factorization="rescaled"),
    dpcr.FactorizationRelease(start=START, period="1d", horizon=None, factorization="blt"),
]


def test_every_plan_kind_is_covered() -> None:
    assert {p.kind for p in PLANS} == set(PLAN_TYPES)


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.describe()[:40])
@pytest.mark.parametrize("n", [1, 7, 59])
def test_variances_are_the_estimators(plan: Any, n: int) -> None:
    layer_var = [2.5 * (1.7**layer) for layer in range(70)]
    nodes = plan.due(0, n)
    var = {node: layer_var[node[0]] for node in {plan.instance(x) for x in nodes} | set(nodes)}
    zeros = {node: np.zeros(1, dtype=np.int64) for node in nodes}
    est = plan.estimate(zeros, var, n)
    change_var, estimate_var = plan.variances(layer_var, n)
    if plan.kind == "factorization":  # FFTs instead of forward substitution: up to rounding
        assert change_var == pytest.approx(est.change_var, rel=1e-12)
        assert estimate_var == pytest.approx(est.estimate_var, rel=1e-12)
    else:
        assert np.array_equal(change_var, est.change_var)
        assert np.array_equal(estimate_var, est.estimate_var)


@pytest.mark.parametrize("kind", ["sqrt", "rescaled"])
def test_long_factorization_variances_match(kind: str) -> None:
    n = 17_000  # past the estimator's forward-substitution limit (16,384)
    plan = dpcr.FactorizationRelease(start=START, period="1h", horizon=n, factorization=kind)
    var = {(0, t): 3.0 for t in range(1, n + 1)}
    zeros = {(0, t): np.zeros(1, dtype=np.int64) for t in range(1, n + 1)}
    est = plan.estimate(zeros, var, n)
    change_var, estimate_var = plan.variances([3.0], n)
    assert change_var == pytest.approx(est.change_var, rel=1e-9)
    assert estimate_var == pytest.approx(est.estimate_var, rel=1e-9)
