"""Per-entry privacy counts of continual releases computed from one entry's own changelog.

In the local model (paper section 5) the adversary compares two *histories* of one entry, not two
databases. A release made from an entry's changelog is a set of queries with filters; the loss
between histories ``m`` and ``m'`` composes the queries whose filtered inputs differ (Eq. 26). Any
query that either history's mutations reach can differ (the values are arbitrary), so the count is

    max over pairs (m, m') of |touched(m) ∪ touched(m')|,

which is at most twice the central-model count (Thm 5.1) and equals it whenever two worst-case
histories fit into disjoint queries (the usual case; the count is capped by the number of queries).
Insert and delete are mutations: an entry allowed ``c`` value changes over its lifecycle makes
``c + 2`` mutations (:func:`lifecycle_mutations`).

>>> from dpcr.bounding.constraints import AtMostK, TimeBounded
>>> from dpcr.plans.dcr import DisjointRelease
>>> local_dcr_count(DisjointRelease(start=0, period=10), AtMostK(k=lifecycle_mutations(2)))
8
>>> local_dcr_count(DisjointRelease(times=(10, 20, 30)), AtMostK(k=4))
3
>>> local_tree_count(levels=10, fanout=2, width=1, constraint=TimeBounded(bound=1))
40
"""

from __future__ import annotations

from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError
from dpcr.plans.counts import max_affected, reachable_runs
from dpcr.plans.dcr import DisjointRelease

__all__ = [
    "lifecycle_mutations",
    "local_dcr_count",
    "local_tree_count",
    "local_window_count",
]


def _positive_int(value: object, name: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def lifecycle_mutations(changes: int) -> int:
    """Mutations of an entry that is inserted, changes value ``changes`` times and is deleted."""
    return _positive_int(changes, "changes", minimum=0) + 2


def _pair_union_of_runs(runs: list[tuple[int, int]]) -> int:
    best = 0
    for a, (i1, j1) in enumerate(runs):
        for i2, j2 in runs[a:]:
            overlap = max(0, min(j1, j2) - max(i1, i2) + 1)
            best = max(best, (j1 - i1 + 1) + (j2 - i2 + 1) - overlap)
    return best


def local_dcr_count(
    plan: DisjointRelease,
    constraint: AtMostK | TimeBounded | Hybrid,
    *,
    until: int | None = None,
) -> int:
    """Queries of a DCR that two histories of one entry can make differ (Cor 5.1, 5.2).

    At most k: ``min(2k, releases)``. B-time-bounded: ``min(2 MostSpan, releases)`` for a periodic
    plan; for explicit release times the largest union of two reachable runs (exact, O(n²)).
    Hybrid: the worst class (an entry's class is part of its history, so both histories of the
    worst pair may come from the worst class).
    """
    if isinstance(constraint, Hybrid):
        return max(local_dcr_count(plan, c, until=until) for c in constraint.all_classes().values())
    single = max_affected(plan, constraint, until=until)
    n = plan.release_count() if until is None else len(plan.release_times(until))
    if isinstance(constraint, TimeBounded) and not plan.is_periodic:
        return _pair_union_of_runs(reachable_runs(plan.release_times(until), constraint.bound))
    return 2 * single if n is None else min(2 * single, n)


def local_tree_count(
    *,
    levels: int,
    fanout: int,
    width: int,
    constraint: AtMostK | TimeBounded,
    horizon: int | None = None,
) -> int:
    """Nodes of a hierarchical DCR (HDCR) that two histories of one entry can make differ.

    Level ``i`` (0-based) has intervals of length ``fanout**i * width`` starting at 0. At most k:
    ``Σ_i min(2k, N_i)`` (``2hk`` unbounded, Cor 5.3). B-time-bounded: a window of length B meets
    up to ``ceil(B / (c^i W)) + 1`` intervals of level i (docs/errata.md, erratum 1; the paper's
    ``ceil(B/W)/c^i + 1`` is too small), so ``Σ_i min(2 (ceil(B / (c^i W)) + 1), N_i)``.
    ``horizon`` (time units, a multiple of ``width``) bounds the timeline and caps each level at its
    ``N_i = ceil(horizon / (c^i W))`` nodes; None means unbounded.
    """
    _positive_int(levels, "levels")
    _positive_int(fanout, "fanout", minimum=2)
    _positive_int(width, "width")
    if horizon is not None:
        _positive_int(horizon, "horizon")
    total = 0
    for i in range(levels):
        length = fanout**i * width
        if isinstance(constraint, AtMostK):
            single = constraint.k
        elif isinstance(constraint, TimeBounded):
            single = -(-constraint.bound // length) + 1
        else:
            raise ConfigError(f"constraint must be AtMostK or TimeBounded, got {constraint!r}")
        nodes = None if horizon is None else -(-horizon // length)
        total += 2 * single if nodes is None else min(2 * single, nodes)
    return total


def local_window_count(
    *,
    period: int,
    window: int,
    constraint: AtMostK | TimeBounded,
    releases: int | None = None,
) -> int:
    """Windows of a sliding-window release (SWCR) that two histories of one entry can make differ.

    Windows are ``(t_i - W, t_i]`` with ``t_i`` P apart (integer times). One mutation lies in at
    most ``ceil(W / P)`` windows, a B-time-bounded history in at most ``ceil((B + W) / P)``:
    Cor 5.4 gives ``2k ceil(W/P)``, Cor 5.5 ``2 ceil((B + W) / P)``, capped by ``releases``.
    """
    _positive_int(period, "period")
    _positive_int(window, "window")
    if isinstance(constraint, AtMostK):
        single = constraint.k * -(-window // period)
    elif isinstance(constraint, TimeBounded):
        single = -(-(constraint.bound + window) // period)
    else:
        raise ConfigError(f"constraint must be AtMostK or TimeBounded, got {constraint!r}")
    return 2 * single if releases is None else min(2 * single, _positive_int(releases, "releases"))
