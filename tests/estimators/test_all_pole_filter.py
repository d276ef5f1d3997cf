"""The published running totals of a factorization are ``C'^{-1} y`` by an all-pole filter:
without scipy.signal (its import costs about 0.75 s of a first run), the same bits as
``scipy.signal.lfilter`` for every filter and input, vectors and intervals x keys."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import signal

import dpcr
from dpcr.estimators.factorization import NUMPY_WORK, all_pole_filter
from dpcr.plans.factorization_plan import integer_sqrt_coefficients


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 365, 1500])
def test_all_pole_filter_is_lfilter_bit_for_bit(n: int) -> None:
    rnd = random.Random(n)
    blt = dpcr.FactorizationRelease(start="2025-01-01", period="1d", horizon=None,
                                    factorization="blt")
    filters = [integer_sqrt_coefficients(n, scale=1 << 20), blt.coefficients_upto(n),
               sorted((rnd.randint(1, 10**7) for _ in range(n)), reverse=True)]
    for coeffs in filters:
        a = np.asarray(coeffs, dtype=np.float64)
        for shape in ((n,), (n, 1), (n, 4)):
            size = int(np.prod(shape))
            x = np.array([rnd.randint(-10**9, 10**9) for _ in range(size)]) / 7.0
            x = x.reshape(shape)
            assert n * x.size <= NUMPY_WORK  # (the numpy path)
            want = signal.lfilter([1.0], a, x, axis=0)
            assert np.array_equal(all_pole_filter(a, x), want), (n, shape)
