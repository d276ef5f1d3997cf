"""dpcr.accounting: privacy events, composition, the per-unit worst case, budget guards.

* :mod:`~dpcr.accounting.events` -- what a mechanism did (frozen event types).
* :mod:`~dpcr.accounting.composition` -- events to an additive cost and to (ε, δ): basic
  composition for pure DP, zCDP sums for Gaussians, the Canonne-Kamath-Steinke conversion.
* :mod:`~dpcr.accounting.per_unit` -- the worst privacy unit of a disjoint continual release
  (paper Eq. 17-18): at most k, time-bounded (MostSpan), hybrid.
* :mod:`~dpcr.accounting.filters` -- :class:`PrivacyFilter` (refuses releases over budget) and
  :class:`PrivacyOdometer` (loss so far).
"""

from dpcr.accounting.composition import (
    Guarantee,
    PrivacyCost,
    basic_composition,
    compose,
    cost_of,
    epsilon_of,
    guarantee_of_cost,
    worst_guarantee,
    zcdp_composition,
    zcdp_delta,
    zcdp_epsilon,
)
from dpcr.accounting.events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    PureDpEvent,
    SelfComposedEvent,
    ZcdpEvent,
)
from dpcr.accounting.filters import PrivacyFilter, PrivacyOdometer
from dpcr.accounting.per_unit import (
    PlanGuarantee,
    per_class_guarantees,
    per_unit_guarantee,
    plan_guarantee,
)

__all__ = [
    "ComposedEvent",
    "DiscreteGaussianEvent",
    "DiscreteLaplaceEvent",
    "DpEvent",
    "Guarantee",
    "PlanGuarantee",
    "PrivacyCost",
    "PrivacyFilter",
    "PrivacyOdometer",
    "PureDpEvent",
    "SelfComposedEvent",
    "ZcdpEvent",
    "basic_composition",
    "compose",
    "cost_of",
    "epsilon_of",
    "guarantee_of_cost",
    "per_class_guarantees",
    "per_unit_guarantee",
    "plan_guarantee",
    "worst_guarantee",
    "zcdp_composition",
    "zcdp_delta",
    "zcdp_epsilon",
]
