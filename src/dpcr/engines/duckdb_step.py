"""The DuckDB engine of a release: the data step in the run's own connection.

A line file read by position keeps an incremental state and is read from where the last run
stopped (:mod:`dpcr.engines.duckdb_incremental`, and a long-running session's steps from memory,
:mod:`dpcr.engines.duckdb_memory`); any other source, and a release whose bounding the state
does not carry, is loaded whole into table ``changelog`` and bounded and totalled there
(:func:`full_step`). The source's position is checked by the run (``run.at_position``); a
SQLite log, and a store whose position is an older record digest, are checked here record by
record once loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from dpcr.engines.base import DataStep, EngineRun
from dpcr.engines.duckdb import DuckDBEngine
from dpcr.engines.step import REWRITTEN, positioned, refuse_lost_records, refuse_missing
from dpcr.errors import RewrittenError, StoreError

if TYPE_CHECKING:
    import duckdb

    from dpcr.changelog import LoadReport
    from dpcr.engines.base import AggregateRequest

__all__ = [
    "LOG_DIGEST",
    "RAW_DIGEST",
    "DuckDBReleaseEngine",
    "full_step",
    "load_positioned",
]

#: Prefix of digests of the raw source records (valid, quarantined and tombstones alike), which
#: no quarantine decision can change. Stores written before it hold a digest of valid rows.
RAW_DIGEST = "raw1:"
#: Prefix of the position of a SQLite log written since ``raw2`` record digests
#: (:func:`dpcr.changelog._resume.log_digest`: the same records, digested in half the time). A
#: store that holds a ``raw1:`` or older digest is checked in its own format, once; its new
#: position is a ``raw2:`` digest, computed in the same load.
LOG_DIGEST = "raw2:"


class DuckDBReleaseEngine(DuckDBEngine):
    """The DuckDB engine as a release runs it (module docstring): in ``run.connection``, with
    an incremental state for a line file (:func:`keeps_state`)."""

    def keeps_state(self, request: AggregateRequest) -> bool:
        from dpcr.engines.duckdb_incremental import eligible

        return eligible(request)

    def step(self, request: AggregateRequest, run: EngineRun) -> DataStep:
        if run.keep_state:
            from dpcr.engines.duckdb_incremental import incremental_step

            return incremental_step(request, run)
        return full_step(request, run)


def full_step(request: AggregateRequest, run: EngineRun) -> DataStep:
    """The data step that loads the whole source into ``run.connection``. A clean Parquet
    file's histories are checked in the ranking window's sort when the aggregation has one
    pass (:func:`dpcr.changelog.unchecked`); when one is not plain, the source is loaded again
    with the liveness check."""
    from dpcr.changelog import NotPlain
    from dpcr.engines.duckdb import checks_liveness

    defer = checks_liveness(request.queries, request.constraint,
                            unit_is_entry=request.unit_is_entry,
                            retire=request.retire)  # fmt: skip
    try:
        return _full(request, run, defer=defer)
    except NotPlain:
        if not defer:
            raise
    return _full(request, run, defer=False)


def _full(request: AggregateRequest, run: EngineRun, *, defer: bool) -> DataStep:
    """:func:`full_step` once. ``defer``: the liveness check of a clean Parquet file is left
    to the aggregation (:func:`dpcr.changelog.unchecked`), which raises
    :class:`dpcr.changelog.NotPlain` when it finds a history that is not plain; when the load
    left it the check, the checks of the loaded rows come after the aggregation, so that they
    read only valid mutations."""
    from dpcr.changelog import ts_source, unchecked
    from dpcr.engines.checks import decimal_warnings, missing_columns
    from dpcr.engines.duckdb import aggregate

    con, progress = run.connection, run.progress
    # The aggregation reads the changelog once: a Parquet file is read again rather than
    # copied (materialize=False).
    report, min_ts, max_ts, token = load_positioned(
        request, run, progress=lambda done, total: progress("load changelog", done, total),
        materialize=False, liveness="defer" if defer else "check",
    )  # fmt: skip

    def check_rows() -> None:
        # A column a query or the constraint names that no row has is a typo (column names
        # are public configuration); an empty source has nothing to check against.
        if report.valid:
            refuse_missing(missing_columns(con, table="changelog", queries=request.queries,
                                           constraint=request.constraint))  # fmt: skip

    deferred = defer and unchecked(con, "changelog")
    if not deferred:
        check_rows()
    # A base64 Debezium decimal whose scale is unknown sums as 0: the operator is told.
    warnings = decimal_warnings(request, con)
    agg = aggregate(
        con, table="changelog", queries=request.queries, constraint=request.constraint,
        release_times=request.release_times, first_interval=request.first_interval,
        unit_is_entry=request.unit_is_entry, exclude_late=None,
        progress=lambda done, total: progress("bound and aggregate", done, total),
        retire=request.retire,
    )  # fmt: skip
    if deferred:
        check_rows()
    row = con.execute(f"SELECT count(*) FROM {ts_source(con, 'changelog')} WHERE ts > ?",
                      [request.clock]).fetchone()  # fmt: skip
    return DataStep(report, agg, min_ts, max_ts, int((row or (0,))[0]), token,
                    warnings=warnings)  # fmt: skip


def load_positioned(
    request: AggregateRequest,
    run: EngineRun,
    *,
    progress: Any = None,
    materialize: bool = True,
    liveness: Literal["check", "defer"] = "check",
) -> tuple[LoadReport, int | None, int | None, str]:
    """Load the changelog into table ``changelog`` of ``run.connection`` and refuse a source
    that lost or rewrote records consumed by earlier runs. Late records (appended after
    earlier runs, dated in a released interval: ``request.exclude_late``) freeze their (unit,
    entry) for good, with the ``request.frozen`` points of earlier runs. Returns (load report,
    min ts, max ts, the source's new position token).

    A line-format file is checked by byte position (:mod:`dpcr.changelog.position`): it must
    still begin with the bytes earlier runs read; a Parquet file by the hashes of its rows. A
    SQLite log, and stores whose position is an older record digest, are checked record by
    record: a log by its ``raw2:`` digest (:func:`dpcr.changelog._resume.log_digest`), or the
    ``raw1:`` digest (:func:`dpcr.changelog.raw_digest`) that an older store holds.

    ``materialize=False``: ``changelog`` may be a view that reads the source again (see
    :func:`dpcr.changelog.load`), for a caller that reads it once. ``liveness`` and
    ``run.on_read``: as in :func:`dpcr.changelog.load`.
    """
    from dpcr.changelog import DebeziumSource, load, ts_source
    from dpcr.changelog.parquet_position import parse_parquet_token
    from dpcr.changelog.position import parse_token
    from dpcr.engines.base import numeric_columns

    con, store = run.connection, run.store
    path, _parquet = positioned(request.source)
    by_record = path is None or (
        store.records > 0
        and parse_token(store.token) is None
        and parse_parquet_token(store.token) is None
    )
    # A SQLite log's load always digests its records as raw2; raw1 digests are computed only
    # to check a store that holds one.
    raw1 = by_record and (path is not None or store.token.startswith(RAW_DIGEST))
    report, token = run.at_position(
        lambda source, _size: load(
            source, con, table="changelog", on_error=request.on_error,  # type: ignore[arg-type]
            quarantine_path=request.quarantine_path, unit_column=request.unit_column,
            exclude_late=request.exclude_late, frozen=request.frozen, raw_digests=raw1,
            ordered=False, progress=progress,
            # The release reads only the rows after each change (a Debezium source's decimals
            # are checked in both).
            before_rows=isinstance(request.source, DebeziumSource), materialize=materialize,
            on_read=run.on_read, scratch=run.scratch(),
            numbers=numeric_columns(request.queries, request.constraint), liveness=liveness,
        ),
    )  # fmt: skip
    refuse_lost_records(store, report.records)
    if by_record and store.records:
        if store.token.startswith(LOG_DIGEST):
            # (only a SQLite log has raw2 digests: another source is not the one digested)
            if path is not None or _log_digest(con, store.records) != store.token:
                raise RewrittenError(REWRITTEN)
        else:
            digest = _digest if store.token.startswith(RAW_DIGEST) else _legacy_digest
            if digest(con, store.records) != store.token:
                raise RewrittenError(REWRITTEN)
    if path is None:
        token = _log_digest(con, report.records)
    row = con.execute(f"SELECT min(ts), max(ts) FROM {ts_source(con, 'changelog')}").fetchone()
    lo, hi = (row[0], row[1]) if row else (None, None)
    return report, lo, hi, token


def _digest(con: duckdb.DuckDBPyConnection, records: int) -> str:
    """The ``raw1`` digest of the first ``records`` source records as read."""
    from dpcr.changelog import raw_digest

    return RAW_DIGEST + raw_digest(con, "changelog", records)


def _log_digest(con: duckdb.DuckDBPyConnection, records: int) -> str:
    """The ``raw2`` digest of the first ``records`` records of a SQLite log as read."""
    from dpcr.changelog import log_digest

    return LOG_DIGEST + log_digest(con, "changelog", records)


def _legacy_digest(con: duckdb.DuckDBPyConnection, records: int) -> str:
    """The digest stores written before raw digests hold (of valid canonical rows)."""
    row = con.execute(
        "SELECT count(*), coalesce(sum(hash(entry, ts, seq, op, CAST(after AS VARCHAR))), 0) "
        "FROM changelog WHERE record <= ?",
        [records],
    ).fetchone()
    if row is None:
        raise StoreError("cannot digest the changelog")
    return f"{row[0]}:{row[1]}"
