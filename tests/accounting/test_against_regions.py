"""Every accountant against the exact privacy profile of composed finite mechanisms.

The privacy-region code (dpcr.analysis.regions) composes the likelihood-ratio distribution of
k-ary randomized response exactly in rationals and reads ε(δ) off the exact profile (rounded
up). No composition method may report less. k-ary RR is symmetric, so the worst pair of
neighbouring inputs is the same at every step and the k-fold composition of one pair is the
exact k-fold guarantee.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpcr.accounting.accountants import compare, tightest
from dpcr.accounting.events import RandomizedResponseEvent, SelfComposedEvent
from dpcr.analysis.regions import loss_distribution, randomized_response

# e^ε = 3 exactly in the mechanism; the event's float ε is rounded up so it is never smaller.
RATIO = 3
EPSILON_UP = math.nextafter(math.log(RATIO), math.inf)
# A method that is exactly tight may land one float step under the exact value rounded up.
SLACK = 1e-12


@pytest.mark.parametrize("buckets", [2, 4])
@pytest.mark.parametrize("k", [1, 2, 5, 12])
@pytest.mark.parametrize("delta", [0.0, 1e-6, 1e-3, 0.05])
def test_no_method_reports_less_than_the_exact_profile(buckets: int, k: int, delta: float) -> None:
    mechanism = randomized_response(Fraction(RATIO, RATIO + buckets - 1), k=buckets)
    exact = loss_distribution(mechanism, 0, 1).power(k).profile().epsilon(delta)
    event = SelfComposedEvent(
        event=RandomizedResponseEvent(epsilon=EPSILON_UP, buckets=buckets), count=k
    )
    reported = {name: eps for name, eps in compare(event, delta=delta).items() if eps is not None}
    assert reported, "no method supports randomized response"
    for name, eps in reported.items():
        assert eps >= exact * (1 - SLACK), (name, eps, exact)
    best = tightest(event, delta=delta)
    assert best.epsilon >= exact * (1 - SLACK)
    # The tightest method is also close: PLD/KOV are exact for RR up to their grid.
    assert best.epsilon <= exact * 1.01 + 1e-9, (best, exact)


def test_vector_releases_are_not_accounted_as_one_dimensional() -> None:
    """A histogram's noise is a vector: the one-dimensional PLD/RDP curves must not be used (a
    Gaussian vector is accounted by its continuous surrogate, which is rotation invariant)."""
    from dpcr.accounting import _dg_coupling
    from dpcr.accounting.accountants import PldAccountant
    from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent

    scalar = DiscreteGaussianEvent(sigma2=Fraction(100), sensitivity2=Fraction(4))
    vector = DiscreteGaussianEvent(sigma2=Fraction(100), sensitivity2=Fraction(4), dimension=3)
    assert PldAccountant().supports(scalar) and PldAccountant().supports(vector)
    surrogate = _dg_coupling.surrogate(vector, 1)
    assert surrogate is not None
    gauss, gamma = surrogate
    via_surrogate = compare(gauss, delta=1e-6 * math.exp(-gamma))["pld"]
    assert via_surrogate is not None
    assert compare(vector, delta=1e-6)["pld"] == pytest.approx(via_surrogate + 2 * gamma, rel=1e-12)
    # zCDP (a sum over coordinates) still applies and gives the same ρ
    assert compare(vector, delta=1e-6)["zcdp"] == compare(scalar, delta=1e-6)["zcdp"]

    lap = DiscreteLaplaceEvent(scale=Fraction(2), sensitivity=Fraction(2), dimension=3)
    methods = compare(SelfComposedEvent(event=lap, count=10), delta=1e-6)
    # every method is at least the bound any ε-DP mechanism composed 10 times obeys (KOV)
    pure = compare(
        SelfComposedEvent(event=RandomizedResponseEvent(epsilon=1.0, buckets=2), count=10),
        delta=1e-6,
    )["optimal"]
    assert pure is not None
    for name, eps in methods.items():
        if eps is not None:
            assert eps >= pure * (1 - 1e-9), name
