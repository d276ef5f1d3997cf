"""A grid PLD's self-composition range from running-product moments (``_quick_truncation``) is
the range the matrix of moments (``_moments``) gives -- the same integers, so the same composed
PLDs and the same calibrations -- or is declined (None) and then computed that way."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpcr.accounting import _grid
from dpcr.accounting._pld import _discrete_gaussian_pld
from dpcr.accounting.events import DiscreteGaussianEvent


def _by_matrix(p: np.ndarray, count: int, tail: float = 1e-15) -> tuple[int, int]:
    return _grid._matrix_truncation(p, count, tail)


def test_discrete_gaussian_plds() -> None:
    """The leaves calibrations compose: discrete Gaussians over σ², sensitivities, grids and
    counts; every range is decided, and equal to the matrix's."""
    decided = 0
    for s2 in (2.0, 9.5, 51.0, 317.0, 3001.0, 4.1e4, 1.3e5):
        for d in (1, 2, 3, 10, 100):
            for h in (1e-3, 1e-4, 3e-5, 1e-5):
                # (about 2 d m / (σ² h) points, m = 11.8 σ + d: only those the path takes)
                if 2 * d * (11.8 * math.sqrt(s2) + d) / (s2 * h) > 1 << 14:
                    continue
                event = DiscreteGaussianEvent(sigma2=Fraction(s2), sensitivity2=Fraction(d * d))
                p = np.maximum(_discrete_gaussian_pld(event, h).probs, 0.0)
                for count in (2, 3, 40, 365, 1000):
                    quick = _grid._quick_truncation(p, count, 1e-15)
                    if quick is not None:
                        decided += 1
                        assert quick == _by_matrix(p, count)
    assert decided >= 100


def test_random_masses() -> None:
    """Random masses (skewed, flat, bell-shaped) of every size the quick path takes: equal
    where decided, and declined only rarely."""
    rng = np.random.default_rng(31)
    decided = declined = 0
    for trial in range(600):
        n = int(rng.integers(2, 1 << 14))
        p = rng.random(n) ** int(rng.integers(1, 30))
        if trial % 4 == 0:
            p = np.exp(-(((np.arange(n) - n / 2) / (n / float(rng.uniform(4, 40)))) ** 2))
        p /= p.sum() * float(rng.uniform(1, 1.01))
        count = int(rng.integers(2, 5000))
        quick = _grid._quick_truncation(p, count, 1e-15)
        if quick is None:
            declined += 1
        else:
            decided += 1
            assert quick == _by_matrix(p, count)
    assert declined <= 0.05 * (decided + declined)


def test_declines_a_bound_at_an_integer() -> None:
    """A tail that puts an order's bound on an integer is declined, and self_compose then
    takes the matrix's range (the same composition as before)."""
    p = np.array([0.2, 0.5, 0.3])
    count, order = 40, 1 / 3  # the first positive order, 1/n
    mgf = float(p @ np.exp(np.arange(3) / 3))
    bound = (count * math.log(mgf) + math.log(2 / 1e-15)) / order
    tail = 2 * math.exp(count * math.log(mgf) - round(bound) * order)  # bound = an integer
    assert _grid._quick_truncation(p, count, tail) is None
    assert _grid._quick_truncation(p, count, 1e-15) == _by_matrix(p, count)
    lower, upper = _by_matrix(p, count, tail)
    out = _grid.GridPld(h=1e-3, lo=-1, probs=p, infinity=0.0).self_compose(count, tail)
    assert out.lo == -count + lower
    assert out.probs.size == upper - lower + 1
