"""Integer square-root factorization: coefficients, and the exact multi-participation sensitivity
against an exhaustive search over participation patterns and signs (small T)."""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise
from math import comb, floor

import numpy as np
import pytest

from dpcr.bounding.constraints import AtMostK, TimeBounded
from dpcr.errors import ConfigError
from dpcr.plans.factorization import brute_force_sensitivity2
from dpcr.plans.factorization_plan import (
    FactorizationRelease,
    integer_sensitivity2,
    integer_sqrt_coefficients,
)


def toeplitz(c: list[int]) -> np.ndarray:
    T = len(c)
    C = np.zeros((T, T))
    for i in range(T):
        for j in range(i + 1):
            C[i, j] = c[i - j]
    return C


@pytest.mark.parametrize("scale", [1, 3, 7, 64, 1000, 1 << 20])
def test_coefficients_are_exact_floors_nonnegative_nonincreasing(scale: int) -> None:
    c = integer_sqrt_coefficients(40, scale=scale)
    assert c == [floor(Fraction(scale * comb(2 * j, j), 4**j)) for j in range(40)]
    assert c[0] == scale
    assert all(v >= 0 for v in c) and all(b <= a for a, b in pairwise(c))


@pytest.mark.parametrize("scale", [1, 3, 7, 64, 1 << 20])
@pytest.mark.parametrize("T", range(1, 10))
def test_sensitivity_matches_exhaustive_search(scale: int, T: int) -> None:
    c = integer_sqrt_coefficients(T, scale=scale)
    C = toeplitz(c)  # entries < 2^21, squared sums < 2^53: float arithmetic is exact here
    for m in range(1, min(T, 4) + 1):
        want = integer_sensitivity2(c, m)
        if T <= 7 or m <= 3:  # at most k: every support of <= m intervals, every sign vector
            assert brute_force_sensitivity2(C, m, contiguous=False) == want
        assert brute_force_sensitivity2(C, m, contiguous=True) == want  # time-bounded runs


def test_sensitivity_capped_by_horizon_and_checks_monotonicity() -> None:
    c = integer_sqrt_coefficients(5, scale=64)
    assert integer_sensitivity2(c, 9) == integer_sensitivity2(c, 5)
    with pytest.raises(ConfigError, match="nonincreasing"):
        integer_sensitivity2([4, 5, 1], 1)
    with pytest.raises(ConfigError, match=">= 1"):
        integer_sensitivity2(c, 0)


def test_keys_bound_by_cauchy_schwarz() -> None:
    """Histograms: rows of D with L2 norm <= 1 on m intervals: ||C' D||_F^2 <= S(m)."""
    rng = np.random.default_rng(5)
    T, m, scale = 8, 3, 64
    c = integer_sqrt_coefficients(T, scale=scale)
    C = toeplitz(c)
    bound = integer_sensitivity2(c, m)
    for _ in range(2000):
        D = np.zeros((T, 4))
        rows = rng.choice(T, size=m, replace=False)
        block = rng.normal(size=(m, 4))
        D[rows] = block / np.linalg.norm(block, axis=1, keepdims=True) * rng.uniform(0, 1, (m, 1))
        assert float(np.sum((C @ D) ** 2)) <= bound * (1 + 1e-12)


def test_plan_validation() -> None:
    with pytest.raises(ConfigError, match="horizon"):
        FactorizationRelease(start=0, period=10, horizon=0)
    with pytest.raises(ConfigError, match="factorization"):
        FactorizationRelease(start=0, period=10, horizon=4, factorization="cholesky")
    p = FactorizationRelease(start=0, period=10, horizon=4)
    assert p.grid().release_count() == 4 and p.end == 40


def test_exact_values_saturate_instead_of_failing() -> None:
    """Data can never make the release fail: (C'x)_t beyond ±2^61 is saturated (1-Lipschitz, so
    the sensitivity holds); below, it is exact."""
    import numpy as np

    p = FactorizationRelease(start=0, period=10, horizon=4)
    huge = np.array([[1 << 50], [1 << 50], [0], [-(1 << 50)]], dtype=np.int64)
    out = p.exact(huge, 1, [(0, t) for t in range(1, 5)])
    assert (np.abs(out) <= 1 << 61).all() and out[0, 0] == 1 << 61
    small = np.array([[3], [-1], [0], [2]], dtype=np.int64)
    c = p.coefficients()
    want = [sum(c[t - j] * int(small[j, 0]) for j in range(t + 1)) for t in range(4)]
    assert p.exact(small, 1, [(0, t) for t in range(1, 5)])[:, 0].tolist() == want


@pytest.mark.parametrize("constraint", [AtMostK(k=1), AtMostK(k=3), TimeBounded(bound=3)])
def test_the_accountants_dimension_bounds_the_coordinates_a_unit_moves(
    constraint: AtMostK | TimeBounded,
) -> None:
    """The budgeting's ``values`` (the event's dimension) bounds the coordinates of ``C' d`` one
    unit's change d on m intervals can make nonzero: the horizon, or for an open-ended BLT m·L
    (each interval moves the L coordinates of one column's support; changes L apart attain
    m times the column's nonzero count)."""
    plan = FactorizationRelease(start=0, period=1, horizon=None, factorization="blt",
                                planning_horizon=8)
    values = plan.budgeting(constraint).layers[0].values
    m = max(plan.participations(constraint).values())
    c = plan.coefficients()
    spread = {i * len(c) + t for i in range(m) for t, ct in enumerate(c) if ct}
    assert len(spread) == m * sum(1 for ct in c if ct) <= values == m * len(c)
    finite = FactorizationRelease(start=0, period=1, horizon=16)
    assert finite.budgeting(constraint).layers[0].values == 16
