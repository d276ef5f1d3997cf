"""The data step of a run: read the source, check it still holds what earlier runs consumed,
validate, bound and aggregate, through the configured engine.

DuckDB (the default) runs in the loop's own connection; another engine (Spark) gets an
:class:`~dpcr.engines.base.AggregateRequest` and returns only totals and counts. The check of
the source's position (:mod:`dpcr.changelog._position`) is the same for every engine; a source
that no longer holds what earlier runs consumed is refused before anything is committed or
written (a tail read is hashed while it is read; a whole re-read only after the check).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from dpcr.errors import ConfigError, DpcrError, StoreError

if TYPE_CHECKING:
    from dpcr.changelog import SourceConfig
    from dpcr.engines.base import AggregateRequest, EngineResult, IncrementalEngine, Pending
    from dpcr.release._settings import ContinualRelease
    from dpcr.store import SourceState

Progress = Any
T = TypeVar("T")


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
    #: called with the store's new source state once the store committed (the incremental
    #: state follows the store), or None
    settle: Callable[[Any], None] | None = None
    #: what the operator is told about the data without the run stopping (one line each)
    warnings: tuple[str, ...] = ()


def decimal_warnings(
    settings: ContinualRelease, con: duckdb.DuckDBPyConnection, *, table: str = "changelog"
) -> tuple[str, ...]:
    """Base64 text in a column a sum reads, from a Debezium source (an undeclared decimal, or
    just a value such as ``"none"``): refused with ``on_error = "raise"``; otherwise counted as
    non-numeric like any text, and told to the operator (one record's value never stops a
    release)."""
    from dpcr.changelog import check_decimals, undeclared_decimals
    from dpcr.queries import Sum

    sums = [q.column for q in settings.queries if isinstance(q, Sum)]
    if settings.on_error == "raise":
        check_decimals(con, settings.source, sums, table=table)
        return ()
    found = undeclared_decimals(con, settings.source, sums, table=table)
    return tuple(f.warning(settings.source) for f in found)


def _refuse_missing(missing: list[str] | tuple[str, ...]) -> None:
    if missing:
        raise ConfigError(
            f"column(s) {', '.join(map(repr, missing))} named by a query or the constraint "
            "appear in no row of the source: check the spelling (docs/config.md); nothing was "
            "released"
        )


REWRITTEN = (
    "records already consumed by earlier runs have changed in the source (rewritten history); "
    "released intervals cannot be reconciled. Restore the original changelog, or start a new "
    "release with a new store."
)


def positioned(settings: ContinualRelease) -> tuple[Path | None, bool]:
    """(path, is Parquet) of a file source checked by position, or (None, False) for a source
    checked by record digests (SQLite)."""
    from dpcr.changelog import ParquetSource, SqliteSource

    source = settings.source
    if isinstance(source, SqliteSource):
        return None, False
    return Path(source.path), isinstance(source, ParquetSource)


def check_source(settings: ContinualRelease) -> None:
    """Refuse, before a store, a state or an operator folder is created, a source file that
    does not exist, cannot be reached (a symlink loop, a folder without access) or is not a
    file: one line naming the path and the fix."""
    import os
    import stat

    path = Path(str(settings.source.path))
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ConfigError(
            f"the source {str(path)!r} does not exist; check [source] path (nothing was "
            "written)"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot reach the source {str(path)!r} ({exc.strerror}); check [source] path "
            "(nothing was written)"
        ) from None
    if not stat.S_ISREG(mode):
        raise ConfigError(
            f"the source {str(path)!r} is not a file; [source] path must name the changelog "
            "file (nothing was written)"
        )


def _unreadable(path: Path, state: SourceState, exc: BaseException) -> DpcrError:
    """The error for a source file that cannot be read as its format says (not a rewritten
    history: nothing says its consumed records changed)."""
    detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if not state.records:
        return ConfigError(
            f"cannot read the source {str(path)!r} ({detail}); check [source] path and format "
            "(nothing was released)"
        )
    return StoreError(
        f"cannot read the source {str(path)!r} ({detail}), of which earlier runs consumed "
        f"{state.records} records; restore the file and run again (nothing was released)"
    )


def read_at_position(
    settings: ContinualRelease,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    read: Callable[[SourceConfig, int], T],
    *,
    bounded: bool = False,
) -> tuple[T, str]:
    """``read(source, size)`` (``size``: the bytes of a line file the position covers) with
    the source's position checked, the same for every engine: a rewritten source is refused
    before anything is committed or written. Returns what ``read`` returned and the new
    position token ('' for a source checked by record digests: the caller digests
    what it loaded).

    A line file appended to while it is read (a live capture) is read again from a still copy
    of its complete lines, and the position covers the copy; a Parquet file that changes while
    it is read is read again, three times at most. ``bounded``: ``read`` reads no byte of a line
    file at or after ``size`` (the incremental tail): then the read covers the complete lines
    the file held when it started, and a writer appending meanwhile costs nothing (a final
    line without a line end is read only once the file is at rest, as before).
    """
    from dpcr.changelog._position import (
        SourceRewritten,
        complete_lines,
        complete_prefix,
        parquet_position,
        parse_parquet_token,
        parse_token,
        read_position,
        snapshot,
    )
    from dpcr.release._outputs import clear_scratch, operator_dir, scratch_dir

    check_source(settings)
    if settings.on_error == "quarantine":
        operator_dir(settings)  # owner-only, before any raw record is written there
    path, parquet = positioned(settings)
    clear_scratch(settings)
    old, old_pq = parse_token(state.digest), parse_parquet_token(state.digest)
    token, stack = "", ExitStack()
    for attempt in range(3):
        seen = snapshot(path) if path is not None else None
        source, read_path, size = settings.source, path, seen[0] if seen else 0
        lines = path is not None and not parquet
        if attempt and lines and not bounded:
            assert path is not None
            read_path, size = stack.enter_context(
                complete_prefix(path, size, scratch_dir(settings))
            )
            source = dataclasses.replace(source, path=read_path)
        elif attempt == 0 and lines and bounded:
            assert path is not None
            consumed = old.size if old is not None and state.records else 0
            size = max(complete_lines(path, size), consumed)
        hashing: Future[Any] | None = None
        if read_path is not None:
            try:
                if parquet:
                    check_pq = old_pq if state.records else None
                    token = parquet_position(con, read_path, check=check_pq).token
                else:
                    check = old if state.records else None
                    if check is None or bounded:  # nothing to refuse first: hash meanwhile
                        hashing = _HASHER.submit(read_position, read_path, size, check=check)
                    else:
                        token = read_position(read_path, size, check=check).token
            except SourceRewritten as exc:
                stack.close()
                raise StoreError(f"{REWRITTEN} ({exc})") from exc
            except (OSError, duckdb.Error) as exc:
                stack.close()
                raise _unreadable(read_path, state, exc) from exc
        failure: BaseException | None = None
        with stack:  # a copy read from is deleted only once the hashing is done with it
            try:
                result = read(source, size)
            except BaseException as exc:
                failure = exc
            if hashing is not None:
                token = _hashed(hashing)  # a rewritten file is the first thing to report
        if failure is not None:
            raise failure
        if path is None or read_path != path:
            break
        now = snapshot(path)
        if bounded and lines:
            assert seen is not None
            if size == seen[0] or now != seen:
                break  # complete lines, which hold still while a writer appends
            continue  # at rest, ending in a line without a line end: read that line too
        if now == seen:
            break
    else:
        raise StoreError(
            f"{path} kept changing while it was read (three attempts); run again when the "
            "writer pauses"
        )
    return result, token


#: Hashes a line file's position in a thread (hashlib releases the interpreter) while the
#: records are read: a first read (nothing consumed that could have been rewritten) or a tail
#: read (which writes nothing; the refusal comes before anything is committed or written).
_HASHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpcr-position")


def _hashed(hashing: Future[Any]) -> str:
    from dpcr.changelog._position import SourceRewritten

    try:
        return str(hashing.result().token)
    except (SourceRewritten, OSError) as exc:
        raise StoreError(f"{REWRITTEN} ({exc})") from exc


def refuse_lost_records(state: SourceState, records: int) -> None:
    """Refuse a source with fewer records than earlier runs consumed."""
    if records < state.records:
        raise StoreError(
            f"the source now has {records} records but earlier runs consumed "
            f"{state.records}; dpcr needs the whole append-only changelog"
        )


def load_and_aggregate(
    settings: ContinualRelease,
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
    from dpcr.release._incremental import eligible, incremental_step

    if eligible(settings):
        return incremental_step(settings, con, state, frozen, lo=lo, hi=hi, clock=clock,
                                settle_at=settle_at, progress=progress)  # fmt: skip
    from dpcr.changelog._canonical import ts_source
    from dpcr.engines.duckdb import missing_columns
    from dpcr.release._loop import _aggregate, load_changelog

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
        agg = _aggregate(
            settings, con, table="changelog", lo=lo, hi=hi, exclude_late=None,
            progress=lambda done, total: progress("bound and aggregate", done, total),
        )  # fmt: skip
        row = con.execute(f"SELECT count(*) FROM {ts_source(con, 'changelog')} WHERE ts > ?",
                          [clock]).fetchone()  # fmt: skip
        return DataStep(report, agg, min_ts, max_ts, int((row or (0,))[0]), token,
                        warnings=warnings)  # fmt: skip
    request = _engine_request(settings, state, frozen, lo=lo, hi=hi, clock=clock)
    return _other_engine(settings, con, state, request, progress=progress,
                         settle_at=settle_at)  # fmt: skip


def _engine_request(
    settings: ContinualRelease,
    state: SourceState,
    frozen: tuple[tuple[str, str, int], ...],
    *,
    lo: int,
    hi: int,
    clock: int,
) -> AggregateRequest:
    """The :class:`~dpcr.engines.base.AggregateRequest` for an engine other than DuckDB."""
    from dpcr.changelog._position import parse_parquet_token, parse_token
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
    settings: ContinualRelease,
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
    settings: ContinualRelease,
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
    from dpcr.changelog._position import parse_token
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
