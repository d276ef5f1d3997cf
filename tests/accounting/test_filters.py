"""PrivacyFilter refuses before anything changes; PrivacyOdometer reports the loss so far.

Participation comes from a plan (here disjoint weekly releases); accounting itself imports none.
"""

from __future__ import annotations

import doctest
import math
from fractions import Fraction

import pytest

import dpcr.accounting.guarantee as guarantee_module
from dpcr.accounting import (
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    Participation,
    PrivacyFilter,
    PrivacyOdometer,
    PureDpEvent,
    SelfComposedEvent,
)
from dpcr.accounting.accountants import stated_guarantee, tightest
from dpcr.accounting.events import ComposedEvent
from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid, TimeBounded
from dpcr.errors import BudgetExhaustedError, ConfigError, UnsupportedEventError
from dpcr.plans.dcr import DisjointRelease
from dpcr.plans.guarantees import per_unit_guarantee

L10 = DiscreteLaplaceEvent(scale=Fraction(10), sensitivity=Fraction(1))  # ε = 0.1
G = DiscreteGaussianEvent(sigma2=Fraction(50), sensitivity2=Fraction(1))  # ρ = 0.01
WEEKLY = DisjointRelease(start=0, period=7)


def check(guard: PrivacyFilter, constraint: Constraint, released: list[DpEvent],
          new: list[DpEvent], plan: DisjointRelease = WEEKLY) -> object:
    events = released + new
    participation = plan.participation(constraint, reporting=len(events))
    return guard.check([events], participation)


def test_under_budget_returns_the_guarantee() -> None:
    guard = PrivacyFilter(epsilon_budget=1.0, delta_budget=0.0)
    g = check(guard, AtMostK(k=10), [L10] * 20, [L10])
    assert g == per_unit_guarantee([L10] * 21, WEEKLY, AtMostK(k=10), delta=0.0)
    assert g.epsilon == 1.0 and g.delta == 0.0 and g.method == "basic"  # type: ignore[attr-defined]


def test_decimal_budget_is_met_exactly() -> None:
    guard = PrivacyFilter(epsilon_budget=0.3, delta_budget=0.0)
    assert check(guard, AtMostK(k=3), [L10, L10], [L10]).epsilon == pytest.approx(0.3)  # type: ignore[attr-defined]
    with pytest.raises(BudgetExhaustedError):
        check(guard, AtMostK(k=4), [L10] * 3, [L10])
    # the float just above 3/10 is within one ulp of the decimal budget and passes; the next is
    # a full ulp over and is refused
    just_above = math.nextafter(0.3, 1.0)
    one = {"all": Participation(counts=(1,))}
    assert guard.check([[PureDpEvent(epsilon=just_above)]], one).epsilon == just_above
    with pytest.raises(BudgetExhaustedError):
        guard.check([[PureDpEvent(epsilon=math.nextafter(just_above, 1.0))]], one)


def test_over_budget_names_budget_loss_and_fix_and_changes_nothing() -> None:
    guard = PrivacyFilter(epsilon_budget=0.5, delta_budget=1e-6)
    released: list[DpEvent] = [L10] * 4
    new: list[DpEvent] = [DiscreteLaplaceEvent(scale=Fraction(2), sensitivity=Fraction(1))]
    before = (list(released), list(new), guard)
    with pytest.raises(BudgetExhaustedError) as info:
        check(guard, TimeBounded(bound=30), released, new)
    message = str(info.value)
    assert "budget ε = 0.5" in message
    assert "ε = 0.9" in message  # 0.5 + 4 * 0.1: a 30-day window meets 6 weekly releases
    assert "To fix" in message and "nothing was released" in message
    assert (released, new, guard) == before
    # the same filter still admits a cheaper release afterwards
    assert check(guard, TimeBounded(bound=30), released, [L10]).epsilon == pytest.approx(0.5)  # type: ignore[attr-defined]


