"""The one release loop, the same for every plan.

    clock ─> due nodes ─┐
    source ─> engine.aggregate(plan.base_grid) ─> plan.exact(base, due) ─> calibrate
          ─> filter.check(ledger + new instances + alert rules) ─> mechanism draws
          ─> store.commit (one transaction) ─> plan.estimate (post-processing) ─> outputs

What closes a reporting interval is a public clock, never the data: ``until`` when given (it
may not be in the future), else the wall clock at the start of the run. A record dated after the
clock waits for its interval to close (counted as not yet due); it cannot change a closed one.
The filter sees every event before any value is drawn or written; a refused run changes nothing.
A released value is read back from the store, never drawn again.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np

from dpcr.accounting.events import (
    ComposedEvent,
    DpEvent,
    event_to_dict,
)
from dpcr.accounting.guarantee import PrivacyFilter
from dpcr.errors import ConfigError, StoreError
from dpcr.mechanisms import add_noise
from dpcr.noise import Randomness, require_secure, secure_randomness
from dpcr.plans.base import Node
from dpcr.plans.dcr import DisjointRelease
from dpcr.release._calibrate import calibrate
from dpcr.release._engine import (
    REWRITTEN,
    check_source,
    load_and_aggregate,
    positioned,
    read_at_position,
    refuse_lost_records,
)
from dpcr.release._ledger import layers_to_draw, ledger_instances
from dpcr.release._results import RunResult
from dpcr.release._rows import _discrete, released_rows, warm_intervals
from dpcr.release._summary import _diagnostics, _summary, public_summary
from dpcr.store import NodeEvent, ReleasedNode, SourceState, Store
from dpcr.timeutil import format_timestamp

if TYPE_CHECKING:
    from dpcr.release._session import ReleaseSession
    from dpcr.release._settings import ContinualRelease, Progress

__all__ = [
    "closed_count",
    "exact_release",
    "resolve_randomness",
    "run_clock",
    "run_release",
]


#: Computes the intervals of the rows a run will publish while its data step runs.
_WARMER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpcr-intervals")
#: Takes a first run's source fingerprint while its data step runs.
_FINGERPRINT = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpcr-fingerprint")


def _warm_when(read: threading.Event, settings: ContinualRelease, layers: Any, n: int,
               method: str, done: list[int]) -> None:
    """:func:`warm_intervals` once ``read`` is set; ``done``: [part, whole] as it goes."""
    read.wait()

    def note(part: int, whole: int) -> None:
        done[:] = [part, whole]  # (read by the run's thread, which reports it)

    warm_intervals(settings, layers, n, method, done=note)


def resolve_randomness(rng: Randomness | None) -> tuple[Randomness, bool]:
    """The generator a run draws from, and whether the run is a simulation.

    No generator means a real release from the secure source; a seeded generator makes the run
    a simulation (its store is marked so and can never be published from).
    """
    simulation = rng is not None and not rng.secure
    if rng is None:
        rng = secure_randomness()
    if not simulation:
        require_secure(rng, "a real release")
    return rng, simulation


def run_clock(until: int | None, *, now: int | None = None) -> int:
    """The public clock of a run (µs): ``until``, or the wall clock. ``until`` in the future is
    refused: intervals never close ahead of time."""
    wall = now if now is not None else time.time_ns() // 1000
    if until is None:
        return wall
    if until > wall:
        fmt = format_timestamp
        raise ConfigError(
            f"--until {fmt(until)} is in the future (now {fmt(wall)}); intervals close by the "
            "clock only: give a time that has passed, or leave --until out to use the wall clock"
        )
    return until


def closed_count(schedule: DisjointRelease, clock: int) -> int:
    """Reporting intervals closed by the public clock: those ending at or before ``clock``."""
    return schedule.count_until(clock)


#: Prefix of digests of the raw source records (valid, quarantined and tombstones alike), which
#: no quarantine decision can change. Stores written before it hold a digest of valid rows.
RAW_DIGEST = "raw1:"
#: Prefix of the position of a SQLite log written since ``raw2`` record digests
#: (:func:`dpcr.changelog._resume.log_digest`: the same records, digested in half the time). A
#: store that holds a ``raw1:`` or older digest is checked in its own format, once; its new
#: position is a ``raw2:`` digest, computed in the same load.
LOG_DIGEST = "raw2:"


def _digest(con: duckdb.DuckDBPyConnection, records: int) -> str:
    """The ``raw1`` digest of the first ``records`` source records as read."""
    from dpcr.changelog import raw_digest

    return RAW_DIGEST + raw_digest(con, "changelog", records)


def _log_digest(con: duckdb.DuckDBPyConnection, records: int) -> str:
    """The ``raw2`` digest of the first ``records`` records of a SQLite log as read."""
    from dpcr.changelog._resume import log_digest

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


@contextmanager
def private_output(settings: ContinualRelease) -> Iterator[ContinualRelease]:
    """``settings`` with a private temporary output folder, deleted on exit: for reading the
    changelog without writing into the release's folder (set-aside copies, quarantined
    records), as an audit or a report's exact values do."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dpcr-aside-") as scratch:
        yield dataclasses.replace(settings, output_dir=Path(scratch))


