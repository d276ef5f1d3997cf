"""The plan protocol: what the one release loop (:mod:`dpcr.release`) asks of every release plan.

A plan is a small frozen value. The loop knows nothing else about it:

* ``schedule()`` -- the public clock: *reporting intervals* ``1, 2, ...`` (disjoint intervals,
  base intervals of a tree or factorization, windows), closed by time alone;
* ``base_grid()`` -- the engine totals each query per base interval of this grid (1-based);
* ``base_range(before, after)`` -- which base intervals the nodes due when the closed reporting
  intervals go from ``before`` to ``after`` depend on; ``reporting_base(i)`` -- the base intervals
  whose total is reporting interval ``i``'s change (alerts watch these);
* ``due(before, after)`` -- the nodes ``(layer, index)`` to release now; ``exact(base, first,
  nodes)`` -- their exact integer values, a linear map of the base totals; ``node_range(node)``;
* ``instance(node)`` -- the mechanism instance a node belongs to (each node is its own, except
  that a factorization releases one vector: one instance, one ledger entry);
* ``participation(constraint, reporting)`` -- per class, how one unit meets the instances
  (:class:`~dpcr.accounting.guarantee.Participation`), computed from the plan's filters;
* ``budgeting(constraint, clamped=...)`` -- per layer, the share of the budget one instance
  spends and its sensitivity factors (:class:`Budgeting`). ``clamped``: the privacy unit is a
  column, whose change the engine clamps per *base* interval; a node summing several base
  intervals then has up to ``m`` times the sensitivity (L2 too), ``m`` the most of its base
  intervals one unit touches (with the entry as the unit, a node's change telescopes: ``m = 1``);
* ``estimate(values, variances, n)`` -- post-processing: per reporting interval, the change and
  the running value (or window) with exact variances; ``variances(layer_var, n)`` -- those two
  variances alone, from one noise variance per layer, without values (what ``dpcr plan``
  predicts; the same numbers as ``estimate``'s, at a cost independent of the number of keys
  and nodes).

Optional: ``weight_stats(n)`` -- for a plan whose nodes all share one noise event, per row of
the published changes and running values, the aggregates of the estimator's weights on the
nodes (:class:`WeightStats`); the published intervals then need no probing of the estimator
(:mod:`dpcr.release._uncertainty`).

Adding a plan = one module implementing this, one entry in :data:`dpcr.plans.PLAN_TYPES`, a test
class in the plan contract suite and a section in docs/config.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from dpcr.errors import ConfigError

if TYPE_CHECKING:
    from dpcr.accounting.guarantee import Participation
    from dpcr.bounding.constraints import Constraint

__all__ = [
    "ANNOUNCE_RUN_INTERVALS",
    "MAX_RUN_INTERVALS",
    "METHOD_1_RUN_INTERVALS",
    "Budgeting",
    "Estimates",
    "LayerBudget",
    "Node",
    "NodeSeries",
    "Plan",
    "WeightStats",
    "check_whole_periods",
    "run_step",
]

#: (layer, index) of a released node; the index numbering is the plan's own.
Node = tuple[int, int]

#: The most reporting intervals a plan may have (or close by one run): a daily plan over 2700
#: years; beyond, the work is no longer interactive and a coarser period is meant.
MAX_RELEASES = 10**6


#: The most reporting intervals one run closes: an hourly year (8,760, 8,784 in a leap year) in
#: one run. A run's time grows with the intervals it closes (its rows, outputs and report, and
#: every row's 95 % interval: about 1 s of CPU per 1,000 hourly intervals of an 8-ary tree with
#: interval method 2), so a longer backlog (a start long before the first run, a long pause) is
#: released in steps, one per run (:func:`run_step`); ``dpcr plan`` says when a run would close
#: more than :data:`ANNOUNCE_RUN_INTERVALS`.
MAX_RUN_INTERVALS = 9_000
#: The most a run of a store that publishes with interval method 1 closes (its intervals are
#: convolutions per row: about a second per 1,000 disjoint intervals, a minute or more per
#: 1,000 base intervals of a tree on 2 cores).
METHOD_1_RUN_INTERVALS = 2_000
#: ``dpcr plan`` announces a run that would close more reporting intervals than this.
ANNOUNCE_RUN_INTERVALS = 100


class Schedule(Protocol):
    """The release times of a disjoint release (:class:`dpcr.plans.dcr.DisjointRelease`): a
    plan's reporting schedule and its grid of base intervals."""

    @property
    def start(self) -> int | None: ...
    @property
    def period(self) -> int | None: ...
    @property
    def end(self) -> int | None: ...
    @property
    def times(self) -> tuple[int, ...] | None: ...
    @property
    def is_periodic(self) -> bool: ...
    @property
    def bounded(self) -> bool: ...
    def release_count(self) -> int | None: ...
    def release_time(self, index: int) -> int: ...
    def release_times(self, until: int | None = None) -> list[int]: ...
    def count_until(self, until: int) -> int: ...
    def interval(self, index: int) -> tuple[int | None, int]: ...
    def interval_index(self, ts: np.ndarray) -> np.ndarray: ...
    def describe(self) -> str: ...


