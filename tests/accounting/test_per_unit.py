"""The per-unit worst case (Eq. 17-18) against brute force over every small unit history."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcr.accounting import (
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    Guarantee,
    PureDpEvent,
    SelfComposedEvent,
    ZcdpEvent,
    epsilon_of,
)
from dpcr.accounting.accountants import stated_guarantee
from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError, UnsupportedEventError
from dpcr.plans.counts import max_affected
from dpcr.plans.dcr import DisjointRelease
from dpcr.plans.guarantees import per_class_guarantees, per_unit_guarantee, plan_guarantee

DELTA = 1e-6


def laplace(scale: int, sens: int = 1) -> DiscreteLaplaceEvent:
    return DiscreteLaplaceEvent(scale=Fraction(scale), sensitivity=Fraction(sens))


def gauss(sigma2: int, sens2: int = 1) -> DiscreteGaussianEvent:
    return DiscreteGaussianEvent(sigma2=Fraction(sigma2), sensitivity2=Fraction(sens2))


L10 = laplace(10)
G50 = gauss(50)
BOTH = ComposedEvent(events=(L10, G50))


def interval_of(times: tuple[int, ...], t: int) -> int:
    for i, ti in enumerate(times, start=1):
        if t <= ti:
            return i
    return 0


def touched_sets(
    times: tuple[int, ...], constraint: AtMostK | TimeBounded, grid: list[int]
) -> set[frozenset[int]]:
    """Every set of released intervals some allowed history on ``grid`` touches (brute force)."""
    out: set[frozenset[int]] = set()
    for size in range(1, len(grid) + 1):
        if isinstance(constraint, AtMostK) and size > constraint.k:
            break
        for history in itertools.combinations(grid, size):
            if isinstance(constraint, TimeBounded) and history[-1] - history[0] > constraint.bound:
                continue
            out.add(frozenset(i for i in map(lambda t: interval_of(times, t), history) if i))
    return out


def brute_force_guarantee(
    events: list[DpEvent],
    times: tuple[int, ...],
    constraint: AtMostK | TimeBounded,
    oracle: Callable[..., Guarantee] = stated_guarantee,
) -> float:
    grid = list(range(times[0] - 1, times[-1] + 2))
    worst = 0.0
    for touched in touched_sets(times, constraint, grid):
        composed = ComposedEvent(events=tuple(events[i - 1] for i in sorted(touched)))
        worst = max(worst, oracle(composed, delta=DELTA).epsilon)
    return worst


TIMES = [(3,), (1, 2, 3, 4, 5, 6, 7), (1, 4, 5, 9), (2, 3, 8, 9, 10)]
MIXED_SEQUENCES: list[list[DpEvent]] = [
    [laplace(s) for s in (10, 2, 10, 5, 1, 10, 3)],  # pure only, uneven
    [gauss(s) for s in (50, 5, 50, 20, 2, 8, 50)],  # zCDP only, uneven
    [L10, G50, BOTH, laplace(2), gauss(3), BOTH, L10],  # mixed
]


@pytest.mark.parametrize("times", TIMES)
@pytest.mark.parametrize("events", MIXED_SEQUENCES)
@pytest.mark.parametrize("bound", [0, 1, 2, 3, 4, 6, 20])
def test_time_bounded_matches_brute_force(
    times: tuple[int, ...], events: list[DpEvent], bound: int
) -> None:
    """Runs are exact: the per-unit guarantee equals the worst history's."""
    events = events[: len(times)]
    plan = DisjointRelease(times=times)
    got = per_unit_guarantee(events, plan, TimeBounded(bound=bound), delta=DELTA)
    assert got.epsilon == pytest.approx(
        brute_force_guarantee(events, times, TimeBounded(bound=bound)), rel=1e-12
    )


@pytest.mark.parametrize("times", TIMES)
@pytest.mark.parametrize("events", MIXED_SEQUENCES)
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_at_most_k_bounds_brute_force(
    times: tuple[int, ...], events: list[DpEvent], k: int
) -> None:
    """Never below the worst history; exact for pure releases (stated by basic composition);
    for one kind of noise with unlike releases never above the additive (zCDP) oracle, since
    every split of k over the kinds is composed exactly."""
    events = events[: len(times)]
    plan = DisjointRelease(times=times)
    got = per_unit_guarantee(events, plan, AtMostK(k=k), delta=DELTA)
    truth = brute_force_guarantee(events, times, AtMostK(k=k))
    assert got.epsilon >= truth * (1 - 1e-12)
    one_kind = all(isinstance(e, DiscreteLaplaceEvent) for e in events) or all(
        isinstance(e, DiscreteGaussianEvent) for e in events
    )
    if all(isinstance(e, DiscreteLaplaceEvent) for e in events):
        assert got.epsilon == pytest.approx(truth, rel=1e-12)
    elif one_kind and len(set(events)) > 1:
        additive = brute_force_guarantee(events, times, AtMostK(k=k), oracle=epsilon_of)
        assert got.epsilon <= additive * (1 + 1e-12)


