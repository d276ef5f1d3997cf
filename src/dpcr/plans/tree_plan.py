"""``[release] plan = "tree"``: a :class:`~dpcr.plans.tree.TreeRelease` and its estimator.

The tree itself (layers, closing nodes, privacy counts) is :mod:`dpcr.plans.tree`; this type adds
only what the pipeline needs on top: how released nodes become running totals (post-processing,
no privacy cost). ``"honaker"`` is the variance-optimal online estimator, ``"plain"`` sums the
canonical nodes (:mod:`dpcr.estimators.tree`).

>>> TreePlan(tree=TreeRelease(start=0, period=10)).estimator
'honaker'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dpcr.errors import ConfigError
from dpcr.plans.tree import TreeRelease

__all__ = ["ESTIMATORS", "TreePlan", "TreeRelease"]

ESTIMATORS = ("honaker", "plain")
Estimator = Literal["honaker", "plain"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TreePlan:
    tree: TreeRelease
    estimator: Estimator = "honaker"

    def __post_init__(self) -> None:
        if not isinstance(self.tree, TreeRelease):
            raise ConfigError(f"tree must be a TreeRelease, got {self.tree!r}")
        if self.estimator not in ESTIMATORS:
            raise ConfigError(
                f"release.estimator must be one of {list(ESTIMATORS)}, got {self.estimator!r}"
            )
