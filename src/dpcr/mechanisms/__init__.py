"""Additive-noise mechanisms on integer-valued queries. Each returns ``(values, event)``.

Noise is exact integer noise from :mod:`dpcr.noise` (discrete Laplace, discrete Gaussian), drawn
from the one randomness seam; the event describes the distribution exactly and goes to the
accountant before the values are published.
"""

from dpcr.mechanisms._noise import (
    PARAMETER_GRID,
    add_noise,
    discrete_gaussian_variance,
    discrete_laplace_variance,
    gaussian,
    laplace,
    noise_variance,
    round_up,
)

__all__ = [
    "PARAMETER_GRID",
    "add_noise",
    "discrete_gaussian_variance",
    "discrete_laplace_variance",
    "gaussian",
    "laplace",
    "noise_variance",
    "round_up",
]
