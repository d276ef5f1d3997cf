"""Exact discrete noise and the one randomness seam of dpcr.

All randomness in dpcr comes from a :class:`Randomness`: :func:`secure_randomness` (OS entropy,
the only kind a real release accepts, see :func:`require_secure`) or
:func:`simulation_randomness` (seeded, for tests and simulations). The samplers take exact rational
parameters and return int64 arrays; no floating-point number takes part in a sampling decision.

>>> from fractions import Fraction
>>> rng = simulation_randomness(1)
>>> discrete_laplace(Fraction(5, 2), size=4, rng=rng).dtype
dtype('int64')
"""

from dpcr.noise._randomness import (
    Randomness,
    require_secure,
    secure_randomness,
    simulation_randomness,
)
from dpcr.noise._samplers import categorical, discrete_gaussian, discrete_laplace
from dpcr.noise._table_cache import table_cache

__all__ = [
    "Randomness",
    "categorical",
    "discrete_gaussian",
    "discrete_laplace",
    "require_secure",
    "secure_randomness",
    "simulation_randomness",
    "table_cache",
]