def load_changelog(
    settings: ContinualRelease,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    frozen: tuple[tuple[str, str, int], ...] = (),
    progress: Any = None,
    *,
    materialize: bool = True,
    on_read: Callable[[], None] | None = None,
) -> tuple[Any, int | None, int | None, str]:
    """Load the changelog into table ``changelog`` of ``con`` and refuse a source that lost or
    rewrote records consumed by earlier runs. Late records (appended after earlier runs, dated in
    a released interval) freeze their (unit, entry) for good, with the ``frozen`` points of
    earlier runs. Returns (load report, min ts, max ts, the source's new position token).

    A line-format file is checked by byte position (:mod:`dpcr.changelog._position`): it must
    still begin with the bytes earlier runs read; a Parquet file by the hashes of its rows. A
    SQLite log, and stores whose position is an older record digest, are checked record by
    record: a log by its ``raw2:`` digest (:func:`dpcr.changelog._resume.log_digest`), or the
    ``raw1:`` digest (:func:`dpcr.changelog.raw_digest`) that an older store holds.

    ``materialize=False``: ``changelog`` may be a view that reads the source again (see
    :func:`dpcr.changelog.load`), for a caller that reads it once. ``on_read``: as in
    :func:`dpcr.changelog.load`.
    """
    from dpcr.changelog import DebeziumSource, load
    from dpcr.changelog._canonical import ts_source
    from dpcr.changelog._position import parse_parquet_token, parse_token
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
            numbers=numeric_columns(settings.queries, settings.constraint),
        ),
    )  # fmt: skip
    refuse_lost_records(state, report.records)
    if by_record and state.records:
        if state.digest.startswith(LOG_DIGEST):
            # (only a SQLite log has raw2 digests: another source is not the one digested)
            if path is not None or _log_digest(con, state.records) != state.digest:
                raise StoreError(REWRITTEN)
        else:
            digest = _digest if state.digest.startswith(RAW_DIGEST) else _legacy_digest
            if digest(con, state.records) != state.digest:
                raise StoreError(REWRITTEN)
    if path is None:
        token = _log_digest(con, report.records)
    row = con.execute(f"SELECT min(ts), max(ts) FROM {ts_source(con, 'changelog')}").fetchone()
    lo, hi = (row[0], row[1]) if row else (None, None)
    return report, lo, hi, token


@contextmanager
def _connection() -> Iterator[duckdb.DuckDBPyConnection]:
    from dpcr.release._session import open_connection

    con = open_connection()
    try:
        yield con
    finally:
        con.close()


def _aggregate(
    settings: ContinualRelease,
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


def exact_release(
    settings: ContinualRelease, con: duckdb.DuckDBPyConnection, *, table: str, reporting: int,
    progress: Any = None,
) -> dict[str, np.ndarray]:
    """With the noise switched off: the exact value of every node of the first ``reporting``
    intervals, per query (rows in the order of ``plan.due(0, reporting)``), through the same
    bounding, aggregation and linear map as a release. For audits, tests and a simulation's
    report; ``progress(done, total)`` as in :func:`dpcr.engines.duckdb.aggregate`."""
    plan = settings.plan
    nodes = plan.due(0, reporting)
    lo, hi = plan.base_range(0, reporting)
    agg = _aggregate(settings, con, table=table, lo=lo, hi=hi, exclude_late=None,
                     progress=progress)  # fmt: skip
    return {
        q.name: plan.exact(agg.values[q.name], agg.first_interval, nodes)
        for q in settings.queries
    }


def source_fingerprint(
    settings: ContinualRelease, ready: threading.Event | None = None
) -> str | None:
    """A cheap identity of the source's current content, read without loading it: a file's
    path, size and modification time; a SQLite log table's row count and largest rowid. None
    when the source cannot say (then every run loads it). ``ready`` is set once the content it
    describes is fixed (a log's read transaction has begun), before it is counted."""
    import json
    import sqlite3

    from dpcr.changelog import SqliteSource

    source = settings.source
    path = Path(str(getattr(source, "path", "")))
    try:
        if isinstance(source, SqliteSource):
            table = f'"{source.table}"'
            with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                         isolation_level=None)) as con:  # fmt: skip
                con.execute("BEGIN")  # one snapshot, taken by the first read
                con.execute(f"SELECT max(rowid) FROM {table}").fetchone()
                if ready is not None:
                    ready.set()
                row = con.execute(f"SELECT count(*), max(rowid) FROM {table}").fetchone()
                con.execute("COMMIT")
            return json.dumps(["sqlite", str(path), source.table, list(row or ())])
        stat = path.stat()
    except (OSError, sqlite3.Error):
        return None
    finally:
        if ready is not None:
            ready.set()
    if not path.is_file():
        return None
    return json.dumps(["file", str(path), stat.st_size, stat.st_mtime_ns])


