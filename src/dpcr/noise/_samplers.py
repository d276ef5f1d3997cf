"""Public exact samplers: parameter checks, then the vectorised implementations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Final

import numpy as np

from dpcr.errors import ConfigError
from dpcr.noise import _fast
from dpcr.noise._params import positive_fraction, sample_size
from dpcr.noise._randomness import Randomness
from dpcr.noise._tables import BoundsFn, InversionTable

__all__ = ["categorical", "discrete_gaussian", "discrete_laplace"]

# Draws exceed 64 * scale with probability below e**-64; beyond 2**62 below e**-4000.
_MAX_SCALE: Final = 1 << 50


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
    if scale > _MAX_SCALE:
        raise ConfigError(f"scale must be at most 2**50 so that draws fit in int64, got {scale}")
    size = sample_size(size)
    rng = _check_rng(rng)
    return _fast.discrete_laplace(scale, size, rng)


def discrete_gaussian(sigma2: Fraction | int, size: int, rng: Randomness) -> np.ndarray:
    """``size`` independent draws with P[X = x] ∝ exp(-x²/(2 sigma2)) on the integers (int64).

    ``sigma2`` is an exact rational (Fraction or int). Adding this noise to an integer query of
    L2 sensitivity Δ is (Δ²/(2 sigma2))-zCDP.
    """
    sigma2 = positive_fraction(sigma2, "sigma2")
    if sigma2 > _MAX_SCALE**2:
        raise ConfigError(f"sigma2 must be at most 2**100 so that draws fit in int64, got {sigma2}")
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


def _rational_bounds(cumulative: tuple[int, ...], denominator: int) -> BoundsFn:
    def bounds(prec: int) -> tuple[list[int], list[int]]:
        lo = [(c << prec) // denominator for c in cumulative]
        hi = [-((-c << prec) // denominator) for c in cumulative]
        return lo, hi

    return bounds


@lru_cache(maxsize=256)
def _categorical_table(probs: tuple[Fraction, ...]) -> InversionTable | None:
    last = max(i for i, p in enumerate(probs) if p > 0)  # later categories are impossible
    if last == 0:
        return None
    denominator = math.lcm(*(p.denominator for p in probs[: last + 1]))
    cumulative = []
    running = 0
    for p in probs[:last]:
        running += p.numerator * (denominator // p.denominator)
        cumulative.append(running)
    return InversionTable(_rational_bounds(tuple(cumulative), denominator), last)


def categorical(probabilities: Sequence[Fraction], size: int, rng: Randomness) -> np.ndarray:
    """``size`` independent indices ``i`` drawn with probability ``probabilities[i]`` (int64).

    The probabilities are exact rationals summing to exactly 1. Index ``i`` is returned when a
    uniform real u in [0, 1) falls in [p_0 + ... + p_(i-1), p_0 + ... + p_i); u is read 64 bits at
    a time and compared exactly with the rational boundaries (more bits only on a tie), so each
    index has probability exactly ``probabilities[i]``, whatever the denominators.
    """
    probs = _probabilities(probabilities)
    size = sample_size(size)
    rng = _check_rng(rng)
    table = _categorical_table(tuple(probs))
    if table is None:
        return np.zeros(size, dtype=np.int64)
    return table.draw(rng._words(size), rng)
