"""Discrete Laplace and discrete Gaussian noise on integer arrays, parameter rounding and noise
variances (see :mod:`dpcr.mechanisms`)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.errors import ConfigError
from dpcr.noise import Randomness, discrete_gaussian, discrete_laplace

#: Noise parameters are rounded *up* to multiples of 1/GRID, so the privacy spent is never more
#: than the budget asked for and the samplers see small exact rationals.
PARAMETER_GRID = 1024


def round_up(value: Fraction) -> Fraction:
    """Smallest multiple of 1/PARAMETER_GRID that is >= ``value``."""
    return Fraction(math.ceil(value * PARAMETER_GRID), PARAMETER_GRID)


def _as_int_array(values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise ConfigError(f"mechanisms take integer arrays, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def laplace(
    values: np.ndarray, *, scale: Fraction, sensitivity: Fraction, rng: Randomness
) -> tuple[np.ndarray, DiscreteLaplaceEvent]:
    """values + discrete Laplace(scale) noise; (sensitivity / scale)-DP for L1 ``sensitivity``."""
    event = DiscreteLaplaceEvent(scale=scale, sensitivity=sensitivity)
    arr = _as_int_array(values)
    noise = discrete_laplace(scale, arr.size, rng).reshape(arr.shape)
    return arr + noise, event


def gaussian(
    values: np.ndarray, *, sigma2: Fraction, sensitivity2: Fraction, rng: Randomness
) -> tuple[np.ndarray, DiscreteGaussianEvent]:
    """values + discrete Gaussian(sigma2) noise; ρ-zCDP, ρ = sensitivity2 / (2 sigma2)."""
    event = DiscreteGaussianEvent(sigma2=sigma2, sensitivity2=sensitivity2)
    arr = _as_int_array(values)
    noise = discrete_gaussian(sigma2, arr.size, rng).reshape(arr.shape)
    return arr + noise, event


def add_noise(
    values: np.ndarray, event: DiscreteLaplaceEvent | DiscreteGaussianEvent, rng: Randomness
) -> np.ndarray:
    """``values`` plus the noise ``event`` describes (its parameters, drawn from ``rng``)."""
    if isinstance(event, DiscreteLaplaceEvent):
        noisy, _ = laplace(values, scale=event.scale, sensitivity=event.sensitivity, rng=rng)
    elif isinstance(event, DiscreteGaussianEvent):
        noisy, _ = gaussian(values, sigma2=event.sigma2, sensitivity2=event.sensitivity2, rng=rng)
    else:
        raise ConfigError(f"no additive-noise mechanism for {event!r}")
    return noisy


def discrete_laplace_variance(scale: Fraction) -> float:
    """Var of discrete Laplace with P[x] ∝ exp(-|x|/scale): 2q / (1 - q)², q = exp(-1/scale)
    (1 − q by ``expm1``: exact also for scales so large that q rounds to 1)."""
    a = float(1 / Fraction(scale))
    return 2.0 * math.exp(-a) / math.expm1(-a) ** 2


def discrete_gaussian_variance(sigma2: Fraction) -> float:
    """Variance of the discrete Gaussian (at most sigma2).

    Small sigma2: the sum over the integers. From sigma2 = 100 on, Poisson summation gives
    Var = sigma2 (1 − r) with 0 <= r <= 4π² sigma2 e^{−2π² sigma2} (1 + o(1)) < 10^-800, so
    float(sigma2) is the variance to the last bit (and the sum would need ~24σ terms).
    """
    if sigma2 >= 100:
        return float(sigma2)
    s2 = float(sigma2)
    radius = math.ceil(12.0 * math.sqrt(s2)) + 2
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    w = np.exp(-(x**2) / (2.0 * s2))
    return float((x**2 * w).sum() / w.sum())


def noise_variance(event: DiscreteLaplaceEvent | DiscreteGaussianEvent) -> float:
    if isinstance(event, DiscreteLaplaceEvent):
        return discrete_laplace_variance(event.scale)
    return discrete_gaussian_variance(event.sigma2)