def run_step(schedule: Schedule, before: int, closed: int, clock: int, *,
             limit: int = MAX_RUN_INTERVALS) -> tuple[int, int]:
    """The reporting intervals a run releases and the clock it releases them at: all
    ``closed`` by ``clock`` when they are at most ``limit`` (:data:`MAX_RUN_INTERVALS`) more
    than the ``before`` of earlier runs; else the next ``limit``, released as if the clock were
    the end of the last of them (the next run goes on from there). A function of the public
    clock and the store alone, as a run with that ``--until`` would be."""
    if closed - before <= limit:
        return closed, clock
    last = before + limit
    return last, int(schedule.release_time(last))


def check_whole_periods(start: int, period: int, end: int) -> None:
    """Refuse an ``end`` that is not a whole number of periods after ``start``: the part of the
    last period before ``end`` would never be released (34 days at 7d: 4 intervals, 6 days
    left out). One line naming the nearest valid ends."""
    from dpcr.timeutil import format_duration, format_timestamp

    n, rest = divmod(end - start, period)
    if rest:
        fmt = format_timestamp
        raise ConfigError(
            f"end {fmt(end)} is not a whole number of periods ({format_duration(period)}) after "
            f"start {fmt(start)}: the {format_duration(rest)} after {fmt(start + n * period)} "
            f'would never be released; set end = "{fmt(start + n * period)}" ({n} '
            f'intervals) or end = "{fmt(start + (n + 1) * period)}" ({n + 1} intervals)'
        )


