"""Composition and conversion, checked against exact privacy curves of small mechanisms."""

from __future__ import annotations

import doctest
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.stats import norm

import dpcr.accounting.composition as composition_module
from dpcr.accounting import (
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    Guarantee,
    PrivacyCost,
    PureDpEvent,
    SelfComposedEvent,
    ZcdpEvent,
    basic_composition,
    compose,
    cost_of,
    epsilon_of,
    worst_guarantee,
    zcdp_composition,
    zcdp_delta,
    zcdp_epsilon,
)
from dpcr.errors import ConfigError, UnsupportedEventError

LAPLACE = DiscreteLaplaceEvent(scale=Fraction(10), sensitivity=Fraction(1))  # ε = 1/10
GAUSS = DiscreteGaussianEvent(sigma2=Fraction(50), sensitivity2=Fraction(2))  # ρ = 1/50


def simple_epsilon(rho: float, delta: float) -> float:
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


# --- exact curves -------------------------------------------------------------------------------


def gaussian_delta(epsilon: float, mu: float) -> float:
    """Exact δ(ε) of the Gaussian mechanism with Δ/σ = mu (Balle & Wang 2018)."""
    return float(
        norm.cdf(mu / 2 - epsilon / mu) - math.exp(epsilon + norm.logcdf(-mu / 2 - epsilon / mu))
    )


def gaussian_epsilon(rho: float, delta: float) -> float:
    """Exact smallest ε with δ(ε) <= delta for the Gaussian with ρ = mu²/2."""
    mu = math.sqrt(2 * rho)
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    hi = 2 * simple_epsilon(rho, delta) + 1
    return float(brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, hi, xtol=1e-13))


def discrete_gaussian_delta(epsilon: float, sigma2: int, shift: int) -> float:
    """Exact δ(ε) of the discrete Gaussian (both orders of the pair), truncated grid."""
    half = int(40 * math.sqrt(sigma2)) + 2 * shift
    x = np.arange(-half, half + 1)
    p = np.exp(-(x.astype(float) ** 2) / (2 * sigma2))
    p /= p.sum()
    q = np.exp(-((x - shift).astype(float) ** 2) / (2 * sigma2))
    q /= q.sum()
    d1 = np.maximum(0.0, p - math.exp(epsilon) * q).sum()
    d2 = np.maximum(0.0, q - math.exp(epsilon) * p).sum()
    return float(max(d1, d2))


# --- costs and basic composition ------------------------------------------------------------


def test_cost_of_each_event() -> None:
    assert cost_of(LAPLACE) == PrivacyCost.pure(Fraction(1, 10))
    assert cost_of(GAUSS) == PrivacyCost.zcdp(Fraction(1, 50))
    assert cost_of(PureDpEvent(epsilon=0.5)) == PrivacyCost.pure(Fraction(1, 2))
    assert cost_of(ZcdpEvent(rho=0.25)).rho == Fraction(1, 4)
    both = ComposedEvent(events=(LAPLACE, GAUSS))
    assert cost_of(both) == PrivacyCost(
        pure_epsilon=Fraction(1, 10), pure_rho=Fraction(1, 200), rho=Fraction(1, 50)
    )
    assert cost_of(SelfComposedEvent(event=both, count=3)) == cost_of(both).times(3)
    assert cost_of(SelfComposedEvent(event=both, count=0)).is_zero


def test_unsupported_event_is_refused() -> None:
    with pytest.raises(UnsupportedEventError, match="supported events"):
        cost_of("laplace")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedEventError):
        compose([LAPLACE, object()])  # type: ignore[list-item]


def test_composition_of_compositions_thm_2_1() -> None:
    nested = ComposedEvent(events=(ComposedEvent(events=(LAPLACE, GAUSS)), LAPLACE))
    flat = ComposedEvent(events=(LAPLACE, GAUSS, LAPLACE))
    assert epsilon_of(nested, delta=1e-6) == epsilon_of(flat, delta=1e-6)
    k = SelfComposedEvent(event=LAPLACE, count=7)
    assert epsilon_of(k, delta=0) == epsilon_of(ComposedEvent(events=(LAPLACE,) * 7), delta=0)


def test_basic_composition_is_exact_and_rounded_up() -> None:
    g = epsilon_of(SelfComposedEvent(event=LAPLACE, count=3), delta=0.0)
    assert (g.epsilon, g.delta, g.method) == (0.30000000000000004, 0.0, "basic")
    assert g.rho is not None and Fraction(g.rho) >= Fraction(3, 200)
    assert Fraction(g.epsilon) >= Fraction(3, 10)
    assert epsilon_of(SelfComposedEvent(event=LAPLACE, count=10), delta=0.0).epsilon == 1.0
    assert basic_composition([0.1, 0.2]) >= 0.1 + 0.2 - 1e-17
    assert Fraction(basic_composition([0.1] * 3)) >= 3 * Fraction(0.1)
    assert zcdp_composition([0.5, 0.25]) == 0.75


