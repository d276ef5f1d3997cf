"""The per-unit worst case of a disjoint continual release (paper Eq. 17-18; Thm 2.2, 4.1, 4.10).

A unit's loss is the composition of the releases its kept mutations touch, L(q, x); the plan's
guarantee is sup_x L(q, x). Release ``i`` may carry its own event (``interval_events[i - 1]``, e.g.
after a configuration change), so the worst unit is found over the sets of releases a unit can
touch:

* **at most k**: any ``k`` releases. The worst is bounded by taking, for each additive part of the
  cost (pure ε, pure ε²/2, zCDP ρ), the sum of its ``k`` largest values. That is exact when the
  releases are alike (or purely one kind) and an upper bound otherwise.
* **B-time-bounded**: any reachable run of consecutive releases (:func:`dpcr.plans.counts.
  reachable_runs`); the maximal runs suffice because the guarantee grows with the cost.
* **hybrid**: the worst class (Thm 4.10).

For uniform events this is ``max_affected`` × the per-release event.

The privacy unit is the entry unless a unit column groups several entries: the constraint then
counts (or time-bounds) the mutations of all the unit's entries, and each release clamps the
unit's contribution, so the same counts hold with "unit" in place of "entry".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType

from dpcr.accounting.composition import (
    Guarantee,
    PrivacyCost,
    cost_of,
    guarantee_of_cost,
    round_up,
    worst_guarantee,
)
from dpcr.accounting.events import ComposedEvent, DpEvent, SelfComposedEvent
from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError
from dpcr.plans.counts import max_affected_by_class, reachable_runs
from dpcr.plans.dcr import DisjointRelease

__all__ = [
    "PlanGuarantee",
    "per_class_guarantees",
    "per_unit_guarantee",
    "plan_guarantee",
    "worst_costs",
]

Constraint = AtMostK | TimeBounded | Hybrid


def _check_plan(plan: DisjointRelease, n_events: int) -> None:
    if not isinstance(plan, DisjointRelease):
        raise ConfigError(f"plan must be a DisjointRelease, got {plan!r}")
    count = plan.release_count()
    if count is not None and n_events > count:
        raise ConfigError(
            f"{n_events} release events given for a plan with {count} releases; "
            "pass one (composed) event per release of the plan, or extend the plan"
        )


def _check_constraint(constraint: object) -> None:
    if not isinstance(constraint, AtMostK | TimeBounded | Hybrid):
        raise ConfigError(f"constraint must be AtMostK, TimeBounded or Hybrid, got {constraint!r}")


def _top_k_sum(values: list[PrivacyCost], k: int) -> PrivacyCost:
    def top(parts: list[Fraction]) -> Fraction:
        return sum(sorted(parts, reverse=True)[:k], Fraction(0))

    return PrivacyCost(
        pure_epsilon=top([c.pure_epsilon for c in values]),
        pure_rho=top([c.pure_rho for c in values]),
        rho=top([c.rho for c in values]),
    )


def _pareto(costs: set[PrivacyCost]) -> list[PrivacyCost]:
    """The costs not dominated by another (only these can be the worst)."""
    ordered = sorted(costs, key=lambda c: (c.pure_epsilon, c.pure_rho, c.rho), reverse=True)
    kept: list[PrivacyCost] = []
    for cost in ordered:
        if not any(k.dominates(cost) for k in kept):
            kept.append(cost)
    return kept


def _class_costs(
    costs: list[PrivacyCost], plan: DisjointRelease, constraint: AtMostK | TimeBounded
) -> list[PrivacyCost]:
    """Candidate worst-case costs of one unit under a simple constraint."""
    n = len(costs)
    if n == 0:
        return [PrivacyCost()]
    if isinstance(constraint, AtMostK):
        return [_top_k_sum(costs, min(constraint.k, n))]
    times = [plan.release_time(i) for i in range(1, n + 1)]
    prefix = [PrivacyCost()]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    runs = {prefix[j + 1] - prefix[i] for i, j in reachable_runs(times, constraint.bound)}
    return _pareto(runs)


def worst_costs(
    interval_events: Sequence[DpEvent], plan: DisjointRelease, constraint: Constraint
) -> dict[str, list[PrivacyCost]]:
    """Per class, the undominated candidate costs of the worst unit (see the module docstring)."""
    _check_constraint(constraint)
    events = list(interval_events)
    _check_plan(plan, len(events))
    costs = [cost_of(e) for e in events]
    classes: Mapping[str, AtMostK | TimeBounded] = (
        constraint.all_classes() if isinstance(constraint, Hybrid) else {"all": constraint}
    )
    return {name: _class_costs(costs, plan, c) for name, c in classes.items()}


def _class_guarantee(
    events: list[DpEvent],
    costs: list[PrivacyCost],
    plan: DisjointRelease,
    constraint: AtMostK | TimeBounded,
    delta: float,
) -> Guarantee:
    """The stated guarantee (:func:`~dpcr.accounting.accountants.stated_guarantee`) of the worst
    unit of one simple constraint, over the candidate sets of releases it can touch."""
    from dpcr.accounting.accountants import flatten, stated_guarantee

    n = len(events)
    if n == 0:
        return guarantee_of_cost(PrivacyCost(), delta=delta)
    # releases with the same multiset of mechanisms are alike (the ledger may list the queries
    # of a release in another order than the configuration)
    keys: dict[frozenset[tuple[object, int]], int] = {}
    group = [keys.setdefault(frozenset(flatten(e).items()), len(keys)) for e in events]
    first = {g: events[group.index(g)] for g in set(group)}
    if isinstance(constraint, AtMostK):
        m = min(constraint.k, n)
        if len(first) == 1:
            return stated_guarantee(SelfComposedEvent(event=events[0], count=m), delta=delta)
        # unlike releases: top-k of each additive part, an upper bound on every k-subset
        top = _top_k_sum(costs, m)
        if top.rho == 0:  # pure only: stated as pure DP (basic composition, exact here)
            return Guarantee(
                epsilon=round_up(top.pure_epsilon),
                delta=0.0,
                rho=round_up(top.total_rho),
                method="basic",
            )
        return guarantee_of_cost(top, delta=delta)
    times = [plan.release_time(i) for i in range(1, n + 1)]
    runs: set[tuple[int, ...]] = set()
    for i, j in reachable_runs(times, constraint.bound):
        counts = [0] * len(first)
        for g in group[i : j + 1]:
            counts[g] += 1
        runs.add(tuple(counts))
    maximal = [
        r
        for r in runs
        if not any(o != r and all(a <= b for a, b in zip(r, o, strict=True)) for o in runs)
    ]
    return worst_guarantee(
        [
            stated_guarantee(
                ComposedEvent(
                    events=tuple(
                        SelfComposedEvent(event=first[g], count=c) for g, c in enumerate(r) if c
                    )
                ),
                delta=delta,
            )
            for r in maximal
        ]
    )


def per_class_guarantees(
    interval_events: Sequence[DpEvent],
    plan: DisjointRelease,
    constraint: Constraint,
    *,
    delta: float,
) -> dict[str, Guarantee]:
    """Per class (``"all"`` for a simple constraint), the guarantee of its worst unit."""
    _check_constraint(constraint)
    events = list(interval_events)
    _check_plan(plan, len(events))
    costs = [cost_of(e) for e in events]  # validates every event first
    classes: Mapping[str, AtMostK | TimeBounded] = (
        constraint.all_classes() if isinstance(constraint, Hybrid) else {"all": constraint}
    )
    return {name: _class_guarantee(events, costs, plan, c, delta) for name, c in classes.items()}


def per_unit_guarantee(
    interval_events: Sequence[DpEvent],
    plan: DisjointRelease,
    constraint: Constraint,
    *,
    delta: float,
) -> Guarantee:
    """The guarantee of releases ``1..len(interval_events)`` of ``plan``: sup over units.

    ``interval_events[i]`` is the (composed) event of release ``i + 1``.
    """
    return worst_guarantee(
        list(per_class_guarantees(interval_events, plan, constraint, delta=delta).values())
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanGuarantee:
    """What ``dpcr plan`` states before any data is read.

    ``max_queries_per_entry`` maps each class (``"all"`` for a simple constraint, ``"*"`` for a
    hybrid default) to the most releases one unit of it can affect; ``releases`` is the number of
    releases (None for an open-ended plan).
    """

    guarantee: Guarantee
    max_queries_per_entry: Mapping[str, int]
    per_class: Mapping[str, Guarantee]
    releases: int | None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "max_queries_per_entry", MappingProxyType(dict(self.max_queries_per_entry))
        )
        object.__setattr__(self, "per_class", MappingProxyType(dict(self.per_class)))

    @property
    def max_queries(self) -> int:
        """The most releases any unit can affect (the worst class)."""
        return max(self.max_queries_per_entry.values(), default=0)


def plan_guarantee(
    per_release_event: DpEvent,
    plan: DisjointRelease,
    constraint: Constraint,
    *,
    delta: float,
    until: int | None = None,
) -> PlanGuarantee:
    """The guarantee of the whole plan (or its releases up to ``until``) when every release
    carries ``per_release_event``: per class, ``max_affected``-fold composition (Thm 4.1, 4.2),
    and the worst class (Thm 4.10).
    """
    _check_constraint(constraint)
    _check_plan(plan, 0)
    cost_of(per_release_event)  # validate the event before anything else
    counts = max_affected_by_class(plan, constraint, until=until)
    from dpcr.accounting.accountants import stated_guarantee

    per_class = {
        name: stated_guarantee(SelfComposedEvent(event=per_release_event, count=n), delta=delta)
        for name, n in counts.items()
    }
    releases = plan.release_count() if until is None else len(plan.release_times(until))
    return PlanGuarantee(
        guarantee=worst_guarantee(list(per_class.values())),
        max_queries_per_entry=counts,
        per_class=per_class,
        releases=releases,
    )
