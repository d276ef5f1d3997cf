"""The float sums of the zCDP accountant (compositions of more than 64 distinct events) bound
the exact rational sums from above, and only just."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from dpcr.accounting._zcdp_acc import _float_cost
from dpcr.accounting.composition import PrivacyCost, cost_of
from dpcr.accounting.events import (
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    PureDpEvent,
    ZcdpEvent,
)


def _fraction(rng: random.Random) -> Fraction:
    return Fraction(rng.randint(1, 10**12), rng.randint(1, 10**12)) * Fraction(10) ** rng.randint(
        -8, 8
    )


def _event(rng: random.Random) -> object:
    kind = rng.randrange(6)
    if kind == 0:
        return DiscreteGaussianEvent(sigma2=_fraction(rng), sensitivity2=_fraction(rng))
    if kind == 1:
        return DiscreteLaplaceEvent(scale=_fraction(rng), sensitivity=_fraction(rng))
    if kind == 2:
        return GaussianEvent(sigma=rng.uniform(0.1, 1e3), sensitivity=rng.uniform(0.1, 10))
    if kind == 3:
        return LaplaceEvent(scale=rng.uniform(0.1, 1e3), sensitivity=rng.uniform(0.1, 10))
    if kind == 4:
        return PureDpEvent(epsilon=rng.uniform(0.0, 2.0))
    return ZcdpEvent(rho=rng.uniform(0.0, 2.0))


@pytest.mark.parametrize("seed", range(20))
def test_float_sums_bound_the_exact_sums(seed: int) -> None:
    rng = random.Random(seed)
    items = tuple((_event(rng), rng.randint(1, 1000)) for _ in range(rng.randint(65, 300)))
    exact = PrivacyCost()
    for e, c in items:
        exact = exact + cost_of(e).times(c)  # type: ignore[arg-type]
    approx = _float_cost(items)  # type: ignore[arg-type]
    for part in ("pure_epsilon", "pure_rho", "rho"):
        lo, hi = getattr(exact, part), getattr(approx, part)
        assert lo <= hi, part
        assert hi <= lo * (1 + Fraction(1, 10**9)) + Fraction(1, 10**300), part