def check_release_count(count: int | None, what: str) -> None:
    """Refuse a plan (or a run) with more than :data:`MAX_RELEASES` reporting intervals."""
    if count is not None and count > MAX_RELEASES:
        raise ConfigError(
            f"{what} has {count:,} reporting intervals, more than {MAX_RELEASES:,}; choose a "
            "longer period, a later start or an earlier end"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerBudget:
    """One instance of a layer: ``share`` of the budget (ε for Laplace noise, ρ for Gaussian),
    the query's L1 sensitivity times ``l1``, its squared L2 sensitivity times ``l2``, and
    ``values`` numbers per key."""

    share: Fraction
    l1: Fraction = Fraction(1)
    l2: Fraction = Fraction(1)
    values: int = 1

    def __post_init__(self) -> None:
        if not self.share > 0:
            raise ConfigError(f"a layer's budget share must be > 0, got {self.share}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Budgeting:
    """Layers ``0 .. len(layers)-1`` as calibrated; ``tail``: the share the layers after them
    spend together (an open-ended tree), 0 when there are none."""

    layers: tuple[LayerBudget, ...]
    tail: Fraction = Fraction(0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimates:
    """Per reporting interval ``1..n`` (rows) and key (columns): the change and the running value
    (the window's value for a window plan) with exact variances (per row)."""

    change: np.ndarray
    estimate: np.ndarray
    change_var: np.ndarray
    estimate_var: np.ndarray


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightStats:
    """Per row ``t`` (reporting interval ``t + 1``) of an estimator that is linear in the
    released nodes: ``Σ w²``, ``max |w|``, the number of nonzero weights and whether every
    weight is an integer."""

    sum_sq: np.ndarray
    max_abs: np.ndarray
    count: np.ndarray
    integer: np.ndarray


@runtime_checkable
class Plan(Protocol):
    kind: ClassVar[str]
    #: noise the plan can add: "laplace" and/or "gaussian"
    mechanisms: ClassVar[tuple[str, ...]]

    def schedule(self) -> Schedule: ...
    def base_grid(self) -> Schedule: ...
    def reporting_range(self, i: int) -> tuple[int | None, int]: ...
    def reporting_base(self, i: int) -> tuple[int, int]: ...
    def base_range(self, before: int, after: int) -> tuple[int, int]: ...
    def due(self, before: int, after: int) -> list[Node]: ...
    def exact(self, base: np.ndarray, first: int, nodes: Sequence[Node]) -> np.ndarray: ...
    def instance(self, node: Node) -> Node: ...
    def node_range(self, node: Node) -> tuple[int | None, int]: ...
    def participation(
        self, constraint: Constraint, *, reporting: int | None
    ) -> dict[str, Participation]: ...
    def budgeting(self, constraint: Constraint, *, clamped: bool = False) -> Budgeting: ...
    def estimate(
        self, values: Mapping[Node, np.ndarray], variances: Mapping[Node, float], n: int
    ) -> Estimates: ...
    def variances(
        self, layer_var: Sequence[float], n: int
    ) -> tuple[np.ndarray, np.ndarray]: ...
    def describe(self) -> str: ...


class NodeSeries(Mapping[Node, Any]):
    """A mapping of nodes to values (numbers, or arrays of one shape) that also holds the
    values of nodes ``(0, 1) .. (0, m)`` (the longest run of them it has) as the rows of one
    float array, extended as nodes are added: what :func:`interval_series` reads without a
    pass over every node (a session's rows, whose nodes only grow: ``dpcr.release._rows``)."""

    __slots__ = ("_count", "_map", "_rows", "_shape")

    def __init__(self) -> None:
        self._map: dict[Node, Any] = {}
        self._rows = np.zeros((0, 1), dtype=np.float64)
        self._count = 0  # rows 0 .. _count - 1 hold nodes (0, 1) .. (0, _count)
        #: the shape of the values in the rows (None: none yet; False: values of unlike
        #: shapes, or of more than one dimension, met: no rows)
        self._shape: tuple[int, ...] | bool | None = None

    def __getitem__(self, node: Node) -> Any:
        return self._map[node]

    def __iter__(self) -> Iterator[Node]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, node: object) -> bool:
        return node in self._map

    def update(self, items: Mapping[Node, Any] | Iterable[tuple[Node, Any]]) -> None:
        """Add (or replace) the values of ``items`` (a mapping or ``(node, value)`` pairs)."""
        pairs = items.items() if isinstance(items, Mapping) else items
        for node, value in pairs:
            if node[0] == 0 and 1 <= node[1] <= self._count:
                self._count = node[1] - 1  # (a value replaced: its rows are written again)
            self._map[node] = value
        if self._shape is not False:
            self._extend()

    def _extend(self) -> None:
        """Append the rows of the nodes ``(0, _count + 1), ...`` that the mapping holds."""
        new: list[Any] = []
        while (0, self._count + len(new) + 1) in self._map:
            new.append(self._map[(0, self._count + len(new) + 1)])
        if not new:
            return
        shapes = {np.shape(v) for v in new}
        if isinstance(self._shape, tuple):
            shapes.add(self._shape)
        shape = shapes.pop()
        if shapes or len(shape) > 1:
            self._shape, self._count = False, 0
            return
        self._shape = shape
        width = shape[0] if shape else 1
        end = self._count + len(new)
        if end > self._rows.shape[0] or self._rows.shape[1] != width:
            rows = np.zeros((max(2 * end, 64), width), dtype=np.float64)
            rows[: self._count] = self._rows[: self._count]
            self._rows = rows
        self._rows[self._count : end] = np.array(new, dtype=np.float64).reshape(len(new), width)
        self._count = end

    def interval_rows(self, n: int) -> np.ndarray | None:
        """Nodes ``(0, 1) .. (0, n)`` as ``interval_series`` gives them (a new array), or None
        when the rows do not reach ``n``."""
        if n > self._count or not isinstance(self._shape, tuple):
            return None
        rows = self._rows[:n]
        return (rows.reshape(n) if self._shape == () else rows).copy()


def interval_series(
    values: Mapping[Node, np.ndarray], variances: Mapping[Node, float], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``(0, 1) .. (0, n)`` as float rows (n x keys) and their variances (n); read from
    the rows a :class:`NodeSeries` holds when it holds them."""
    change = values.interval_rows(n) if isinstance(values, NodeSeries) else None
    if change is None:
        change = np.array([values[(0, i)] for i in range(1, n + 1)], dtype=np.float64)
    var = variances.interval_rows(n) if isinstance(variances, NodeSeries) else None
    if var is None:
        var = np.array([variances[(0, i)] for i in range(1, n + 1)], dtype=np.float64)
    return change.reshape(n, -1), var


def sum_rows(base: np.ndarray, first: int, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """Exact integer sums of the base-interval ranges ``(lo, hi)`` (1-based, inclusive)."""
    keys = base.shape[1] if base.ndim == 2 else 1
    out = np.zeros((len(ranges), keys), dtype=np.int64)
    if not ranges:
        return out
    cs = np.zeros((base.shape[0] + 1, keys), dtype=np.int64)
    cs[1:] = np.cumsum(np.asarray(base, dtype=np.int64).reshape(base.shape[0], keys), axis=0)
    for r, (lo, hi) in enumerate(ranges):
        if hi < lo:
            continue
        if lo < first or hi - first + 1 > base.shape[0]:
            raise ConfigError(f"base intervals {lo}..{hi} were not aggregated")
        out[r] = cs[hi - first + 1] - cs[lo - first]
    return out
