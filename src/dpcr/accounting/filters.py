"""Budget guards: a filter refusing releases over the budget, and an odometer of the loss so far.

The filter is checked BEFORE a value is published: the pipeline passes the events of the releases
already made and of the ones about to be made, and publishes only if :meth:`PrivacyFilter.check`
returns. The filter holds configuration only; it never changes, so a refused check leaves nothing
to roll back.

The budget is read as the decimal number written (``0.3`` is 3/10) and compared with the reported
guarantee, which is rounded up to a float: a loss is accepted when its rounded-up value is at most
the rounded-up budget, so nothing over the budget by a full float ulp (about 1e-16 relative) passes.

>>> from fractions import Fraction
>>> from dpcr.accounting.events import DiscreteLaplaceEvent
>>> from dpcr.bounding.constraints import AtMostK
>>> from dpcr.plans.dcr import DisjointRelease
>>> laplace = DiscreteLaplaceEvent(scale=Fraction(10), sensitivity=Fraction(1))   # ε = 0.1
>>> guard = PrivacyFilter(epsilon_budget=0.3, delta_budget=0.0,
...                       plan=DisjointRelease(start=0, period=7), constraint=AtMostK(k=3))
>>> guard.check([laplace] * 5, [laplace]).describe()       # any 3 of 6 releases
'(ε = 0.3, δ = 0)-DP, 0.015-zCDP [basic]'
>>> guard.check([], [DiscreteLaplaceEvent(scale=Fraction(2), sensitivity=Fraction(1))])
Traceback (most recent call last):
  ...
dpcr.errors.BudgetExhaustedError: release 1 would bring the per-unit guarantee to ε = 0.5 ...
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from dpcr.accounting.composition import Guarantee, cost_of, round_up
from dpcr.accounting.events import DpEvent
from dpcr.accounting.per_unit import PlanGuarantee, per_unit_guarantee, plan_guarantee
from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import BudgetExhaustedError, ConfigError
from dpcr.plans.dcr import DisjointRelease

__all__ = ["PrivacyFilter", "PrivacyOdometer"]

Constraint = AtMostK | TimeBounded | Hybrid

_FIX = (
    "raise the budget, add more noise per release (a larger scale or sigma2), release fewer "
    "statistics per interval, or tighten the constraint (smaller k or bound)"
)


def _check_common(plan: object, constraint: object) -> None:
    if not isinstance(plan, DisjointRelease):
        raise ConfigError(f"plan must be a DisjointRelease, got {plan!r}")
    if not isinstance(constraint, AtMostK | TimeBounded | Hybrid):
        raise ConfigError(f"constraint must be AtMostK, TimeBounded or Hybrid, got {constraint!r}")


def _check_delta(delta: float, name: str) -> None:
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 <= delta < 1:
        raise ConfigError(f"{name} must be a number in [0, 1), got {delta!r}; e.g. 1e-6")


def check_budget(epsilon_budget: float, delta_budget: float) -> None:
    """A budget is a finite ε > 0 and a δ in [0, 1); anything else is a ConfigError."""
    eps = epsilon_budget
    if (
        isinstance(eps, bool)
        or not isinstance(eps, int | float)
        or not (math.isfinite(eps) and eps > 0)
    ):
        raise ConfigError(f"epsilon_budget must be a finite number > 0, got {eps!r}")
    _check_delta(delta_budget, "delta_budget")


def _within(value: float, budget: float) -> bool:
    return value <= round_up(Fraction(repr(float(budget))))


def _fmt(value: float, budget: float) -> tuple[str, str]:
    a, b = f"{value:.6g}", f"{budget:.6g}"
    return (repr(value), repr(budget)) if a == b else (a, b)


def _over(g: Guarantee, epsilon_budget: float, delta_budget: float) -> bool:
    return not (_within(g.epsilon, epsilon_budget) and _within(g.delta, delta_budget))


def _has_zcdp(events: Sequence[DpEvent]) -> bool:
    return any(cost_of(e).rho > 0 for e in events)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrivacyFilter:
    """Refuses any release that would make the per-unit guarantee exceed the budget.

    The guarantee is computed at ``δ = delta_budget`` (pure-DP compositions report δ = 0).
    """

    epsilon_budget: float
    delta_budget: float
    plan: DisjointRelease
    constraint: Constraint

    def __post_init__(self) -> None:
        check_budget(self.epsilon_budget, self.delta_budget)
        _check_common(self.plan, self.constraint)

    def check(self, released_events: Sequence[DpEvent], new_events: Sequence[DpEvent]) -> Guarantee:
        """The guarantee of all releases including ``new_events``; raises
        :class:`BudgetExhaustedError` (changing nothing) when it would exceed the budget.

        ``released_events[i]`` is the (composed) event of release ``i + 1``; ``new_events``
        continue the sequence.
        """
        released, new = list(released_events), list(new_events)
        events = released + new
        first, last = len(released) + 1, len(events)
        which = f"releases {first}..{last}" if last > first else f"release {last}"
        if self.delta_budget == 0 and _has_zcdp(events):
            raise BudgetExhaustedError(
                f"{which}: Gaussian (zCDP) releases need a delta budget > 0, but "
                "delta_budget = 0; set delta_budget (e.g. 1e-6) or use Laplace noise"
            )
        guarantee = per_unit_guarantee(events, self.plan, self.constraint, delta=self.delta_budget)
        if _over(guarantee, self.epsilon_budget, self.delta_budget):
            eps, budget = _fmt(guarantee.epsilon, self.epsilon_budget)
            raise BudgetExhaustedError(
                f"{which} would bring the per-unit guarantee to ε = {eps} "
                f"(δ = {guarantee.delta:.3g}), over the budget epsilon_budget = "
                f"{budget} (delta_budget = {self.delta_budget:.3g}); "
                f"nothing was released. To fix: {_FIX}"
            )
        return guarantee

    def check_plan(self, per_release_event: DpEvent) -> PlanGuarantee:
        """Check the whole plan in advance (every release carrying ``per_release_event``)."""
        if self.delta_budget == 0 and _has_zcdp([per_release_event]):
            raise BudgetExhaustedError(
                "Gaussian (zCDP) releases need a delta budget > 0, but delta_budget = 0; "
                "set delta_budget (e.g. 1e-6) or use Laplace noise"
            )
        planned = plan_guarantee(
            per_release_event, self.plan, self.constraint, delta=self.delta_budget
        )
        g = planned.guarantee
        if _over(g, self.epsilon_budget, self.delta_budget):
            eps, budget = _fmt(g.epsilon, self.epsilon_budget)
            raise BudgetExhaustedError(
                f"the plan's per-unit guarantee is ε = {eps} (δ = {g.delta:.3g}; "
                f"up to {planned.max_queries} releases per unit), over the budget "
                f"epsilon_budget = {budget} "
                f"(delta_budget = {self.delta_budget:.3g}). To fix: {_FIX}"
            )
        return planned


class PrivacyOdometer:
    """The per-unit loss of the releases made so far.

    ``record`` adds the event of the next release (validated first; a rejected event changes
    nothing) and returns None; ``guarantee`` reports the loss so far at ``delta``.
    """

    __slots__ = ("_constraint", "_delta", "_events", "_plan")

    def __init__(self, *, plan: DisjointRelease, constraint: Constraint, delta: float) -> None:
        _check_common(plan, constraint)
        _check_delta(delta, "delta")
        self._plan = plan
        self._constraint = constraint
        self._delta = float(delta)
        self._events: tuple[DpEvent, ...] = ()

    @property
    def plan(self) -> DisjointRelease:
        return self._plan

    @property
    def constraint(self) -> Constraint:
        return self._constraint

    @property
    def delta(self) -> float:
        return self._delta

    @property
    def released(self) -> tuple[DpEvent, ...]:
        """The events recorded so far, one per release."""
        return self._events

    def record(self, *events: DpEvent) -> None:
        """Record the events of the next releases (one per release, in order)."""
        for event in events:
            cost_of(event)
        count = self._plan.release_count()
        if count is not None and len(self._events) + len(events) > count:
            raise ConfigError(
                f"the plan has {count} releases and {len(self._events)} are recorded; "
                f"cannot record {len(events)} more"
            )
        if self._delta == 0 and _has_zcdp(events):
            raise ConfigError(
                "Gaussian (zCDP) events need delta > 0 to report (ε, δ); "
                "create the odometer with delta (e.g. 1e-6)"
            )
        self._events = self._events + tuple(events)

    def guarantee(self) -> Guarantee:
        """The per-unit guarantee of all recorded releases."""
        return per_unit_guarantee(self._events, self._plan, self._constraint, delta=self._delta)

    def __repr__(self) -> str:
        return (
            f"PrivacyOdometer(plan={self._plan!r}, constraint={self._constraint!r}, "
            f"delta={self._delta!r}, releases={len(self._events)})"
        )
