"""dpcr.accounting: privacy events, composition, the per-unit worst case, budget guards.

* :mod:`~dpcr.accounting.events` -- what a mechanism did (frozen event types).
* :mod:`~dpcr.accounting.composition` -- events to an additive cost and to (ε, δ): basic
  composition for pure DP, zCDP sums for Gaussians, the Canonne-Kamath-Steinke conversion.
* :mod:`~dpcr.accounting.guarantee` -- the worst unit of a release made in layers, from the
  plan's participation counts (accounting never imports plans); :class:`PrivacyFilter` (refuses
  releases over budget) and :class:`PrivacyOdometer` (loss so far).
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
from dpcr.accounting.guarantee import (
    Participation,
    PrivacyFilter,
    PrivacyOdometer,
    layered_guarantee,
)

__all__ = [
    "ComposedEvent",
    "DiscreteGaussianEvent",
    "DiscreteLaplaceEvent",
    "DpEvent",
    "Guarantee",
    "Participation",
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
    "layered_guarantee",
    "worst_guarantee",
    "zcdp_composition",
    "zcdp_delta",
    "zcdp_epsilon",
]