PLANS = [
    DisjointRelease(start=0, period=7, end=70),
    DisjointRelease(start=0, period=7, end=21),
    DisjointRelease(times=(1, 4, 5, 9, 30, 31)),
    DisjointRelease(start=100, period=24),
]
CONSTRAINTS = [
    AtMostK(k=1),
    AtMostK(k=4),
    AtMostK(k=50),
    TimeBounded(bound=0),
    TimeBounded(bound=7),
    TimeBounded(bound=8),
    TimeBounded(bound=30),
    Hybrid(column="fare", classes={"ride": AtMostK(k=3), "pass": TimeBounded(bound=30)}),
]


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("constraint", CONSTRAINTS)
@pytest.mark.parametrize("event", [L10, G50, BOTH, PureDpEvent(epsilon=0.3), ZcdpEvent(rho=0.1)])
def test_uniform_events_are_max_affected_times_one_release(
    plan: DisjointRelease, constraint: AtMostK | TimeBounded | Hybrid, event: DpEvent
) -> None:
    n = plan.release_count() or 12
    until = plan.release_time(n)
    count = max_affected(plan, constraint, until=until)
    got = per_unit_guarantee([event] * n, plan, constraint, delta=DELTA)
    assert got == stated_guarantee(SelfComposedEvent(event=event, count=count), delta=DELTA)
    planned = plan_guarantee(event, plan, constraint, delta=DELTA, until=until)
    assert planned.guarantee == got
    assert planned.max_queries == count
    if event is L10:  # basic composition: ε adds up
        assert got.epsilon == pytest.approx(count * 0.1)
        assert got.delta == 0.0
    if event is G50:  # zCDP: ρ adds up
        assert got.rho == pytest.approx(count * 0.01)


def test_plan_guarantee_open_ended_and_hybrid() -> None:
    plan = DisjointRelease(start=0, period=7 * 86_400 * 10**6)
    hybrid = Hybrid(
        column="fare",
        classes={
            "ride10": AtMostK(k=10),
            "monthly": TimeBounded(bound=30 * 86_400 * 10**6),
        },
        default=AtMostK(k=2),
    )
    planned = plan_guarantee(L10, plan, hybrid, delta=DELTA)
    assert dict(planned.max_queries_per_entry) == {"ride10": 10, "monthly": 6, "*": 2}
    assert planned.max_queries == 10
    assert planned.releases is None
    assert planned.guarantee.epsilon == pytest.approx(1.0)
    assert planned.per_class["monthly"].epsilon == pytest.approx(0.6)
    assert planned.per_class["*"].epsilon == pytest.approx(0.2)


def test_config_change_mid_plan() -> None:
    """Releases 1-3 at ε = 0.1, then 4-6 at ε = 0.5: the worst run holds the expensive ones."""
    plan = DisjointRelease(start=0, period=10, end=60)
    events: list[DpEvent] = [L10, L10, L10, laplace(2), laplace(2), laplace(2)]
    g = per_unit_guarantee(events, plan, TimeBounded(bound=15), delta=DELTA)
    assert g.epsilon == pytest.approx(1.5)  # 3 consecutive releases, all at 0.5
    g = per_unit_guarantee(events, plan, AtMostK(k=4), delta=DELTA)
    assert g.epsilon == pytest.approx(1.6)  # 0.5 * 3 + 0.1
    by_class = per_class_guarantees(
        events,
        plan,
        Hybrid(column="c", classes={"a": AtMostK(k=1), "b": TimeBounded(bound=0)}),
        delta=DELTA,
    )
    assert {k: v.epsilon for k, v in by_class.items()} == {"a": 0.5, "b": 0.5}


def test_nothing_released() -> None:
    g = per_unit_guarantee([], DisjointRelease(start=0, period=1), AtMostK(k=3), delta=DELTA)
    assert g == Guarantee(epsilon=0.0, delta=0.0, rho=0.0, method="none")


