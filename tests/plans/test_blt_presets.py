"""Open-ended BLT presets fitted for m participations: the objective they were fitted for (exact
infinite-matrix sensitivity, noise by the buffer recursion) against dense and brute-force
computations, the integer matrices' exact sensitivity against an exhaustive search over
participation patterns, and the plan's use of them."""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

import dpcr
from dpcr.errors import ConfigError
from dpcr.plans import plan_identity
from dpcr.plans.blt_presets import (
    FIT_PARTICIPATIONS,
    FITTED,
    OPEN_BLT,
    blt_preset,
    fitted,
    nearest_fit,
)
from dpcr.plans.factorization import BLT, toeplitz_sensitivity2
from dpcr.plans.factorization_plan import FactorizationRelease
from dpcr.plans.integer_factorization import blt_integer_coefficients, open_sensitivity2
from plans.test_integer_factorizations import brute, matrix


def objective(blt: BLT, T: int, m: int) -> float:
    return math.sqrt(blt.open_sensitivity2(m) * blt.noise2(T))


def recursion_noise2(blt: BLT, T: int) -> float:
    """sum_{t<T} b_t^2 by running the buffer recursion on an impulse (O(T d))."""
    om, th = np.asarray(blt.omega), np.asarray(blt.theta)
    S, total, out = np.zeros(om.size), 0.0, 0.0
    for t in range(T):
        y = (1.0 if t == 0 else 0.0) - float(om @ S)
        S = th * S + y
        total += y
        out += total * total
    return out


def test_every_m_and_horizon_is_fitted_and_valid() -> None:
    assert set(FITTED) == {(m, T) for m in FIT_PARTICIPATIONS[1:] for T in OPEN_BLT}
    for (m, T), (om, th) in FITTED.items():
        b = BLT(omega=om, theta=th)  # 0 < theta < 1, omega > 0
        assert sum(om) <= 1, (m, T)  # nonincreasing coefficients: the worst-pattern theorem
        assert fitted(T, m) == b


@pytest.mark.parametrize("T", sorted(OPEN_BLT))
def test_a_fit_for_m_beats_the_single_participation_preset_at_m(T: int) -> None:
    one = OPEN_BLT[T]
    for m in FIT_PARTICIPATIONS[1:]:
        assert objective(fitted(T, m), T, m) < objective(one, T, m), (m, T)
    # and the single-participation preset stays the best at m = 1
    assert objective(one, T, 1) <= min(objective(fitted(T, m), T, 1) for m in (2, 4)) + 1e-9


@pytest.mark.parametrize(("m", "T"), [(1, 1024), (4, 1024), (5, 4096), (64, 65536)])
def test_noise_by_doubling_is_the_recursion(m: int, T: int) -> None:
    b = fitted(T, m)
    assert b.noise2(T) == pytest.approx(recursion_noise2(b, T), rel=1e-10)
    short = b.noise_coefficients(50)  # the polynomial form agrees where it is accurate
    assert b.noise2(50) == pytest.approx(float(short @ short), rel=1e-9)
    assert b.noise2(1) == 1.0 and b.noise2(0) == 0.0


@pytest.mark.parametrize("m", [1, 2, 5])
def test_open_sensitivity_is_the_infinite_gram_sum(m: int) -> None:
    b = fitted(1024, m)
    long = 200_000  # every coefficient below 1e-9 of the first: the tail is negligible
    assert b.c_coefficients(long)[-1] < 1e-9
    assert b.open_sensitivity2(m) == pytest.approx(
        toeplitz_sensitivity2(b.c_coefficients(long), m), rel=1e-9
    )


@pytest.mark.parametrize("m", [2, 3, 5])
def test_fitted_integer_matrices_sensitivity_is_the_brute_force_maximum(m: int) -> None:
    """Small scale and support, so that the exhaustive search runs: over every support of <= m
    intervals (anywhere, or a run) and every sign vector, the largest ||C'd||^2 of every finite
    prefix is at most the open-ended value, and the whole response attains it."""
    om, th = FITTED[(m, 1024)]
    cap = 7
    c = blt_integer_coefficients(om, th, scale=64, cap=cap)
    assert c[0] == 64 and min(c) >= 0 and all(b <= a for a, b in pairwise(c))
    for mm in range(1, m + 1):
        exact = open_sensitivity2(c, mm)
        long = cap + mm
        for T in range(1, long + 1, 3):
            M = matrix(c, [1] * T, T)
            assert max(brute(M, mm, run=False), brute(M, mm, run=True)) <= exact
        M = matrix(c, [1] * long, long)
        assert brute(M, mm, run=False) == exact == brute(M, mm, run=True)


def test_nearest_fit_and_preset_lookup() -> None:
    assert [nearest_fit(m) for m in (1, 2, 7, 9, 11, 14, 20, 40, 1000)] == [
        1, 2, 8, 10, 12, 16, 24, 48, 64
    ]
    with pytest.raises(ConfigError):
        nearest_fit(0)
    T, om, th = blt_preset(16, 5)
    assert T == 1024 and (om, th) == FITTED[(5, 1024)]
    assert blt_preset(10**6)[0] == 65536 and blt_preset(2000, 1)[1] == OPEN_BLT[4096].omega


def test_plan_fitted_for_m() -> None:
    base = {"start": 0, "period": 10, "horizon": None, "factorization": "blt"}
    one = FactorizationRelease(**base)
    four = FactorizationRelease(**base, fit_participations=4)
    assert one.fit_participations == 1 and one.coefficients() != four.coefficients()
    assert "fit_participations" not in plan_identity(one)  # stores bound before keep working
    assert "fit_participations=4" in plan_identity(four)
    assert "fitted for 4 participations" in four.describe()
    # the sensitivity is the exact one for the constraint, whatever the fit
    k4 = dpcr.AtMostK(k=4)
    assert four.sensitivities(k4) == {"all": open_sensitivity2(four.coefficients(), 4)}
    assert four.sensitivities(k4)["all"] < one.sensitivities(k4)["all"]
    with pytest.raises(ConfigError, match="fit_participations"):
        FactorizationRelease(start=0, period=10, horizon=8, fit_participations=2)
    with pytest.raises(ConfigError, match="fit_participations"):
        FactorizationRelease(**base, fit_participations=0)


def test_auto_offers_and_prefers_the_blt_fitted_for_the_constraint(tmp_path: Path) -> None:
    from dpcr.release import rank_plans, running_candidates

    s = dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp_path / "log.jsonl"),
        constraint=dpcr.AtMostK(k=4),
        plan=dpcr.DisjointRelease(start="2025-01-01", period="1d"),
        queries=[dpcr.Count(name="n")],
        budget=dpcr.Budget(epsilon=1.0, delta=1e-6),
        noise=dpcr.DiscreteGaussian(),
        output_dir=tmp_path / "out",
        horizon=1024,
    )
    blts = [p for p in running_candidates(s) if getattr(p, "factorization", None) == "blt"]
    assert sorted(p.fit_participations for p in blts) == [1, 4]
    ranked = [r.plan for r in rank_plans(s)]
    assert ranked.index(blts[1]) < ranked.index(blts[0])
