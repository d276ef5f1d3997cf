"""The PLD of a discrete Gaussian is bounded in time and memory: beyond DG_MAX_ATOMS atoms a
coarse pessimistic PLD (work proportional to the grid, not to σ) is used, and it is never below
the fine one nor the exact δ(ε) where both run; a leaf whose grid is absurdly large is left to
the other accountants."""

from __future__ import annotations

import itertools
import math
import time
import tracemalloc
from fractions import Fraction

import numpy as np
import pytest

from dpcr.accounting import _pld
from dpcr.accounting._grid import GridPld
from dpcr.accounting.accountants import PldAccountant, compare, stated_guarantee, tightest
from dpcr.accounting.composition import zcdp_epsilon
from dpcr.accounting.events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    PureDpEvent,
    SelfComposedEvent,
)

# (d, σ, h): the fine path runs for each (fewer than DG_MAX_ATOMS atoms)
GRID = [
    (d, s, h)
    for d, s, h in itertools.product(
        [1, 2, 5, 40], [20.0, 300.0, 2000.0, 5000.0], [1e-5, 1e-4, 1e-3, 1e-2]
    )
    if 2 * _pld._dg_support(d, s * s) + 1 <= _pld.DG_MAX_ATOMS
    and _pld._leaf_points(
        DiscreteGaussianEvent(sigma2=Fraction(s * s), sensitivity2=Fraction(d * d)), h
    )
    < 3e5
]


def _coarse(d: int, s2: float, h: float) -> GridPld:
    lo, masses, infinity = _pld._coarse_discrete_gaussian_pmf(d, Fraction(s2), h)
    return GridPld(h=h, lo=lo, probs=masses, infinity=infinity)


def _fine(d: int, s2: float, h: float) -> GridPld:
    event = DiscreteGaussianEvent(sigma2=Fraction(s2), sensitivity2=Fraction(d * d))
    return _pld._discrete_gaussian_pld(event, h)


def _exact_delta(d: int, s2: float, eps: float) -> float:
    """δ(ε) of the discrete Gaussian by summing every atom within 14σ (the rest < 1e-40)."""
    s = math.sqrt(s2)
    m = math.ceil(14 * s) + d
    xs = np.arange(-m, m + 1, dtype=np.float64)
    w = np.exp(-(xs * xs) / (2 * s2))
    w /= math.fsum(w)
    loss = (d * d - 2 * d * xs) / (2 * s2)
    return math.fsum(w * np.maximum(0.0, -np.expm1(eps - loss)))


@pytest.mark.parametrize(("d", "s", "h"), GRID)
def test_coarse_pld_is_never_below_the_fine_one_or_the_truth(d: int, s: float, h: float) -> None:
    s2 = s * s
    coarse, fine = _coarse(d, s2, h), _fine(d, s2, h)
    mu = d / s
    for eps in (0.0, 0.3 * mu, mu, 3 * mu, 6 * mu):
        got = coarse.get_delta_for_epsilon(eps)
        assert got >= _exact_delta(d, s2, eps)  # the truth: never below
        # the fine PLD inflates its masses by 1e-12 (its own float margin): compare to that
        assert got >= fine.get_delta_for_epsilon(eps) * (1 - 1e-11)
    for delta in (1e-3, 1e-6, 1e-10):
        ref = fine.get_epsilon_for_delta(delta)
        assert coarse.get_epsilon_for_delta(delta) >= ref * (1 - 1e-11)
    # composed: dp-accounting's FFT convolutions are accurate to about 1e-17 absolute (and
    # truncate tails below 1e-15), in both alike; compare to that precision
    c, f = coarse.self_compose(7), fine.self_compose(7)
    for eps in (0.0, 0.3 * mu * math.sqrt(7), mu * math.sqrt(7), 3 * mu * math.sqrt(7)):
        assert c.get_delta_for_epsilon(eps) >= f.get_delta_for_epsilon(eps) * (1 - 1e-6) - 1e-16


