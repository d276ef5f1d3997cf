"""Frequency oracles: one report of one categorical value under ε-LDP, with exact probabilities.

``ratio`` is the exact rational likelihood-ratio bound e^ε' of one report, chosen by
:func:`exp_ratio` as a rational at most e^ε, so every probability is an exact Fraction and the
guarantee never exceeds the nominal ε.

* :class:`GeneralizedRR` (k-ary randomized response, paper Eq. 34): the true value with
  probability ``p = r / (k - 1 + r)``, each other value with ``q = 1 / (k - 1 + r)``.
* :class:`UnaryEncoding` (optimized unary encoding, Wang et al. 2017): k independent bits, the true
  value's bit is 1 with probability ``p = 1/2``, every other bit with ``q = 1 / (1 + r)``.

Both estimate counts by ``ĉ = (C - n q) / (p - q)`` from output counts ``C`` of ``n`` reports.
Covariance (docs/errata.md, erratum 8, not the paper's Eq. 54): output counts of independent
reports have ``Cov(C) = Σ_x (diag(p_x) - p_x p_xᵀ)`` with ``p_x`` the output probabilities of
report x (for unary encoding only the diagonal, ``Σ_x p_xj (1 - p_xj)``). The plug-in
``n (diag(p̂) - p̂ p̂ᵀ)`` with ``p̂ = C / n`` is a conservative estimate of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcr.errors import ConfigError
from dpcr.noise import Randomness, categorical

__all__ = ["GeneralizedRR", "UnaryEncoding", "exp_ratio"]

_DEN = 1 << 32


def exp_ratio(epsilon: float) -> Fraction:
    """A rational ``r`` with ``1 < r <= e^epsilon`` (denominator 2**32, rounded down with margin).

    >>> float(exp_ratio(1.0)) <= math.e
    True
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ConfigError(f"epsilon must be finite and > 0, got {epsilon!r}")
    num = math.floor(math.exp(epsilon) * _DEN) - 2  # float exp is within an ulp; keep 2/2^32 margin
    if num <= _DEN:
        raise ConfigError(
            f"epsilon = {epsilon!r} is too small to represent (needs e^ε > 1 + 2^-31)"
        )
    return Fraction(num, _DEN)


def _bernoulli(prob: Fraction, size: int, rng: Randomness) -> np.ndarray:
    """``size`` exact Bernoulli(prob) bits (uint8) through the seam."""
    return np.asarray((categorical([1 - prob, prob], size, rng) == 1).astype(np.uint8))


def numpy_generator(rng: Randomness) -> np.random.Generator:
    """A numpy generator seeded from the seam (for aggregate simulation of many reports only)."""
    return np.random.Generator(np.random.PCG64([int(w) for w in rng.uniform_uint64(4)]))


