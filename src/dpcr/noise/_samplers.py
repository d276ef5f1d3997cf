"""Public exact samplers: parameter checks, then the vectorised implementations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dpcr.errors import ConfigError
from dpcr.noise import _fast, reference
from dpcr.noise._params import positive_fraction, sample_size
from dpcr.noise._randomness import Randomness

__all__ = ["categorical", "discrete_gaussian", "discrete_laplace"]


def _check_rng(rng: object) -> Randomness:
    if not isinstance(rng, Randomness):
        raise ConfigError(
            "rng must be a dpcr.noise.Randomness (secure_randomness() for releases, "
            f"simulation_randomness(seed) for tests), got {type(rng).__name__}"
        )
    return rng


def discrete_laplace(scale: Fraction | int, size: int, rng: Randomness) -> np.ndarray:
    """``size`` independent draws with P[X = x] ∝ exp(-|x|/scale) on the integers (int64).

    ``scale`` is an exact rational (Fraction or int). Adding this noise to an integer query of
    L1 sensitivity Δ is (Δ/scale)-DP.
    """
    scale = positive_fraction(scale, "scale")
    size = sample_size(size)
    rng = _check_rng(rng)
    return _fast.discrete_laplace(scale, size, rng)


def discrete_gaussian(sigma2: Fraction | int, size: int, rng: Randomness) -> np.ndarray:
    """``size`` independent draws with P[X = x] ∝ exp(-x²/(2 sigma2)) on the integers (int64).

    ``sigma2`` is an exact rational (Fraction or int). Adding this noise to an integer query of
    L2 sensitivity Δ is (Δ²/(2 sigma2))-zCDP.
    """
    sigma2 = positive_fraction(sigma2, "sigma2")
    size = sample_size(size)
    rng = _check_rng(rng)
    return _fast.discrete_gaussian(sigma2, size, rng)


def _probabilities(probabilities: object) -> list[Fraction]:
    if isinstance(probabilities, str | bytes) or not isinstance(probabilities, Sequence):
        raise ConfigError(
            f"probabilities must be a sequence of Fractions, got {type(probabilities).__name__}"
        )
    if len(probabilities) == 0:
        raise ConfigError("probabilities must not be empty")
    out: list[Fraction] = []
    items: Sequence[object] = probabilities
    for i, p in enumerate(items):
        if isinstance(p, bool | float | np.floating):
            raise ConfigError(
                f"probabilities[{i}] = {p!r} is not exact: pass fractions.Fraction values"
            )
        if isinstance(p, int | np.integer):
            p = Fraction(int(p))
        if not isinstance(p, Fraction):
            raise ConfigError(f"probabilities[{i}] must be a Fraction, got {p!r}")
        if p < 0:
            raise ConfigError(f"probabilities[{i}] must be >= 0, got {p}")
        out.append(p)
    total = sum(out, Fraction(0))
    if total != 1:
        raise ConfigError(f"probabilities must sum to exactly 1, they sum to {total}")
    return out


def categorical(probabilities: Sequence[Fraction], size: int, rng: Randomness) -> np.ndarray:
    """``size`` independent indices ``i`` drawn with probability ``probabilities[i]`` (int64).

    The probabilities are exact rationals summing to exactly 1; with D the least common
    denominator, one uniform integer below D is drawn per sample and compared with the integer
    cumulative sums, so each index has probability exactly ``probabilities[i]``.
    """
    probs = _probabilities(probabilities)
    size = sample_size(size)
    rng = _check_rng(rng)
    denominator = math.lcm(*(p.denominator for p in probs))
    cumulative: list[int] = []
    running = 0
    for p in probs:
        running += p.numerator * (denominator // p.denominator)
        cumulative.append(running)
    if denominator <= 1 << 62:
        u = rng.integers(denominator, size)
        index: np.ndarray = np.searchsorted(np.array(cumulative, dtype=np.int64), u, "right")
        return index.astype(np.int64)
    out = np.empty(size, dtype=np.int64)
    for i in range(size):
        u_big = reference.uniform_below(denominator, rng)
        out[i] = next(j for j, c in enumerate(cumulative) if u_big < c)
    return out