def test_coarse_pld_is_tight_where_it_is_used() -> None:
    """σ in the thousands (the coarse path's range): within 1e-5 of the fine PLD's δ."""
    for d, s, h in [(1, 5000.0, 1e-4), (3, 5000.0, 1e-5), (40, 2000.0, 1e-3)]:
        coarse, fine = _coarse(d, s * s, h), _fine(d, s * s, h)
        for eps in (0.0, d / s, 3 * d / s):
            ref = fine.get_delta_for_epsilon(eps)
            assert coarse.get_delta_for_epsilon(eps) <= ref * (1 + 1e-5) + 1e-15


def test_the_coarse_path_is_taken_only_beyond_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = _pld._coarse_discrete_gaussian_pmf

    def spy(d: int, sigma2: Fraction, h: float):  # type: ignore[no-untyped-def]
        calls.append(d)
        return real(d, sigma2, h)

    monkeypatch.setattr(_pld, "_coarse_discrete_gaussian_pmf", spy)
    # σ = 5,000: 2m + 1 = 118,005 atoms, below the cap
    _fine(1, 5000.0**2, 1e-4)
    assert calls == []
    # σ = 5,600: 2m + 1 = 132,165 atoms, above
    _fine(1, 5600.0**2, 1e-4)
    assert calls == [1]
    assert 2 * _pld._dg_support(1, 5000.0**2) + 1 <= _pld.DG_MAX_ATOMS
    assert 2 * _pld._dg_support(1, 5600.0**2) + 1 > _pld.DG_MAX_ATOMS


@pytest.mark.parametrize(
    "event",
    [
        # the candidate: a sqrt factorization's scaled (2^20) discrete Gaussian
        DiscreteGaussianEvent(sigma2=Fraction(37_000_000_000_000), sensitivity2=Fraction(2**40)),
        # small ρ: σ = 10^8
        DiscreteGaussianEvent(sigma2=Fraction(10**16), sensitivity2=Fraction(1)),
        # a sum over 10^9 grid steps at ε near 1
        DiscreteGaussianEvent(sigma2=Fraction(16 * 10**18), sensitivity2=Fraction(10**18)),
    ],
)
def test_huge_sigma_is_fast_and_small(event: DiscreteGaussianEvent) -> None:
    tracemalloc.start()  # numpy reports its arrays to tracemalloc
    start = time.process_time()
    try:
        for count in (1, 3, 100):
            composed = SelfComposedEvent(event=event, count=count)
            assert compare(composed, delta=1e-6)["pld"] is not None  # computed, not skipped
            g = tightest(composed, delta=1e-6)
            assert g.epsilon <= zcdp_epsilon(float(event.rho) * count, 1e-6)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.process_time() - start < 10  # about 0.2 s on a calm machine
    assert peak < 300 * 2**20  # the fine PLD wanted 27 GiB for the first


def test_a_grid_beyond_every_cap_leaves_the_guarantee_to_the_other_methods() -> None:
    # μ = d/σ = 10^6: a loss range of 10^13 grid steps
    event = DiscreteGaussianEvent(sigma2=Fraction(1), sensitivity2=Fraction(10**12))
    assert compare(event, delta=1e-6)["pld"] is None
    assert tightest(event, delta=1e-6).method in ("zcdp", "rdp")
    assert math.isinf(PldAccountant()._epsilon(((event, 1),), 1e-6))


def test_discrete_laplace_with_a_huge_sensitivity_is_accounted_as_pure_epsilon() -> None:
    """dp-accounting's exact discrete Laplace PLD loops over the sensitivity (10^9 here):
    beyond DL_MAX_SENSITIVITY the leaf is its pure ε (binary randomized response dominates)."""
    big = DiscreteLaplaceEvent(scale=Fraction(10**9), sensitivity=Fraction(10**9))  # ε = 1
    mixed = ComposedEvent(events=(big, PureDpEvent(epsilon=0.5)))
    start = time.process_time()
    g = stated_guarantee(ComposedEvent(events=(mixed, _approx())), delta=1e-6)
    assert time.process_time() - start < 5
    assert 1.0 < g.epsilon <= 1.6 * (1 + 1e-9)


def _approx():  # type: ignore[no-untyped-def]
    from dpcr.accounting.events import ApproxDpEvent

    return ApproxDpEvent(epsilon=0.1, delta=1e-9)
