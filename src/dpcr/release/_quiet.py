"""A step whose source holds nothing past what the store consumed: its data step without an
engine.

A line file read by position (:func:`eligible`) that has not grown since the last run, whose
incremental state keeps no pending mutation, gives every new interval what the state alone
gives (:func:`dpcr.engines.duckdb_incremental._unchanged`): its settled totals, zero after them,
its counters as the reports. That step needs only what the state holds, which
is a few numbers; opening the state (and importing DuckDB to do so) is most of its cost. So
each run that leaves the state at rest also keeps a summary of it beside the state
(``<store>.state/quiet.json``, :func:`keep`): its head, its counters, its totals of settled
base intervals and an open histogram's candidate keys, and what the quarantine file held. A run
then takes this path (:func:`quiet_step`) only when all of these hold, and reads the source
otherwise:

* no session (a session's step runs from what it holds);
* the store's source state is the summary's head (records, interval, position) under the same
  configuration fingerprint, and the state kept no pending mutation;
* the source file is exactly as long as the consumed bytes, which end a line, and the check of
  the consumed bytes that a run reading past the position makes passes
  (:func:`dpcr.changelog.position.nothing_past`: the same blocks, the same digests moving on);
* with ``on_error = "quarantine"``, the quarantine file is the one the summary found equal to
  the state's quarantined lines (same size, inode and times): the file a run would write (a
  step that quarantined no new line is not read again to find it so: :func:`_quarantine`).

The released values, the ledger, the draws and the outputs then follow as after any data step;
the path changes what a run costs, never what it publishes (``tests/release/test_quiet_step.py``
runs every constraint kind, unit mode, plan and query kind both ways and compares every byte).

Such a step leaves the state file as it is, while a step through the state would have written
the new head there (and advanced its seed version). The summary records that the state file
lags, by how many steps, and the next run that opens the state brings its head forward first
(:func:`catch_up`), as those steps would have; a lost or stale summary only costs one read of
the whole source (the state is rebuilt).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcr.engines.base import DataStep
from dpcr.release._engine import release_times, release_times_through
from dpcr.release._outputs import (
    clear_scratch,
    quiet_path,
    scratch_dir,
    source_blocks,
    state_path,
)

if TYPE_CHECKING:
    import duckdb

    from dpcr.engines.base import StoreHead
    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import SourceState, Store

__all__ = ["catch_up", "eligible", "keep", "quiet_step"]

#: The summary's format (another is ignored).
FORMAT = "quiet1"
#: Rows of totals, clamps and candidate keys up to which a state is summarised; a larger one
#: is read through the engine (the summary would cost more to write at every run than it saves).
MAX_ROWS = 20_000
#: The fields of a state head, in the order the summary keeps them.
_HEAD = ("records", "interval", "token", "lines", "explicit", "fingerprint", "columns_ok")


def eligible(settings: ReleaseSettings) -> bool:
    """Whether a run of ``settings`` keeps the DuckDB engine's incremental state (the state this
    module summarises): DuckDB reads a line file by position, as
    :func:`dpcr.engines.duckdb_incremental.eligible` decides (that module imports DuckDB, which
    a step through this module never does)."""
    from dpcr.changelog import DebeziumSource, JsonlSource, Wal2jsonSource
    from dpcr.queries import Exhausted

    return (
        settings.engine.name == "duckdb"
        and isinstance(settings.source, JsonlSource | DebeziumSource | Wal2jsonSource)
        and settings.on_exhausted != "retire"
        and not any(isinstance(q, Exhausted) for q in settings.queries)
    )


def quiet_step(settings: ReleaseSettings, store: Store, state: SourceState, window: Any,
               progress: Any) -> DataStep | None:  # fmt: skip
    """The data step of a run that reads nothing (see the module docstring) for base intervals
    ``window.lo .. window.hi`` (a :class:`dpcr.release._loop.RunWindow`), or None when the run
    reads the source."""
    from dpcr.changelog.position import SourceRewritten, nothing_past
    from dpcr.engines.state import frozen_points, kept_totals, state_load_report

    if not state.records or not eligible(settings):
        return None
    summary = _read(settings)
    if summary is None or not _current(settings, summary, state):
        return None
    counts: dict[str, int] = summary["counters"]
    if counts.get("records", 0) < state.records:
        return None  # (a source that lost records: the read refuses it)
    path = Path(str(getattr(settings.source, "path", "")))
    progress("load changelog", 0, 1)
    try:
        position = nothing_past(path, state.digest, blocks=source_blocks(settings))
    except (SourceRewritten, OSError):
        return None  # (the read reports it)
    if position is None:
        return None
    progress("load changelog", 1, 1)
    clear_scratch(settings)  # (what a killed run left, as a read clears it)
    settled = _settled(settings, state, window)
    lo, hi = max(1, min(window.lo, window.hi + 1)), window.hi
    aggregates = kept_totals(counts, _kept_rows(summary), queries=settings.queries,
                             constraint=settings.constraint, span=(lo, hi, settled))  # fmt: skip
    report = state_load_report(
        settings.source, counts,
        settings.quarantine_path if settings.on_error == "quarantine" else None,
        frozen=frozen_points(store.frozen()),
    )  # fmt: skip

    def settle(new_state: StoreHead) -> None:
        head = dict(summary["head"], records=new_state.records, interval=new_state.interval,
                    token=new_state.token)  # fmt: skip
        with _optional(settings):
            _write(settings, {**summary, "head": head, "lag": int(summary["lag"]) + 1})

    return DataStep(report, aggregates, counts.get("min_ts"), counts.get("max_ts"), 0,
                    position.token, settle)  # fmt: skip


def _current(settings: ReleaseSettings, summary: dict[str, Any], state: SourceState) -> bool:
    """Whether ``summary`` describes the state at the store's ``state``, at rest, under this
    configuration, with the quarantine file as the state would write it."""
    head = summary["head"]
    if (head["records"], head["interval"], head["token"], head["fingerprint"]) != (
        state.records, state.interval, state.digest, settings.fingerprint()
    ) or summary["pending"]:  # fmt: skip
        return False
    if settings.on_error != "quarantine":
        return True
    return summary["quarantine"] is not None and _stat(settings.quarantine_path) == summary[
        "quarantine"]  # fmt: skip


def _settled(settings: ReleaseSettings, state: SourceState, window: Any) -> int:
    """The base intervals that end by the end of the last released interval (``t_last``), as
    the data step through the state counts them (:func:`dpcr.release._engine.engine_run`'s
    release times)."""
    import bisect

    if state.t_last is None:
        return 0
    grid = settings.plan.base_grid()
    times = release_times_through(grid, release_times(grid, window.hi),
                                  (state.t_last, window.settle_at))  # fmt: skip
    return bisect.bisect_right(times, state.t_last)


def _kept_rows(summary: dict[str, Any]) -> Any:
    """The :data:`dpcr.engines.state.KeptRows` of the state the summary describes."""

    def rows(table: str, q: int, lo: int, first: int, hi: int) -> list[Any]:
        if table == "okeys":  # (kept as (q, key, iv))
            return [(key, iv) for qi, key, iv in summary["okeys"] if qi == q]
        return [r[1:] for r in summary[table] if r[0] == q and lo <= r[1] < first and r[1] <= hi]

    return rows


def keep(settings: ReleaseSettings, con: duckdb.DuckDBPyConnection,
         settle: Callable[[StoreHead], None]) -> Callable[[StoreHead], None]:  # fmt: skip
    """``settle`` (a data step's, through the state attached to ``con``), then the summary of
    the state it left for the next runs (removed when the state cannot be summarised: it keeps
    pending mutations, or too many rows)."""

    def settled(new_state: StoreHead) -> None:
        import duckdb

        settle(new_state)
        with _optional(settings, duckdb.Error):
            summary = _summarise(settings, con)
            if summary is None:
                quiet_path(settings).unlink(missing_ok=True)
            else:
                _write(settings, summary)

    return settled


@contextmanager
def _optional(settings: ReleaseSettings, *more: type[Exception]) -> Iterator[None]:
    """The summary is written after the release is out: a failure to write it (a full disk)
    removes it, and the next run reads the source (a summary that names an older head is
    never used); the operator is told, with the file and what is safe to do."""
    import logging

    from dpcr.errors import DpcrError

    caught: tuple[type[Exception], ...] = (OSError, DpcrError, *more)
    try:
        yield
    except caught as exc:
        path = quiet_path(settings)
        with suppress(OSError):
            path.unlink(missing_ok=True)
        logging.getLogger("dpcr").warning(
            f"warning: the summary of the incremental state, {path}, could not be written "
            f"({exc}); the release is out and unaffected, and the next run reads the source "
            "instead of it (free space if the disk is full; nothing else to do)"
        )


def _summarise(settings: ReleaseSettings, con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    """The summary of the state attached to ``con``, or None."""
    from dpcr.engines.state import SCHEMA, counters, fetch, nothing_pending, read_head

    head = read_head(con)
    if head is None or not nothing_pending(con):
        return None
    s = SCHEMA
    sizes = fetch(con, "SELECT " + ", ".join(f"(SELECT count(*) FROM {s}.{t})"
                                             for t in ("totals", "clamps", "okeys", "ototals")))
    if sum(sizes[0]) > MAX_ROWS:
        return None
    at_rest = {name: getattr(head, name) for name in _HEAD}
    quarantine, qlines = (_quarantine(settings, con, at_rest)
                          if settings.on_error == "quarantine" else (None, None))  # fmt: skip
    return {
        "format": FORMAT, "head": at_rest, "state_head": at_rest, "lag": 0, "pending": False,
        "counters": counters(con), "quarantine": quarantine, "qlines": qlines,
        "totals": fetch(con, f"SELECT q, iv, key, value FROM {s}.totals"),
        "clamps": fetch(con, f"SELECT q, iv, n FROM {s}.clamps"),
        "okeys": fetch(con, f"SELECT q, key, iv FROM {s}.okeys"),
        "ototals": fetch(con, f"SELECT q, iv, key, value FROM {s}.ototals"),
    }  # fmt: skip


def _quarantine(settings: ReleaseSettings, con: duckdb.DuckDBPyConnection,
                head: dict[str, Any]) -> tuple[Any, Any]:  # fmt: skip
    """(the quarantine file's :func:`_stat` when it holds the quarantined lines of the state
    attached to ``con`` (at ``head``), else None; what shows those lines: [how many, their
    SHA-256]).

    Every step through the state writes the file from those lines. One that quarantined no new
    line since the summary it replaces (the same number of lines under the same configuration:
    lines are only ever added, and a rebuild of the state reads the same records) wrote the
    lines that summary found in the file: when it found them there and the file has the size
    it had, neither is read again (a step costs what is new, not the quarantine's history);
    otherwise both are hashed and compared."""
    import hashlib

    from dpcr.engines.state import SCHEMA, fetch

    path = settings.quarantine_path
    (n,) = fetch(con, f"SELECT count(*) FROM {SCHEMA}.qlines")[0]
    before, stat = _read(settings), _stat(path)
    if (before is not None and before.get("qlines") and before["qlines"][0] == n
            and before["head"]["fingerprint"] == head["fingerprint"]
            and before["quarantine"] is not None and stat is not None
            and stat[0] == before["quarantine"][0]):  # fmt: skip
        return stat, before["qlines"]
    lines = con.execute(f"SELECT line FROM {SCHEMA}.qlines ORDER BY record, part")
    h = hashlib.sha256()
    while rows := lines.fetchmany(10_000):
        h.update("".join(r[0] for r in rows).encode())
    kept = [n, h.hexdigest()]
    if stat is not None and hashlib.sha256(path.read_bytes()).digest() == h.digest():
        return stat, kept
    return None, kept


def catch_up(settings: ReleaseSettings, con: duckdb.DuckDBPyConnection, state: SourceState,
             frozen: tuple[tuple[str, str, int], ...] = (), held: Any = None,
             progress: Any = None) -> None:  # fmt: skip
    """Before a step through the state: bring a state file that lags the store level with it
    when what it lacks can be shown, so that the step continues it instead of rebuilding it
    from the whole source. Steps that read nothing (the summary counts them, and the store is
    where they left it): the head they would have written, its seed version advanced once per
    step, as :func:`dpcr.engines.state.settle_unchanged` does. Steps that a session ran from
    memory and never wrote (it was killed): one settle of the lines they read
    (:func:`dpcr.engines.duckdb_replay.replay`; ``frozen``: the store's freeze points), then
    held by the session's ``held`` state (``progress``: told as the stage "replay state").
    Anything else is left to the step, which rebuilds the state. Nothing is done while
    ``held`` holds the state (its steps are not written yet)."""
    import duckdb

    from dpcr.engines import state as inc_state

    if not state.records or not eligible(settings) or (held is not None and held.holds()):
        return
    summary = _read(settings)
    if summary is None or not summary["lag"] or not _names(summary["head"], state, settings):
        summary = None
        if frozen or state.t_last is None or not _replayable(settings, state):
            return
    if not state_path(settings).exists():
        return
    try:
        inc_state.attach(con, state_path(settings), fresh=False)
        was = inc_state.read_head(con)
    except duckdb.Error:
        return  # (the step reads it, and tells)
    if was is None or _names({name: getattr(was, name) for name in _HEAD}, state, settings):
        return
    if summary is None:
        _replay(settings, con, state, was, held, progress or (lambda *_: None))
        return
    if [getattr(was, name) for name in _HEAD] != [summary["state_head"][name] for name in _HEAD]:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        c = inc_state.counters(con)
        c["version"] = c.get("version", 0) + int(summary["lag"])
        inc_state.write_head(con, c, inc_state.StateHead(**summary["head"]))
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _names(head: dict[str, Any], state: SourceState, settings: ReleaseSettings) -> bool:
    """Whether a state head (its fields) names the store's source ``state`` under this
    configuration."""
    return (head["records"], head["interval"], head["token"], head["fingerprint"]) == (
        state.records, state.interval, state.digest, settings.fingerprint())  # fmt: skip


def _replayable(settings: ReleaseSettings, state: SourceState) -> bool:
    """Whether the release's steps can run from memory (those a killed session may not have
    written: :func:`dpcr.engines.duckdb_memory.accepts`)."""
    from dpcr.engines.duckdb_memory import accepts
    from dpcr.release._engine import engine_request

    return accepts(engine_request(settings, state))


def _replay(settings: ReleaseSettings, con: duckdb.DuckDBPyConnection, state: SourceState,
            was: Any, held: Any, progress: Any) -> None:  # fmt: skip
    """:func:`catch_up` of a state whose head ``was`` is behind the store's by steps from
    memory; the store has no freeze point."""
    import duckdb

    from dpcr.engines.duckdb_replay import replay
    from dpcr.release._engine import engine_request, release_times, store_head

    if state.t_last is None or was.interval > state.interval:
        return
    plan = settings.plan
    t_old = plan.schedule().release_time(was.interval) if was.interval else None
    times = release_times(plan.base_grid(), plan.base_range(0, state.interval)[1])
    if not times or times[-1] < state.t_last:
        return
    progress("replay state", 0, 1)
    try:
        got = replay(engine_request(settings, state), con, store_head(state), times=times,
                     t_last_old=t_old, fingerprint=settings.fingerprint(),
                     blocks=source_blocks(settings),
                     scratch=lambda: scratch_dir(settings))  # fmt: skip
    except duckdb.Error:
        return  # (its write rolled back: the step rebuilds the state, and tells what failed)
    finally:
        progress("replay state", 1, 1)
    if got is not None and held is not None:
        held.adopt(got)


def _stat(path: Path) -> list[int] | None:
    """What shows a file rewritten: its size, inode and modification and change times."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]


def _read(settings: ReleaseSettings) -> dict[str, Any] | None:
    """The summary beside the state (None: none, or not one this version wrote)."""
    from dpcr._fs import read_nofollow
    from dpcr.errors import OutputError

    try:
        summary = json.loads(read_nofollow(quiet_path(settings)))
    except (OutputError, OSError, ValueError):
        return None
    if not isinstance(summary, dict) or summary.get("format") != FORMAT:
        return None
    return summary


def _write(settings: ReleaseSettings, summary: dict[str, Any]) -> None:
    """Keep ``summary`` (owner-only, in the state's owner-only folder; replaced atomically)."""
    from dpcr._fs import ensure_dir, write_atomic

    path = quiet_path(settings)
    ensure_dir(path.parent, 0o700)
    write_atomic(path, json.dumps(summary, separators=(",", ":")), mode=0o600, durable=False)