def _fingerprint_beside(settings: ContinualRelease) -> Future[str | None]:
    """:func:`source_fingerprint` taken in a thread beside what follows (a log's count is a
    scan of it), once the content it describes is fixed: a load begun after this returns sees
    at least that content, as when the fingerprint is taken first."""
    ready = threading.Event()
    future = _FINGERPRINT.submit(source_fingerprint, settings, ready)
    ready.wait()
    return future


def _stored(settings: ContinualRelease, store: Store) -> RunResult:
    """The store's release: every released row, the last run's public summary and its
    operator diagnostics (empty before the first run)."""
    runs = store.runs()
    last = dict(runs[-1]) if runs else {}
    diagnostics = last.pop("operator", {})
    rows = released_rows(settings, store, store.source_state().interval)
    return RunResult(rows=tuple(rows), summary=last, diagnostics=diagnostics, new_intervals=0)


def _publish(
    settings: ContinualRelease, store: Store, result: RunResult, *, simulation: bool
) -> None:
    """The public outputs (and the operator's diagnostics) of ``result``, stamped with the
    store's head, and the alert answers when there are alert rules."""
    from dpcr.release._outputs import public_dir, write_outputs, write_table
    from dpcr.svt.pipeline import ALERT_FIELDS, alert_rows, alert_totals

    public = public_summary(settings, result.summary, alert_totals(settings, store))
    write_outputs(settings, result.rows, public, result.diagnostics, head=store.recorded_head())
    if settings.alerts:
        write_table(public_dir(settings, simulation=simulation), "alerts", ALERT_FIELDS,
                    alert_rows(settings, store), simulation=simulation)


def stored_result(settings: ContinualRelease, *, simulation: bool = False) -> RunResult:
    """What the store holds, as a run's result (rows, the last run's public summary and
    diagnostics), without loading the source or drawing anything. Refuses when public outputs
    exist that the store cannot account for (:func:`~dpcr.release._outputs.check_published`)."""
    from dpcr.release._outputs import check_layout, check_published

    if not settings.store_path.exists():
        raise StoreError(f"no store at {settings.store_path}: run `dpcr run` first")
    check_layout(settings, simulation=simulation)
    with Store(
        settings.store_path,
        fingerprint=settings.fingerprint(),
        mode="simulation" if simulation else "release",
    ) as store:
        check_published(settings, store, simulation=simulation)
        return _stored(settings, store)


def _rerun_unchanged(
    settings: ContinualRelease, store: Store, state: SourceState, clock: int,
    simulation: bool, fingerprint: str | None,
) -> RunResult | None:
    """Nothing new since the last run (same source content, no interval closed since): the
    stored values are the release; nothing is loaded or drawn. None when there is work."""
    if fingerprint is None or not state.records or store.source_fingerprint() != fingerprint:
        return None
    if closed_count(settings.plan.schedule(), clock) > state.interval:
        return None
    stored = _stored(settings, store)
    if not stored.summary:
        return None
    summary = {**stored.summary, "new_intervals": 0, "simulation": simulation,
               "clock": format_timestamp(clock)}
    summary["plan"] = {**summary.get("plan", {}), "new_nodes": 0}
    summary.pop("alerts", None)
    result = dataclasses.replace(stored, summary=summary)
    _publish(settings, store, result, simulation=simulation)
    return result


