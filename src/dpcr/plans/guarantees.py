"""The per-unit worst case of a disjoint continual release (paper Eq. 17-18; Thm 2.2, 4.1, 4.10).

Release ``i`` may carry its own event (``interval_events[i - 1]``); the plan turns the constraint
into a :class:`~dpcr.accounting.guarantee.Participation` (at most k: any ``k`` releases; a time
bound: one reachable run of consecutive releases, :func:`dpcr.plans.counts.reachable_runs`) and
:mod:`dpcr.accounting.guarantee` composes. For uniform events this is ``max_affected`` times the
per-release event.

The privacy unit is the entry unless a unit column groups several entries: the constraint then
counts (or time-bounds) the mutations of all the unit's entries, and each release clamps the
unit's contribution, so the same counts hold with "unit" in place of "entry".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from dpcr.accounting.composition import Guarantee, cost_of, worst_guarantee
from dpcr.accounting.events import DpEvent
from dpcr.accounting.guarantee import layered_guarantee
from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError
from dpcr.plans.dcr import DisjointRelease

__all__ = ["PlanGuarantee", "per_class_guarantees", "per_unit_guarantee", "plan_guarantee"]

Constraint = AtMostK | TimeBounded | Hybrid


def _check(plan: object, constraint: object, n_events: int) -> None:
    if not isinstance(plan, DisjointRelease):
        raise ConfigError(f"plan must be a DisjointRelease, got {plan!r}")
    if not isinstance(constraint, AtMostK | TimeBounded | Hybrid):
        raise ConfigError(f"constraint must be AtMostK, TimeBounded or Hybrid, got {constraint!r}")
    count = plan.release_count()
    if count is not None and n_events > count:
        raise ConfigError(
            f"{n_events} release events given for a plan with {count} releases; "
            "pass one (composed) event per release of the plan, or extend the plan"
        )


def per_class_guarantees(
    interval_events: Sequence[DpEvent], plan: DisjointRelease, constraint: Constraint, *,
    delta: float,
) -> dict[str, Guarantee]:
    """Per class (``"all"`` for a simple constraint), the guarantee of its worst unit."""
    events = list(interval_events)
    _check(plan, constraint, len(events))
    for e in events:
        cost_of(e)
    participation = plan.participation(constraint, reporting=len(events))
    _, per_class = layered_guarantee([events], participation, delta=delta)
    return per_class


def per_unit_guarantee(
    interval_events: Sequence[DpEvent], plan: DisjointRelease, constraint: Constraint, *,
    delta: float,
) -> Guarantee:
    """The guarantee of releases ``1..len(interval_events)`` of ``plan``: sup over units."""
    return worst_guarantee(
        list(per_class_guarantees(interval_events, plan, constraint, delta=delta).values())
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanGuarantee:
    """The guarantee of a whole disjoint plan before any data is read: ``max_queries_per_entry``
    per class, ``releases`` (None for an open-ended plan)."""

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
    per_release_event: DpEvent, plan: DisjointRelease, constraint: Constraint, *, delta: float,
    until: int | None = None,
) -> PlanGuarantee:
    """The guarantee of the whole plan (or its releases up to ``until``) when every release
    carries ``per_release_event``: per class ``max_affected``-fold composition, worst class."""
    _check(plan, constraint, 0)
    cost_of(per_release_event)
    reporting = None if until is None else len(plan.release_times(until))
    participation = plan.participation(constraint, reporting=reporting)
    widest = max(p.total for p in participation.values())
    guarantee, per_class = layered_guarantee(
        [[per_release_event] * widest], participation, delta=delta
    )
    releases = plan.release_count() if until is None else reporting
    return PlanGuarantee(
        guarantee=guarantee,
        max_queries_per_entry={name: p.total for name, p in participation.items()},
        per_class=per_class,
        releases=releases,
    )
