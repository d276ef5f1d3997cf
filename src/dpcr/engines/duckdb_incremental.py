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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from dpcr._duck import afterwards
from dpcr._fs import full, write_atomic
from dpcr.engines.base import DataStep
from dpcr.engines.checks import decimal_warnings
from dpcr.engines.duckdb_memory import HeldState, StepWindow, accepts
from dpcr.engines.duckdb_partial import partial_step
from dpcr.engines.step import refuse_lost_records, refuse_missing

# DuckDB is imported by the functions that use it (a run with nothing new imports no engine).
if TYPE_CHECKING:
    import duckdb

    from dpcr.engines.base import AggregateRequest, EngineRun, StoreHead
    from dpcr.queries import Query

__all__ = ["STATE_FILE", "disk_full", "eligible", "incremental_step"]

#: The state file's name in the store's state folder (``<store>.state/``).
STATE_FILE = "state.duckdb"


def _remove_legacy(state_dir: Path) -> None:
    """Delete the state file (and log) stores kept beside them before ``<store>.state/``: the
    state is rebuilt from the source in the new place."""
    for name in (".duckdb", ".duckdb.wal"):
        state_dir.with_name(state_dir.name + name).unlink(missing_ok=True)


def eligible(request: AggregateRequest) -> bool:
    """Whether the source is read by position as lines, one record per line, and the state
    carries everything the bounding needs (``on_exhausted = "retire"`` and exhausted-entries
    queries read every unit's cut, which the state does not keep yet: such releases read the
    whole file every run)."""
    from dpcr.changelog import DebeziumSource, JsonlSource, Wal2jsonSource
    from dpcr.queries import Exhausted

    return (
        isinstance(request.source, JsonlSource | DebeziumSource | Wal2jsonSource)
        and not request.retire
        and not any(isinstance(q, Exhausted) for q in request.queries)
    )


def _open_queries(queries: Sequence[Query]) -> tuple[int, ...]:
    """The numbers of the open histograms among the queries (the state keeps their keys as
    text)."""
    return tuple(i for i, q in enumerate(queries) if getattr(q, "open", False))


def _line_start(path: Path, size: int) -> int | None:
    """Where the lines after the first ``size`` bytes of ``path`` start: ``size`` when those
    bytes end with a line end (or are none, or are all the file holds), ``size + 1`` when their
    last line was ended since by a line feed, ``size + 2`` when it was ended by CR LF and
    its last byte is no carriage return (DuckDB's line reader, which reads the whole file,
    ends that line at the CR LF too), None otherwise: a line ended by a lone CR, or a CR LF
    after a CR (a CR CR LF, which that reader may read as a further line), rebuild the state
    from the whole file; a record that was extended is refused by the position's check."""
    if size == 0:
        return 0
    with open(path, "rb") as f:
        f.seek(size - 1)
        end = f.read(3)
    if end[:1] == b"\n" or len(end) == 1:
        return size
    if end[1:2] == b"\n":
        return size + 1
    return size + 2 if end[1:] == b"\r\n" and end[:1] != b"\r" else None


def _tail(path: Path, size: int, end: int) -> int:
    """Where the new lines between the first ``size`` and ``end`` bytes start."""
    return min(_line_start(path, size) or size, end)


