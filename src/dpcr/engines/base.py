"""The engine protocol: what the release loop asks of the engine that reads the changelog.

An engine loads a source, validates every record (the outcomes of :func:`dpcr.changelog.load`:
the same quarantine reasons and counts), bounds each privacy unit's history by the constraint
and totals every query's change per base interval. The loop then hands the small table of
totals to the plan; nothing per record or per unit leaves the engine except the counts of the
reports. Every engine must give identical results on the same input (tests compare them).

The engine does not judge whether the source still holds what earlier runs consumed: that check
is made on the source itself (:mod:`dpcr.changelog.position`), the same for every engine, and
handed to the engine with the run (:class:`EngineRun`).

The release loop asks every engine for one thing, :meth:`Engine.step`: the data step of a run
(an :class:`AggregateRequest` and the run's :class:`EngineRun`) to a :class:`DataStep`, whose
``settle`` moves the engine's incremental state forward once the store has committed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from dpcr.bounding.constraints import Constraint
    from dpcr.changelog import FrozenPoint, LoadReport, SourceConfig
    from dpcr.queries import Query, Scalar

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundingReport:
    """What bounding did: ``dropped`` maps a reason to its number of mutations; ``late`` counts
    mutations left out by ``exclude_late``; ``clamped`` (per query) the unit-intervals whose
    change was clamped; ``non_numeric`` (per sum) kept mutations whose value is missing, not a
    number, NaN or infinite; ``unknown_keys`` (per histogram with ``unknown = "drop"``) kept
    mutations whose value is outside the keys; ``by_class`` per hybrid class: units, kept,
    dropped; ``retired``: live entries removed by ``on_exhausted = "retire"``;
    ``dropped_moves``: under state machines, the dropped mutations per reason and per move."""

    units: int
    mutations: int
    kept: int
    dropped: dict[str, int]
    late: int = 0
    clamped: dict[str, int] = field(default_factory=dict)
    non_numeric: dict[str, int] = field(default_factory=dict)
    unknown_keys: dict[str, int] = field(default_factory=dict)
    by_class: dict[str, dict[str, int]] = field(default_factory=dict)
    retired: int = 0  # on_exhausted = "retire": live entries removed at their unit's retirement
    #: state machines: dropped mutations per reason and per move (``'from -> to'``)
    dropped_moves: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Aggregates:
    """``values[name]`` has shape (intervals, keys): integer change of each key per interval."""

    first_interval: int
    last_interval: int
    values: dict[str, np.ndarray]
    report: BoundingReport
    #: per query with a clamp: the unit-intervals clamped in each interval (same rows as values)
    clamps: dict[str, np.ndarray] = field(default_factory=dict)
    #: per open histogram: its candidate keys (every key a kept row holds, up to the last
    #: interval) and the first base interval one holds it in; the columns of its values are
    #: :func:`open_columns` (operator-only: which keys are published is the release's choice)
    candidates: dict[str, dict[str, int]] = field(default_factory=dict)


def open_columns(query: Query, candidates: Mapping[str, int]) -> tuple[str, ...]:
    """The keys of an open histogram's values, in column order: its declared keys, then its
    other candidate keys in the order of ``candidates`` (by first interval and key)."""
    declared = query.keys
    known = set(declared)
    return declared + tuple(k for k in candidates if k not in known)


@dataclass(frozen=True, slots=True, kw_only=True)
class AggregateRequest:
    """One aggregation.

    ``release_times`` are the ends t_1 .. t_n of the plan's base intervals up to the last one
    any node of this run needs (a public clock decides n); interval i covers (t_{i-1}, t_i].
    Totals are wanted for intervals ``first_interval .. n`` (the plan decides which, never the
    data).
    ``clock`` is the run's public clock (mutations after it are counted as not yet due).
    ``exclude_late = (records_seen, t_last)`` and ``frozen`` are the freeze inputs of
    :func:`dpcr.changelog.load`. ``unit_column`` None means the unit is the entry, or the
    source's record-level unit field when it names one; ``unit_is_entry`` is True only when
    each unit is one entry (then no per-unit clamping is needed). ``retire``: a unit leaves
    every statistic when bounding cuts its history (``on_exhausted = "retire"``).
    """

    source: SourceConfig
    queries: Sequence[Query]
    constraint: Constraint
    release_times: Sequence[int]
    first_interval: int
    clock: int
    unit_column: str | None = None
    unit_is_entry: bool = True
    on_error: str = "raise"
    quarantine_path: Path | None = None
    exclude_late: tuple[int, int] | None = None
    frozen: Sequence[FrozenPoint] = ()
    retire: bool = False
    #: what of the source earlier runs consumed, for an incremental step (None: read it all)
    consumed: Consumed | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Consumed:
    """What of a source the store's position covers: the first ``bytes`` bytes of a line file
    (an incremental step reads the lines after them). ``size``: read the line file up to this
    byte only (the complete lines it held when the read began; None: to its end)."""

    bytes: int = 0
    size: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreHead:
    """What the store last committed about the source: the ``records`` consumed, the end
    ``t_last`` of the last released interval (None: none yet) and the position ``token``. An
    engine's incremental state names the head it belongs to, and is continued only by a run
    whose store has that head. ``interval``: the store's released reporting intervals (for an
    engine whose state names them too; heads compare without it)."""

    records: int = 0
    t_last: int | None = None
    token: str = ""
    interval: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineStateRef:
    """Where an engine keeps its incremental state, and what it must match.

    ``folder``: the engine's own folder beside the store (``<store>.state/<engine>/``,
    operator-only: it holds per-unit data). ``store``: the store's head, which a state must
    match to be continued (otherwise the step reads the whole source and writes a fresh
    state: never a wrong release). ``fingerprint``: the configuration's. ``settle_at``: the end
    of the last interval this run releases: once the store has committed the run, mutations
    dated by then are final and the state keeps only what later runs need of them.
    ``settle_times``: the base interval ends after the request's ``release_times`` up to
    ``settle_at`` and the store's ``t_last`` (usually none), so that everything that settles
    is bounded.
    """

    folder: Path
    store: StoreHead
    fingerprint: str = ""
    settle_at: int | None = None
    settle_times: tuple[int, ...] = ()


class Pending(Protocol):
    """A state version written by a step and not yet current."""

    def commit(self, store: StoreHead) -> None:
        """Make the version current, recording ``store`` (the store's head once it has
        committed the run's release): call it after the store commits, never before."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineResult:
    """What an aggregation returns to the loop.

    ``load``: the validation report (records, valid, quarantined per reason, tombstones, split,
    late, freeze points). ``aggregates``: per query, the (intervals × keys) integer changes of
    intervals ``aggregates.first_interval .. len(release_times)``, and the bounding report.
    ``min_ts`` / ``max_ts``: the range of valid timestamps (None when there are none);
    ``not_yet_due``: valid mutations dated after the clock; ``missing_columns``: columns a query
    or the constraint names that no valid row has (the loop refuses to release then).
    """

    load: LoadReport
    aggregates: Aggregates
    min_ts: int | None
    max_ts: int | None
    not_yet_due: int
    missing_columns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DataStep:
    """What the loop needs from the data: the load and bounding reports, the totals, the
    range of valid timestamps, the mutations after the clock and the source's new position."""

    report: Any
    aggregates: Any
    min_ts: int | None
    max_ts: int | None
    not_yet_due: int
    token: str
    #: called with the store's new head once the store committed (the incremental state
    #: follows the store), or None
    settle: Callable[[StoreHead], None] | None = None
    #: what the operator is told about the data without the run stopping (one line each)
    warnings: tuple[str, ...] = ()


class AtPosition(Protocol):
    """The read of the source with its position checked, the same for every engine
    (``dpcr.release``'s ``read_at_position``): ``read(source, size)`` (``size``: the bytes of a
    line file the position covers), returned with the source's new position token ('' for a
    source checked by record digests). ``bounded``: ``read`` reads no byte of a line file at or
    after ``size``."""

    def __call__(
        self, read: Callable[[SourceConfig, int], T], *, bounded: bool = False
    ) -> tuple[T, str]: ...


def _no_folder() -> Path:
    raise RuntimeError("this run has no operator folder")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineRun:
    """What one run gives its engine besides the :class:`AggregateRequest`.

    ``store``: what the store last committed. ``keep_state``: whether the run continues (or
    starts) the engine's incremental state in ``state_dir`` (``<store>.state/``, owner-only:
    it holds per-unit data); ``fingerprint`` is the configuration's, which a state must
    match; ``settle_at`` the end of the last interval this run releases and ``settle_times``
    the base interval ends after the request's ``release_times`` up to it and to the store's
    ``t_last`` (so that every row that settles is bounded). ``at_position``: the position
    check. ``connection``: the run's DuckDB connection (a session's cursor), in which the
    DuckDB engine works. ``progress(stage, done, total)``. ``scratch()`` and ``operator()``:
    the owner-only folders for still copies of the source and for quarantined records.
    ``held``: what a long-running session keeps between its steps (the engine's own object,
    or None). ``on_read``: called once a source that Python code reads (a SQLite log) has
    been read."""

    store: StoreHead
    at_position: AtPosition
    progress: Callable[[str, int, int], None]
    keep_state: bool = False
    state_dir: Path | None = None
    fingerprint: str = ""
    settle_at: int | None = None
    settle_times: tuple[int, ...] = ()
    connection: Any = None
    scratch: Callable[[], Path] = _no_folder
    operator: Callable[[], Path] = _no_folder
    held: Any = None
    on_read: Callable[[], None] | None = None


class Engine(Protocol):
    """An engine: ``name`` as written in the configuration (``engine = "duckdb"``)."""

    name: str

    def aggregate(self, request: AggregateRequest) -> EngineResult:
        """Load, validate, bound and aggregate; raise :class:`~dpcr.errors.ChangelogError`
        like :func:`dpcr.changelog.load` with ``on_error = "raise"``."""
        ...

    def keeps_state(self, request: AggregateRequest) -> bool:
        """Whether the engine can keep an incremental state for this request (a run then
        reads only what is new)."""
        ...

    def step(self, request: AggregateRequest, run: EngineRun) -> DataStep:
        """The data step of a run: :meth:`aggregate` with the source's position checked
        (``run.at_position``), continuing the engine's state when ``run.keep_state``; the
        result's ``settle`` moves the state forward once the store has committed."""
        ...


@runtime_checkable
class IncrementalEngine(Engine, Protocol):
    """An engine that keeps state between runs, so that a run reads only what is new."""

    def continues(self, request: AggregateRequest, state: EngineStateRef) -> bool:
        """Whether :meth:`aggregate_step` will continue the state (read only what follows
        ``request.consumed``) rather than read the whole source."""
        ...

    def aggregate_step(
        self, request: AggregateRequest, state: EngineStateRef
    ) -> tuple[EngineResult, Pending]:
        """:meth:`aggregate`, reading only what is new when the state matches the store, and
        the next state version (current once :meth:`Pending.commit` is called). The result
        is the one :meth:`aggregate` gives on the whole source."""
        ...


def filter_items(query: Query) -> list[tuple[str, tuple[Scalar, ...]]]:
    """(column, values) of every row filter of ``query``: its ``where``, and an event query's
    ``before``."""
    from dpcr.queries import Events

    items = list(query.where.items())
    if isinstance(query, Events):
        items += list(query.before.items())
    return items


def numeric_columns(queries: Sequence[Query], constraint: Constraint) -> tuple[str, ...]:
    """The row columns read as numbers, once each: a sum's column, a ``where`` column matched
    against numbers, a state machine's column cut into buckets. A bare NaN or infinity token
    there (not JSON) makes its record ``bad_json`` (``dpcr.changelog.load(numbers=...)``)."""
    from dpcr.bounding.constraints import Hybrid
    from dpcr.bounding.state_machine import StateMachine
    from dpcr.queries import Sum

    wanted: dict[str, None] = {}
    for q in queries:
        if isinstance(q, Sum):
            wanted[q.column] = None
        for column, values in filter_items(q):
            if any(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                wanted[column] = None
    simple = (
        list(constraint.all_classes().values()) if isinstance(constraint, Hybrid) else [constraint]
    )
    for c in simple:
        if isinstance(c, StateMachine) and c.buckets is not None:
            wanted[c.column] = None
    return tuple(wanted)


def referenced_columns(queries: Sequence[Query], constraint: Constraint) -> tuple[str, ...]:
    """Every row column the queries (``column``, ``where`` keys) or the constraint (a hybrid's
    class column, a state machine's column) read, once each, in the order they name them: the
    columns an engine checks for in the data (a column no row has is a typo)."""
    from dpcr.bounding.constraints import Hybrid
    from dpcr.bounding.state_machine import OpLimits, StateMachine
    from dpcr.queries import GroupedSum, Histogram, Sum

    wanted: list[str] = []

    def want(column: str) -> None:
        if column not in wanted:
            wanted.append(column)

    for q in queries:
        if isinstance(q, Sum | Histogram):
            want(q.column)
        if isinstance(q, GroupedSum):
            want(q.by)
        for column, _values in filter_items(q):
            want(column)
    simple = (
        list(constraint.all_classes().values()) if isinstance(constraint, Hybrid) else [constraint]
    )
    if isinstance(constraint, Hybrid):
        want(constraint.column)
    for c in simple:
        if isinstance(c, OpLimits):  # (reads no state column; its immutable ones)
            for column in c.immutable:
                want(column)
        elif isinstance(c, StateMachine):
            want(c.column)
    return tuple(wanted)