def test_zero_delta_budget_refuses_gaussian_with_a_fix() -> None:
    guard = PrivacyFilter(epsilon_budget=10.0, delta_budget=0.0)
    with pytest.raises(BudgetExhaustedError, match="delta"):
        check(guard, AtMostK(k=2), [], [G])


def test_gaussian_within_delta_budget() -> None:
    guard = PrivacyFilter(epsilon_budget=2.0, delta_budget=1e-6)
    g = check(guard, AtMostK(k=5), [G] * 9, [G])
    assert g == stated_guarantee(SelfComposedEvent(event=G, count=5), delta=1e-6)
    assert g.delta == 1e-6 and g.rho == pytest.approx(0.05)  # type: ignore[attr-defined]


def test_unsupported_event_is_refused_before_anything() -> None:
    guard = PrivacyFilter(epsilon_budget=1.0, delta_budget=1e-6)
    with pytest.raises(UnsupportedEventError):
        check(guard, AtMostK(k=1), [L10], [object()])  # type: ignore[list-item]


def test_hybrid_classes_and_layers() -> None:
    hybrid = Hybrid(column="fare", classes={"a": AtMostK(k=3), "b": TimeBounded(bound=14)})
    guard = PrivacyFilter(epsilon_budget=0.3, delta_budget=0.0)
    assert check(guard, hybrid, [L10] * 9, [L10]).epsilon == pytest.approx(0.3)  # type: ignore[attr-defined]
    with pytest.raises(BudgetExhaustedError):
        eps_02 = DiscreteLaplaceEvent(scale=Fraction(5), sensitivity=Fraction(1))
        check(guard, hybrid, [], [eps_02, eps_02])
    # two layers: 2 of layer 0 and 1 of layer 1
    two = {"all": Participation(counts=(2, 1))}
    assert guard.check([[L10] * 4, [L10] * 2], two).epsilon == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon_budget": 0.0}, "epsilon_budget"),
        ({"epsilon_budget": float("inf")}, "epsilon_budget"),
        ({"delta_budget": 1.0}, "delta_budget"),
        ({"delta_budget": -1e-9}, "delta_budget"),
    ],
)
def test_filter_validation(kwargs: dict[str, object], match: str) -> None:
    base: dict[str, object] = {"epsilon_budget": 1.0, "delta_budget": 1e-6}
    with pytest.raises(ConfigError, match=match):
        PrivacyFilter(**{**base, **kwargs})  # type: ignore[arg-type]


def test_odometer_reports_loss_so_far() -> None:
    odo = PrivacyOdometer(participation={"all": Participation(counts=(3,))}, delta=1e-6)
    assert odo.guarantee().epsilon == 0.0
    odo.record(0, L10)
    assert odo.guarantee().epsilon == pytest.approx(0.1)
    odo.record(0, L10, L10, L10)
    assert odo.guarantee().epsilon == pytest.approx(0.3)  # at most 3 of them
    assert len(odo.released[0]) == 4
    with pytest.raises(UnsupportedEventError):
        odo.record(0, L10, object())  # type: ignore[arg-type]
    assert len(odo.released[0]) == 4  # validated first: nothing recorded
    odo2 = PrivacyOdometer(participation={"all": Participation(counts=(3,))}, delta=1e-6)
    odo2.record(0, L10, L10, G)
    g = odo2.guarantee()
    assert g.epsilon <= stated_guarantee(ComposedEvent(events=(L10, L10, G)), delta=1e-6).epsilon
    assert g.delta == 1e-6
    assert tightest(ComposedEvent(events=(L10, G)), delta=1e-6).method


def test_odometer_refuses_gaussian_without_delta() -> None:
    odo = PrivacyOdometer(participation={"all": Participation(counts=(1,))}, delta=0.0)
    odo.record(0, L10)
    with pytest.raises(ConfigError, match="delta"):
        odo.record(0, G)
    assert len(odo.released[0]) == 1


def test_doctests() -> None:
    assert doctest.testmod(guarantee_module, optionflags=doctest.ELLIPSIS).failed == 0
