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
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, closing, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.engines.base import DataStep
from dpcr.errors import ConfigError
from dpcr.noise import Randomness, require_secure, secure_randomness, table_cache
from dpcr.plans.base import Node
from dpcr.plans.dcr import DisjointRelease
from dpcr.release._calibrate import calibrate
from dpcr.release._draw import check_filter, draw
from dpcr.release._engine import load_and_aggregate, store_head
from dpcr.release._full import aggregate_totals
from dpcr.release._ledger import LedgerCache
from dpcr.release._open import open_step, query_columns
from dpcr.release._outputs import noise_tables, published_rows_at
from dpcr.release._quiet import catch_up, eligible, keep, quiet_step
from dpcr.release._results import RunResult
from dpcr.release._rows import Grown, released_rows, warm_intervals
from dpcr.release._source import check_source
from dpcr.release._stored import publish, rerun_unchanged, stored_result
from dpcr.release._summary import _diagnostics, _summary
from dpcr.store import NodeEvent, OpenBlock, OpenKey, ReleasedNode, SourceState, Store
from dpcr.timeutil import format_timestamp

# DuckDB is imported by the functions that use it: a run that releases nothing new needs no
# engine.
if TYPE_CHECKING:
    import duckdb

    from dpcr.release._calibrate import Calibration
    from dpcr.release._session import Session
    from dpcr.release._settings import Progress, ReleaseSettings

__all__ = [
    "closed_count",
    "exact_columns",
    "exact_release",
    "resolve_randomness",
    "run_clock",
    "run_release",
    "stored_result",
]


#: Computes the intervals of the rows a run will publish while its data step runs.
_WARMER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpcr-intervals")
#: Takes a first run's source fingerprint while its data step runs.
_FINGERPRINT = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpcr-fingerprint")


def _warm_when(read: threading.Event, settings: ReleaseSettings, layers: Any,
               rows: tuple[int, int], method: str, done: list[int]) -> None:  # fmt: skip
    """:func:`warm_intervals` of ``rows`` (first, n) once ``read`` is set; ``done``: [part,
    whole] as it goes."""
    read.wait()

    def note(part: int, whole: int) -> None:
        done[:] = [part, whole]  # (read by the run's thread, which reports it)

    warm_intervals(settings, layers, rows[1], method, done=note, first=rows[0])


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