def run_release(
    settings: ContinualRelease, *, rng: Randomness | None, progress: Progress,
    session: ReleaseSession | None = None,
) -> RunResult:
    """Release every node due by the public clock and not yet released; write the outputs.
    ``session``: the connection and calibration to reuse (:mod:`dpcr.release._session`)."""
    from dpcr.changelog import SqliteSource
    from dpcr.plans.base import MAX_RUN_INTERVALS, METHOD_1_RUN_INTERVALS, run_step
    from dpcr.release._outputs import check_layout, check_published
    from dpcr.svt.pipeline import evaluate_alerts

    started = time.time()
    rng, simulation = resolve_randomness(rng)
    check_source(settings)  # before the store, its state or the operator folder exist
    cal = session.calibration() if session is not None else calibrate(settings)
    plan = settings.plan
    guard = PrivacyFilter(
        epsilon_budget=settings.budget.epsilon, delta_budget=settings.budget.delta
    )

    check_layout(settings, simulation=simulation)  # before anything is written
    progress("open store", 0, 1)
    with (
        Store(
            settings.store_path,
            fingerprint=settings.fingerprint(),
            mode="simulation" if simulation else "release",
        ) as store,
        (session.connection() if session is not None else _connection()) as con,
    ):
        check_published(settings, store, simulation=simulation)
        _spill_to_operator(settings, con)
        state = store.source_state()
        clock = run_clock(settings.until)
        fingerprint: str | None = None
        if state.records:  # (a first run only stores it: taken while the source loads)
            fingerprint = source_fingerprint(settings)
            quick = _rerun_unchanged(settings, store, state, clock, simulation, fingerprint)
            if quick is not None:
                return quick
        taking = _fingerprint_beside(settings) if not state.records else None
        before = state.interval
        closed = closed_count(plan.schedule(), clock)
        limit = METHOD_1_RUN_INTERVALS if store.intervals == "1" else MAX_RUN_INTERVALS
        step, clock = run_step(plan.schedule(), before, closed, clock, limit=limit)
        after = max(step, before)
        nodes = plan.due(before, after)
        lo, hi = plan.base_range(before, after)
        if settings.alerts and after > before:
            lo = min(lo, plan.reporting_base(before + 1)[0])
            hi = max(hi, plan.reporting_base(after)[1])

        # The published rows' intervals depend on the plan alone: computed meanwhile, once a
        # source that Python code reads (a SQLite log) has been read (the two would share the
        # interpreter: the read would wait for the intervals).
        read = threading.Event()
        if not isinstance(settings.source, SqliteSource):
            read.set()
        instances = ledger_instances(store.ledger())
        to_draw = layers_to_draw(cal.layers, instances)  # the store's, where it has them
        warmed = [0, 1]  # thousandths of the intervals computed so far
        warming = _WARMER.submit(_warm_when, read, settings, to_draw, after, store.intervals,
                                 warmed) if after > before else None
        # the end of the last interval this run releases: the next run's t_last
        settle_at = plan.schedule().release_time(after) if after else None
        try:
            data = load_and_aggregate(settings, con, state, store.frozen(), lo=lo, hi=hi,
                                      clock=clock, progress=progress, settle_at=settle_at,
                                      on_read=read.set)  # fmt: skip
        finally:
            read.set()  # (a failed load: the waiting computation ends)
        report, agg, token = data.report, data.aggregates, data.token
        if taking is not None:
            fingerprint = taking.result()
        first = agg.first_interval

        # --- the filter: every event, released and new, BEFORE any draw --------------------
        new_instances = {plan.instance(node) for node in nodes} - instances.keys()
        layers = max([len(cal.layers)] + [lv + 1 for lv, _ in instances])
        layer_events: list[list[DpEvent]] = [[] for _ in range(layers)]
        composed: dict[tuple[int, ...], DpEvent] = {}
        for (layer, _idx), evs in sorted(instances.items()):
            key = tuple(sorted(id(e) for e in evs.values()))
            if key not in composed:
                composed[key] = ComposedEvent(events=tuple(evs.values()))
            layer_events[layer].append(composed[key])
        planned_event = {
            layer: ComposedEvent(events=tuple(events.values()))
            for layer, events in enumerate(to_draw)
        }
        for layer, _idx in new_instances:
            if layer >= len(to_draw):
                raise StoreError(f"layer {layer} is beyond the layers the plan calibrated")
            layer_events[layer].append(planned_event[layer])
        participation = plan.participation(settings.constraint, reporting=after)
        guarantee = guard.check(layer_events, participation, extra=cal.alerts)

        # --- draws ---------------------------------------------------------------------------
        total_draws = max(1, len(nodes) * len(settings.queries))
        drawn = 0
        progress("release", 0, total_draws)
        values: list[ReleasedNode] = []
        ledger_rows: list[NodeEvent] = []
        by_layer: dict[int, list[Node]] = {}
        for node in nodes:
            by_layer.setdefault(node[0], []).append(node)
        for q in settings.queries:
            for layer, layer_nodes in sorted(by_layer.items()):
                event = _discrete(to_draw[layer][q.name])
                exact = plan.exact(agg.values[q.name], first, layer_nodes)
                if simulation:  # a node's noise depends on the seed and the node alone
                    noisy = np.vstack([
                        add_noise(exact[row:row + 1], event, rng.fork(q.name, *node))
                        for row, node in enumerate(layer_nodes)
                    ]) if layer_nodes else exact
                else:
                    noisy = add_noise(exact, event, rng)
                drawn += len(layer_nodes)
                progress("release", drawn, total_draws)
                for row, node in enumerate(layer_nodes):
                    t_lo, t_hi = plan.node_range(node)
                    values.extend(
                        ReleasedNode(layer=node[0], index=node[1], t_lo=t_lo, t_hi=t_hi,
                                     query=q.name, key=key, value=int(noisy[row, k]))
                        for k, key in enumerate(q.keys)
                    )
            entry_of = {
                layer: {**event_to_dict(to_draw[layer][q.name]), "grid": str(q.unit_scale)}
                for layer in {inst[0] for inst in new_instances}
            }
            ledger_rows.extend(
                (lv, idx, q.name, entry_of[lv]) for (lv, idx) in sorted(new_instances)
            )
        progress("release", total_draws, total_draws)

        new_state = SourceState(
            records=report.records, interval=after, t_last=settle_at, digest=token
        )
        summary = _summary(settings, cal, guarantee, after, after - before, simulation,
                           len(nodes), clock)
        summary["waiting_intervals"] = max(0, closed - after)  # for the next runs
        diagnostics = _diagnostics(
            settings, report, agg.report, min_ts=data.min_ts, max_ts=data.max_ts,
            not_yet_due=data.not_yet_due, warnings=data.warnings,
        )
        alert_batch = evaluate_alerts(
            settings, store, _reporting_changes(settings, agg.values, first, before, after),
            before + 1, after - before, rng.fork("alerts", before) if simulation else rng,
        )
        if alert_batch.states:
            summary["alerts"] = alert_batch.summary
        progress("commit", 0, 1)
        store.commit_release(
            values=values,
            events=ledger_rows,
            source=new_state,
            summary={**summary, "operator": diagnostics},
            started=started,
            alerts=alert_batch.commit,
            frozen=report.frozen,
            source_fingerprint=fingerprint,
        )
        progress("commit", 1, 1)
        # the rows' 95 % intervals (computed meanwhile; what is missing, now)
        progress("intervals", 0, 1)
        if warming is not None:
            while not wait([warming], timeout=0.25).done:
                progress("intervals", *warmed)
            with suppress(Exception):  # only a cache: released_rows computes what is missing
                warming.result()
        rows = released_rows(settings, store, after)
        progress("intervals", 1, 1)
        progress("publish", 0, 1)
        result = RunResult(rows=tuple(rows), summary=summary, diagnostics=diagnostics,
                           new_intervals=after - before)
        _publish(settings, store, result, simulation=simulation)
        progress("publish", 1, 1)
        # The incremental state follows the store (a state that lags it is rebuilt from the
        # source), so it moves forward after the release is out.
        if data.settle is not None:
            data.settle(new_state)
    return result


def _spill_to_operator(settings: ContinualRelease, con: duckdb.DuckDBPyConnection) -> None:
    """DuckDB's spill files (raw rows, when a run outgrows memory) go to the owner-only
    ``<output>/operator/duckdb-tmp`` instead of ``.tmp`` in the working directory."""
    from dpcr._sql import lit
    from dpcr.release._outputs import operator_dir

    con.execute(f"SET temp_directory = {lit(str(operator_dir(settings) / 'duckdb-tmp'))}")


def _reporting_changes(
    settings: ContinualRelease, values: dict[str, np.ndarray], first: int, before: int, after: int
) -> dict[str, np.ndarray]:
    """Exact change of every reporting interval ``before+1 .. after`` (what alerts watch)."""
    from dpcr.plans.base import sum_rows

    if not settings.alerts or after <= before:
        return {q.name: np.zeros((0, len(q.keys)), dtype=np.int64) for q in settings.queries}
    ranges = [settings.plan.reporting_base(i) for i in range(before + 1, after + 1)]
    return {q.name: sum_rows(values[q.name], first, ranges) for q in settings.queries}