def _check_oracle(categories: int, ratio: Fraction) -> None:
    """An oracle needs an integer number of categories >= 2 and a rational e^ε > 1."""
    if isinstance(categories, bool) or not isinstance(categories, int):
        raise ConfigError(f"categories must be an int >= 2, got {categories!r}")
    if categories < 2:
        raise ConfigError(f"categories must be >= 2, got {categories}")
    if not isinstance(ratio, Fraction) or ratio <= 1:
        raise ConfigError(f"ratio must be a Fraction > 1, got {ratio!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class GeneralizedRR:
    """k-ary randomized response with likelihood-ratio bound ``ratio`` (= e^ε)."""

    categories: int
    ratio: Fraction

    def __post_init__(self) -> None:
        _check_oracle(self.categories, self.ratio)

    @property
    def p(self) -> Fraction:
        return self.ratio / (self.categories - 1 + self.ratio)

    @property
    def q(self) -> Fraction:
        return 1 / (self.categories - 1 + self.ratio)

    def output_probabilities(self, value: int) -> list[Fraction]:
        """Exact distribution of one report of ``value``."""
        return [self.p if j == value else self.q for j in range(self.categories)]

    def max_ratio(self, a: int, b: int) -> Fraction:
        """Exact sup over outputs of P[o | a] / P[o | b], by enumerating the outputs."""
        pa, pb = self.output_probabilities(a), self.output_probabilities(b)
        return max(x / y for x, y in zip(pa, pb, strict=True))

    def randomize(self, values: np.ndarray, rng: Randomness) -> np.ndarray:
        """One exact report per value: keep with probability p, else uniform over the others."""
        values = np.asarray(values, dtype=np.int64)
        keep = _bernoulli(self.p, values.size, rng).astype(bool)
        other = rng.integers(self.categories - 1, values.size)
        other += other >= values  # skip the true value
        return np.where(keep, values, other)

    def tally(self, reports: np.ndarray) -> np.ndarray:
        return np.bincount(np.asarray(reports, dtype=np.int64), minlength=self.categories)

    def simulate_counts(self, true_counts: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        """Output counts of reports of ``true_counts[j]`` entries with value j (same law as
        :meth:`randomize` then :meth:`tally`)."""
        k = self.categories
        true_counts = np.asarray(true_counts, dtype=np.int64)
        kept = gen.binomial(true_counts, float(self.p))
        moved = gen.multinomial(true_counts - kept, np.full(k - 1, 1.0 / (k - 1)))  # (k, k-1)
        out = kept.copy()
        for j in np.flatnonzero(true_counts - kept):  # row j: targets skip j
            out[:j] += moved[j, :j]
            out[j + 1 :] += moved[j, j:]
        return out

    def debias(self, counts: np.ndarray, n: int) -> np.ndarray:
        p, q = float(self.p), float(self.q)
        return (np.asarray(counts, dtype=float) - n * q) / (p - q)

    def linear_variance(self, weights: np.ndarray, true_counts: np.ndarray) -> np.ndarray:
        """Exact variance of ``weights @ debias(C)`` for each row of ``weights`` (erratum 8).

        ``aᵀ Σ_x (diag(p_x) - p_x p_xᵀ) a = Σ_m n_m (Σ_j a_j² p_mj - (aᵀ p_m)²)``.
        """
        a = np.atleast_2d(np.asarray(weights, dtype=float))
        n_m = np.asarray(true_counts, dtype=float)
        p, q = float(self.p), float(self.q)
        sq = (a**2).sum(axis=1)[:, None] * q + (p - q) * a**2  # Σ_j a_j² p_mj, per m
        mean = a.sum(axis=1)[:, None] * q + (p - q) * a  # aᵀ p_m, per m
        return np.asarray(((sq - mean**2) * n_m).sum(axis=1) / (p - q) ** 2)

    def conservative_variance(self, weights: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
        """Plug-in ``aᵀ n (diag(p̂) - p̂ p̂ᵀ) a / (p - q)²`` with ``p̂ = C / n``."""
        if n == 0:
            return np.zeros(np.atleast_2d(weights).shape[0])
        a = np.atleast_2d(np.asarray(weights, dtype=float))
        ph = np.asarray(counts, dtype=float) / n
        p, q = float(self.p), float(self.q)
        return np.asarray(n * ((a**2 * ph).sum(axis=1) - (a @ ph) ** 2) / (p - q) ** 2)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnaryEncoding:
    """Optimized unary encoding (OUE) with likelihood-ratio bound ``ratio`` (= e^ε)."""

    categories: int
    ratio: Fraction

    def __post_init__(self) -> None:
        _check_oracle(self.categories, self.ratio)

    @property
    def p(self) -> Fraction:
        return Fraction(1, 2)

    @property
    def q(self) -> Fraction:
        return 1 / (1 + self.ratio)

    def bit_probabilities(self, value: int) -> list[Fraction]:
        """P[bit j = 1 | value], exactly; the bits are independent."""
        return [self.p if j == value else self.q for j in range(self.categories)]

    def max_ratio(self, a: int, b: int) -> Fraction:
        """Exact sup over bit vectors of P[o | a] / P[o | b]: the bits are independent, so the sup
        is the product over bits of the larger of the 1- and 0-ratios."""
        out = Fraction(1)
        for x, y in zip(self.bit_probabilities(a), self.bit_probabilities(b), strict=True):
            out *= max(x / y, (1 - x) / (1 - y))
        return out

    def randomize(self, values: np.ndarray, rng: Randomness) -> np.ndarray:
        """One exact bit vector per value, shape (len(values), k), uint8."""
        values = np.asarray(values, dtype=np.int64)
        n, k = values.size, self.categories
        bits = _bernoulli(self.q, n * k, rng).reshape(n, k)
        bits[np.arange(n), values] = _bernoulli(self.p, n, rng)
        return bits

    def tally(self, reports: np.ndarray) -> np.ndarray:
        counts = np.asarray(reports, dtype=np.int64).reshape(-1, self.categories)
        return np.asarray(counts.sum(axis=0))

    def simulate_counts(self, true_counts: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        true_counts = np.asarray(true_counts, dtype=np.int64)
        n = int(true_counts.sum())
        return gen.binomial(true_counts, float(self.p)) + gen.binomial(
            n - true_counts, float(self.q)
        )

    def debias(self, counts: np.ndarray, n: int) -> np.ndarray:
        p, q = float(self.p), float(self.q)
        return (np.asarray(counts, dtype=float) - n * q) / (p - q)

    def linear_variance(self, weights: np.ndarray, true_counts: np.ndarray) -> np.ndarray:
        """Exact variance: bits are independent, ``Var C_j = n_j p(1-p) + (n - n_j) q(1-q)``."""
        a = np.atleast_2d(np.asarray(weights, dtype=float))
        n_m = np.asarray(true_counts, dtype=float)
        p, q = float(self.p), float(self.q)
        var_c = n_m * p * (1 - p) + (n_m.sum() - n_m) * q * (1 - q)
        return np.asarray((a**2 * var_c).sum(axis=1) / (p - q) ** 2)

    def conservative_variance(self, weights: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
        """Plug-in ``Σ_j a_j² n p̂_j (1 - p̂_j) / (p - q)²`` (concavity: never below the truth on
        average)."""
        if n == 0:
            return np.zeros(np.atleast_2d(weights).shape[0])
        a = np.atleast_2d(np.asarray(weights, dtype=float))
        ph = np.asarray(counts, dtype=float) / n
        p, q = float(self.p), float(self.q)
        return np.asarray((a**2 * n * ph * (1 - ph)).sum(axis=1) / (p - q) ** 2)


FrequencyOracle = GeneralizedRR | UnaryEncoding
