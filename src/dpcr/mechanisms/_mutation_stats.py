"""Discrete Laplace release of the columnar engine's per-interval mutation statistics.

:func:`release_mutation_stats` adds exact discrete Laplace noise to the counts and sums of a
:class:`~dpcr.engines.columnar.MutationStats`, drawn from one :class:`~dpcr.noise.Randomness`;
:func:`release_first_k_stats` bounds, aggregates and releases in one call.

Privacy (unit = entry). After :func:`~dpcr.engines.columnar.bound_first_k` an entry keeps at most
``k`` rows, each adding 1 to one count and an integer in ``[−clamp, clamp]`` to one sum, so the
L1 sensitivity is ``k`` for the count vector and ``k·clamp`` for the sum vector (see
:mod:`dpcr.engines.columnar`). Discrete Laplace noise of scale ``s`` on every coordinate of a
vector of L1 sensitivity ``Δ`` is ``Δ/s``-DP. The two releases compose to
``ε = k/s_count + k·clamp/s_sum``.

>>> import numpy as np
>>> from fractions import Fraction
>>> from dpcr.engines.columnar import MutationStats
>>> from dpcr.noise import simulation_randomness
>>> stats = MutationStats(counts=np.array([3, 1]), sums=np.array([7, 3]), start=0, period=25,
...                       clamp=5)
>>> released = release_mutation_stats(stats, k=3, epsilon=Fraction(1),
...                                   rng=simulation_randomness(0))
>>> released.epsilon, released.simulation
(Fraction(1, 1), True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpcr.accounting.events import ComposedEvent, DiscreteLaplaceEvent
from dpcr.engines.columnar import MutationStats, bound_first_k, mutation_stats
from dpcr.errors import ConfigError
from dpcr.mechanisms._noise import discrete_laplace_variance, laplace, round_up
from dpcr.noise import Randomness, secure_randomness


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _exact_fraction(value: object, name: str) -> Fraction:
    if isinstance(value, bool | float | np.floating):
        raise ConfigError(
            f"{name} must be exact: pass fractions.Fraction (e.g. Fraction('{value!r}')) "
            f"or an int, not {value!r}"
        )
    if isinstance(value, int | np.integer):
        return Fraction(int(value))
    if isinstance(value, Fraction):
        return value
    raise ConfigError(f"{name} must be a Fraction or an int, got {type(value).__name__}")


@dataclass(frozen=True, slots=True, kw_only=True)
class MutationStatsRelease:
    """Noisy per-interval counts and sums with the events that describe their noise.

    ``counts`` and ``sums`` (int64) are the exact statistics plus independent discrete Laplace
    noise; ``count_event`` and ``sum_event`` state the scales and L1 sensitivities, ``event``
    their composition. ``simulation`` is ``True`` when the noise came from a seeded generator:
    such values are for tests and simulations and must not be published.
    """

    counts: np.ndarray
    sums: np.ndarray
    start: int
    period: int
    count_event: DiscreteLaplaceEvent
    sum_event: DiscreteLaplaceEvent
    simulation: bool

    @property
    def event(self) -> ComposedEvent:
        return ComposedEvent(events=(self.count_event, self.sum_event))

    @property
    def epsilon(self) -> Fraction:
        """Pure-DP ε per entry for the whole release (basic composition of the two events)."""
        return sum(
            (e.sensitivity / e.scale for e in (self.count_event, self.sum_event)), Fraction(0)
        )

    @property
    def count_noise_std(self) -> float:
        """Standard deviation of the noise on each released count."""
        return math.sqrt(discrete_laplace_variance(self.count_event.scale))

    @property
    def sum_noise_std(self) -> float:
        """Standard deviation of the noise on each released sum."""
        return math.sqrt(discrete_laplace_variance(self.sum_event.scale))


def release_mutation_stats(
    stats: MutationStats,
    *,
    k: int,
    epsilon: Fraction | int,
    count_share: Fraction = Fraction(1, 2),
    rng: Randomness | None = None,
) -> MutationStatsRelease:
    """Add discrete Laplace noise to ``stats``, ``epsilon``-DP per entry in total.

    ``k`` must bound the kept mutations of every entry (as :func:`bound_first_k` guarantees), so
    the L1 sensitivities are ``k`` (counts) and ``k·clamp`` (sums). The counts get the share
    ``count_share`` of ``epsilon`` and the sums the rest; each scale is
    ``sensitivity / (share·epsilon)`` rounded up to a multiple of 1/1024, so the privacy spent is
    at most ``epsilon``. ``rng`` defaults to :func:`~dpcr.noise.secure_randomness`; any other
    generator marks the release as a simulation.
    """
    if not isinstance(stats, MutationStats):
        raise ConfigError(f"stats must be a MutationStats, got {type(stats).__name__}")
    k = _positive_int(k, "k")
    eps = _exact_fraction(epsilon, "epsilon")
    share = _exact_fraction(count_share, "count_share")
    if eps <= 0:
        raise ConfigError(f"epsilon must be > 0, got {eps}")
    if not 0 < share < 1:
        raise ConfigError(f"count_share must be strictly between 0 and 1, got {share}")
    if rng is None:
        rng = secure_randomness()
    if not isinstance(rng, Randomness):
        raise ConfigError(
            "rng must be a dpcr.noise.Randomness (secure_randomness() for releases, "
            f"simulation_randomness(seed) for tests), got {type(rng).__name__}"
        )
    count_sensitivity = Fraction(k)
    sum_sensitivity = Fraction(k * stats.clamp)
    count_scale = round_up(count_sensitivity / (eps * share))
    sum_scale = round_up(sum_sensitivity / (eps * (1 - share)))
    counts, count_event = laplace(
        stats.counts, scale=count_scale, sensitivity=count_sensitivity, rng=rng
    )
    sums, sum_event = laplace(stats.sums, scale=sum_scale, sensitivity=sum_sensitivity, rng=rng)
    return MutationStatsRelease(
        counts=counts,
        sums=sums,
        start=stats.start,
        period=stats.period,
        count_event=count_event,
        sum_event=sum_event,
        simulation=not rng.secure,
    )


def release_first_k_stats(
    entry: npt.ArrayLike,
    ts: npt.ArrayLike,
    old: npt.ArrayLike,
    new: npt.ArrayLike,
    *,
    k: int,
    start: int,
    period: int,
    intervals: int,
    clamp: int,
    epsilon: Fraction | int,
    count_share: Fraction = Fraction(1, 2),
    rng: Randomness | None = None,
) -> MutationStatsRelease:
    """:func:`bound_first_k`, then :func:`mutation_stats`, then :func:`release_mutation_stats`.

    The sensitivity comes from the same ``k`` that bounded the rows, so it cannot disagree.
    """
    kept = bound_first_k(entry, ts, k)
    stats = mutation_stats(
        kept, ts, old, new, start=start, period=period, intervals=intervals, clamp=clamp
    )
    return release_mutation_stats(stats, k=k, epsilon=epsilon, count_share=count_share, rng=rng)