def test_nothing_released_is_free() -> None:
    g = epsilon_of(ComposedEvent(events=()), delta=1e-6)
    assert (g.epsilon, g.delta, g.method) == (0.0, 0.0, "none")


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize(("scale", "sens"), [(Fraction(1), 1), (Fraction(5, 2), 1), (3, 2)])
def test_discrete_laplace_k_fold_exact_privacy_loss(k: int, scale: Fraction, sens: int) -> None:
    """Exact PMFs of k independent discrete Laplace releases on neighbouring inputs (each query
    shifted by the sensitivity, the worst case): max |log ratio| <= reported ε and δ(ε) = 0."""
    event = DiscreteLaplaceEvent(scale=Fraction(scale), sensitivity=Fraction(sens))
    reported = epsilon_of(SelfComposedEvent(event=event, count=k), delta=0.0)
    assert reported.delta == 0.0
    half = 40
    x = np.arange(-half, half + 1)
    t = float(scale)
    norm_const = (1 + math.exp(-1 / t)) / (1 - math.exp(-1 / t))  # Σ_x exp(-|x|/t), exact
    p1 = np.exp(-np.abs(x) / t) / norm_const
    q1 = np.exp(-np.abs(x - sens) / t) / norm_const
    p, q = p1, q1
    for _ in range(k - 1):
        p, q = np.multiply.outer(p, p1), np.multiply.outer(q, q1)
    # the privacy loss of an output is the sum of the per-release log ratios
    log_ratio_1 = (np.abs(x - sens) - np.abs(x)) / t
    lr = log_ratio_1
    for _ in range(k - 1):
        lr = np.add.outer(lr, log_ratio_1)
    true_eps = float(np.abs(lr).max())
    assert true_eps == pytest.approx(k * sens / t)
    assert true_eps <= reported.epsilon + 1e-12
    # hockey-stick divergence at the reported ε is zero (both directions)
    e = math.exp(reported.epsilon)
    assert np.maximum(0.0, p - e * q).sum() <= 1e-15
    assert np.maximum(0.0, q - e * p).sum() <= 1e-15


# --- zCDP -> (ε, δ) ------------------------------------------------------------------------------


def test_cks_formula_forms_agree() -> None:
    """Cor. 13's δ(α) form and Prop. 12's form (1/α)(1-1/α)^(α-1) are the same; the ε(α)
    used by the code inverts it."""
    for alpha in (1.01, 1.5, 3.0, 17.0, 400.0):
        for rho, eps in ((0.1, 1.0), (1.0, 5.0), (0.01, 0.3)):
            log_common = (alpha - 1) * (alpha * rho - eps)
            log_d13 = log_common - math.log(alpha - 1) + alpha * math.log1p(-1 / alpha)
            log_d12 = log_common - math.log(alpha) + (alpha - 1) * math.log1p(-1 / alpha)
            assert log_d13 == pytest.approx(log_d12, rel=1e-12, abs=1e-12)
            log_inv = -log_d13
            e_alpha = (
                alpha * rho + math.log1p(-1 / alpha) + (log_inv - math.log(alpha)) / (alpha - 1)
            )
            assert e_alpha == pytest.approx(eps, rel=1e-9, abs=1e-12)


RHOS = [1e-6, 1e-4, 1e-3, 0.01, 0.1, 0.5, 1.0, 5.0, 50.0, 1000.0]
DELTAS = [0.1, 1e-3, 1e-6, 1e-10, 1e-15]


@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("delta", DELTAS)
def test_zcdp_conversion_sound_and_tight_for_the_gaussian(rho: float, delta: float) -> None:
    eps = zcdp_epsilon(rho, delta)
    exact = gaussian_epsilon(rho, delta)
    assert exact <= eps  # never less than the exact ε of a ρ-zCDP mechanism
    assert gaussian_delta(eps, math.sqrt(2 * rho)) <= delta * (1 + 1e-9)
    assert eps <= simple_epsilon(rho, delta)
    if exact > 0.01:
        # within a modest factor: measured 1.01-1.4 for δ <= 1e-3, up to 2 at δ = 0.1
        assert eps <= (1.5 if delta <= 1e-3 else 2.5) * exact
    # the δ direction agrees with the ε direction
    assert zcdp_delta(rho, eps) <= delta * (1 + 1e-6)


@pytest.mark.parametrize(("sigma2", "shift"), [(1, 1), (4, 1), (25, 2), (100, 1)])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-9])
def test_zcdp_conversion_sound_for_the_discrete_gaussian(
    sigma2: int, shift: int, delta: float
) -> None:
    event = DiscreteGaussianEvent(sigma2=Fraction(sigma2), sensitivity2=Fraction(shift**2))
    g = epsilon_of(event, delta=delta)
    assert g.rho == pytest.approx(shift**2 / (2 * sigma2))
    assert discrete_gaussian_delta(g.epsilon, sigma2, shift) <= delta