def test_errors_name_the_fix() -> None:
    plan = DisjointRelease(start=0, period=10, end=30)
    with pytest.raises(ConfigError, match="3 releases"):
        per_unit_guarantee([L10] * 4, plan, AtMostK(k=1), delta=DELTA)
    with pytest.raises(ConfigError, match="constraint"):
        per_unit_guarantee([L10], plan, "k=3", delta=DELTA)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedEventError):
        per_unit_guarantee([object()], plan, AtMostK(k=1), delta=DELTA)  # type: ignore[list-item]
    with pytest.raises(UnsupportedEventError):
        plan_guarantee(object(), plan, AtMostK(k=1), delta=DELTA)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="delta"):
        per_unit_guarantee([G50], plan, AtMostK(k=1), delta=0.0)


def test_long_uneven_plan_is_fast() -> None:
    plan = DisjointRelease(start=0, period=3600)
    events: list[DpEvent] = [laplace(1 + (i % 7)) for i in range(3000)]
    g = per_unit_guarantee(events, plan, TimeBounded(bound=30 * 86_400 // 24), delta=DELTA)
    assert g.epsilon > 0


# --- properties -------------------------------------------------------------------------------

scales = st.lists(st.integers(1, 20), min_size=1, max_size=10)


@settings(max_examples=60, deadline=None)
@given(scales=scales, b1=st.integers(0, 40), b2=st.integers(0, 40))
def test_monotone_in_bound(scales: list[int], b1: int, b2: int) -> None:
    plan = DisjointRelease(start=0, period=5)
    events = [laplace(s) for s in scales]
    lo, hi = sorted((b1, b2))
    g_lo = per_unit_guarantee(events, plan, TimeBounded(bound=lo), delta=DELTA)
    g_hi = per_unit_guarantee(events, plan, TimeBounded(bound=hi), delta=DELTA)
    assert g_lo.epsilon <= g_hi.epsilon


@settings(max_examples=60, deadline=None)
@given(scales=scales, k1=st.integers(1, 12), k2=st.integers(1, 12), gaussian=st.booleans())
def test_monotone_in_k_and_in_releases(scales: list[int], k1: int, k2: int, gaussian: bool) -> None:
    plan = DisjointRelease(start=0, period=5)
    events: list[DpEvent] = [gauss(s) if gaussian else laplace(s) for s in scales]
    lo, hi = sorted((k1, k2))
    g_lo = per_unit_guarantee(events, plan, AtMostK(k=lo), delta=DELTA)
    g_hi = per_unit_guarantee(events, plan, AtMostK(k=hi), delta=DELTA)
    assert g_lo.epsilon <= g_hi.epsilon
    shorter = per_unit_guarantee(events[:-1], plan, AtMostK(k=hi), delta=DELTA)
    assert shorter.epsilon <= g_hi.epsilon


def test_docs_privacy_worked_example() -> None:
    """The numbers quoted in docs/privacy.md section 9."""
    from dpcr.plans.counts import most_span
    from dpcr.timeutil import parse_duration, parse_timestamp

    day = parse_duration("1d")
    plan = DisjointRelease(start=parse_timestamp("2025-01-06"), period=7 * day)
    fares = Hybrid(
        column="fare",
        classes={"ride10": AtMostK(k=10), "monthly": TimeBounded(bound=30 * day)},
    )
    per_release = ComposedEvent(events=(laplace(20), laplace(20)))
    planned = plan_guarantee(per_release, plan, fares, delta=1e-6)
    assert dict(planned.max_queries_per_entry) == {"ride10": 10, "monthly": 6}
    g = planned.guarantee
    assert (g.epsilon, g.delta, g.method) == (1.0, 0.0, "basic")
    assert planned.per_class["monthly"].epsilon == pytest.approx(0.6)
    assert most_span([10, 20, 25, 26, 40], 5) == 3
    assert most_span([10, 20, 25, 26, 40], 100) == 5
    gaussian = plan_guarantee(gauss(100), plan, fares, delta=1e-6).guarantee
    assert gaussian.rho == pytest.approx(0.05)
    assert round(gaussian.epsilon, 2) == 1.37 and gaussian.method == "pld"
    assert (
        round(epsilon_of(SelfComposedEvent(event=gauss(100), count=10), delta=1e-6).epsilon, 2)
        == 1.47
    )
    many = epsilon_of(SelfComposedEvent(event=laplace(10), count=1000), delta=1e-6)
    assert round(many.epsilon, 1) == 20.6