@contextmanager
def private_output(settings: ReleaseSettings) -> Iterator[ReleaseSettings]:
    """``settings`` with a private temporary output folder and store path, deleted on exit: for
    reading the changelog without writing into the release's folder or the store's state
    (set-aside copies, quarantined records, a line file's block digests), as an audit or a
    report's exact values do."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dpcr-aside-") as scratch:
        yield dataclasses.replace(settings, output_dir=Path(scratch),
                                  store=Path(scratch) / "store.sqlite")  # fmt: skip


@contextmanager
def _connection(settings: ReleaseSettings) -> Iterator[duckdb.DuckDBPyConnection]:
    from dpcr.release._session import open_connection

    con = open_connection(settings.engine.memory_limit)
    try:
        yield con
    finally:
        con.close()


def exact_release(
    settings: ReleaseSettings, con: duckdb.DuckDBPyConnection, *, table: str, reporting: int,
    progress: Any = None,
) -> dict[str, np.ndarray]:
    """With the noise switched off: the exact value of every node of the first ``reporting``
    intervals, per query (rows in the order of ``plan.due(0, reporting)``), through the same
    bounding, aggregation and linear map as a release. For audits, tests and a simulation's
    report; ``progress(done, total)`` as in :func:`dpcr.engines.duckdb.aggregate`."""
    return exact_columns(settings, con, table=table, reporting=reporting, progress=progress)[0]


def exact_columns(
    settings: ReleaseSettings, con: duckdb.DuckDBPyConnection, *, table: str, reporting: int,
    progress: Any = None,
) -> tuple[dict[str, np.ndarray], dict[str, tuple[str, ...]]]:
    """:func:`exact_release` and, per query, the key of each column: its declared keys, then
    (an open histogram) every candidate key the data holds."""
    plan = settings.plan
    nodes = plan.due(0, reporting)
    lo, hi = plan.base_range(0, reporting)
    agg = aggregate_totals(settings, con, table=table, lo=lo, hi=hi, exclude_late=None,
                     progress=progress)  # fmt: skip
    values = {q.name: plan.exact(agg.values[q.name], agg.first_interval, nodes)
              for q in settings.queries}  # fmt: skip
    return values, {q.name: query_columns(q, agg.candidates) for q in settings.queries}


def source_fingerprint(
    settings: ReleaseSettings, ready: threading.Event | None = None
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


def _fingerprint_beside(settings: ReleaseSettings) -> Future[str | None]:
    """:func:`source_fingerprint` taken in a thread beside what follows (a log's count is a
    scan of it), once the content it describes is fixed: a load begun after this returns sees
    at least that content, as when the fingerprint is taken first."""
    ready = threading.Event()
    future = _FINGERPRINT.submit(source_fingerprint, settings, ready)
    ready.wait()
    return future


@dataclasses.dataclass(frozen=True, slots=True)
class RunWindow:
    """What a run releases, from the public clock and the store alone: reporting intervals
    ``before + 1 .. after`` (of ``closed`` by ``clock``), their due ``nodes``, the base
    intervals ``lo .. hi`` the data step totals, and ``settle_at``, the end of the last
    interval released (the next run's ``t_last``)."""

    before: int
    closed: int
    after: int
    clock: int
    nodes: list[Node]
    lo: int
    hi: int
    settle_at: int | None


def run_window(settings: ReleaseSettings, before: int, clock: int, *,
               method: str = "2") -> RunWindow:
    """The :class:`RunWindow` of a run with the public clock at ``clock`` after runs that
    released ``before`` reporting intervals (a long backlog goes in steps: ``run_step``, of at
    most ``METHOD_1_RUN_INTERVALS`` for a store whose interval ``method`` is ``"1"``)."""
    from dpcr.plans.base import MAX_RUN_INTERVALS, METHOD_1_RUN_INTERVALS, run_step

    plan = settings.plan
    closed = closed_count(plan.schedule(), clock)
    limit = METHOD_1_RUN_INTERVALS if method == "1" else MAX_RUN_INTERVALS
    step, clock = run_step(plan.schedule(), before, closed, clock, limit=limit)
    after = max(step, before)
    lo, hi = plan.base_range(before, after)
    if settings.alerts and after > before:
        lo = min(lo, plan.reporting_base(before + 1)[0])
        hi = max(hi, plan.reporting_base(after)[1])
    settle_at = plan.schedule().release_time(after) if after else None
    return RunWindow(before, closed, after, clock, plan.due(before, after), lo, hi, settle_at)


def run_release(
    settings: ReleaseSettings, *, rng: Randomness | None, progress: Progress,
    session: Session | None = None,
) -> RunResult:
    """Release every node due by the public clock and not yet released; write the outputs.
    ``session``: the connection and calibration to reuse (:mod:`dpcr.release._session`).

    The steps: check the source and the layout (:func:`_check_before_store`); open the store;
    the window of this run (:func:`run_window`); the data step (:func:`_data_step`, or without
    an engine when the source holds nothing new, :func:`~dpcr.release._quiet.quiet_step`); the
    filter over every event and the draws (:func:`_draws`); one commit (:func:`_commit`); the
    published rows and their intervals (:func:`_rows`), the outputs; the incremental state
    moves forward last."""
    from dpcr.release._layout import check_published

    started = time.time()
    rng, simulation = resolve_randomness(rng)
    cal = _check_before_store(settings, simulation, session)
    progress("open store", 0, 1)
    mode = "simulation" if simulation else "release"
    with (
        (session.store(mode) if session is not None else
         Store(settings.store_path, fingerprint=settings.fingerprint(), mode=mode)) as store,
        ExitStack() as stack,
    ):
        found = check_published(settings, store, simulation=simulation)
        state = store.source_state()
        clock = run_clock(settings.until)
        fingerprint: str | None = None
        if state.records:  # (a first run only stores it: taken while the source loads)
            fingerprint = source_fingerprint(settings)
            quick = rerun_unchanged(settings, store, state, clock, simulation, fingerprint)
            if quick is not None:
                return quick
        if cal is None:
            cal = calibrate(settings)
        taking = _fingerprint_beside(settings) if not state.records else None
        window = run_window(settings, state.interval, clock, method=store.intervals)
        # the store's events where it has them (a session's: the ledger it committed last)
        ledger = session.ledger if session is not None else LedgerCache()
        instances, to_draw = ledger.read(store, cal.layers)
        warmed = [0, 1]  # thousandths of the intervals computed so far
        # (a source with nothing past the store's position: no engine, dpcr.release._quiet)
        quiet = quiet_step(settings, store, state, window, progress) if not session else None
        data, warming = (quiet, None) if quiet is not None else _data_step(
            settings, stack, store, state, window, (to_draw, warmed), progress, session)
        if taking is not None:
            fingerprint = taking.result()
        run = _Run(settings, store, window, rng, simulation, progress, session)
        drawn = _draws(run, cal, data, instances, to_draw, ledger.layer_events())
        result, new_state, head_before = _commit(run, cal, data, drawn, started=started,
                                                 fingerprint=fingerprint)  # fmt: skip
        result = _rows(run, result, drawn, head_before, (warming, warmed))
        progress("publish", 0, 1)
        publish(settings, store, result, simulation=simulation,
                since=(head_before, window.before), found=found)
        progress("publish", 1, 1)
        # The incremental state follows the store (a state that lags it is rebuilt from the
        # source), so it moves forward after the release is out.
        if data.settle is not None:
            data.settle(store_head(new_state))
    return result


def _check_before_store(
    settings: ReleaseSettings, simulation: bool, session: Session | None
) -> Calibration | None:
    """What is refused before a store, its state or the operator folder exist: a missing
    source, a calibration that fails (a first run's; with a store, a run that releases nothing
    new needs none), a layout that is not the release's. Returns the calibration when it was
    needed or the session holds it."""
    from dpcr.release._layout import check_layout

    check_source(settings)
    cal = session.calibration() if session is not None else None
    if cal is None and not settings.store_path.exists():
        cal = calibrate(settings)
    if session is None or session.layout_unchecked(simulation):
        check_layout(settings, simulation=simulation)  # before anything is written
    return cal


@dataclasses.dataclass(frozen=True, slots=True)
class _Run:
    """What the steps of one run after its data step share."""

    settings: ReleaseSettings
    store: Store
    window: RunWindow
    rng: Randomness
    simulation: bool
    progress: Progress
    session: Session | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Drawn:
    """What the filter and the draws gave: the guarantee, the released values (this run's and,
    for open histograms, the earlier intervals' of the keys selected now), the ledger rows and
    the open keys and blocks to store."""

    guarantee: Any
    values: list[ReleasedNode]
    ledger_rows: list[NodeEvent]
    open_keys: list[OpenKey]
    open_blocks: list[OpenBlock]


def _draws(run: _Run, cal: Calibration, data: DataStep, instances: Any, to_draw: Any,
           stored: list[list[Any]]) -> _Drawn:  # fmt: skip
    """The filter over every event of the run (nothing is drawn when it refuses), then the
    draws of the due nodes and of the open histograms' keys. ``stored``: the released
    instances' events per layer (:meth:`LedgerCache.layer_events`)."""
    settings, window = run.settings, run.window
    opened = {settings.plan.instance(node) for node in window.nodes} - instances.keys()
    guarantee = check_filter(settings, cal, window.nodes, window.after, instances, opened,
                             to_draw, stored=stored)  # fmt: skip
    with table_cache(noise_tables(settings)):
        values, ledger_rows, drawn = draw(settings, window.nodes, data.aggregates, to_draw,
                                          opened, rng=run.rng, simulation=run.simulation,
                                          progress=run.progress)  # fmt: skip
        # (open histograms: the rows of the keys selected, their records, the values)
        earlier, open_keys, blocks = open_step(
            settings, run.store, data.aggregates, window.before, window.after, drawn,
            instances, to_draw, rng=run.rng, simulation=run.simulation,
        )  # fmt: skip
    return _Drawn(guarantee, values + earlier, ledger_rows, open_keys, blocks)


def _rows(run: _Run, result: RunResult, drawn: _Drawn, head_before: Any,
          warm: tuple[Future[None] | None, list[int]]) -> RunResult:  # fmt: skip
    """``result`` with the published rows and their 95 % intervals (computed meanwhile,
    ``warm``: the computation and [part, whole] of it done; what is missing, now)."""
    settings, progress, (warming, warmed) = run.settings, run.progress, warm
    progress("intervals", 0, 1)
    if warming is not None:
        while not wait([warming], timeout=0.25).done:
            progress("intervals", *warmed)
        with suppress(Exception):  # only a cache: released_rows computes what is missing
            warming.result()
    grown = Grown(head=head_before, n=run.window.before, values=drawn.values,
                  ledger=drawn.ledger_rows,
                  published=lambda: published_rows_at(settings, head_before, run.simulation))
    rows = released_rows(settings, run.store, run.window.after, grown=grown)
    progress("intervals", 1, 1)
    return dataclasses.replace(result, rows=tuple(rows))


def _data_step(
    settings: ReleaseSettings, stack: ExitStack, store: Store, state: SourceState,
    window: RunWindow, warm: tuple[Any, list[int]], progress: Progress,
    session: Session | None,
) -> tuple[DataStep, Future[None] | None]:
    """The data step of the run in the engine's connection (a session's, or one of its own
    that ``stack`` closes), with the intervals of the rows it will publish computed
    meanwhile (they depend on the plan alone), once a source that Python code reads (a
    SQLite log) has been read (the two would share the interpreter: the read would wait for
    the intervals). ``warm``: the nodes to draw, and [part, whole] of the intervals computed
    so far. A state that steps without an engine left behind is brought forward first, and a
    run of its own keeps the summary of the state it leaves (:mod:`dpcr.release._quiet`)."""
    from dpcr.changelog import SqliteSource

    # the engine's connection (DuckDB is imported only by a run that reads the source)
    con = stack.enter_context(session.connection() if session is not None
                              else _connection(settings))  # fmt: skip
    if session is None or session.spill_unset():  # (a setting of the connection's database)
        _spill_to_operator(settings, con)
    frozen = store.frozen()
    catch_up(settings, con, state, frozen, session.held if session is not None else None,
             progress)  # fmt: skip
    read = threading.Event()
    if not isinstance(settings.source, SqliteSource):
        read.set()
    after, (to_draw, warmed) = window.after, warm
    # (a session's earlier steps computed the intervals of the rows they published, and
    # those of the rows after them: Session.intervals_to_warm)
    rows: tuple[int, int] | None = (0, after) if after > window.before else None
    if session is not None and rows is not None:
        rows = session.intervals_to_warm(window.before, after, store.intervals, to_draw)
    warming = _WARMER.submit(_warm_when, read, settings, to_draw, rows, store.intervals,
                             warmed) if rows is not None else None
    try:
        data = load_and_aggregate(settings, con, state, frozen,
                                  span=(window.lo, window.hi), clock=window.clock,
                                  progress=progress, settle_at=window.settle_at,
                                  on_read=read.set,
                                  held=session.held if session else None)  # fmt: skip
    finally:
        read.set()  # (a failed load: the waiting computation ends)
    if session is None and data.settle is None:
        # (the run's own DuckDB database is done with: closing it returns its memory, the
        # loaded changelog's, before the draws; DuckDB keeps dropped tables' memory)
        con.close()
    elif session is None and data.settle is not None and eligible(settings):
        data = dataclasses.replace(data, settle=keep(settings, con, data.settle))
    return data, warming


def _commit(
    run: _Run, cal: Calibration, data: DataStep, drawn: _Drawn, *, started: float,
    fingerprint: str | None,
) -> tuple[RunResult, SourceState, Any]:
    """The run's summary, diagnostics and alert answers, committed with the drawn values, the
    ledger rows and the source's new state in one transaction. Returns the result (without
    rows: read back from the store), the new source state and the store's head before the
    commit."""
    from dpcr.svt.pipeline import evaluate_alerts

    settings, store, window, rng = run.settings, run.store, run.window, run.rng
    before, after, agg, report = window.before, window.after, data.aggregates, data.report
    run.progress("commit", 0, 1)
    head_before = store.recorded_head()
    new_state = SourceState(
        records=report.records, interval=after, t_last=window.settle_at, digest=data.token
    )
    summary = _summary(settings, cal, drawn.guarantee, after, after - before, run.simulation,
                       len(window.nodes), window.clock)  # fmt: skip
    summary["waiting_intervals"] = max(0, window.closed - after)  # for the next runs
    diagnostics = _diagnostics(
        settings, report, agg.report, min_ts=data.min_ts, max_ts=data.max_ts,
        not_yet_due=data.not_yet_due, warnings=data.warnings,
    )
    if agg.candidates:  # (exact: operator-only)
        diagnostics["open_keys"] = {q: len(keys) for q, keys in agg.candidates.items()}
    alert_batch = evaluate_alerts(
        settings, store,
        _reporting_changes(settings, agg.values, agg.first_interval, before, after),
        before + 1, after - before, rng.fork("alerts", before) if run.simulation else rng,
    )  # fmt: skip
    if alert_batch.states:
        summary["alerts"] = alert_batch.summary
    store.commit_release(
        values=drawn.values,
        events=drawn.ledger_rows,
        source=new_state,
        summary={**summary, "operator": diagnostics},
        started=started,
        alerts=alert_batch.commit,
        frozen=report.frozen,
        source_fingerprint=fingerprint,
        open_keys=drawn.open_keys,
        open_blocks=drawn.open_blocks,
    )
    if run.session is not None:
        run.session.ledger.committed(store.recorded_head(), drawn.ledger_rows)
    run.progress("commit", 1, 1)
    result = RunResult(rows=(), summary=summary, diagnostics=diagnostics,
                       new_intervals=after - before)  # fmt: skip
    return result, new_state, head_before


def _spill_to_operator(settings: ReleaseSettings, con: duckdb.DuckDBPyConnection) -> None:
    """DuckDB's spill files (raw rows, when a run outgrows memory) go to the owner-only
    ``<output>/operator/duckdb-tmp`` instead of ``.tmp`` in the working directory."""
    from dpcr._sql import lit
    from dpcr.release._outputs import operator_dir

    con.execute(f"SET temp_directory = {lit(str(operator_dir(settings) / 'duckdb-tmp'))}")


def _reporting_changes(
    settings: ReleaseSettings, values: dict[str, np.ndarray], first: int, before: int, after: int
) -> dict[str, np.ndarray]:
    """Exact change of every reporting interval ``before+1 .. after`` (what alerts watch)."""
    from dpcr.plans.base import sum_rows

    if not settings.alerts or after <= before:
        return {q.name: np.zeros((0, len(q.keys)), dtype=np.int64) for q in settings.queries}
    ranges = [settings.plan.reporting_base(i) for i in range(before + 1, after + 1)]
    return {q.name: sum_rows(values[q.name], first, ranges) for q in settings.queries}