@settings(max_examples=200, deadline=None)
@given(
    log_rho=st.floats(-14, 8),
    log_delta=st.floats(-30, -0.5),
)
def test_zcdp_conversion_property(log_rho: float, log_delta: float) -> None:
    rho, delta = math.exp(log_rho), math.exp(log_delta)
    eps = zcdp_epsilon(rho, delta)
    assert 0 <= eps <= simple_epsilon(rho, delta)
    assert gaussian_epsilon(rho, delta) <= eps + 1e-9 * max(1.0, eps)


@given(r1=st.floats(1e-8, 100), r2=st.floats(1e-8, 100), d=st.floats(1e-12, 0.5))
def test_zcdp_conversion_monotone(r1: float, r2: float, d: float) -> None:
    lo, hi = sorted((r1, r2))
    assert zcdp_epsilon(lo, d) <= zcdp_epsilon(hi, d)
    assert zcdp_epsilon(hi, d) <= zcdp_epsilon(hi, d / 2)


def test_zcdp_edge_cases() -> None:
    assert zcdp_epsilon(0.0, 1e-6) == 0.0
    assert zcdp_epsilon(1e-12, 0.5) == 0.0  # (0, δ) already holds
    assert zcdp_delta(0.0, 0.0) == 0.0
    assert zcdp_delta(100.0, 0.0) == 1.0 or zcdp_delta(100.0, 0.0) <= 1.0
    with pytest.raises(ConfigError, match="delta"):
        zcdp_epsilon(1.0, 0.0)
    with pytest.raises(ConfigError, match="delta"):
        zcdp_epsilon(1.0, 1.0)
    with pytest.raises(ConfigError, match="rho"):
        zcdp_epsilon(-1.0, 1e-6)
    with pytest.raises(ConfigError, match="delta > 0"):
        epsilon_of(GAUSS, delta=0.0)


# --- mixed pure + zCDP ----------------------------------------------------------------------------


@pytest.mark.parametrize("n_pure", [0, 1, 5, 200])
@pytest.mark.parametrize("n_gauss", [0, 1, 5, 200])
@pytest.mark.parametrize("delta", [1e-3, 1e-8])
def test_mixed_reports_the_better_route(n_pure: int, n_gauss: int, delta: float) -> None:
    event = ComposedEvent(
        events=(
            SelfComposedEvent(event=LAPLACE, count=n_pure),
            SelfComposedEvent(event=GAUSS, count=n_gauss),
        )
    )
    g = epsilon_of(event, delta=delta)
    eps_pure, rho = n_pure * 0.1, n_gauss * 0.02
    if n_pure == n_gauss == 0:
        assert g.epsilon == 0
        return
    route_a = zcdp_epsilon(n_pure * 0.01 / 2 + rho, delta)
    route_b = eps_pure + (zcdp_epsilon(rho, delta) if rho else 0.0)
    assert g.epsilon == pytest.approx(min(route_a, route_b), rel=1e-12)
    assert g.epsilon >= min(route_a, route_b) - 1e-15
    assert g.rho == pytest.approx(n_pure * 0.005 + rho)
    assert g.delta == (0.0 if g.method == "basic" else delta)
    if n_gauss == 0 and n_pure <= 5:
        assert g.method == "basic" and g.epsilon == pytest.approx(eps_pure)


def test_many_pure_releases_use_zcdp_when_better() -> None:
    g = epsilon_of(SelfComposedEvent(event=LAPLACE, count=1000), delta=1e-6)
    assert g.method == "pure-as-zcdp"
    assert g.epsilon < 100 / 3  # basic composition gives 100
    assert epsilon_of(SelfComposedEvent(event=LAPLACE, count=1000), delta=0.0).epsilon == 100.0


def test_worst_guarantee() -> None:
    a = Guarantee(epsilon=1.0, delta=0.0, rho=0.5, method="basic")
    b = Guarantee(epsilon=0.5, delta=1e-6, rho=0.1, method="zcdp")
    w = worst_guarantee([a, b])
    assert (w.epsilon, w.delta, w.rho, w.method) == (1.0, 1e-6, 0.5, "basic")
    assert worst_guarantee([]).method == "none"


def test_guarantee_validation_names_the_value() -> None:
    with pytest.raises(ConfigError, match="-1"):
        Guarantee(epsilon=-1.0, delta=0.0, rho=None, method="basic")
    with pytest.raises(ConfigError, match="delta"):
        Guarantee(epsilon=1.0, delta=2.0, rho=None, method="basic")


def test_doctests() -> None:
    assert doctest.testmod(composition_module).failed == 0
