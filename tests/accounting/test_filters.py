"""PrivacyFilter refuses before anything changes; PrivacyOdometer reports the loss so far."""

from __future__ import annotations

import doctest
import math
from fractions import Fraction

import pytest

import dpcr.accounting.filters as filters_module
from dpcr.accounting import (
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    PrivacyFilter,
    PrivacyOdometer,
    PureDpEvent,
    SelfComposedEvent,
    per_unit_guarantee,
)
from dpcr.accounting.accountants import stated_guarantee, tightest
from dpcr.accounting.events import ComposedEvent
from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import BudgetExhaustedError, ConfigError, UnsupportedEventError
from dpcr.plans.dcr import DisjointRelease

L10 = DiscreteLaplaceEvent(scale=Fraction(10), sensitivity=Fraction(1))  # ε = 0.1
G = DiscreteGaussianEvent(sigma2=Fraction(50), sensitivity2=Fraction(1))  # ρ = 0.01
WEEKLY = DisjointRelease(start=0, period=7)


def test_under_budget_returns_the_guarantee() -> None:
    guard = PrivacyFilter(
        epsilon_budget=1.0, delta_budget=0.0, plan=WEEKLY, constraint=AtMostK(k=10)
    )
    g = guard.check([L10] * 20, [L10])
    assert g.epsilon == 1.0 and g.delta == 0.0 and g.method == "basic"
    assert g == per_unit_guarantee([L10] * 21, WEEKLY, AtMostK(k=10), delta=0.0)


def test_decimal_budget_is_met_exactly() -> None:
    guard = PrivacyFilter(
        epsilon_budget=0.3, delta_budget=0.0, plan=WEEKLY, constraint=AtMostK(k=3)
    )
    assert guard.check([L10, L10], [L10]).epsilon == pytest.approx(0.3)
    tight = PrivacyFilter(
        epsilon_budget=0.3, delta_budget=0.0, plan=WEEKLY, constraint=AtMostK(k=4)
    )
    with pytest.raises(BudgetExhaustedError):
        tight.check([L10] * 3, [L10])
    # the float just above 3/10 is within one ulp of the decimal budget and passes; the next is
    # a full ulp over and is refused
    just_above = math.nextafter(0.3, 1.0)
    assert guard.check([], [PureDpEvent(epsilon=just_above)]).epsilon == just_above
    with pytest.raises(BudgetExhaustedError):
        guard.check([], [PureDpEvent(epsilon=math.nextafter(just_above, 1.0))])


def test_over_budget_names_budget_loss_and_fix_and_changes_nothing() -> None:
    guard = PrivacyFilter(
        epsilon_budget=0.5,
        delta_budget=1e-6,
        plan=WEEKLY,
        constraint=TimeBounded(bound=30),
    )
    released: list[DpEvent] = [L10] * 4
    new: list[DpEvent] = [DiscreteLaplaceEvent(scale=Fraction(2), sensitivity=Fraction(1))]
    before = (list(released), list(new), guard)
    with pytest.raises(BudgetExhaustedError) as info:
        guard.check(released, new)
    message = str(info.value)
    assert "release 5" in message
    assert "epsilon_budget = 0.5" in message
    assert "ε = 0.9" in message  # 0.5 + 4 * 0.1: a 30-day window meets 6 weekly releases
    assert "To fix" in message and "nothing was released" in message
    assert (released, new, guard) == before
    # the same filter still admits a cheaper release afterwards
    assert guard.check(released, [L10]).epsilon == pytest.approx(0.5)


def test_zero_delta_budget_refuses_gaussian_with_a_fix() -> None:
    guard = PrivacyFilter(
        epsilon_budget=10.0, delta_budget=0.0, plan=WEEKLY, constraint=AtMostK(k=2)
    )
    with pytest.raises(BudgetExhaustedError, match="delta_budget"):
        guard.check([], [G])


