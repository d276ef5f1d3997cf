"""Additive-noise mechanisms on integer-valued queries. Each returns ``(values, event)``.

Noise is exact integer noise from :mod:`dpcr.noise` (discrete Laplace, discrete Gaussian), drawn
from the one randomness seam; the event describes the distribution exactly and goes to the
accountant before the values are published.

:func:`release_mutation_stats` (and :func:`release_first_k_stats`, which also bounds and
aggregates) releases the columnar engine's per-interval statistics as a
:class:`MutationStatsRelease` that carries its events.
"""

from dpcr.mechanisms._bounds import group_half_widths, half_widths
from dpcr.mechanisms._fourier import NoiseGroups
from dpcr.mechanisms._intervals import (
    Interval,
    chernoff,
    chernoff_tails,
    gaussian_half_width,
    half_width,
    half_widths_iid,
)
from dpcr.mechanisms._mutation_stats import (
    MutationStatsRelease,
    release_first_k_stats,
    release_mutation_stats,
)
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
    "Interval",
    "MutationStatsRelease",
    "NoiseGroups",
    "add_noise",
    "chernoff",
    "chernoff_tails",
    "discrete_gaussian_variance",
    "discrete_laplace_variance",
    "gaussian",
    "gaussian_half_width",
    "group_half_widths",
    "half_width",
    "half_widths",
    "half_widths_iid",
    "laplace",
    "noise_variance",
    "release_first_k_stats",
    "release_mutation_stats",
    "round_up",
]
