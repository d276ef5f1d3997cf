"""Exact privacy of discrete Gaussian pairs with integer shifts, every output summed (an oracle
for tests/accounting/test_dg_coupling.py and tests/release/test_gaussian_calibration.py)."""

from __future__ import annotations

import math

import numpy as np


def dg_pmf(s2: float) -> tuple[np.ndarray, np.ndarray]:
    """Atoms |x| <= 14σ + 2 of N_Z(0, σ²) and their masses, normalised over those atoms (each an
    over-estimate; the mass left out is below 2e^{-98})."""
    m = math.ceil(14 * math.sqrt(s2)) + 2
    x = np.arange(-m, m + 1)
    w = np.exp(-(x * x) / (2 * s2))
    return x, w / math.fsum(w)


def exact_delta(s2: float, shift: tuple[int, ...], eps: float) -> float:
    """δ(ε) of N_Z(0, σ²)^d against N_Z(shift, σ²)^d, summed over every output: the loss
    (|μ|² − 2⟨μ, y⟩)/(2σ²) depends on y through W = ⟨μ, y⟩ only, whose law is the exact
    convolution of the laws of μ_j Y_j (nonnegative terms: a few ulps of relative error)."""
    x, p = dg_pmf(s2)
    m = int(x[-1])
    dist, lo = np.array([1.0]), 0
    for mu in shift:
        a = abs(mu)
        new = np.zeros(len(dist) + 2 * m * a)
        for xi, pi in zip(x, p, strict=True):
            off = int(xi) * mu + m * a
            new[off : off + len(dist)] += pi * dist
        dist, lo = new, lo - m * a
    w = lo + np.arange(len(dist))
    norm2 = sum(mu * mu for mu in shift)
    loss = (norm2 - 2 * w) / (2 * s2)
    keep = loss > eps
    return math.fsum(dist[keep] * -np.expm1(eps - loss[keep])) + len(shift) * 2 * math.exp(-98)
