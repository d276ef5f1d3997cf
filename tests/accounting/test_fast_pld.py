"""Fast PLD leaves and sums: equal to dp-accounting's own constructions, never below them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcr.accounting.accountants import PldAccountant, _gaussian_mu, _rho_of, tightest
from dpcr.accounting.events import ComposedEvent, GaussianEvent, LaplaceEvent
from dpcr.accounting.fast_pld import laplace_pmf

DELTA = 1e-6


def _dense(pmf: object) -> tuple[int, np.ndarray]:
    if hasattr(pmf, "_probs"):
        return pmf._lower_loss, pmf._probs  # type: ignore[attr-defined]
    d = pmf._loss_probs  # type: ignore[attr-defined]
    lo = min(d)
    out = np.zeros(max(d) - lo + 1)
    for k, v in d.items():
        out[k - lo] = v
    return lo, out


@settings(max_examples=40, deadline=None)
@given(
    eps0=st.floats(min_value=1e-5, max_value=3.0),
    h=st.sampled_from([1e-5, 5.8e-5, 1e-4, 1e-3, 1e-2, 0.3]),
)
def test_laplace_pmf_equals_dp_accounting_connect_the_dots(eps0: float, h: float) -> None:
    from dp_accounting.pld import privacy_loss_distribution as pld

    if eps0 / h > 2e5:
        return
    ref = pld.from_laplace_mechanism(1 / eps0, value_discretization_interval=h)._pmf_remove
    ref_lo, ref_p = _dense(ref)
    lo, p = laplace_pmf(eps0, h)
    assert lo <= ref_lo
    assert len(p) >= len(ref_p)
    shift = ref_lo - lo
    padded = np.zeros(len(p))
    padded[shift : shift + len(ref_p)] = ref_p
    # theirs is a second difference of δ at grid points (cancellation error ~1e-16 / h)
    assert np.max(np.abs(p - padded)) <= 1e-14 / h + 1e-15
    assert ref._infinity_mass <= 1e-15
    assert abs(p.sum() - 1) <= 1e-12
    assert np.all(p >= 0)


def test_laplace_grid_covers_the_loss_range_on_grid_points() -> None:
    for eps0, h in [(0.1, 0.001), (0.3, 0.1), (1.0, 0.25), (0.7, 0.1)]:
        lo, p = laplace_pmf(eps0, h)
        assert lo * h <= -eps0 and (lo + len(p) - 1) * h >= eps0


def _het(n: int, seed: int = 7) -> ComposedEvent:
    rng = np.random.default_rng(seed)
    eps_i = rng.uniform(0.001, 0.02, size=n) * math.sqrt(1e4 / n)
    return ComposedEvent(events=tuple(LaplaceEvent(scale=1 / float(e)) for e in eps_i))


def test_heterogeneous_laplace_matches_a_fine_dp_accounting_tree() -> None:
    from dp_accounting.pld import privacy_loss_distribution as pld

    ev = _het(60)
    ours = PldAccountant()
    ours.compose(ev)
    got = ours.epsilon(DELTA)
    laps = [e for e in ev.events if isinstance(e, LaplaceEvent)]
    plds = [pld.from_laplace_mechanism(e.scale, value_discretization_interval=2e-5) for e in laps]
    opt = [
        pld.from_laplace_mechanism(
            e.scale,
            value_discretization_interval=2e-5,
            pessimistic_estimate=False,
            use_connect_dots=False,
        )
        for e in laps
    ]
    hi, lo = plds[0], opt[0]
    for p, q in zip(plds[1:], opt[1:], strict=True):
        hi, lo = hi.compose(p), lo.compose(q)
    upper = hi.get_epsilon_for_delta(DELTA)
    lower = lo.get_epsilon_for_delta(DELTA)
    assert got >= lower  # never below an optimistic estimate of the truth
    assert got == pytest.approx(upper, rel=1e-4)


def test_many_distinct_gaussians_float_sum_is_an_upper_bound() -> None:
    from fractions import Fraction

    rng = np.random.default_rng(3)
    gauss = [
        (GaussianEvent(sigma=float(s)), 1 + i % 3) for i, s in enumerate(rng.uniform(1, 9, 300))
    ]
    exact = sum((Fraction(1) / Fraction(e.sigma) ** 2 * c for e, c in gauss), Fraction(0))
    mu = _gaussian_mu(gauss)
    assert Fraction(mu) ** 2 >= exact
    assert mu == pytest.approx(math.sqrt(float(exact)), rel=1e-11)


def test_float_rho_is_an_upper_bound_of_the_exact_sum() -> None:
    from dpcr.accounting.composition import cost_of

    ev = _het(200)
    items = tuple((e, 1) for e in ev.events)
    exact = sum((cost_of(e).total_rho for e, _ in items), start=cost_of(items[0][0]).total_rho * 0)
    got = _rho_of(items)
    assert got is not None and got >= exact
    assert got == pytest.approx(float(exact), rel=1e-9)


def test_mixed_laplace_gaussian_stays_above_the_gaussian_part_alone() -> None:
    ev = _het(100)
    g = GaussianEvent(sigma=20.0)
    both = tightest(ComposedEvent(events=(*ev.events, g)), delta=DELTA)
    assert both.epsilon >= tightest(ev, delta=DELTA).epsilon
    assert both.method == "pld"


@pytest.mark.parametrize("sigma2,d,k", [(9, 1, 10), (50, 2, 30), (400, 3, 5)])
def test_discrete_gaussian_connect_the_dots_between_optimistic_and_rounded_up(
    sigma2: int, d: int, k: int
) -> None:
    from fractions import Fraction

    from dp_accounting.pld import privacy_loss_distribution as pld

    from dpcr.accounting.accountants import _discrete_gaussian_pld
    from dpcr.accounting.events import DiscreteGaussianEvent, SelfComposedEvent

    e = DiscreteGaussianEvent(sigma2=Fraction(sigma2), sensitivity2=Fraction(d * d))
    got = tightest(SelfComposedEvent(event=e, count=k), delta=DELTA)
    assert got.method == "pld"

    def ref(pessimistic: bool) -> float:
        p = pld.from_discrete_gaussian_mechanism(
            math.sqrt(sigma2),
            sensitivity=d,
            value_discretization_interval=1e-5,
            pessimistic_estimate=pessimistic,
        )
        return float(p.self_compose(k).get_epsilon_for_delta(DELTA))

    lower, upper = ref(False), ref(True)
    assert lower <= got.epsilon <= upper * (1 + 1e-9)
    assert got.epsilon <= lower * (1 + 1e-4)
    # the split PLD of one mechanism is at least the exact δ(ε) at every grid point
    one = _discrete_gaussian_pld(e, 1e-3)
    xs = np.arange(-40 * math.isqrt(sigma2) - d, 40 * math.isqrt(sigma2) + d + 1)
    w = np.exp(-(xs.astype(float) ** 2) / (2 * sigma2))
    w /= w.sum()
    loss = (d * d - 2 * d * xs) / (2 * sigma2)
    for eps in (0.0, 0.05, 0.2, 0.5):
        exact = float(np.sum(w * np.maximum(0.0, -np.expm1(eps - loss))))
        assert one.get_delta_for_epsilon(eps) >= exact * (1 - 1e-12)
