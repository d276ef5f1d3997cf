"""Noise variances at the edges of the scale: a huge discrete Laplace scale (a tiny ε over a sum
with a wide range) has variance about 2 scale², not a division by zero."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpcr.accounting.events import DiscreteLaplaceEvent
from dpcr.mechanisms import noise_variance


@pytest.mark.parametrize(
    "scale", [Fraction(1, 3), Fraction(1), Fraction(10**6), Fraction(10**17), Fraction(3 * 10**40)]
)
def test_discrete_laplace_variance_is_finite_at_every_scale(scale: Fraction) -> None:
    var = noise_variance(DiscreteLaplaceEvent(scale=scale, sensitivity=Fraction(1)))
    q = math.exp(-1 / float(scale))
    if q < 1 - 1e-6:
        assert var == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-12)
    else:  # 2q/(1−q)² = 2 scale² − 1/6 + O(1/scale²)
        assert var == pytest.approx(2 * float(scale) ** 2, rel=1e-9)
