"""Release plans: disjoint intervals (DCR), trees (HDCR), sliding windows (SWCR) and the exact
factorizations (square root, row-rescaled square root, BLT); each implements the plan protocol
of :mod:`dpcr.plans.base`.

:data:`PLAN_TYPES` maps the ``[release] plan`` name of the configuration to its type.
"""

from __future__ import annotations

from dpcr.plans.base import Budgeting, Estimates, LayerBudget, Node, Plan
from dpcr.plans.dcr import DisjointRelease
from dpcr.plans.factorization_plan import FactorizationRelease
from dpcr.plans.tree import TreeRelease
from dpcr.plans.window import SlidingWindowRelease

ReleasePlan = DisjointRelease | TreeRelease | SlidingWindowRelease | FactorizationRelease

PLAN_TYPES: dict[str, type[ReleasePlan]] = {
    "disjoint": DisjointRelease,
    "tree": TreeRelease,
    "window": SlidingWindowRelease,
    "factorization": FactorizationRelease,
}


def plan_identity(plan: ReleasePlan) -> str:
    """The text a store's fingerprint binds for ``plan`` (stable across versions of dpcr: a tree
    is written as it was when its estimator lived in a wrapper type, a factorization under its
    earlier type name, so stores written then keep working)."""
    if isinstance(plan, TreeRelease):
        tree = (
            f"TreeRelease(start={plan.start!r}, period={plan.period!r}, "
            f"branching={plan.branching!r}, height={plan.height!r}, end={plan.end!r})"
        )
        return f"TreePlan(tree={tree}, estimator={plan.estimator!r})"
    if isinstance(plan, FactorizationRelease):
        text = repr(plan).replace("FactorizationRelease(", "FactorizationPlan(", 1)
        text = text.replace(", fit_participations=1)", ")")  # as before fitted BLTs for m > 1
        if plan.factorization == "sqrt":  # as before the planning horizon existed
            return text.replace(", planning_horizon=None)", ")")
        return f"{text} sha256={plan.digest()}"  # the integer matrix itself
    return repr(plan)


__all__ = [
    "PLAN_TYPES",
    "Budgeting",
    "DisjointRelease",
    "Estimates",
    "FactorizationRelease",
    "LayerBudget",
    "Node",
    "Plan",
    "ReleasePlan",
    "SlidingWindowRelease",
    "TreeRelease",
    "plan_identity",
]
