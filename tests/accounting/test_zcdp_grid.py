"""The zCDP conversion evaluates about 1,000 of its 30,001 orders and still returns the grid's
minimum exactly (ε(α) is unimodal), so it stays exactly monotone in ρ and δ."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np

from dpcr.accounting.composition import _ALPHA, _epsilon_at, _grid_min, zcdp_epsilon


def test_the_windowed_minimum_is_the_grids() -> None:
    rnd = random.Random(20261201)
    for _ in range(3000):
        rho = 10 ** rnd.uniform(-14, 6)
        log_inv_delta = -math.log(10 ** rnd.uniform(-300, -0.01))
        full = float(np.min(_epsilon_at(_ALPHA, rho, log_inv_delta)))
        assert _grid_min(rho, log_inv_delta) == full


def test_monotone_in_rho_and_delta() -> None:
    rhos = np.geomspace(1e-6, 1e3, 400)
    eps = [zcdp_epsilon(float(r), 1e-6) for r in rhos]
    assert all(a <= b for a, b in itertools.pairwise(eps))
    deltas = np.geomspace(1e-12, 0.5, 400)
    eps = [zcdp_epsilon(0.3, float(d)) for d in deltas]
    assert all(a >= b for a, b in itertools.pairwise(eps))
