"""The data step of a run: read the source, check it still holds what earlier runs consumed,
validate, bound and aggregate, through the configured engine.

DuckDB (the default) runs in the loop's own connection, reading a line file from where the last
run stopped (:mod:`dpcr.release._incremental`) or the whole source
(:mod:`dpcr.release._full`); another engine (Spark) gets an
:class:`~dpcr.engines.base.AggregateRequest` and returns only totals and counts. The check of
the source's position (:mod:`dpcr.release._source`) is the same for every engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from dpcr.errors import ConfigError, StoreError
from dpcr.release._full import aggregate_totals, load_changelog
from dpcr.release._incremental import eligible, incremental_step
from dpcr.release._source import (
    DataStep,
    Progress,
    _refuse_missing,
    decimal_warnings,
    positioned,
    read_at_position,
    refuse_lost_records,
)

if TYPE_CHECKING:
    import duckdb

    from dpcr.changelog import SourceConfig
    from dpcr.engines.base import AggregateRequest, EngineResult, IncrementalEngine, Pending
    from dpcr.release._memory import HeldState
    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import SourceState

__all__ = ["load_and_aggregate"]


def load_and_aggregate(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    frozen: tuple[tuple[str, str, int], ...],
    *,
    span: tuple[int, int],
    clock: int,
    progress: Progress,
    settle_at: int | None = None,
    on_read: Callable[[], None] | None = None,
    held: HeldState | None = None,
) -> DataStep:
    """Load and aggregate base intervals ``span`` = (lo, hi) (see the module docstring); a line
    file read by DuckDB is read from where the last run stopped
    (:mod:`dpcr.release._incremental`; ``settle_at``: the end of the last interval this run
    releases). ``on_read()`` is called once a source that Python code reads (a SQLite log)
    has been read (see :func:`dpcr.changelog.load`); other sources are read by the engine and
    may not call it. ``held``: a session's (:mod:`dpcr.release._memory`)."""
    if eligible(settings):
        return incremental_step(settings, con, state, frozen, span=span, clock=clock,
                                settle_at=settle_at, progress=progress, held=held)  # fmt: skip
    if settings.engine.name == "duckdb":
        from dpcr.changelog import NotPlain
        from dpcr.engines.duckdb import checks_liveness

        # A clean Parquet file's histories are checked in the ranking window's sort when the
        # aggregation has one pass (dpcr.changelog.unchecked); when one is not plain, the
        # source is loaded again with the liveness check.
        defer = checks_liveness(settings.queries, settings.constraint,
                                unit_is_entry=settings.owner is None,
                                retire=settings.on_exhausted == "retire")  # fmt: skip
        try:
            return _duckdb_step(settings, con, state, frozen, lo=span[0], hi=span[1], clock=clock,
                                progress=progress, on_read=on_read, defer=defer)  # fmt: skip
        except NotPlain:
            if not defer:
                raise
        return _duckdb_step(settings, con, state, frozen, lo=span[0], hi=span[1], clock=clock,
                            progress=progress, on_read=on_read, defer=False)  # fmt: skip
    request = _engine_request(settings, state, frozen, lo=span[0], hi=span[1], clock=clock)
    return _other_engine(settings, con, state, request, progress=progress,
                         settle_at=settle_at)  # fmt: skip


def _duckdb_step(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    frozen: tuple[tuple[str, str, int], ...],
    *,
    lo: int,
    hi: int,
    clock: int,
    progress: Progress,
    on_read: Callable[[], None] | None,
    defer: bool,
) -> DataStep:
    """The full data step in ``con`` (see :func:`load_and_aggregate`). ``defer``: the
    liveness check of a clean Parquet file is left to the aggregation
    (:func:`dpcr.changelog.unchecked`), which raises :class:`dpcr.changelog.NotPlain` when
    it finds a history that is not plain; when the load left it the check, the checks of the
    loaded rows come after the aggregation, so that they read only valid mutations."""
    from dpcr.changelog import ts_source, unchecked
    from dpcr.engines.checks import missing_columns

    # The aggregation reads the changelog once: a Parquet file is read again rather than
    # copied (materialize=False).
    report, min_ts, max_ts, token = load_changelog(
        settings, con, state, frozen,
        progress=lambda done, total: progress("load changelog", done, total),
        materialize=False, on_read=on_read, liveness="defer" if defer else "check",
    )  # fmt: skip

    def check_rows() -> None:
        # A column a query or the constraint names that no row has is a typo (column names
        # are public configuration); an empty source has nothing to check against.
        if report.valid:
            _refuse_missing(missing_columns(con, table="changelog", queries=settings.queries,
                                            constraint=settings.constraint))  # fmt: skip

    deferred = defer and unchecked(con, "changelog")
    if not deferred:
        check_rows()
    # A base64 Debezium decimal whose scale is unknown sums as 0: the operator is told.
    warnings = decimal_warnings(settings, con)
    agg = aggregate_totals(
        settings, con, table="changelog", lo=lo, hi=hi, exclude_late=None,
        progress=lambda done, total: progress("bound and aggregate", done, total),
    )  # fmt: skip
    if deferred:
        check_rows()
    row = con.execute(f"SELECT count(*) FROM {ts_source(con, 'changelog')} WHERE ts > ?",
                      [clock]).fetchone()  # fmt: skip
    return DataStep(report, agg, min_ts, max_ts, int((row or (0,))[0]), token,
                    warnings=warnings)  # fmt: skip


