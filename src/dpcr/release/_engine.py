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

    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import SourceState

__all__ = ["load_and_aggregate"]


def load_and_aggregate(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    frozen: tuple[tuple[str, str, int], ...],
    *,
    lo: int,
    hi: int,
    clock: int,
    progress: Progress,
    settle_at: int | None = None,
    on_read: Callable[[], None] | None = None,
) -> DataStep:
    """Load and aggregate base intervals ``lo .. hi`` (see the module docstring); a line
    file read by DuckDB is read from where the last run stopped
    (:mod:`dpcr.release._incremental`; ``settle_at``: the end of the last interval this run
    releases). ``on_read()`` is called once a source that Python code reads (a SQLite log)
    has been read (see :func:`dpcr.changelog.load`); other sources are read by the engine and
    may not call it."""
    if eligible(settings):
        return incremental_step(settings, con, state, frozen, lo=lo, hi=hi, clock=clock,
                                settle_at=settle_at, progress=progress)  # fmt: skip
    from dpcr.changelog import ts_source
    from dpcr.engines.checks import missing_columns

    if settings.engine.name == "duckdb":
        # The aggregation reads the changelog once: a Parquet file is read again rather than
        # copied (materialize=False).
        report, min_ts, max_ts, token = load_changelog(
            settings, con, state, frozen,
            progress=lambda done, total: progress("load changelog", done, total),
            materialize=False, on_read=on_read,
        )  # fmt: skip
        # A column a query or the constraint names that no row has is a typo (column names are
        # public configuration); an empty source has nothing to check against.
        if report.valid:
            _refuse_missing(missing_columns(con, table="changelog", queries=settings.queries,
                                            constraint=settings.constraint))  # fmt: skip
        # A base64 Debezium decimal whose scale is unknown sums as 0: the operator is told.
        warnings = decimal_warnings(settings, con)
        agg = aggregate_totals(
            settings, con, table="changelog", lo=lo, hi=hi, exclude_late=None,
            progress=lambda done, total: progress("bound and aggregate", done, total),
        )  # fmt: skip
        row = con.execute(f"SELECT count(*) FROM {ts_source(con, 'changelog')} WHERE ts > ?",
                          [clock]).fetchone()  # fmt: skip
        return DataStep(report, agg, min_ts, max_ts, int((row or (0,))[0]), token,
                        warnings=warnings)  # fmt: skip
    return _other_engine(settings, con, state, frozen, lo=lo, hi=hi, clock=clock,
                         progress=progress)  # fmt: skip


def _other_engine(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    frozen: tuple[tuple[str, str, int], ...],
    *,
    lo: int,
    hi: int,
    clock: int,
    progress: Progress,
) -> DataStep:
    from dpcr.changelog.position import parse_parquet_token, parse_token
    from dpcr.engines import get_engine
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
    engine = get_engine(settings.engine)
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
