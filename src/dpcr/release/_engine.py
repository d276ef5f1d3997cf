"""The data step of a run: read the source, check it still holds what earlier runs consumed,
validate, bound and aggregate, through the configured engine.

Every engine gets the same two things (:mod:`dpcr.engines.base`): an
:class:`~dpcr.engines.base.AggregateRequest` (what to total, from the configuration, the
store's head and the public clock) and the run's :class:`~dpcr.engines.base.EngineRun` (the
run's connection, the position check of :mod:`dpcr.release._source`, where the engine's
incremental state lives and what it must match, a session's held state), and returns a
:class:`~dpcr.engines.base.DataStep` (:meth:`~dpcr.engines.base.Engine.step`). DuckDB (the
default, :mod:`dpcr.engines.duckdb_step`) works in the run's connection; Spark reads the file
itself and returns only totals and counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from dpcr.release._source import read_at_position

if TYPE_CHECKING:
    import duckdb

    from dpcr.changelog import SourceConfig
    from dpcr.engines.base import AggregateRequest, DataStep, EngineRun, StoreHead
    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import SourceState

__all__ = ["eligible", "engine_request", "engine_run", "load_and_aggregate", "release_times",
           "release_times_through", "store_head"]  # fmt: skip

T = TypeVar("T")


def load_and_aggregate(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    frozen: tuple[tuple[str, str, int], ...],
    *,
    span: tuple[int, int],
    clock: int,
    progress: Callable[[str, int, int], None],
    settle_at: int | None = None,
    on_read: Callable[[], None] | None = None,
    held: object | None = None,
) -> DataStep:
    """Load and aggregate base intervals ``span`` = (lo, hi) through the configured engine
    (see the module docstring). ``settle_at``: the end of the last interval this run
    releases. ``on_read()`` is called once a source that Python code reads (a SQLite log) has
    been read (see :func:`dpcr.changelog.load`); other sources are read by the engine and may
    not call it. ``held``: what a long-running session keeps between its steps."""
    from dpcr.engines import get_engine

    engine = get_engine(settings.engine)
    request = engine_request(settings, state, frozen, span=span, clock=clock)
    run = engine_run(settings, con, state, request, progress=progress, settle_at=settle_at,
                     on_read=on_read, held=held)  # fmt: skip
    return engine.step(request, dataclasses.replace(run, keep_state=eligible(settings)))


def eligible(settings: ReleaseSettings) -> bool:
    """Whether a run of ``settings`` continues (or starts) its engine's incremental state,
    reading only what is new (:meth:`~dpcr.engines.base.Engine.keeps_state`)."""
    from dpcr.engines import get_engine

    return get_engine(settings.engine).keeps_state(engine_request(settings))


def engine_request(
    settings: ReleaseSettings,
    state: SourceState | None = None,
    frozen: tuple[tuple[str, str, int], ...] = (),
    *,
    span: tuple[int, int] = (1, 0),
    clock: int = 0,
) -> AggregateRequest:
    """The :class:`~dpcr.engines.base.AggregateRequest` of base intervals ``span`` = (lo, hi)
    with the store's ``state`` (None: a first run) and freeze points ``frozen``."""
    from dpcr.engines.base import AggregateRequest

    lo, hi = span
    grid = settings.plan.base_grid()
    late = None
    if state is not None and state.t_last is not None:
        late = (state.records, state.t_last)
    return AggregateRequest(
        source=settings.source,
        queries=settings.queries,
        constraint=settings.constraint,
        release_times=release_times(grid, hi),
        first_interval=max(1, min(lo, hi + 1)),
        clock=clock,
        unit_column=settings.unit_column,
        unit_is_entry=settings.owner is None,
        on_error=settings.on_error,
        quarantine_path=settings.quarantine_path if settings.on_error == "quarantine" else None,
        exclude_late=late,
        frozen=frozen,
        retire=settings.on_exhausted == "retire",
    )


#: The base grid whose release times were last asked for, and those times (t_1 .. ): a
#: session's runs ask for one more each.
_TIMES: list[tuple[Any, list[int]]] = []


def release_times(grid: Any, hi: int) -> list[int]:
    """The release times t_1 .. t_hi of ``grid`` (a new list)."""
    if _TIMES and _TIMES[0][0] == grid:
        times = _TIMES[0][1]
    else:
        times = []
        _TIMES[:] = [(grid, times)]
    while len(times) < hi:
        times.append(grid.release_time(len(times) + 1))
    return times[: max(hi, 0)]


def release_times_through(grid: Any, times: list[int], ends: tuple[int | None, ...]) -> list[int]:
    """``times`` (t_1 .. t_n of ``grid``) continued up to the first release time at or past
    the latest of ``ends`` (the ends of the last released intervals; None: none), so that
    every base interval that ends by them is counted."""
    last = max((t for t in ends if t is not None), default=None)
    while last is not None and (not times or times[-1] < last):
        times.append(grid.release_time(len(times) + 1))
    return times


def store_head(state: SourceState) -> StoreHead:
    """The store's head as engines see it."""
    from dpcr.engines.base import StoreHead

    return StoreHead(records=state.records, t_last=state.t_last, token=state.digest,
                     interval=state.interval)  # fmt: skip


def engine_run(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    request: AggregateRequest,
    *,
    progress: Callable[[str, int, int], None],
    settle_at: int | None = None,
    on_read: Callable[[], None] | None = None,
    held: object | None = None,
) -> EngineRun:
    """The :class:`~dpcr.engines.base.EngineRun` of a run of ``settings`` in ``con`` after
    the store's ``state``: the base interval ends past the request's up to the ends of the
    last released intervals (the earlier runs' and ``settle_at``), so that every row that
    settles is bounded; the state folder beside the store; the owner-only folders. It keeps
    no state (``keep_state``) unless the caller says so."""
    from dpcr.engines.base import EngineRun
    from dpcr.release._outputs import operator_dir, scratch_dir

    times = release_times_through(settings.plan.base_grid(), list(request.release_times),
                                  (state.t_last, settle_at))  # fmt: skip
    store = settings.store_path

    def at_position(read: Callable[[SourceConfig, int], T], *,
                    bounded: bool = False) -> tuple[T, str]:  # fmt: skip
        return read_at_position(settings, con, state, read, bounded=bounded,
                                held=getattr(held, "position", None))  # fmt: skip

    return EngineRun(
        store=store_head(state), at_position=at_position, progress=progress,
        state_dir=store.with_name(store.name + ".state"),
        fingerprint=settings.fingerprint(), settle_at=settle_at,
        settle_times=tuple(times[len(request.release_times):]), connection=con,
        scratch=lambda: scratch_dir(settings), operator=lambda: operator_dir(settings),
        held=held, on_read=on_read,
    )  # fmt: skip
