"""zCDP accounting: exact sums of pure ε and of ρ, converted (see :mod:`.composition`)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpcr.accounting._accountant_base import Accountant, Leaf, Multiset
from dpcr.accounting.composition import (
    Guarantee,
    PrivacyCost,
    cost_of,
    guarantee_of_cost,
    round_up,
)
from dpcr.accounting.events import (
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
)
from dpcr.errors import ConfigError, UnsupportedEventError


def _float_cost(items: Multiset) -> PrivacyCost:
    """Σ of the additive costs in floats, rounded outward: an upper bound on the exact sums.

    Laplace and Gaussian terms (continuous and discrete) are computed in numpy (each term has at
    most a few ulps of relative error, and ``math.fsum`` rounds the sum correctly), then every
    part is multiplied by 1 + 2^-40, far more than the accumulated relative error; other events
    use their exact cost rounded up.
    """
    up = 1 + 2.0**-40
    eps: list[float] = []
    rho: list[float] = []
    counts_e: list[int] = []
    counts_r: list[int] = []
    pe: list[float] = []
    pr: list[float] = []
    rr: list[float] = []
    for e, c in items:
        if isinstance(e, LaplaceEvent):
            eps.append(e.sensitivity / e.scale)
            counts_e.append(c)
        elif isinstance(e, GaussianEvent):
            rho.append((e.sensitivity / e.sigma) ** 2 / 2)
            counts_r.append(c)
        elif isinstance(e, DiscreteLaplaceEvent) and (q := _ratio(e.sensitivity, e.scale)):
            eps.append(q)
            counts_e.append(c)
        elif isinstance(e, DiscreteGaussianEvent) and (
            q := _ratio(e.sensitivity2, 2 * e.sigma2)
        ):
            rho.append(q)
            counts_r.append(c)
        else:
            cost = cost_of(e).times(c)
            pe.append(round_up(cost.pure_epsilon))
            pr.append(round_up(cost.pure_rho))
            rr.append(round_up(cost.rho))
    if eps:
        ev, cv = np.asarray(eps), np.asarray(counts_e, dtype=float)
        pe.extend((ev * cv).tolist())
        pr.extend((ev * ev * cv / 2).tolist())
    if rho:
        rr.extend((np.asarray(rho) * np.asarray(counts_r, dtype=float)).tolist())
    return PrivacyCost(
        pure_epsilon=Fraction(math.fsum(pe) * up),
        pure_rho=Fraction(math.fsum(pr) * up),
        rho=Fraction(math.fsum(rr) * up),
    )


def _ratio(num: Fraction, den: Fraction) -> float:
    """``num / den`` in floats (each conversion correctly rounded, the quotient within an ulp:
    inside the margin of :func:`_float_cost`); 0.0 when it leaves the normal float range (the
    caller then takes the exact cost)."""
    q = float(num) / float(den)
    return q if 1e-300 < q < 1e300 else 0.0


class ZcdpAccountant(Accountant):
    """Σ ε of pure events and Σ ρ of zCDP events, converted (see :mod:`.composition`)."""

    name = "zcdp"

    def _supports_leaf(self, e: Leaf) -> bool:
        if isinstance(e, LaplaceEvent | GaussianEvent):  # validated on construction
            return True
        try:
            cost_of(e)
        except UnsupportedEventError:
            return False
        return True

    def _guarantee(self, items: Multiset, delta: float) -> Guarantee:
        if len(items) <= 64:  # exact rational sums
            total = PrivacyCost()
            for e, c in items:
                total = total + cost_of(e).times(c)
            return guarantee_of_cost(total, delta=delta)
        return guarantee_of_cost(_float_cost(items), delta=delta)

    def _epsilon(self, items: Multiset, delta: float) -> float:
        try:
            return self._guarantee(items, delta).epsilon
        except ConfigError:  # zCDP part with δ = 0
            return math.inf
