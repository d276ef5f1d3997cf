"""The data step of a line-format source: read only what was appended since the last run.

A JSON-lines, Debezium or wal2json file is append-only (its position proves the consumed bytes
unchanged, :mod:`dpcr.changelog.position`), so a run reads the bytes after that position,
validates and bounds them continuing every history from the state file
(:mod:`dpcr.engines.incremental`), and after the store commits carries them into the state.
The first run, and any run whose state does not match the store head, reads the whole file the
same way from an empty state. Either way each mutation gets the verdict, rank and contribution a
load of the whole source gives it, so the releases are those of a full recomputation. A run
that finds no new complete line while the state keeps no pending mutation loads and bounds
nothing: the state alone gives its totals and reports (:func:`_unchanged`).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from dpcr._fs import full, write_atomic
from dpcr.release._memory import HeldState, StepWindow, accepts
from dpcr.release._outputs import state_path
from dpcr.release._source import (
    DataStep,
    _refuse_missing,
    decimal_warnings,
    read_at_position,
    refuse_lost_records,
)

# DuckDB is imported by the functions that use it (a run with nothing new imports no engine).
if TYPE_CHECKING:
    import duckdb

    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import SourceState

Progress = Any


def _remove_legacy(settings: ReleaseSettings) -> None:
    """Delete the state file (and log) stores kept beside them before ``<store>.state/``: the
    state is rebuilt from the source in the new place."""
    store = settings.store_path
    for name in (".state.duckdb", ".state.duckdb.wal"):
        store.with_name(store.name + name).unlink(missing_ok=True)


def eligible(settings: ReleaseSettings) -> bool:
    """Whether the source is read by position as lines, one record per line, by DuckDB, and
    the state carries everything the bounding needs (``on_exhausted = "retire"`` and
    exhausted-entries queries read every unit's cut, which the state does not keep yet: such
    releases read the whole file every run)."""
    from dpcr.changelog import DebeziumSource, JsonlSource, Wal2jsonSource
    from dpcr.queries import Exhausted

    return (
        settings.engine.name == "duckdb"
        and isinstance(settings.source, JsonlSource | DebeziumSource | Wal2jsonSource)
        and settings.on_exhausted == "freeze"
        and not any(isinstance(q, Exhausted) for q in settings.queries)
    )


def _open_queries(settings: ReleaseSettings) -> tuple[int, ...]:
    """The numbers of the open histograms among the queries (the state keeps their keys as
    text)."""
    return tuple(i for i, q in enumerate(settings.queries) if getattr(q, "open", False))


def _ends_with_newline(path: Path, size: int) -> bool:
    if size == 0:
        return True
    with open(path, "rb") as f:
        f.seek(size - 1)
        return f.read(1) == b"\n"


def incremental_step(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    frozen: tuple[tuple[str, str, int], ...],
    *,
    span: tuple[int, int],
    clock: int,
    settle_at: int | None,
    progress: Progress,
    held: HeldState | None = None,
) -> DataStep:
    """Load and aggregate base intervals ``span`` = (lo, hi) reading only new records when the state
    allows (see the module docstring). ``settle_at``: the end of the last interval this run
    releases (the next run's ``t_last``); ``held``: a session's (:mod:`dpcr.release._memory`)."""
    import duckdb

    from dpcr.changelog.position import parse_token
    from dpcr.engines import state as inc_state

    window = _window(settings, state, span, clock, settle_at)
    if held is not None:
        fast = held.step(settings, con, state, frozen, window, progress) if accepts(
            settings) else None  # fmt: skip
        if fast is not None:
            return _quarantine_kept(settings, con, fast)
        held.forget()
    lo, hi, times = window.lo, window.hi, window.times
    settled_old, settled_new = window.settled_old, window.settled_new
    fingerprint = settings.fingerprint()
    path = state_path(settings)
    _remove_legacy(settings)
    old = parse_token(state.digest)
    source_path = Path(str(getattr(settings.source, "path", "")))

    # A first read of the whole file leaves the liveness check to the ranking window when the
    # aggregation has one pass (as a clean Parquet file's: dpcr.changelog.unchecked); when a
    # history is not plain, the file is read again with the check.
    deferrable = _checks_liveness(settings)

    def attempt(fresh: bool, defer: bool = deferrable) -> DataStep:
        inc_state.attach(con, path, fresh=fresh)
        head = None if fresh else inc_state.read_head(con)
        resume = (
            head is not None and state.records > 0 and old is not None
            and (head.records, head.interval, head.token, head.fingerprint)
            == (state.records, state.interval, state.digest, fingerprint)
            and _ends_with_newline(source_path, old.size)
        )  # fmt: skip
        if not resume and not fresh:
            con.execute(f"DETACH {inc_state.SCHEMA}")
            return attempt(True, defer)
        settled = settled_old if resume else 0
        if not resume:  # (a state whose head resumes holds them: it was written with them)
            inc_state.create_tables(con, len(settings.queries), _machines(settings),
                                    text=_open_queries(settings))  # fmt: skip
        temps: list[str] = []

        def read(source: Any, size: int) -> Any:
            if resume and old is not None and size == old.size and inc_state.nothing_pending(con):
                return None  # nothing to load: the state alone answers (_unchanged)
            from dpcr.changelog import Prior, load_increment
            from dpcr.engines.base import numeric_columns
            from dpcr.release._outputs import scratch_dir

            numbers = numeric_columns(settings.queries, settings.constraint)
            _threads_for(con, size - old.size if resume and old is not None else size)

            if resume and old is not None and head is not None:
                from dpcr.changelog.position import copy_range

                with copy_range(Path(source.path), old.size, size,
                                directory=scratch_dir(settings)) as (tail, _):  # fmt: skip
                    prior = Prior(schema=inc_state.SCHEMA, last_record=head.lines,
                                  t_last=state.t_last, frozen=frozen, explicit=head.explicit)
                    return load_increment(
                        dataclasses.replace(source, path=tail), con, prior,
                        record_offset=head.lines,
                        on_error=settings.on_error, unit_column=settings.unit_column,
                        full_source=settings.source, temps=temps,
                        scratch=scratch_dir(settings), numbers=numbers,
                    )  # fmt: skip
            prior = Prior(schema=inc_state.SCHEMA, last_record=0, t_last=state.t_last,
                          frozen=frozen, seen=state.records, empty=True)  # fmt: skip
            return load_increment(
                source, con, prior, record_offset=0, on_error=settings.on_error,
                unit_column=settings.unit_column, full_source=settings.source, temps=temps,
                scratch=scratch_dir(settings), numbers=numbers,
                liveness="defer" if defer else "check",
            )  # fmt: skip

        progress("load changelog", 0, 1)
        try:
            inc, token = read_at_position(settings, con, state, read, bounded=bool(resume))
        except _needs_full_read():  # (evaluated once an exception is raised)
            con.execute(f"DETACH {inc_state.SCHEMA}")
            return attempt(True, defer)
        progress("load changelog", 1, 1)
        if inc is None:
            assert head is not None
            return _unchanged(settings, con, state, head, frozen, token,
                              span=(lo, hi, settled), fingerprint=fingerprint)
        from dpcr.changelog import NotPlain, mark_checked
        from dpcr.engines import incremental as inc_rows  # (bounds the rows it read)

        c = inc_state.counters(con)
        records = c.get("records", 0) + inc.records
        refuse_lost_records(state, records)
        valid, lo_ts, hi_ts, due = con.execute(
            f"SELECT count(*), min(ts), max(ts), count(*) FILTER (WHERE ts > ?) "
            f"FROM {inc.good} WHERE chk IS NULL", [clock],
        ).fetchone() or (0, None, None, 0)  # fmt: skip
        columns_ok = head is not None and head.columns_ok

        def check_rows() -> tuple[str, ...]:
            # (the valid rows only: after the aggregation when it checks their liveness)
            if not columns_ok and valid:
                _check_columns(settings, con, inc)
            con.execute(f"CREATE OR REPLACE TEMP VIEW _dpcr_dec AS SELECT record, after, "
                        f"NULL::JSON AS before FROM {inc.valid}")  # fmt: skip
            warned = decimal_warnings(settings, con, table="_dpcr_dec")
            _write_quarantine(settings, con, inc)
            return warned

        if not inc.unchecked:
            warnings = check_rows()
        try:
            combined, agg = inc_rows.seeded_aggregate(
                con, inc, queries=settings.queries, constraint=settings.constraint,
                release_times=times, lo=lo, hi=hi, settled=settled,
                unit_is_entry=settings.owner is None,
                progress=lambda done, total: progress("bound and aggregate", done, total),
                empty=not resume, settle_at=settle_at,
            )  # fmt: skip
        except NotPlain:
            if not inc.unchecked:
                raise
            _drop_all(con, [*temps, "_dpcr_seeded"])
            mark_checked(con, "_dpcr_seeded")
            con.execute(f"DETACH {inc_state.SCHEMA}")
            return attempt(True, False)
        if inc.unchecked:
            warnings = check_rows()
        columns_ok = columns_ok or bool(valid)
        lows = [v for v in (c.get("min_ts"), lo_ts) if v is not None]
        highs = [v for v in (c.get("max_ts"), hi_ts) if v is not None]
        report = _load_report(settings, c, inc, valid=int(valid))
        lines = inc.lines

        def settle(new_state: Any) -> None:
            head_new = inc_state.StateHead(
                records=new_state.records, interval=new_state.interval, token=new_state.digest,
                lines=lines, explicit=inc.explicit, fingerprint=fingerprint,
                columns_ok=columns_ok,
            )  # fmt: skip
            with _settling(path):
                inc_rows.settle(
                    con, inc, agg, queries=settings.queries, constraint=settings.constraint,
                    t_new=settle_at, settled_old=settled, settled_new=settled_new,
                    head=head_new,
                )  # fmt: skip

        return DataStep(report, combined, min(lows) if lows else None,
                        max(highs) if highs else None, int(due or 0), token, settle,
                        warnings)  # fmt: skip

    try:
        return attempt(False)
    except duckdb.Error as exc:
        if disk_full(exc):  # (before the commit: nothing is released)
            raise full(path) from None
        raise


def _window(settings: ReleaseSettings, state: SourceState, span: tuple[int, int], clock: int,
            settle_at: int | None) -> StepWindow:  # fmt: skip
    """The step's base intervals ``span`` = (lo, hi), the release times up to hi and on to the
    ends of the last released intervals (the earlier runs' and this run's), and the settled
    base intervals: those that end by them."""
    lo, hi = span
    grid = settings.plan.base_grid()
    times = [grid.release_time(j) for j in range(1, hi + 1)] if hi >= 1 else []
    ends = [t for t in (state.t_last, settle_at) if t is not None]
    while ends and (not times or times[-1] < max(ends)):
        times.append(grid.release_time(len(times) + 1))

    def settled_by(t: int | None) -> int:
        return bisect.bisect_right(times, t) if t is not None else 0

    return StepWindow(lo=max(1, min(lo, hi + 1)), hi=hi, settled_old=settled_by(state.t_last),
                      settled_new=settled_by(settle_at), times=times, clock=clock,
                      settle_at=settle_at)  # fmt: skip


def _quarantine_kept(settings: ReleaseSettings, con: duckdb.DuckDBPyConnection,
                     step: DataStep) -> DataStep:  # fmt: skip
    """A step from memory quarantines nothing new; the quarantine file is written when it is
    missing (else it holds what it holds)."""
    if settings.on_error == "quarantine" and not settings.quarantine_path.exists():
        _write_quarantine(settings, con, None)
    return step


def _load_report(settings: ReleaseSettings, c: dict[str, int], inc: Any, *, valid: int,
                 frozen: tuple[tuple[str, str, int], ...] = ()) -> Any:  # fmt: skip
    """The load report: the state's counters ``c`` plus what the increment ``inc`` read
    (``valid`` of its mutations are valid; None: it read no record, and ``frozen`` are the
    freeze points)."""
    from dpcr.changelog import REASONS, LoadReport, describe

    def new(name: str) -> int:
        return int(getattr(inc, name)) if inc is not None else 0

    quarantined = {k[2:]: v for k, v in c.items() if k.startswith("q:")}
    for k, v in (inc.quarantined.items() if inc is not None else ()):
        quarantined[k] = quarantined.get(k, 0) + v
    return LoadReport(
        source=describe(settings.source), records=c.get("records", 0) + new("records"),
        valid=c.get("valid", 0) + valid,
        quarantined={r: quarantined[r] for r in REASONS if quarantined.get(r)},
        quarantine_path=settings.quarantine_path if settings.on_error == "quarantine"
        else None,
        tombstones=c.get("tombstones", 0) + new("tombstones"),
        split=c.get("split", 0) + new("split"), late=c.get("late", 0) + new("late"),
        frozen=inc.frozen if inc is not None else frozen,
    )  # fmt: skip


def _unchanged(
    settings: ReleaseSettings, con: duckdb.DuckDBPyConnection, state: SourceState, head: Any,
    frozen: tuple[tuple[str, str, int], ...], token: str, *, span: tuple[int, int, int],
    fingerprint: str,
) -> DataStep:
    """The data step of a run whose source gained no complete line since the state's ``head``
    and whose state keeps no pending mutation: what loading and bounding no row gives, from
    the state alone. ``span``: the base intervals ``lo``, ``hi`` and the last settled one."""
    from dpcr.engines import state as inc_state

    lo, hi, settled = span
    c = inc_state.counters(con)
    refuse_lost_records(state, c.get("records", 0))
    _write_quarantine(settings, con, None)
    combined = inc_state.state_totals(con, queries=settings.queries,
                                      constraint=settings.constraint, lo=lo, hi=hi,
                                      settled=settled)  # fmt: skip
    points: dict[tuple[str, str], int] = {}
    for unit, entry, record in frozen:  # (one per (unit, entry), the lowest, in key order)
        points[unit, entry] = min(record, points.get((unit, entry), record))
    report = _load_report(settings, c, None, valid=0,
                          frozen=tuple((u, e, r) for (u, e), r in sorted(points.items())))

    def settle(new_state: Any) -> None:
        with _settling(state_path(settings)):
            inc_state.settle_unchanged(con, inc_state.StateHead(
                records=new_state.records, interval=new_state.interval,
                token=new_state.digest, lines=head.lines, explicit=head.explicit,
                fingerprint=fingerprint, columns_ok=head.columns_ok,
            ))  # fmt: skip

    return DataStep(report, combined, c.get("min_ts"), c.get("max_ts"), 0, token, settle)


@contextmanager
def _settling(path: Path) -> Iterator[None]:
    """A full disk while the state moves forward, told as such."""
    import duckdb

    try:
        yield
    except duckdb.Error as exc:
        if disk_full(exc):
            raise full(path, then=_SETTLE_FULL) from None
        raise


#: A full disk while the state moves forward, after the release is committed and published.
_SETTLE_FULL = (
    "The release is committed and its outputs are written; only the incremental state could "
    "not move forward: free space and run again (the next run rebuilds the state from the "
    "source, which releases the same)"
)


def disk_full(exc: BaseException) -> bool:
    """Whether a DuckDB error is a full disk (or an exhausted quota)."""
    text = str(exc)
    return "No space left on device" in text or "Disk quota exceeded" in text


#: New bytes up to which a step runs on one DuckDB thread: its statements are small, and a
#: second thread costs more CPU in scheduling than it saves in wall time (a daily step of a
#: 10^6 log, 270 kB: 20 % less CPU on one thread; 1 % appended to a 10^7 log, 11 MB: 9 %
#: less CPU, 2.40 s against 2.63 s, at the same wall time on a loaded machine).
ONE_THREAD_BYTES = 32 << 20


def _threads_for(con: duckdb.DuckDBPyConnection, new_bytes: int) -> None:
    """One thread for a small increment, DuckDB's default otherwise (the setting belongs to
    the connection's database, which a session's later runs share: every step sets it)."""
    if new_bytes <= ONE_THREAD_BYTES:
        con.execute("SET threads = 1")
    else:
        con.execute("RESET threads")


def _checks_liveness(settings: ReleaseSettings) -> bool:
    """Whether the aggregation checks the liveness of a first read's histories in its ranking
    window (:func:`dpcr.engines.duckdb.checks_liveness`)."""
    from dpcr.engines.duckdb import checks_liveness

    return checks_liveness(settings.queries, settings.constraint,
                           unit_is_entry=settings.owner is None,
                           retire=settings.on_exhausted == "retire")  # fmt: skip


def _drop_all(con: duckdb.DuckDBPyConnection, names: list[str]) -> None:
    """Drop the temporary views and tables ``names`` (those that exist)."""
    import duckdb

    for name in names:
        for kind in ("VIEW", "TABLE"):
            with suppress(duckdb.Error):
                con.execute(f"DROP {kind} IF EXISTS {name}")


def _needs_full_read() -> type[Exception]:
    """The loader's :class:`~dpcr.changelog.NeedsFullRead` (imported once it can have been
    raised: a run that loads nothing imports no loader)."""
    from dpcr.changelog import NeedsFullRead

    return NeedsFullRead


def _machines(settings: ReleaseSettings) -> int:
    from dpcr.bounding.sql import bounding_sql

    return bounding_sql(settings.constraint).machines


def _write_quarantine(settings: ReleaseSettings, con: duckdb.DuckDBPyConnection,
                      inc: Any) -> None:  # fmt: skip
    """The quarantine file: the final lines of earlier runs and this run's (none when ``inc``
    is None), in record order."""
    if settings.on_error != "quarantine":
        return
    from dpcr.engines.state import SCHEMA
    from dpcr.release._outputs import operator_dir

    operator_dir(settings)
    new = "" if inc is None else \
        f" UNION ALL SELECT record, part, line FROM {inc.bad}_lines"  # fmt: skip
    result = con.execute(
        f"SELECT line FROM (SELECT record, part, line FROM {SCHEMA}.qlines{new}) "
        "ORDER BY record, part"
    )

    def lines(f: TextIO) -> None:
        while rows := result.fetchmany(10_000):
            f.writelines(r[0] for r in rows)

    write_atomic(settings.quarantine_path, lines, mode=0o600)


def _check_columns(settings: ReleaseSettings, con: duckdb.DuckDBPyConnection, inc: Any) -> None:
    """Refuse a configuration that reads a column no valid row has (a typo). The valid rows
    among the first new records usually show every column; only when they do not are all the
    valid rows searched (``inc.valid`` is a view whose joins cannot stop at the first row)."""
    from dpcr.engines.checks import missing_columns

    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _dpcr_cols_sample AS SELECT record, after "
        f"FROM {inc.rows} LIMIT 10000"
    )
    con.execute(
        "CREATE OR REPLACE TEMP VIEW _dpcr_cols AS SELECT s.after, NULL::JSON AS before "
        f"FROM _dpcr_cols_sample s JOIN {inc.good} g USING (record) "
        "WHERE g.chk IS NULL AND NOT g.pend AND g.op <> 'delete'"
    )
    def missing() -> list[str]:
        return missing_columns(con, table="_dpcr_cols", queries=settings.queries,
                               constraint=settings.constraint)  # fmt: skip

    try:
        if missing():
            con.execute(f"CREATE OR REPLACE TEMP VIEW _dpcr_cols AS SELECT after, "
                        f"NULL::JSON AS before FROM {inc.valid}")  # fmt: skip
            _refuse_missing(missing())
    finally:
        con.execute("DROP TABLE IF EXISTS _dpcr_cols_sample")