def _engine_request(
    settings: ReleaseSettings,
    state: SourceState,
    frozen: tuple[tuple[str, str, int], ...],
    *,
    lo: int,
    hi: int,
    clock: int,
) -> AggregateRequest:
    """The :class:`~dpcr.engines.base.AggregateRequest` for an engine other than DuckDB."""
    from dpcr.changelog.position import parse_parquet_token, parse_token
    from dpcr.engines.base import AggregateRequest

    path, _parquet = positioned(settings)
    name = settings.engine.name
    if path is None:
        raise ConfigError(
            f"engine {name!r} reads Parquet and JSON-lines files; use the DuckDB engine for "
            "this source"
        )
    if state.records and parse_token(state.digest) is None \
            and parse_parquet_token(state.digest) is None:  # fmt: skip
        raise StoreError(
            f"this store was last run with the DuckDB engine of an older dpcr; run it once "
            f"with the DuckDB engine before switching to {name!r}"
        )
    grid = settings.plan.base_grid()
    request = AggregateRequest(
        source=settings.source,
        queries=settings.queries,
        constraint=settings.constraint,
        release_times=[grid.release_time(j) for j in range(1, hi + 1)] if hi >= 1 else [],
        first_interval=max(1, min(lo, hi + 1)),
        clock=clock,
        unit_column=settings.unit_column,
        unit_is_entry=settings.owner is None,
        on_error=settings.on_error,
        quarantine_path=settings.quarantine_path if settings.on_error == "quarantine" else None,
        exclude_late=(state.records, state.t_last) if state.t_last is not None else None,
        frozen=frozen,
        retire=settings.on_exhausted == "retire",
    )
    return request


def _other_engine(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    request: AggregateRequest,
    *,
    progress: Progress,
    settle_at: int | None = None,
) -> DataStep:
    from dpcr.engines import get_engine
    from dpcr.engines.base import IncrementalEngine as Incremental

    engine = get_engine(settings.engine)
    if isinstance(engine, Incremental):
        return _engine_step(settings, con, state, request, engine, settle_at=settle_at,
                            progress=progress)  # fmt: skip
    progress("load changelog", 0, 1)
    result, token = read_at_position(
        settings, con, state,
        lambda source, _size: engine.aggregate(dataclasses.replace(request, source=source)),
    )  # fmt: skip
    progress("bound and aggregate", 1, 1)
    refuse_lost_records(state, result.load.records)
    _refuse_missing(result.missing_columns)
    return DataStep(result.load, result.aggregates, result.min_ts, result.max_ts,
                    result.not_yet_due, token)  # fmt: skip


def _engine_step(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    request: AggregateRequest,
    engine: IncrementalEngine,
    *,
    settle_at: int | None,
    progress: Progress,
) -> DataStep:
    """The data step of an engine that keeps state between runs (Spark): it reads only the
    records after the store's position when its state (``<store>.state/<engine>/``) matches
    the store's head, and the state moves forward once the store has committed."""
    from dpcr.changelog.position import parse_token
    from dpcr.engines.base import Consumed, EngineStateRef, StoreHead

    # Base intervals past the request's, up to the ends of the last released intervals (the
    # earlier runs' and this run's): every row that settles is bounded.
    grid = settings.plan.base_grid()
    times = list(request.release_times)
    ends = [t for t in (state.t_last, settle_at) if t is not None]
    while ends and (not times or times[-1] < max(ends)):
        times.append(grid.release_time(len(times) + 1))
    store = settings.store_path
    ref = EngineStateRef(
        folder=store.with_name(store.name + ".state") / engine.name,
        store=StoreHead(records=state.records, t_last=state.t_last, token=state.digest),
        fingerprint=settings.fingerprint(), settle_at=settle_at,
        settle_times=tuple(times[len(request.release_times):]),
    )  # fmt: skip
    old = parse_token(state.digest)
    consumed = Consumed(bytes=old.size if old is not None and state.records else 0)
    request = dataclasses.replace(request, consumed=consumed)
    _path, parquet = positioned(settings)
    bounded = not parquet and engine.continues(request, ref)  # a tail read: up to ``size``

    def read(source: SourceConfig, size: int) -> tuple[EngineResult, Pending]:
        tail = dataclasses.replace(consumed, size=size if bounded else None)
        return engine.aggregate_step(dataclasses.replace(request, source=source,
                                                         consumed=tail), ref)  # fmt: skip

    progress("load changelog", 0, 1)
    (result, pending), token = read_at_position(settings, con, state, read, bounded=bounded)
    progress("bound and aggregate", 1, 1)
    refuse_lost_records(state, result.load.records)
    _refuse_missing(result.missing_columns)

    def settle(new_state: SourceState) -> None:
        pending.commit(StoreHead(records=new_state.records, t_last=new_state.t_last,
                                 token=new_state.digest))  # fmt: skip

    return DataStep(result.load, result.aggregates, result.min_ts, result.max_ts,
                    result.not_yet_due, token, settle)  # fmt: skip
