"""The row-rescaled square root and BLT plans: exact integer sensitivities against brute force
(every support and sign vector, Python integers), exact tail sums, estimates, identity."""

from __future__ import annotations

from itertools import combinations, pairwise, product

import numpy as np
import pytest

import dpcr
from dpcr.errors import ConfigError
from dpcr.plans import plan_identity
from dpcr.plans.factorization_plan import FactorizationRelease, integer_sqrt_coefficients
from dpcr.plans.integer_factorization import (
    OPEN_BLT,
    RESCALED_SCALE,
    blt_integer_coefficients,
    open_sensitivity2,
    rescaled_row_weights,
    rescaled_sensitivity2,
    weighted_tail_sums,
)


def brute(rows: list[list[int]], m: int, *, run: bool) -> int:
    """max ||M d||^2 over d in {-1, 0, 1}^T supported on at most m intervals (anywhere, or inside
    one run of m), exact integers."""
    T = len(rows[0])
    if run:
        supports = {tuple(s) for start in range(T)
                    for r in range(1, m + 1)
                    for s in combinations(range(start, min(T, start + m)), r)}
    else:
        supports = {s for r in range(1, m + 1) for s in combinations(range(T), r)}
    best = 0
    for sup in supports:
        for signs in product((-1, 1), repeat=len(sup)):
            v = [sum(row[j] * sg for j, sg in zip(sup, signs, strict=True)) for row in rows]
            best = max(best, sum(x * x for x in v))
    return best


def matrix(coeffs: list[int], weights: list[int], T: int) -> list[list[int]]:
    c = coeffs + [0] * max(0, T - len(coeffs))
    return [[weights[t] * c[t - j] if j <= t else 0 for j in range(T)] for t in range(T)]


def test_weighted_tail_sums_are_exact() -> None:
    rng = np.random.default_rng(3)
    for n, wmax, rmax in [(1, 2, 2), (7, 2**18, 2**60), (64, 2**29, 2**40), (301, 5, 2**61)]:
        w = rng.integers(0, wmax, n)
        r = rng.integers(0, rmax, int(rng.integers(1, n + 1)))
        got = weighted_tail_sums(w, r)
        want = [sum(int(w[s + u]) * int(r[u]) for u in range(min(r.size, n - s)))
                for s in range(n)]
        assert list(got) == want


@pytest.mark.parametrize("T", [2, 3, 5, 7])
def test_rescaled_sensitivity_is_the_brute_force_maximum(T: int) -> None:
    c = integer_sqrt_coefficients(T, scale=RESCALED_SCALE)
    q = list(rescaled_row_weights(T))
    M = matrix(c, q, T)
    assert rescaled_sensitivity2(c, q, 1, run=False) == brute(M, 1, run=False)
    for m in range(2, T + 1):
        assert rescaled_sensitivity2(c, q, m, run=True) == brute(M, m, run=True)
    # at most k >= T is a run of T
    assert rescaled_sensitivity2(c, q, T, run=False) == brute(M, T, run=False)
    if T > 2:
        with pytest.raises(ConfigError, match="at most k"):
            rescaled_sensitivity2(c, q, 2, run=False)


def test_rescaled_weights_equalise_the_column_norms() -> None:
    """q mirrors the real row scales: the weighted column norms of Q C' are within 1% of each
    other (the plain square root's first column is ln(T)/pi times its last)."""
    T = 256
    c = integer_sqrt_coefficients(T, scale=RESCALED_SCALE)
    q = np.asarray(rescaled_row_weights(T), dtype=object)
    norms = weighted_tail_sums(np.asarray(q * q, dtype=np.int64),
                               np.asarray([v * v for v in c], dtype=np.int64))
    assert max(norms) <= 1.01 * min(norms)


@pytest.mark.parametrize(("omega", "theta", "cap"), [
    ((0.5,), (0.5,), 6),
    ((0.3, 0.2), (0.6, 0.9), 9),
    (*tuple(list(b) for b in (OPEN_BLT[1024].omega, OPEN_BLT[1024].theta)), 7),
])
def test_open_ended_blt_sensitivity_bounds_every_horizon_and_is_attained(
    omega: tuple[float, ...], theta: tuple[float, ...], cap: int
) -> None:
    c = blt_integer_coefficients(omega, theta, scale=64, cap=cap)
    assert c[0] == 64 and all(b <= a for a, b in pairwise(c)) and min(c) >= 0
    for m in (1, 2, 3):
        exact = open_sensitivity2(c, m)
        long = cap + m  # the whole response of the first m intervals fits
        for T in range(1, long + 1):
            M = matrix(c, [1] * T, T)
            seen = max(brute(M, m, run=False), brute(M, m, run=True))
            assert seen <= exact
        assert brute(matrix(c, [1] * long, long), m, run=False) == exact


