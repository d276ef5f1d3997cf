"""The noise search: the zCDP ρ in one pass over the orders, the tight ρ in a few evaluations,
and only checked values returned."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpcr.accounting.composition import epsilon_of, zcdp_rho
from dpcr.accounting.events import ZcdpEvent
from dpcr.release._calibrate import largest_rho


@pytest.mark.parametrize("epsilon", [1e-3, 0.05, 1.0, 7.5, 1000.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-6, 0.1])
def test_zcdp_rho_is_the_largest_within(epsilon: float, delta: float) -> None:
    rho = zcdp_rho(epsilon, delta)

    def within(r: float) -> bool:
        return epsilon_of(ZcdpEvent(rho=r), delta=delta).epsilon <= epsilon

    assert within(rho)
    assert not within(rho * (1 + 1e-11))


@pytest.mark.parametrize("gain", [1.0, 1.03, 1.2, 1.6, 3.0])
@pytest.mark.parametrize("epsilon", [0.01, 1.0, 50.0])
def test_the_tight_search_is_precise_and_short(gain: float, epsilon: float) -> None:
    """A tighter accountant: ε(ρ) is the zCDP conversion at ρ / gain (what the true ρ is)."""
    delta = 1e-6
    calls: list[float] = []

    def spent(rho: Fraction) -> float:
        calls.append(float(rho))
        return epsilon_of(ZcdpEvent(rho=float(rho) / gain), delta=delta).epsilon

    got = largest_rho(epsilon, delta, spent)
    truth = zcdp_rho(epsilon, delta) * gain
    assert got in calls  # only checked values are returned
    assert spent(Fraction(got)) <= epsilon
    assert truth * math.exp(-1.1e-4) <= got <= truth
    assert len(calls) <= 1 + 12 + 1  # (the extra call is this test's check)


def test_covered_classes_leave_the_calibration_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search accounts for the classes no other class covers (at most 381 mutations covers
    at most 3 and at most 1); the calibrated noise is the one a search over every class finds."""
    import dpcr
    from dpcr.release import _calibrate

    settings = dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path="log.jsonl"),
        constraint=dpcr.Hybrid(
            column="kind",
            classes={"b": dpcr.AtMostK(k=1), "c": dpcr.AtMostK(k=3)},
            default=dpcr.AtMostK(k=381),
        ),
        plan=dpcr.TreeRelease(start="2025-01-08", period="1h", end="2025-02-07", branching=8),
        queries=[dpcr.Count(name="n"), dpcr.Sum(name="s", column="v", lower=0, upper=100)],
        budget=dpcr.Budget(epsilon=1.0, delta=1e-6),
        noise=dpcr.DiscreteGaussian(),
        output_dir="out",
    )
    participation = settings.plan.participation(settings.constraint, reporting=None)
    assert list(_calibrate._widest(participation)) == ["*"]
    _calibrate._CALIBRATIONS.clear()
    reduced = _calibrate.calibrate(settings)
    monkeypatch.setattr(_calibrate, "_widest", lambda p: dict(p))
    _calibrate._CALIBRATIONS.clear()
    full = _calibrate.calibrate(settings)
    _calibrate._CALIBRATIONS.clear()
    assert reduced.layers == full.layers
    assert reduced.guarantee == full.guarantee and reduced.per_class == full.per_class
