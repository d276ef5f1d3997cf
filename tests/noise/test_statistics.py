"""Statistical tests of the samplers against their exact PMFs and the scalar oracles.

Fixed seeds (simulation_randomness) keep CI deterministic; the critical values are derived in
``_stats.py`` (ALPHA = 1e-8 per check, below 1e-6 for the whole suite). The last tests show the
checks have power: a sampler off by 5% in scale fails them.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpcr.noise import (
    categorical,
    discrete_gaussian,
    discrete_laplace,
    reference,
    secure_randomness,
    simulation_randomness,
)

from ._stats import binning, gaussian_pmf, goodness_of_fit, homogeneity, laplace_pmf

N = 200_000

LAPLACE_SCALES = [
    Fraction(1, 2),
    Fraction(1),
    Fraction(7, 3),
    Fraction(10),
    Fraction(12_345_678, 2**20),  # about 11.77, a caller-style denominator
    Fraction(1000),
    Fraction(10**4),
    Fraction(10**4 * 2**20 + 1, 2**20),
]
GAUSSIAN_SIGMA2 = [
    Fraction(1, 2),
    Fraction(1),
    Fraction(5, 2),
    Fraction(10),
    Fraction(123_456_789, 2**20),  # about 117.7
    Fraction(1000, 7),
    Fraction(10**3),
    Fraction(10**4),
]


def laplace_bins(scale: Fraction, n: int, bins: int = 60):  # type: ignore[no-untyped-def]
    reach = int(40 * float(scale)) + 40  # mass beyond: 2 e^-40 < 1e-17
    return binning(laplace_pmf(float(scale)), -reach, reach, n, bins)


def gaussian_bins(sigma2: Fraction, n: int, bins: int = 60):  # type: ignore[no-untyped-def]
    reach = int(10 * math.sqrt(sigma2)) + 10  # mass beyond 10 sigma: < 1e-22
    return binning(gaussian_pmf(float(sigma2)), -reach, reach, n, bins)


def residue_check(samples: np.ndarray, pmf_x: np.ndarray, xs: np.ndarray, m: int) -> None:
    """Chi-square of ``samples mod m`` against the exact residue masses (fine lattice structure,
    which equal-mass bins of a wide distribution cannot see)."""
    masses = np.bincount(xs % m, weights=pmf_x, minlength=m)
    masses /= masses.sum()
    observed = np.bincount(samples % m, minlength=m)
    expected = masses * samples.size
    stat = float(np.sum((observed - expected) ** 2 / expected))
    from ._stats import critical_value

    assert stat < critical_value(m - 1), (stat, m)


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_discrete_laplace_matches_pmf(scale: Fraction) -> None:
    x = discrete_laplace(scale, size=N, rng=simulation_randomness(101))
    stat, crit = goodness_of_fit(x, laplace_bins(scale, N))
    assert stat < crit
    if scale >= 10:
        reach = int(40 * float(scale)) + 40
        xs = np.arange(-reach, reach + 1)
        residue_check(x, laplace_pmf(float(scale))(xs), xs, 7)


@pytest.mark.parametrize("sigma2", GAUSSIAN_SIGMA2, ids=str)
def test_discrete_gaussian_matches_pmf(sigma2: Fraction) -> None:
    x = discrete_gaussian(sigma2, size=N, rng=simulation_randomness(202))
    stat, crit = goodness_of_fit(x, gaussian_bins(sigma2, N))
    assert stat < crit
    if sigma2 >= 100:
        reach = int(10 * math.sqrt(sigma2)) + 10
        xs = np.arange(-reach, reach + 1)
        residue_check(x, gaussian_pmf(float(sigma2))(xs), xs, 7)


def test_secure_generator_samples_match_pmf() -> None:
    scale, sigma2 = Fraction(5, 2), Fraction(40)
    rng = secure_randomness()
    x = discrete_laplace(scale, size=N, rng=rng)
    stat, crit = goodness_of_fit(x, laplace_bins(scale, N))
    assert stat < crit
    y = discrete_gaussian(sigma2, size=N, rng=rng)
    stat, crit = goodness_of_fit(y, gaussian_bins(sigma2, N))
    assert stat < crit


# --- the scalar oracles, and agreement of the vectorised samplers with them ----------------------

M = 20_000  # oracle draws are ~50 us each


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(7, 3), Fraction(50)], ids=str)
def test_oracle_laplace_matches_pmf_and_vectorised(scale: Fraction) -> None:
    rng = simulation_randomness(303)
    oracle = np.array([reference.discrete_laplace(scale, rng) for _ in range(M)])
    bins = laplace_bins(scale, M, bins=20)
    stat, crit = goodness_of_fit(oracle, bins)
    assert stat < crit
    fast = discrete_laplace(scale, size=N, rng=simulation_randomness(304))
    stat, crit = homogeneity(oracle, fast, bins)
    assert stat < crit


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(10, 3), Fraction(200)], ids=str)
def test_oracle_gaussian_matches_pmf_and_vectorised(sigma2: Fraction) -> None:
    rng = simulation_randomness(404)
    oracle = np.array([reference.discrete_gaussian(sigma2, rng) for _ in range(M)])
    bins = gaussian_bins(sigma2, M, bins=20)
    stat, crit = goodness_of_fit(oracle, bins)
    assert stat < crit
    fast = discrete_gaussian(sigma2, size=N, rng=simulation_randomness(405))
    stat, crit = homogeneity(oracle, fast, bins)
    assert stat < crit


@pytest.mark.parametrize(
    "gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(7, 2)], ids=str
)
def test_oracle_bernoulli_exp(gamma: Fraction) -> None:
    rng = simulation_randomness(505)
    hits = sum(reference.bernoulli_exp(gamma, rng) for _ in range(M))
    p = math.exp(-float(gamma))
    if p == 1:
        assert hits == M
        return
    # Binomial z-test, two-sided at 1e-8: |z| < 5.73 (= Phi^-1(1 - 5e-9)).
    z = (hits - M * p) / math.sqrt(M * p * (1 - p))
    assert abs(z) < 5.73


def test_oracle_geometric() -> None:
    rng = simulation_randomness(606)
    g = np.array([reference.geometric_exp(Fraction(1, 2), rng) for _ in range(M)])
    q = math.exp(-0.5)
    bins = binning(lambda x: (1 - q) * q ** x.astype(float), 0, 200, M, bins=20)
    stat, crit = goodness_of_fit(g, bins)
    assert stat < crit


# --- categorical ---------------------------------------------------------------------------------

CATEGORICAL = [
    [Fraction(1, 2), Fraction(1, 2)],
    [Fraction(1, 7), Fraction(2, 7), Fraction(4, 7)],
    [Fraction(1, 3), Fraction(0), Fraction(1, 6), Fraction(1, 2)],
    # A common denominator above 2**64: boundaries are compared beyond 64 bits on ties only.
    [Fraction(2**63 - 25, 2**64 - 59), Fraction(2**64 - 59 - (2**63 - 25), 2**64 - 59)],
    # Randomized response, k = 5 values, p = e^1 approximated as 2718281828/10**9.
    [Fraction(2718281828, 2718281828 + 4 * 10**9)] + [Fraction(10**9, 2718281828 + 4 * 10**9)] * 4,
]


@pytest.mark.parametrize("probs", CATEGORICAL, ids=lambda p: str(len(p)))
def test_categorical_matches_probabilities(probs: list[Fraction]) -> None:
    n = N
    x = categorical(probs, size=n, rng=simulation_randomness(707))
    support = [i for i, p in enumerate(probs) if p > 0]
    assert set(np.unique(x).tolist()) <= set(support)
    from ._stats import critical_value

    observed = np.bincount(x, minlength=len(probs))[support]
    expected = np.array([float(probs[i]) for i in support]) * n
    stat = float(np.sum((observed - expected) ** 2 / expected))
    assert stat < critical_value(len(support) - 1)


# --- power: the checks above fail a sampler with a wrong scale ------------------------------------


def test_checks_reject_a_laplace_sampler_with_a_wrong_scale() -> None:
    scale = Fraction(10)
    wrong = discrete_laplace(scale * Fraction(105, 100), size=N, rng=simulation_randomness(808))
    stat, crit = goodness_of_fit(wrong, laplace_bins(scale, N))
    assert stat > crit


def test_checks_reject_a_gaussian_sampler_with_a_wrong_scale() -> None:
    sigma2 = Fraction(100)
    wrong = discrete_gaussian(sigma2 * Fraction(110, 100), size=N, rng=simulation_randomness(909))
    stat, crit = goodness_of_fit(wrong, gaussian_bins(sigma2, N))
    assert stat > crit


def test_checks_reject_continuous_laplace_rounding() -> None:
    """Rounding a continuous Laplace(scale) is a different distribution from the discrete one."""
    scale = Fraction(1, 2)
    rounded = np.rint(np.random.default_rng(1).laplace(0, 0.5, N)).astype(np.int64)
    stat, crit = goodness_of_fit(rounded, laplace_bins(scale, N))
    assert stat > crit


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "param"), [("laplace", Fraction(7, 3)), ("gaussian", Fraction(10, 3))], ids=str
)
def test_oracle_agreement_with_more_oracle_draws(kind: str, param: Fraction) -> None:
    """As above with 5x the oracle draws (about 5 s each); by hand it detected a 3% error in the
    Laplace scale and a 5% error in sigma2."""
    m = 100_000
    rng = simulation_randomness(1001)
    if kind == "laplace":
        oracle = np.array([reference.discrete_laplace(param, rng) for _ in range(m)])
        fast = discrete_laplace(param, size=N, rng=simulation_randomness(1002))
        bins = laplace_bins(param, m, bins=30)
    else:
        oracle = np.array([reference.discrete_gaussian(param, rng) for _ in range(m)])
        fast = discrete_gaussian(param, size=N, rng=simulation_randomness(1002))
        bins = gaussian_bins(param, m, bins=30)
    stat, crit = homogeneity(oracle, fast, bins)
    assert stat < crit