def test_gaussian_within_delta_budget() -> None:
    guard = PrivacyFilter(
        epsilon_budget=2.0, delta_budget=1e-6, plan=WEEKLY, constraint=AtMostK(k=5)
    )
    g = guard.check([G] * 9, [G])
    assert g == stated_guarantee(SelfComposedEvent(event=G, count=5), delta=1e-6)
    assert g.delta == 1e-6 and g.rho == pytest.approx(0.05)


def test_unsupported_event_is_refused_before_anything() -> None:
    guard = PrivacyFilter(
        epsilon_budget=1.0, delta_budget=1e-6, plan=WEEKLY, constraint=AtMostK(k=1)
    )
    with pytest.raises(UnsupportedEventError):
        guard.check([L10], [object()])  # type: ignore[list-item]


def test_more_releases_than_the_plan_has() -> None:
    plan = DisjointRelease(start=0, period=7, end=14)
    guard = PrivacyFilter(epsilon_budget=1.0, delta_budget=0.0, plan=plan, constraint=AtMostK(k=1))
    with pytest.raises(ConfigError, match="2 releases"):
        guard.check([L10, L10], [L10])


def test_check_plan() -> None:
    hybrid = Hybrid(column="fare", classes={"a": AtMostK(k=3), "b": TimeBounded(bound=14)})
    guard = PrivacyFilter(epsilon_budget=0.3, delta_budget=0.0, plan=WEEKLY, constraint=hybrid)
    planned = guard.check_plan(L10)
    assert planned.max_queries == 3
    with pytest.raises(BudgetExhaustedError, match="up to 3 releases per unit"):
        guard.check_plan(DiscreteLaplaceEvent(scale=Fraction(5), sensitivity=Fraction(1)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon_budget": 0.0}, "epsilon_budget"),
        ({"epsilon_budget": float("inf")}, "epsilon_budget"),
        ({"delta_budget": 1.0}, "delta_budget"),
        ({"delta_budget": -1e-9}, "delta_budget"),
        ({"plan": "weekly"}, "plan"),
        ({"constraint": 3}, "constraint"),
    ],
)
def test_filter_validation(kwargs: dict[str, object], match: str) -> None:
    base: dict[str, object] = {
        "epsilon_budget": 1.0,
        "delta_budget": 1e-6,
        "plan": WEEKLY,
        "constraint": AtMostK(k=1),
    }
    with pytest.raises(ConfigError, match=match):
        PrivacyFilter(**{**base, **kwargs})  # type: ignore[arg-type]


def test_odometer_reports_loss_so_far() -> None:
    odo = PrivacyOdometer(plan=WEEKLY, constraint=TimeBounded(bound=14), delta=1e-6)
    assert odo.guarantee().epsilon == 0.0
    odo.record(L10)
    assert odo.guarantee().epsilon == pytest.approx(0.1)
    odo.record(L10, L10, L10)
    assert odo.guarantee().epsilon == pytest.approx(0.3)  # 14 days meet 3 weekly releases
    assert len(odo.released) == 4
    with pytest.raises(UnsupportedEventError):
        odo.record(L10, object())  # type: ignore[arg-type]
    assert len(odo.released) == 4  # validated first: nothing recorded
    odo.record(G)
    g = odo.guarantee()
    assert g == stated_guarantee(ComposedEvent(events=(L10, L10, G)), delta=1e-6)
    assert (
        g.delta == 1e-6 and g.method == tightest(ComposedEvent(events=(L10, G)), delta=1e-6).method
    )


def test_odometer_refuses_beyond_the_plan_and_gaussian_without_delta() -> None:
    odo = PrivacyOdometer(
        plan=DisjointRelease(start=0, period=7, end=14), constraint=AtMostK(k=1), delta=0.0
    )
    odo.record(L10)
    with pytest.raises(ConfigError, match="delta"):
        odo.record(G)
    with pytest.raises(ConfigError, match="2 releases"):
        odo.record(L10, L10)
    assert len(odo.released) == 1


def test_doctests() -> None:
    assert doctest.testmod(filters_module, optionflags=doctest.ELLIPSIS).failed == 0
