"""Chi-square helpers with derived critical values for the statistical tests.

Critical values. Under H0 the Pearson statistic of a k-bin goodness-of-fit test is asymptotically
chi-square with k - 1 degrees of freedom (two-sample homogeneity on k bins: also k - 1). Each check
rejects when the statistic exceeds the upper ALPHA quantile ``chi2.isf(ALPHA, df)``. With
ALPHA = 1e-8 per check and fewer than 100 checks in the noise suite, the union bound gives a
suite-wide false-failure probability below 100 * 1e-8 = 1e-6. For example df = 1 gives 32.84,
df = 30 gives 95.33 and df = 60 gives 142.97 (cross-check, Wilson-Hilferty:
df * (1 - 2/(9 df) + z sqrt(2/(9 df)))**3 with z = 5.612 = Phi^-1(1 - 1e-8) gives 96.4 and 143.7
for df = 30 and 60; for df = 1, chi2 = Z**2 gives z(5e-9)**2 = 5.73**2 = 32.8). Every bin has an
expected count of at least MIN_EXPECTED = 50, where the chi-square approximation of the tail is
good; the pooled end bins carry the whole infinite tails, so no mass is dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2

ALPHA = 1e-8
MIN_EXPECTED = 50.0


def critical_value(df: int) -> float:
    return float(chi2.isf(ALPHA, df))


@dataclass(frozen=True, slots=True, kw_only=True)
class Binning:
    """Bins (-inf, c_1], (c_1, c_2], ..., (c_{k-1}, inf) of the integers, with exact masses."""

    cuts: np.ndarray  # c_1 < ... < c_{k-1}, int64
    masses: np.ndarray  # k masses summing to 1

    def counts(self, samples: np.ndarray) -> np.ndarray:
        index = np.searchsorted(self.cuts, samples, side="left")
        return np.bincount(index, minlength=self.cuts.size + 1)


def binning(
    pmf: Callable[[np.ndarray], np.ndarray], lo: int, hi: int, n: int, bins: int = 60
) -> Binning:
    """Equal-mass bins for a PMF whose mass outside ``[lo, hi]`` is negligible (< 1e-12), each
    with expected count >= MIN_EXPECTED for ``n`` samples. The end bins pool the tails."""
    xs = np.arange(lo, hi + 1, dtype=np.int64)
    p = pmf(xs)
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    bins = max(2, min(bins, int(n / (2 * MIN_EXPECTED))))
    levels = np.arange(1, bins) / bins
    cuts = np.unique(xs[np.searchsorted(cdf, levels)])
    # Merge until every bin has the minimum expected count.
    while True:
        upper = np.concatenate([cdf[np.searchsorted(xs, cuts)], [1.0]])
        masses = np.diff(np.concatenate([[0.0], upper]))
        small = np.flatnonzero(masses * n < MIN_EXPECTED)
        if small.size == 0 or cuts.size == 0:
            return Binning(cuts=cuts, masses=masses)
        i = int(small[0])
        cuts = np.delete(cuts, min(i, cuts.size - 1))


def goodness_of_fit(samples: np.ndarray, bins: Binning) -> tuple[float, float]:
    """(Pearson statistic, critical value) of ``samples`` against the exact bin masses."""
    observed = bins.counts(samples)
    expected = bins.masses * samples.size
    stat = float(np.sum((observed - expected) ** 2 / expected))
    return stat, critical_value(bins.masses.size - 1)


def homogeneity(a: np.ndarray, b: np.ndarray, bins: Binning) -> tuple[float, float]:
    """(Pearson statistic, critical value) of the two-sample test that a and b share a law."""
    table = np.vstack([bins.counts(a), bins.counts(b)]).astype(np.float64)
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    stat = float(np.sum((table - expected) ** 2 / expected))
    return stat, critical_value(bins.masses.size - 1)


def laplace_pmf(scale: float) -> Callable[[np.ndarray], np.ndarray]:
    def pmf(x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.tanh(0.5 / scale) * np.exp(-np.abs(x) / scale)
        return out

    return pmf


def gaussian_pmf(sigma2: float) -> Callable[[np.ndarray], np.ndarray]:
    reach = int(40 * np.sqrt(sigma2)) + 2
    grid = np.arange(-reach, reach + 1, dtype=np.float64)
    z = float(np.sum(np.exp(-(grid**2) / (2 * sigma2))))

    def pmf(x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.exp(-(x.astype(np.float64) ** 2) / (2 * sigma2)) / z
        return out

    return pmf
