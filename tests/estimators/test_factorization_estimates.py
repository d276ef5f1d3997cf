"""Estimates of the integer factorization plan: exact without noise; exact variances vs Monte
Carlo with a derived tolerance."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpcr.accounting.events import DiscreteGaussianEvent
from dpcr.estimators.factorization import (
    factorization_prefix_estimates as prefix_estimates,
)
from dpcr.estimators.factorization import (
    factorization_prefix_variances as prefix_variances,
)
from dpcr.estimators.factorization import (
    factorization_window_estimates as window_estimates,
)
from dpcr.estimators.factorization import (
    factorization_window_variances as window_variances,
)
from dpcr.mechanisms import noise_variance
from dpcr.noise import discrete_gaussian, simulation_randomness
from dpcr.plans.factorization_plan import integer_sqrt_coefficients


def mix(x: np.ndarray, c: list[int]) -> np.ndarray:
    return np.stack([np.convolve(x[:, k], c)[: x.shape[0]] for k in range(x.shape[1])], axis=1)


@pytest.mark.parametrize("scale", [1, 5, 1 << 20])
def test_without_noise_estimates_are_the_running_totals(scale: int) -> None:
    rng = np.random.default_rng(1)
    T = 300
    x = rng.integers(-50, 50, size=(T, 3))
    c = integer_sqrt_coefficients(T, scale=scale)
    est = prefix_estimates(mix(x, c), c)
    np.testing.assert_allclose(est, np.cumsum(x, axis=0), atol=1e-6)
    np.testing.assert_allclose(
        window_estimates(est, 7)[7:], (np.cumsum(x, 0)[7:] - np.cumsum(x, 0)[:-7]), atol=1e-6
    )
    np.testing.assert_allclose(window_estimates(est, 1), x, atol=1e-6)


def test_exact_variances_vs_monte_carlo() -> None:
    """x = 0, y = z ~ discrete Gaussian (sigma^2 = 50, scale 16, T = 12). Four checks (prefix at
    t = 1 and T, windows of 1 and 4 at T), each of a linear combination of independent discrete
    Gaussians: kurtosis 3 up to e^{-2 pi^2 50}, so the mean of squares of N draws (the mean 0 is
    known) has sd sigma^2 sqrt(2 / N) and is near normal at N = 40000. Two-sided 1e-6 / 4 per check:
    z = 5.26. (Fixed seed: the test is deterministic; the tolerance is what makes it honest.)"""
    T, N, scale = 12, 40_000, 16
    c = integer_sqrt_coefficients(T, scale=scale)
    sigma2 = Fraction(50)
    rng = simulation_randomness(2024)
    z = discrete_gaussian(sigma2, T * N, rng).reshape(T, N)
    est = prefix_estimates(z, c)
    var = noise_variance(DiscreteGaussianEvent(sigma2=sigma2, sensitivity2=Fraction(1)))
    assert var == pytest.approx(50.0, rel=1e-12)
    pv = prefix_variances(c, var, T)
    checks = [
        (est[0], pv[0]),
        (est[-1], pv[-1]),
        (window_estimates(est, 1)[-1], window_variances(c, var, T, 1)[-1]),
        (window_estimates(est, 4)[-1], window_variances(c, var, T, 4)[-1]),
    ]
    tol = 5.26 * math.sqrt(2 / N)
    for sample, exact in checks:
        got = float(np.mean(sample**2))  # mean 0 is known exactly (symmetric noise)
        assert abs(got / exact - 1) <= tol, (got, exact)
    # exact variance at t = 1: noise / scale^2
    assert pv[0] == pytest.approx(var / scale**2)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n", [1, 2, 5, 37, 600])
def test_weight_stats_are_those_of_the_explicit_weights(n: int, weighted: bool) -> None:
    """Each row's sum of squares, largest |weight|, nonzero count and integrality equal those
    of the explicit weight matrix (change: inv_{t-j} / q_j; running total: b_{t-j} / q_j)."""
    from dpcr.estimators.factorization import factorization_weight_stats, inverse_coefficients
    from dpcr.plans.factorization_plan import integer_sqrt_coefficients

    coeffs = integer_sqrt_coefficients(n, scale=1 << 12)
    rng = np.random.default_rng(n)
    q = rng.integers(1, 4, size=n).tolist() if weighted else None
    inv = inverse_coefficients(coeffs[:n])
    for f, stats in zip((inv, np.cumsum(inv)),
                        factorization_weight_stats(coeffs, n, weights=q), strict=True):  # fmt: skip
        qq = np.ones(n) if q is None else np.asarray(q, dtype=float)
        w = np.array([[f[t - j] / qq[j] if j <= t else 0.0 for j in range(n)]
                      for t in range(n)])  # fmt: skip
        np.testing.assert_allclose(stats.sum_sq, (w * w).sum(axis=1), rtol=1e-12)
        assert np.array_equal(stats.max_abs, np.abs(w).max(axis=1))
        assert np.array_equal(stats.count, (w != 0).sum(axis=1))
        assert np.array_equal(stats.integer, np.all(w == np.floor(w), axis=1))
