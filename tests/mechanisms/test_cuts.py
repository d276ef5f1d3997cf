"""The frequency cut of :func:`dpcr.mechanisms._fourier.lattice_quantiles` stops bisecting once
both ends of every row's bracket give the same frequency: the same cuts as bisecting to the
end (60 halvings), on sums of discrete Laplace and Gaussian noises of many sizes."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.mechanisms import _fourier
from dpcr.mechanisms._fourier import CUT, NoiseGroups, fast_odd


def _cuts_to_the_end(groups: NoiseGroups, periods: np.ndarray, halves: np.ndarray) -> np.ndarray:
    target = np.log(2 * CUT / (1 + np.log(np.maximum(halves, 1))))
    lo, hi = np.zeros(len(periods)), np.full(len(periods), math.pi)
    full = groups.log_cf(hi) > target
    for _ in range(60):
        mid = (lo + hi) / 2
        above = groups.log_cf(mid) > target
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    first = np.ceil(hi * periods / (2 * math.pi)).astype(np.int64)
    out: np.ndarray = np.where(full, halves, np.clip(first - 1, 0, halves))
    return out


def test_cuts_equal_those_of_a_bisection_to_the_end() -> None:
    rng = random.Random(7)
    rows_seen = 0
    for _ in range(120):
        events = [
            DiscreteLaplaceEvent(scale=Fraction(rng.choice([1, 3, 6, 600, 25, 7])) / 2,
                                 sensitivity=Fraction(1)),
            DiscreteGaussianEvent(sigma2=Fraction(rng.choice([1, 4, 100, 2500])),
                                  sensitivity2=Fraction(1)),
        ]
        rows = [[(1.0, rng.randrange(2), rng.randint(1, 400)) for _ in range(rng.randint(1, 3))]
                for _ in range(rng.randint(1, 12))]  # fmt: skip
        groups = NoiseGroups.of(rows, events)
        reach = [float(rng.randint(3, 200_000)) for _ in rows]
        halves = np.array([(fast_odd(2 * math.ceil(r) + 3) - 1) // 2 for r in reach],
                          dtype=np.int64)  # fmt: skip
        periods = 2 * halves + 1
        got = _fourier._cuts(groups, periods, halves)
        assert np.array_equal(got, _cuts_to_the_end(groups, periods, halves)), (rows, reach)
        rows_seen += len(rows)
    assert rows_seen > 500