def test_blt_coefficients_are_integer_only_and_nonincreasing() -> None:
    b = OPEN_BLT[65536]
    c = blt_integer_coefficients(b.omega, b.theta, scale=1 << 20, cap=1 << 16)
    assert c[0] == 1 << 20 and all(isinstance(v, int) for v in c[:10])
    assert all(y <= x for x, y in pairwise(c))
    with pytest.raises(ConfigError):
        blt_integer_coefficients((0.7, 0.4), (0.5, 0.5), scale=8, cap=4)


@pytest.mark.parametrize("kind", ["rescaled", "blt"])
def test_noise_free_estimates_are_the_exact_running_totals(kind: str) -> None:
    T = 40
    horizon = T if kind == "rescaled" else None
    p = FactorizationRelease(start=0, period=10, horizon=horizon, factorization=kind)
    rng = np.random.default_rng(1)
    x = rng.integers(-5, 6, size=(T, 2))
    nodes = [(0, t) for t in range(1, T + 1)]
    y = p.exact(x, 1, nodes)
    # a few new intervals (dot products) give the same values as the whole convolution
    assert (p.exact(x, 1, nodes[-3:]) == y[-3:]).all()
    est = p.estimate({n: y[i] for i, n in enumerate(nodes)}, {(0, 1): 4.0}, T)
    assert np.allclose(est.estimate, np.cumsum(x, axis=0), atol=1e-6)
    # variances against the dense matrices: Var = 4 * ||row t of A C'^-1 Q^-1||^2
    c = p.coefficients_upto(T)
    q = p.row_weights(T)
    M = np.array(matrix(c, q, T), dtype=np.float64)
    B = np.tril(np.ones((T, T))) @ np.linalg.inv(M)
    assert np.allclose(est.estimate_var, 4.0 * (B * B).sum(axis=1), rtol=1e-8)
    D = np.linalg.inv(M)
    assert np.allclose(est.change_var, 4.0 * (D * D).sum(axis=1), rtol=1e-8)


def test_plan_sensitivities_by_constraint() -> None:
    p = FactorizationRelease(start=0, period=10, horizon=6, factorization="rescaled")
    c, q = p.coefficients(), p.row_weights()
    M = matrix(c, q, 6)
    assert p.sensitivities(dpcr.AtMostK(k=1)) == {"all": brute(M, 1, run=False)}
    assert p.sensitivities(dpcr.AtMostK(k=9)) == {"all": brute(M, 6, run=False)}
    # a 25-unit bound on a 10-unit period: runs of ceil(25/10) + 1 = 4 intervals
    assert p.sensitivities(dpcr.TimeBounded(bound=25)) == {"all": brute(M, 4, run=True)}
    with pytest.raises(ConfigError, match="at most k"):
        p.sensitivities(dpcr.AtMostK(k=3))
    blt = FactorizationRelease(start=0, period=10, horizon=None, factorization="blt")
    assert blt.end is None and blt.planning_horizon == 1024
    assert blt.due(0, 5) == [(0, t) for t in range(1, 6)]
    assert blt.sensitivities(dpcr.AtMostK(k=3)) == {
        "all": open_sensitivity2(blt.coefficients(), 3)
    }


def test_validation_and_identity() -> None:
    with pytest.raises(ConfigError, match="finite horizon"):
        FactorizationRelease(start=0, period=10, horizon=None, factorization="rescaled")
    with pytest.raises(ConfigError, match="planning_horizon"):
        FactorizationRelease(start=0, period=10, horizon=8, factorization="blt",
                             planning_horizon=100)
    sqrt = FactorizationRelease(start=0, period=10, horizon=4)
    assert plan_identity(sqrt) == (
        "FactorizationPlan(start=0, period=10, horizon=4, factorization='sqrt', scale=1048576)"
    )  # as stores written before the other factorizations bound it
    a = FactorizationRelease(start=0, period=10, horizon=None, factorization="blt")
    b = FactorizationRelease(start=0, period=10, horizon=None, factorization="blt",
                             planning_horizon=65536)
    assert "sha256=" in plan_identity(a) and plan_identity(a) != plan_identity(b)
