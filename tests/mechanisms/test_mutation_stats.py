"""The discrete Laplace release of the columnar engine's statistics: events, scales, noise."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpcr.accounting.events import ComposedEvent, DiscreteLaplaceEvent
from dpcr.engines.columnar import MutationStats
from dpcr.errors import ConfigError
from dpcr.mechanisms import release_first_k_stats, release_mutation_stats
from dpcr.noise import discrete_laplace, secure_randomness, simulation_randomness


def _stats() -> MutationStats:
    return MutationStats(
        counts=np.array([3, 0, 7], dtype=np.int64),
        sums=np.array([-5, 0, 250], dtype=np.int64),
        start=0,
        period=10,
        clamp=100,
    )


def test_release_scales_events_and_epsilon() -> None:
    released = release_mutation_stats(
        _stats(), k=3, epsilon=Fraction(1), rng=simulation_randomness(1)
    )
    assert released.count_event == DiscreteLaplaceEvent(scale=Fraction(6), sensitivity=Fraction(3))
    assert released.sum_event == DiscreteLaplaceEvent(
        scale=Fraction(600), sensitivity=Fraction(300)
    )
    assert released.event == ComposedEvent(events=(released.count_event, released.sum_event))
    assert released.epsilon == 1
    assert released.simulation
    q = math.exp(-1 / 6)
    assert released.count_noise_std == pytest.approx(math.sqrt(2 * q) / (1 - q))
    assert released.sum_noise_std == pytest.approx(600 * math.sqrt(2), rel=1e-5)


def test_release_adds_the_samplers_noise() -> None:
    released = release_mutation_stats(
        _stats(), k=3, epsilon=Fraction(1), rng=simulation_randomness(9)
    )
    rng = simulation_randomness(9)
    expected_counts = _stats().counts + discrete_laplace(Fraction(6), 3, rng)
    expected_sums = _stats().sums + discrete_laplace(Fraction(600), 3, rng)
    assert released.counts.tolist() == expected_counts.tolist()
    assert released.sums.tolist() == expected_sums.tolist()


def test_release_uneven_share_rounds_scales_up() -> None:
    released = release_mutation_stats(
        _stats(), k=3, epsilon=Fraction(1, 3), count_share=Fraction(1, 7),
        rng=simulation_randomness(1),
    )
    assert released.epsilon <= Fraction(1, 3)
    assert released.count_event.scale >= Fraction(3) / (Fraction(1, 3) * Fraction(1, 7))
    assert released.count_event.scale.denominator <= 1024


def test_release_defaults_to_secure_randomness() -> None:
    released = release_mutation_stats(_stats(), k=3, epsilon=1)
    assert not released.simulation
    explicit = release_mutation_stats(_stats(), k=3, epsilon=1, rng=secure_randomness())
    assert not explicit.simulation


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": 1.0}, "epsilon must be exact"),
        ({"epsilon": Fraction(0)}, "epsilon must be > 0"),
        ({"count_share": Fraction(1)}, "count_share must be strictly between"),
        ({"k": 0}, "k must be an integer >= 1"),
        ({"rng": np.random.default_rng(0)}, "rng must be a dpcr.noise.Randomness"),
    ],
)
def test_release_rejects(kwargs: dict[str, object], message: str) -> None:
    params: dict[str, object] = {"k": 3, "epsilon": Fraction(1)}
    params.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        release_mutation_stats(_stats(), **params)  # type: ignore[arg-type]


def test_release_first_k_stats_end_to_end() -> None:
    entry = np.array([1, 1, 1, 1, 2, 2])
    ts = np.array([5, 1, 12, 3, 25, 2])
    old = np.array([np.nan, 10.0, 20.0, 30.0, np.nan, 0.0])
    new = np.array([10.0, 20.0, 30.0, np.nan, 5.0, np.nan])
    # entry 1 keeps ts 1, 3, 5 (changes +10, −30, +10); entry 2 keeps both (+5 at 25, 0 at 2)
    released = release_first_k_stats(
        entry, ts, old, new, k=3, start=0, period=10, intervals=3, clamp=100,
        epsilon=Fraction(1), rng=simulation_randomness(2),
    )
    rng = simulation_randomness(2)
    count_noise = discrete_laplace(Fraction(6), 3, rng)
    sum_noise = discrete_laplace(Fraction(600), 3, rng)
    assert (released.counts - count_noise).tolist() == [4, 0, 1]
    assert (released.sums - sum_noise).tolist() == [-10, 0, 5]
