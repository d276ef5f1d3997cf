from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpcr.errors import ConfigError
from dpcr.noise import (
    categorical,
    discrete_gaussian,
    discrete_laplace,
    secure_randomness,
    simulation_randomness,
)


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian])
def test_shape_dtype_and_both_generators(sampler: object) -> None:
    for rng in (simulation_randomness(5), secure_randomness()):
        x = sampler(Fraction(7, 3), size=1000, rng=rng)  # type: ignore[operator]
        assert x.dtype == np.int64
        assert x.shape == (1000,)
        assert sampler(3, size=0, rng=rng).shape == (0,)  # type: ignore[operator]


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian])
@pytest.mark.parametrize("bad", [0.5, 1.0, np.float64(2.0)])
def test_floats_are_refused_with_the_fix(sampler: object, bad: object) -> None:
    with pytest.raises(ConfigError, match="Fraction"):
        sampler(bad, size=3, rng=simulation_randomness(1))  # type: ignore[operator]


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian])
@pytest.mark.parametrize("bad", [0, -1, Fraction(-1, 2), "2", None, 2**101])
def test_bad_parameters_are_refused(sampler: object, bad: object) -> None:
    with pytest.raises(ConfigError):
        sampler(bad, size=3, rng=simulation_randomness(1))  # type: ignore[operator]


def test_rng_must_be_a_randomness() -> None:
    with pytest.raises(ConfigError, match="simulation_randomness"):
        discrete_laplace(1, size=3, rng=np.random.default_rng(1))  # type: ignore[arg-type]


def test_simulation_samples_are_reproducible() -> None:
    a = discrete_gaussian(Fraction(10), size=500, rng=simulation_randomness(9))
    b = discrete_gaussian(Fraction(10), size=500, rng=simulation_randomness(9))
    assert np.array_equal(a, b)


def test_categorical_basic_and_validation() -> None:
    rng = simulation_randomness(2)
    x = categorical([Fraction(1, 4), Fraction(0), Fraction(3, 4)], size=4000, rng=rng)
    assert x.dtype == np.int64
    assert set(np.unique(x).tolist()) == {0, 2}
    assert categorical([1], size=5, rng=rng).tolist() == [0] * 5
    for bad in ([], [Fraction(1, 2)], [0.5, 0.5], [Fraction(3, 2), Fraction(-1, 2)]):
        with pytest.raises(ConfigError):
            categorical(bad, size=3, rng=rng)  # type: ignore[arg-type]


def test_large_scales_up_to_the_limit() -> None:
    rng = simulation_randomness(3)
    x = discrete_laplace(2**50, size=1000, rng=rng)
    assert np.abs(x).max() < 2**62
    with pytest.raises(ConfigError, match="2\\*\\*50"):
        discrete_laplace(2**50 + 1, size=3, rng=rng)