def incremental_step(request: AggregateRequest, run: EngineRun) -> DataStep:
    """Load and aggregate the request's base intervals reading only new records when the
    state allows (see the module docstring). ``run.settle_at``: the end of the last interval
    this run releases (the next run's ``t_last``); ``run.held``: a session's
    :class:`~dpcr.engines.duckdb_memory.HeldState`."""
    import duckdb

    from dpcr.changelog.position import parse_token
    from dpcr.engines import state as inc_state

    con, state, progress = run.connection, run.store, run.progress
    frozen = tuple(request.frozen)
    on_error: Any = request.on_error
    window = _window(request, run)
    assert run.state_dir is not None
    path = run.state_dir / STATE_FILE
    fast = _from_memory(request, run, window, path)
    if fast is not None:
        return fast
    lo, hi, times, settle_at = window.lo, window.hi, window.times, window.settle_at
    settled_old, settled_new = window.settled_old, window.settled_new
    fingerprint = run.fingerprint
    old = parse_token(state.token)
    source_path = Path(str(getattr(request.source, "path", "")))

    # A first read of the whole file leaves the liveness check to the ranking window when the
    # aggregation has one pass (as a clean Parquet file's: dpcr.changelog.unchecked); when a
    # history is not plain, the file is read again with the check.
    deferrable = _checks_liveness(request)

    def attempt(fresh: bool, defer: bool = deferrable) -> DataStep:
        inc_state.attach(con, path, fresh=fresh)
        head = None if fresh else inc_state.read_head(con)
        resume = (
            head is not None and state.records > 0 and old is not None
            and (head.records, head.interval, head.token, head.fingerprint)
            == (state.records, state.interval, state.token, fingerprint)
            and _line_start(source_path, old.size) is not None
        )  # fmt: skip
        if not resume and not fresh:
            con.execute(f"DETACH {inc_state.SCHEMA}")
            return attempt(True, defer)
        settled = settled_old if resume else 0
        if not resume:  # (a state whose head resumes holds them: it was written with them)
            inc_state.create_tables(con, len(request.queries), _machines(request),
                                    text=_open_queries(request.queries))  # fmt: skip
        temps: list[str] = []

        def read(source: Any, size: int) -> Any:
            if resume and old is not None and size == old.size and inc_state.nothing_pending(con):
                return None  # nothing to load: the state alone answers (_unchanged)
            from dpcr.changelog import Prior, load_increment
            from dpcr.engines.base import numeric_columns

            numbers = numeric_columns(request.queries, request.constraint)
            _threads_for(con, size - old.size if resume and old is not None else size)

            if resume and old is not None and head is not None:
                from dpcr.changelog.position import copy_range

                with copy_range(Path(source.path), _tail(source_path, old.size, size),
                                size, directory=run.scratch()) as (tail, _):  # fmt: skip
                    prior = _resumed(request, head, state.t_last, frozen)
                    return _close_lines(con, load_increment(
                        dataclasses.replace(source, path=tail), con, prior,
                        record_offset=head.lines,
                        on_error=on_error, unit_column=request.unit_column,
                        full_source=request.source, temps=temps,
                        scratch=run.scratch(), numbers=numbers,
                    ), settle_at)  # fmt: skip
            prior = Prior(schema=inc_state.SCHEMA, last_record=0, t_last=state.t_last,
                          frozen=frozen, seen=state.records, empty=True)  # fmt: skip
            return _close_lines(con, load_increment(
                source, con, prior, record_offset=0, on_error=on_error,
                unit_column=request.unit_column, full_source=request.source, temps=temps,
                scratch=run.scratch(), numbers=numbers,
                liveness="defer" if defer else "check",
            ), settle_at, copy=Path(source.path) != source_path)  # fmt: skip

        progress("load changelog", 0, 1)
        try:
            inc, token = run.at_position(read, bounded=bool(resume))
        except _needs_full_read():  # (evaluated once an exception is raised)
            con.execute(f"DETACH {inc_state.SCHEMA}")
            return attempt(True, defer)
        progress("load changelog", 1, 1)
        if inc is None:
            assert head is not None
            return _unchanged(request, run, head, token, span=(lo, hi, settled))
        from dpcr.changelog import NotPlain, mark_checked
        from dpcr.engines import incremental as inc_rows  # (bounds the rows it read)

        c = inc_state.counters(con)
        records = c.get("records", 0) + inc.records
        refuse_lost_records(state, records)
        valid, lo_ts, hi_ts, due = con.execute(
            f"SELECT count(*), min(ts), max(ts), count(*) FILTER (WHERE ts > ?) "
            f"FROM {inc.good} WHERE chk IS NULL", [request.clock],
        ).fetchone() or (0, None, None, 0)  # fmt: skip
        columns_ok = head is not None and head.columns_ok

        def check_rows() -> tuple[str, ...]:
            # (the valid rows only: after the aggregation when it checks their liveness)
            if not columns_ok and valid:
                _check_columns(request, con, inc)
            con.execute(f"CREATE OR REPLACE TEMP VIEW _dpcr_dec AS SELECT record, after, "
                        f"NULL::JSON AS before FROM {inc.valid}")  # fmt: skip
            warned = decimal_warnings(request, con, table="_dpcr_dec")
            _write_quarantine(request, run, inc)
            return warned

        if not inc.unchecked:
            warnings = check_rows()
        try:
            combined, agg = inc_rows.seeded_aggregate(
                con, inc, queries=request.queries, constraint=request.constraint,
                release_times=times, lo=lo, hi=hi, settled=settled,
                unit_is_entry=request.unit_is_entry,
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
        report = _load_report(request, c, inc, valid=int(valid))
        lines = inc.lines

        def settle(new_state: StoreHead) -> None:
            head_new = inc_state.StateHead(
                records=new_state.records, interval=new_state.interval, token=new_state.token,
                lines=lines, explicit=inc.explicit, fingerprint=fingerprint,
                columns_ok=columns_ok,
            )  # fmt: skip
            with _settling(path):
                inc_rows.settle(
                    con, inc, agg, queries=request.queries, constraint=request.constraint,
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


def _window(request: AggregateRequest, run: EngineRun) -> StepWindow:
    """The step's base intervals (the request's), the release times up to its last and on to
    the ends of the last released intervals (the earlier runs' and this run's:
    ``run.settle_times``), and the settled base intervals: those that end by them."""
    hi = len(request.release_times)
    times = [*request.release_times, *run.settle_times]
    settle_at = run.settle_at

    def settled_by(t: int | None) -> int:
        return bisect.bisect_right(times, t) if t is not None else 0

    return StepWindow(lo=request.first_interval, hi=hi,
                      settled_old=settled_by(run.store.t_last),
                      settled_new=settled_by(settle_at), times=times, clock=request.clock,
                      settle_at=settle_at)  # fmt: skip


def _quarantine_kept(request: AggregateRequest, run: EngineRun, step: DataStep) -> DataStep:
    """A step from memory quarantines nothing new; the quarantine file is written when it is
    missing (else it holds what it holds)."""
    if request.quarantine_path is not None and request.on_error == "quarantine" \
            and not request.quarantine_path.exists():  # fmt: skip
        _write_quarantine(request, run, None)
    return step


def _from_memory(request: AggregateRequest, run: EngineRun, window: StepWindow,
                 path: Path) -> DataStep | None:  # fmt: skip
    """The step from memory, or None (it runs in SQL): a session's from the seeds it holds
    (``run.held``), another run's from the seeds of the units its new lines touch, in the
    state file at ``path`` (whose legacy files are removed first)."""
    held: HeldState | None = run.held
    fast = None
    if held is not None:
        fast = held.step(request, run, window) if accepts(request) else None
        if fast is None:
            held.forget()
    _remove_legacy(path.parent)
    if held is None and accepts(request):
        fast = partial_step(request, run, window, path)
        fast = None if fast is None else _settled_in(path, fast)
    return None if fast is None else _quarantine_kept(request, run, fast)


def _settled_in(path: Path, step: DataStep) -> DataStep:
    """``step`` whose settle, which writes the state file at ``path``, tells a full disk as
    such."""
    settle = step.settle
    if settle is None:
        return step

    def settled(new_state: StoreHead) -> None:
        with _settling(path):
            settle(new_state)

    return dataclasses.replace(step, settle=settled)


def _load_report(request: AggregateRequest, c: dict[str, int], inc: Any, *, valid: int,
                 frozen: tuple[tuple[str, str, int], ...] = ()) -> Any:  # fmt: skip
    """The load report: the state's counters ``c`` plus what the increment ``inc`` read
    (``valid`` of its mutations are valid; None: it read no record, and ``frozen`` are the
    freeze points)."""
    from dpcr.engines.state import state_load_report

    quarantine = request.quarantine_path if request.on_error == "quarantine" else None
    if inc is None:
        return state_load_report(request.source, c, quarantine, frozen=frozen)
    new = {name: int(getattr(inc, name)) for name in ("records", "tombstones", "split", "late")}
    return state_load_report(request.source, c, quarantine, new={**new, "valid": valid},
                             quarantined=inc.quarantined, frozen=inc.frozen)  # fmt: skip

def _unchanged(
    request: AggregateRequest, run: EngineRun, head: Any, token: str, *,
    span: tuple[int, int, int],
) -> DataStep:
    """The data step of a run whose source gained no complete line since the state's ``head``
    and whose state keeps no pending mutation: what loading and bounding no row gives, from
    the state alone. ``span``: the base intervals ``lo``, ``hi`` and the last settled one."""
    from dpcr.engines import state as inc_state

    lo, hi, settled = span
    con, state, frozen, fingerprint = run.connection, run.store, request.frozen, run.fingerprint
    c = inc_state.counters(con)
    refuse_lost_records(state, c.get("records", 0))
    _write_quarantine(request, run, None)
    combined = inc_state.state_totals(con, queries=request.queries,
                                      constraint=request.constraint, lo=lo, hi=hi,
                                      settled=settled)  # fmt: skip
    report = _load_report(request, c, None, valid=0, frozen=inc_state.frozen_points(frozen))

    def settle(new_state: StoreHead) -> None:
        assert run.state_dir is not None
        with _settling(run.state_dir / STATE_FILE):
            inc_state.settle_unchanged(con, inc_state.StateHead(
                records=new_state.records, interval=new_state.interval,
                token=new_state.token, lines=head.lines, explicit=head.explicit,
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


def _checks_liveness(request: AggregateRequest) -> bool:
    """Whether the aggregation checks the liveness of a first read's histories in its ranking
    window (:func:`dpcr.engines.duckdb.checks_liveness`)."""
    from dpcr.engines.duckdb import checks_liveness

    return checks_liveness(request.queries, request.constraint,
                           unit_is_entry=request.unit_is_entry,
                           retire=request.retire)  # fmt: skip


def _drop_all(con: duckdb.DuckDBPyConnection, names: list[str]) -> None:
    """Drop the temporary views and tables ``names`` (those that exist)."""
    import duckdb

    for name in names:
        for kind in ("VIEW", "TABLE"):
            with suppress(duckdb.Error):
                con.execute(f"DROP {kind} IF EXISTS {name}")


def _close_lines(con: duckdb.DuckDBPyConnection, inc: Any, settle_at: int | None, *,
                 copy: bool = True) -> Any:  # fmt: skip
    """``inc`` (:class:`dpcr.changelog.Increment`) read from a ``copy`` about to be deleted
    (the appended lines, or the complete lines of a file whose last line is cut): the text
    of its new rows that a settle at ``settle_at`` keeps as pending (those dated after it)
    fetched now, and its lines closed (a later read of another line is an error). A file
    read in place (not a ``copy``) stays: ``inc`` as it is."""
    if copy and inc.lazy is not None:
        from dpcr.changelog import ensure_raw

        t = -(2**63) if settle_at is None else int(settle_at)  # (as the settle's)
        ensure_raw(con, inc.lazy, f"SELECT record FROM {inc.good} WHERE ts > {t} AND NOT pend")
        inc.lazy.path = None
    return inc


def _needs_full_read() -> type[Exception]:
    """The loader's :class:`~dpcr.changelog.NeedsFullRead` (imported once it can have been
    raised: a run that loads nothing imports no loader)."""
    from dpcr.changelog import NeedsFullRead

    return NeedsFullRead


def _resumed(request: AggregateRequest, head: Any, t_last: int | None,
             frozen: tuple[Any, ...]) -> Any:  # fmt: skip
    """What a resumed load continues (:class:`dpcr.changelog.Prior`): the state's ``head``,
    the end ``t_last`` of the last released interval, the freeze points, and the lookup of
    the state's seeds (:func:`dpcr.engines.seeds.lookup_seeds`)."""
    import functools

    from dpcr.bounding.sql import bounding_sql
    from dpcr.changelog import Prior
    from dpcr.engines.seeds import lookup_seeds
    from dpcr.engines.state import SCHEMA, seed_columns

    columns = seed_columns(len(request.queries), _machines(request),
                           _open_queries(request.queries))  # fmt: skip
    # (without classes every row's class is '': the seeds' column is not read)
    known = {} if bounding_sql(request.constraint).uses_cls else {"cls": "''"}
    lookup = functools.partial(lookup_seeds, columns=columns, known=known)
    return Prior(schema=SCHEMA, last_record=head.lines, t_last=t_last, frozen=frozen,
                 explicit=head.explicit, lookup=lookup)


def _machines(request: AggregateRequest) -> int:
    from dpcr.bounding.sql import bounding_sql

    return bounding_sql(request.constraint).machines


def _write_quarantine(request: AggregateRequest, run: EngineRun, inc: Any) -> None:
    """The quarantine file: the final lines of earlier runs and this run's (none when ``inc``
    is None), in record order."""
    if request.on_error != "quarantine" or request.quarantine_path is None:
        return
    from dpcr.engines.state import SCHEMA

    con = run.connection
    run.operator()
    new = "" if inc is None else \
        f" UNION ALL SELECT record, part, line FROM {inc.bad}_lines"  # fmt: skip
    result = con.execute(
        f"SELECT line FROM (SELECT record, part, line FROM {SCHEMA}.qlines{new}) "
        "ORDER BY record, part"
    )

    def lines(f: TextIO) -> None:
        while rows := result.fetchmany(10_000):
            f.writelines(r[0] for r in rows)

    write_atomic(request.quarantine_path, lines, mode=0o600)


def _check_columns(request: AggregateRequest, con: duckdb.DuckDBPyConnection, inc: Any) -> None:
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
        return missing_columns(con, table="_dpcr_cols", queries=request.queries,
                               constraint=request.constraint)  # fmt: skip

    with afterwards(con, "DROP TABLE IF EXISTS _dpcr_cols_sample"):
        if missing():
            con.execute(f"CREATE OR REPLACE TEMP VIEW _dpcr_cols AS SELECT after, "
                        f"NULL::JSON AS before FROM {inc.valid}")  # fmt: skip
            refuse_missing(missing())
