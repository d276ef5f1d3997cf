"""Coupled-worlds streaming privacy: Theorem 4's bound against exact brute force (looseness)."""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np
import pytest

from dpcr.analysis.cw import brute_force_stream, single_step


@pytest.mark.parametrize("t", [1, 2, 3])
def test_theorem4_bounds_exact_noisy_count(t: int) -> None:
    n, block = 4, 2
    kernel = 0.5 * np.eye(n + 1) + 0.5 / (n + 1)  # exact count half the time, else uniform
    bound = single_step(n=n, block=block, p=Fraction(1, 2), kernel=kernel)
    assert bound.assumption_1
    eps_b, delta_b = bound.theorem4(t)
    exact, (delta_at,) = brute_force_stream(
        n=n, block=block, p=Fraction(1, 2), kernel=kernel, t=t, epsilons=[eps_b]
    )
    assert exact.epsilon <= eps_b + 1e-12
    assert exact.delta <= delta_b + 1e-12 and delta_at <= delta_b + 1e-12
    if t == 1:
        assert exact.epsilon == pytest.approx(bound.epsilon_max)


def test_exact_count_window_brute_force_is_fast() -> None:
    # exact (noiseless) counts over a window of n = 8 Bernoulli(1/2) rows, c = 1/4, t = 6
    n, block = 8, 2
    kernel = np.eye(n + 1)
    bound = single_step(n=n, block=block, p=Fraction(1, 2), kernel=kernel)
    assert not bound.assumption_1 and math.isinf(bound.gamma)  # Theorem 4 does not apply
    start = time.perf_counter()
    exact, _ = brute_force_stream(n=n, block=block, p=Fraction(1, 2), kernel=kernel, t=6)
    assert time.perf_counter() - start < 10.0
    assert exact.epsilon == pytest.approx(math.log(2))
    # δ is conditional on the auxiliary rows z: given z, the count reveals the unseen pair's sum,
    # and "sum 0" is impossible in world 0 with the private row = 1 but has probability 1/4 in
    # world 1 (not 1/256 = P(z) · 1/4, the joint mass)
    assert exact.delta == pytest.approx(1 / 4) == bound.delta_max
