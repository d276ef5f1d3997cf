"""How many releases of a disjoint continual release one privacy unit can affect.

The guarantee of a plan is a function of the plan and the constraint alone (paper Eq. 17-18,
Thm 2.2): a unit's loss is the composition of the releases its kept mutations touch, and the plan's
guarantee is the worst unit. This module counts the touched releases; :mod:`dpcr.accounting` turns
counts (or the runs of intervals themselves, when releases differ) into (ε, δ).

Timeline and intervals
----------------------
Times are integers (microseconds). Release ``i`` (1-based) covers ``(t_{i-1}, t_i]``; the first
covers ``(-inf, t_1]``. A mutation after the last release time of a bounded plan is never
released.

* **At most k** (Thm 4.1): the intervals are disjoint, so one mutation touches at most one release
  and a unit touches at most ``k`` releases -- never more than there are releases.
* **B-time-bounded** (Thm 4.2): a unit inserted at ``x`` mutates only in ``[x, x + B]``. The run
  of intervals ``i..j`` (``i < j``) can be touched iff some ``a`` in interval ``i`` and ``b`` in
  interval ``j`` satisfy ``b - a <= B``. The closest pair is ``a = t_i`` and ``b = t_{j-1} + 1``
  (the first integer of interval ``j``), so the run is reachable iff ``t_{j-1} + 1 - t_i <= B``,
  i.e. ``t_{j-1} - t_i < B``; mutations at ``t_i, t_{i+1}, ..., t_{j-1}, t_{j-1} + 1`` then touch
  all of ``i..j`` (every interval holds at least its own ``t``). **MostSpan** (Definition 4.4) is
  the length of the longest reachable run.

  For a periodic plan ``t_i = start + i W`` the condition is ``(j - 1 - i) W < B``, so the longest
  run has ``j - i = ceil(B / W)`` and MostSpan is ``ceil(B / W) + 1`` (for every integer
  ``B >= 0``: ``B = 0`` gives 1, ``B = W`` gives 2), capped by the number of releases.

The paper's reference code for MostSpan (section 4.4.3) is wrong (docs/errata.md, erratum 2): it
returns 0 when no two release times are ``B`` apart (claiming no loss for a short plan) and 2 for
``B = 0``. This module implements the definition.

>>> most_span([10, 20, 30, 40], 0)
1
>>> most_span([10, 20, 30, 40], 10)
2
>>> most_span([10, 20, 30, 40], 11)
3
>>> most_span([10, 20], 1000)
2
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral
from typing import TYPE_CHECKING

from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError
from dpcr.plans.base import Schedule

if TYPE_CHECKING:
    from dpcr.bounding.constraints import Constraint

__all__ = [
    "max_affected",
    "max_affected_by_class",
    "most_span",
    "periodic_most_span",
    "reachable_runs",
    "release_times_for",
    "touched_base_intervals",
]


def _check_bound(bound: int) -> None:
    if isinstance(bound, bool) or not isinstance(bound, int) or bound < 0:
        raise ConfigError(f"time bound must be an integer >= 0 (microseconds), got {bound!r}")


def _check_times(times: Sequence[int]) -> list[int]:
    out: list[int] = []
    for i, t in enumerate(times):
        value: object = t
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise ConfigError(f"release time {i + 1} must be an integer (µs), got {t!r}")
        out.append(int(value))
        if i and out[i] <= out[i - 1]:
            raise ConfigError(
                f"release times must be strictly increasing; t_{i + 1} = {t} follows "
                f"t_{i} = {times[i - 1]}"
            )
    return out


def reachable_runs(times: Sequence[int], bound: int) -> list[tuple[int, int]]:
    """The maximal reachable runs as 0-based inclusive pairs ``(i, j)``, one per start ``i``.

    Run ``i..j`` is reachable by one B-time-bounded unit iff ``j == i`` or
    ``t_{j-1} - t_i < bound`` (1-based in the module docstring; here ``times[j - 1] - times[i]``).
    Every reachable run is contained in one of the returned runs. ``O(n)``.

    >>> reachable_runs([10, 20, 30, 40], 11)
    [(0, 2), (1, 3), (2, 3), (3, 3)]
    """
    _check_bound(bound)
    times = _check_times(times)
    n = len(times)
    runs: list[tuple[int, int]] = []
    j = 0
    for i in range(n):
        j = max(j, i)
        # extend j while run i..j+1 is reachable: times[j] - times[i] < bound
        while j + 1 < n and times[j] - times[i] < bound:
            j += 1
        runs.append((i, j))
    return runs


def most_span(times: Sequence[int], bound: int) -> int:
    """MostSpan(t, B) (paper Definition 4.4): the most consecutive intervals one window meets.

    ``times`` are the release times ``t_1 < t_2 < ... < t_n`` (integers, µs) and ``bound`` is ``B``.
    Returns 0 only when there are no releases.
    """
    runs = reachable_runs(times, bound)
    return max((j - i + 1 for i, j in runs), default=0)


def periodic_most_span(bound: int, period: int) -> int:
    """MostSpan of an unbounded periodic plan: ``ceil(bound / period) + 1`` (integer timeline).

    >>> periodic_most_span(0, 7), periodic_most_span(1, 7), periodic_most_span(7, 7)
    (1, 2, 2)
    >>> periodic_most_span(8, 7)
    3
    """
    _check_bound(bound)
    if isinstance(period, bool) or not isinstance(period, int) or period <= 0:
        raise ConfigError(f"period must be an integer > 0 (µs), got {period!r}")
    return -(-bound // period) + 1


def release_times_for(plan: Schedule, until: int | None = None) -> list[int] | None:
    """Release times of ``plan`` up to ``until``; None for an open-ended plan without ``until``."""
    if not plan.bounded and until is None:
        return None
    return plan.release_times(until)


def _simple_count(
    plan: Schedule, constraint: AtMostK | TimeBounded, until: int | None
) -> int:
    if isinstance(constraint, AtMostK):
        n = _release_count(plan, until)
        return constraint.k if n is None else min(constraint.k, n)
    if isinstance(constraint, TimeBounded):
        if plan.period is not None:  # periodic: t_i = start + i * period
            n = _release_count(plan, until)
            span = periodic_most_span(constraint.bound, plan.period)
            return span if n is None else min(span, n)
        return most_span(plan.release_times(until), constraint.bound)
    raise ConfigError(
        f"constraint must be AtMostK or TimeBounded here, got {constraint!r}; "
        "for a Hybrid constraint use max_affected_by_class"
    )


def _release_count(plan: Schedule, until: int | None) -> int | None:
    if until is None:
        return plan.release_count()
    return plan.count_until(until)


def max_affected(
    plan: Schedule,
    constraint: AtMostK | TimeBounded | Hybrid,
    *,
    until: int | None = None,
) -> int:
    """The most releases one unit's kept mutations can affect.

    ``until`` restricts the plan to releases at or before that time (the releases made so far).
    At most k: ``min(k, releases)``. Time-bounded: MostSpan of the release times (for a periodic
    plan the closed form ``ceil(B / W) + 1``, capped by the number of releases). Hybrid: the worst
    class (Thm 4.10); see :func:`max_affected_by_class` for each class.
    """
    _check_until(until)
    if isinstance(constraint, Hybrid):
        return max(max_affected_by_class(plan, constraint, until=until).values())
    return _simple_count(plan, constraint, until)


def max_affected_by_class(
    plan: Schedule, constraint: AtMostK | TimeBounded | Hybrid, *, until: int | None = None
) -> dict[str, int]:
    """Per class of a :class:`Hybrid` constraint (default class under ``"*"``), the most releases
    one unit of that class can affect. A simple constraint gives one class named ``"all"``.
    """
    _check_until(until)
    if isinstance(constraint, Hybrid):
        return {name: _simple_count(plan, c, until) for name, c in constraint.all_classes().items()}
    return {"all": _simple_count(plan, constraint, until)}


def _check_until(until: int | None) -> None:
    if until is not None and (isinstance(until, bool) or not isinstance(until, int)):
        raise ConfigError(f"until must be a time in microseconds (int) or None, got {until!r}")


def touched_base_intervals(
    constraint: Constraint, *, base: int, span: int
) -> int:
    """The most of ``span`` consecutive base intervals (length ``base`` µs) one unit's kept
    mutations touch, worst class: ``min(span, k)`` at most k, ``min(span, ceil(B/base) + 1)``
    B-time-bounded."""
    classes = constraint.all_classes() if isinstance(constraint, Hybrid) else {"all": constraint}
    worst = 0
    for con in classes.values():
        m = con.k if isinstance(con, AtMostK) else periodic_most_span(con.bound, base)
        worst = max(worst, min(span, m))
    return max(1, worst)
