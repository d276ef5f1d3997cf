"""The full data step on DuckDB: the whole changelog loaded into the run's connection, then
bounded and totalled per base interval (a line file read by position goes through
:mod:`dpcr.release._incremental` instead)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from dpcr.errors import RewrittenError
from dpcr.release._source import (
    LOG_DIGEST,
    RAW_DIGEST,
    REWRITTEN,
    _digest,
    _legacy_digest,
    _log_digest,
    positioned,
    read_at_position,
    refuse_lost_records,
)

if TYPE_CHECKING:
    import duckdb

    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import SourceState

__all__ = ["aggregate_totals", "load_changelog"]


def load_changelog(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    frozen: tuple[tuple[str, str, int], ...] = (),
    progress: Any = None,
    *,
    materialize: bool = True,
    on_read: Callable[[], None] | None = None,
    liveness: Literal["check", "defer"] = "check",
) -> tuple[Any, int | None, int | None, str]:
    """Load the changelog into table ``changelog`` of ``con`` and refuse a source that lost or
    rewrote records consumed by earlier runs. Late records (appended after earlier runs, dated in
    a released interval) freeze their (unit, entry) for good, with the ``frozen`` points of
    earlier runs. Returns (load report, min ts, max ts, the source's new position token).

    A line-format file is checked by byte position (:mod:`dpcr.changelog.position`): it must
    still begin with the bytes earlier runs read; a Parquet file by the hashes of its rows. A
    SQLite log, and stores whose position is an older record digest, are checked record by
    record: a log by its ``raw2:`` digest (:func:`dpcr.changelog._resume.log_digest`), or the
    ``raw1:`` digest (:func:`dpcr.changelog.raw_digest`) that an older store holds.

    ``materialize=False``: ``changelog`` may be a view that reads the source again (see
    :func:`dpcr.changelog.load`), for a caller that reads it once. ``on_read`` and
    ``liveness``: as in :func:`dpcr.changelog.load`.
    """
    from dpcr.changelog import DebeziumSource, load, ts_source
    from dpcr.changelog.position import parse_parquet_token, parse_token
    from dpcr.engines.base import numeric_columns
    from dpcr.release._outputs import scratch_dir

    path, _parquet = positioned(settings)
    by_record = path is None or (
        state.records > 0
        and parse_token(state.digest) is None
        and parse_parquet_token(state.digest) is None
    )
    # A SQLite log's load always digests its records as raw2; raw1 digests are computed only
    # to check a store that holds one.
    raw1 = by_record and (path is not None or state.digest.startswith(RAW_DIGEST))
    report, token = read_at_position(
        settings, con, state,
        lambda source, _size: load(
            source, con, table="changelog", on_error=settings.on_error,
            quarantine_path=settings.quarantine_path, unit_column=settings.unit_column,
            exclude_late=(state.records, state.t_last) if state.t_last is not None else None,
            frozen=frozen, raw_digests=raw1, ordered=False, progress=progress,
            # The release reads only the rows after each change (a Debezium source's decimals
            # are checked in both).
            before_rows=isinstance(settings.source, DebeziumSource), materialize=materialize,
            on_read=on_read, scratch=scratch_dir(settings),
            numbers=numeric_columns(settings.queries, settings.constraint), liveness=liveness,
        ),
    )  # fmt: skip
    refuse_lost_records(state, report.records)
    if by_record and state.records:
        if state.digest.startswith(LOG_DIGEST):
            # (only a SQLite log has raw2 digests: another source is not the one digested)
            if path is not None or _log_digest(con, state.records) != state.digest:
                raise RewrittenError(REWRITTEN)
        else:
            digest = _digest if state.digest.startswith(RAW_DIGEST) else _legacy_digest
            if digest(con, state.records) != state.digest:
                raise RewrittenError(REWRITTEN)
    if path is None:
        token = _log_digest(con, report.records)
    row = con.execute(f"SELECT min(ts), max(ts) FROM {ts_source(con, 'changelog')}").fetchone()
    lo, hi = (row[0], row[1]) if row else (None, None)
    return report, lo, hi, token


def aggregate_totals(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    *,
    table: str,
    lo: int,
    hi: int,
    exclude_late: tuple[int, int] | None,
    progress: Any = None,
) -> Any:
    from dpcr.engines.duckdb import aggregate

    grid = settings.plan.base_grid()
    times = [grid.release_time(j) for j in range(1, hi + 1)] if hi >= 1 else []
    return aggregate(
        con,
        table=table,
        queries=settings.queries,
        constraint=settings.constraint,
        release_times=times,
        first_interval=max(1, min(lo, hi + 1)),
        unit_is_entry=settings.owner is None,
        exclude_late=exclude_late,
        progress=progress,
        retire=settings.on_exhausted == "retire",
    )
