"""Factorization mechanisms: multi-participation sensitivity vs exhaustive search; errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.linalg import toeplitz

from dpcr.plans.factorization import (
    BLT,
    brute_force_sensitivity2,
    rescaled_sqrt,
    series_inverse,
    sqrt_coefficients,
    toeplitz_sensitivity2,
    window_error2,
)


def lower(coeffs: np.ndarray) -> np.ndarray:
    return np.tril(toeplitz(coeffs))


BLT_SMALL = BLT(omega=(0.3, 0.1, 0.02), theta=(0.8, 0.99, 0.9995))


@pytest.mark.parametrize("T", [4, 7, 9])
@pytest.mark.parametrize("m", [1, 2, 3])
def test_sqrt_and_blt_sensitivity_exhaustive(T: int, m: int) -> None:
    for coeffs in (sqrt_coefficients(T), BLT_SMALL.c_coefficients(T)):
        C = lower(coeffs)
        exact = toeplitz_sensitivity2(coeffs, m)
        assert exact == pytest.approx(brute_force_sensitivity2(C, m, contiguous=False), rel=1e-12)
        assert exact == pytest.approx(brute_force_sensitivity2(C, m, contiguous=True), rel=1e-12)
    assert BLT_SMALL.sensitivity2(T, m) == pytest.approx(BLT_SMALL.sensitivity2_closed(T, m))


def test_sqrt_factorizes_prefix_sums() -> None:
    f = sqrt_coefficients(50)
    A = np.tril(np.ones((50, 50)))
    assert np.allclose(lower(f) @ lower(f), A)
    b = BLT_SMALL.noise_coefficients(50)
    assert np.allclose(lower(b) @ lower(BLT_SMALL.c_coefficients(50)), A)


def test_rescaled_sqrt_dense() -> None:
    T = 64
    r = rescaled_sqrt(T)
    C = np.diag(np.sqrt(r.u)) @ lower(sqrt_coefficients(T))
    assert np.allclose(np.linalg.norm(C, axis=0), 1.0)
    B = np.tril(np.ones((T, T))) @ np.linalg.inv(C)
    assert np.allclose((B**2).sum(axis=1), r.error2)
    # Cauchy-Schwarz bound for two participations holds
    assert brute_force_sensitivity2(C[:12, :12], 2, contiguous=False) <= 4 + 1e-12


def test_series_inverse() -> None:
    a = np.random.default_rng(1).random(300) / (np.arange(300) + 1.0) ** 2
    a[0] = 1.0
    inv = series_inverse(a, 300)
    assert np.allclose(np.convolve(a, inv)[:300], np.r_[1.0, np.zeros(299)])


def test_window_error_dense() -> None:
    T, w = 40, 7
    f = sqrt_coefficients(T)
    B = lower(f)
    D = B[T - 1] - np.r_[B[T - 1 - w], 0][:T] * 0 - B[T - 1 - w]
    assert window_error2(f, w) == pytest.approx(float(D @ D))


def test_known_constants() -> None:
    # docs/benchmarks.md, "Continual counting": sqrt Toeplitz 4.60 and row-rescaled 4.41 at T = 2^16
    T = 2**16
    f = sqrt_coefficients(T)
    assert math.sqrt(toeplitz_sensitivity2(f, 1) * float(f @ f)) == pytest.approx(4.596, abs=1e-3)
    assert math.sqrt(rescaled_sqrt(T).error2.max()) == pytest.approx(4.407, abs=1e-3)
