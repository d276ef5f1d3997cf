"""The data step of a long-running session from what it holds in memory.

A long-running session (``dpcr follow``, ``release.session()``) runs a step every time an
interval closes. The SQL data step (:mod:`dpcr.engines.duckdb_incremental`) costs
about a hundred DuckDB statements whatever the step reads. A session instead keeps the newest
seed of every unit of the incremental state (its settled rows ``n``, the last f of each query,
its last insert or delete) in numpy columns keyed by integer ids, and runs the common step in
Python and numpy: the new lines parsed once, bounded and aggregated, and after the store commits
the held seeds, totals and counters moved forward. The rows the SQL step's settle would append
to the state file are kept and written in one transaction every :data:`WRITE_STEPS` steps, before
a step that reads the state file, and when the session closes or a run fails
(:meth:`HeldState.settled`, :func:`~dpcr.engines.duckdb_held.write_held`): the state file is then
what SQL steps leave, which a fresh process, ``dpcr run``, continues from. A session killed with
steps not yet written leaves a state behind the store, which the next run brings to the
store's head by one settle of the lines those steps read (:mod:`dpcr.engines.duckdb_replay`),
or, when that cannot be shown, rebuilds from the source (one read of the whole file),
releasing the same.

It takes the releases :func:`~dpcr.engines.memory_sources.accepts` names. A step runs here
only when every new line is plain: of a JSON-lines source, a JSON object with only the fields
entry (an integer or printable text), ts (an epoch integer), op (``insert``, ``update`` or
``delete``), before and after (objects, or null where the op has none), summed values that are
finite JSON numbers or null or missing, no repeated key; of wal2json, a line
:mod:`dpcr.engines._wal2json` reads (of Debezium, one :mod:`dpcr.engines._debezium` reads),
with no (entry, LSN) of the state's or the step's twice; dated after the last released interval
and (of JSON lines) by the end of the interval this step releases; each mutation
valid given its entry's history. Anything else -- a blank, long or malformed line, a late or
quarantined record, a pending JSON-lines record, freeze points, a state not at the
store's head -- takes the SQL step, from the state file written first with the steps it lacks.

Of wal2json and Debezium, the records dated after the interval a step releases (pending: what a live
capture has written past it) are held (:class:`~dpcr.engines.duckdb_held.Later`) and judged
again with the next step's records, as the SQL step re-judges its table ``pending``; only the
rows dated by the interval settle. The state file's table ``pending`` is then written with the
texts DuckDB's staging of their lines gives (:func:`~dpcr.engines.duckdb_held.write_held`),
and the rows a SQL step left there are held when their lines, parsed again, give them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.changelog.position import HeldPosition
from dpcr.engines import _wal2json
from dpcr.engines.base import DataStep
from dpcr.engines.duckdb_held import (
    Batch,
    Bounded,
    Carried,
    Held,
    Later,
    StepWindow,
    interval_values,
    read_held,
    settle_held,
    write_held,
)
from dpcr.engines.memory_batch import parse, read_batch
from dpcr.engines.memory_sources import accepts, explicit
from dpcr.engines.step import refuse_lost_records

if TYPE_CHECKING:
    import duckdb

    from dpcr.engines.base import AggregateRequest, EngineRun, StoreHead

__all__ = [
    "HeldState", "StepRead", "StepWindow", "accepts", "bound", "data_step", "new_lines", "parse",
    "read_batch",
]  # fmt: skip

#: A session writes the steps it settled from memory to the state file once this many have
#: gathered, or their seed rows this many (:meth:`HeldState.settled`).
WRITE_STEPS = 128
WRITE_ROWS = 1 << 19


def new_lines(path: Path, consumed: int, size: int) -> bytes | None:
    """The bytes of the file at ``path`` from ``consumed`` to ``size``, or None when the
    consumed bytes did not end a line (the byte before them is read to tell)."""
    with open(path, "rb") as f:
        if consumed:  # (the byte before them read alone: no copy of the new bytes after it)
            f.seek(consumed - 1)
            if f.read(1) != b"\n":
                return None
        return f.read(size - consumed)


class HeldState:
    """What a session holds of the incremental state (module docstring); empty until a step
    reads it, and emptied whenever the SQL step, or a failure, moved the state. The steps it
    settles are written to the state file in batches (:meth:`settled`), and before it is
    emptied (:meth:`forget`)."""

    def __init__(self) -> None:
        self._held: Held | None = None
        #: the source's position as the session's runs checked it (read_at_position)
        self.position = HeldPosition()
        #: the last step read JSON-lines records dated after the interval it released: the
        #: next runs in SQL without reading the state file
        self._tail = False

    def forget(self, con: duckdb.DuckDBPyConnection | None = None) -> None:
        """Empty it, first writing the steps the state file lacks through ``con`` (without
        one they are lost: the next step finds the state behind the store and replays or
        rebuilds it)."""
        held, self._held = self._held, None
        if con is not None and held is not None and held.pending:
            write_held(con, held)

    def holds(self) -> bool:
        """Whether it holds the state (whose file may lack its last steps)."""
        return self._held is not None

    def adopt(self, held: Held) -> None:
        """Hold ``held``, the state file's content with every step written (a replay's,
        :func:`dpcr.engines.duckdb_replay.replay`), instead of reading it again."""
        self._held = held

    def settled(self, con: duckdb.DuckDBPyConnection) -> None:
        """After a step's settle: write the steps settled so far once they are
        :data:`WRITE_STEPS` or hold :data:`WRITE_ROWS` seed rows."""
        held = self._held
        if held is None or not held.pending:
            return
        rows = sum(len(p.rows["seeds"]["v"]) for p in held.pending)
        if len(held.pending) >= WRITE_STEPS or rows >= WRITE_ROWS:
            write_held(con, held)

    def step(
        self, request: AggregateRequest, run: EngineRun, window: StepWindow
    ) -> DataStep | None:
        """The data step from memory, or None when it must run in SQL (nothing written)."""
        from dpcr.changelog.position import parse_token

        state, con = run.store, run.connection
        old, settle_at = parse_token(state.token), window.settle_at
        if request.frozen or settle_at is None or old is None or not state.records \
                or state.t_last is None:  # fmt: skip
            self.forget(con)
            return None
        carry = explicit(request)  # (pending records held: wal2json's and Debezium's)
        if self._held is None and self._tail:  # (a capture's tail comes and goes: the state
            self._tail = False  # file, which the SQL step moved, is read at the next step)
            return None
        held = self._held = self._held if self._held is not None else \
            read_held(request, con, later=carry)  # fmt: skip
        head = held.head if held is not None else None
        if head is None or (head.records, head.interval, head.token, head.fingerprint) != (
            state.records, state.interval, state.token, run.fingerprint
        ) or not head.columns_ok or head.explicit != explicit(request) \
                or not hold_stored(held, request, run.scratch):  # type: ignore[arg-type]  # fmt: skip
            self.forget(con)
            return None
        assert held is not None
        path = Path(str(getattr(request.source, "path", "")))
        tail = [False]
        chunk = [b""]

        def read(_source: Any, size: int) -> Batch | None:
            got = new_lines(path, old.size, size) if size >= old.size else None
            if got is None:
                return None
            chunk[0] = data = got
            if not carry and explicit(request) and _wal2json.last_time(data) > settle_at:
                tail[0] = True  # (a record pending, most likely: not worth a parse)
                return None
            return read_batch(data, request)

        run.progress("load changelog", 0, 1)
        batch, token = run.at_position(read, bounded=True)
        run.progress("load changelog", 1, 1)
        tail[0] = not carry and (tail[0] or (batch is not None and bool(len(batch.ts))
                                 and int(batch.ts.max()) > settle_at))  # fmt: skip
        self._tail = tail[0]
        if batch is None or tail[0] or (len(batch.ts) and int(batch.ts.min()) <= state.t_last):
            self.forget(con)  # (late or pending records)
            return None
        got = bound_all(held, batch, request, run.scratch, settle_at, chunk[0])
        if got is None:
            self.forget(con)
            return None
        return data_step(self, request, run, StepRead(held, got[0], got[1], token, got[2]),
                          window)  # fmt: skip


def bound(held: Held, batch: Batch, k: int, carried: int = 0) -> Bounded | None:
    """Rank, keep and the previous f of every row, in each unit's history order (ts, then
    record); None when a row's liveness verdict is not valid (the SQL step quarantines it:
    an insert of a live entry, an update or a delete of one that is not). The held seeds
    change only at settle (new ids, not live and without rows, are harmless). The first
    ``carried`` rows are pending mutations of the state (re-judged: their sequence numbers
    are the state's already)."""
    seeds = held.seeds
    ids = seeds.grow(batch.entries)
    n = len(ids)
    at = np.arange(n)
    if batch.seq is None:
        order = np.lexsort((at, batch.ts, ids))
    elif held.sequences is None or not held.sequences.unseen(seeds, ids[carried:],
                                                             batch.seq[carried:]):
        return None
    else:
        order = np.lexsort((at, batch.seq, batch.ts, ids))
    sid = ids[order]
    first = np.empty(n, dtype=bool)  # the first row of its unit in this batch
    first[:1] = True
    first[1:] = sid[1:] != sid[:-1]
    start = np.maximum.accumulate(np.where(first, at, 0))  # (its unit's first row)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = seeds.n[sid] + (at - start) + 1
    f_sorted = batch.f[:, order]
    prev_sorted = np.empty_like(f_sorted)
    prev_sorted[:, 1:] = f_sorted[:, :-1]
    prev_sorted[:, first] = seeds.f[:, sid[first]]
    prev = np.empty_like(batch.f)
    prev[:, order] = prev_sorted
    # Liveness: the last insert or delete before each row in its unit, else the seed's.
    op = batch.op[order]
    marks = np.maximum.accumulate(np.where(op != 1, at, -1))
    before = np.empty(n, dtype=np.int64)
    before[:1] = -1
    before[1:] = marks[:-1]
    own = before >= start
    live_before = np.where(own, op[np.maximum(before, 0)] == 0, seeds.live[sid])
    if np.any((op == 0) == live_before):
        return None
    last = np.empty(n, dtype=bool)  # the last row of its unit
    last[-1:] = True
    last[:-1] = first[1:]
    last_mark = marks[last]
    has = last_mark >= start[last]
    rows = last_mark[has]
    return Bounded(
        ids, order, rank, rank <= k, prev, int(np.count_nonzero(first & ~seeds.known[sid])),
        changed=sid[rows], live=op[rows] == 0,
        record=batch.numbers(held.head.lines, order[rows]),
    )  # fmt: skip


def _distinct(values: np.ndarray) -> int:
    """How many distinct values ``values`` holds (``len(np.unique(values))``, without the
    masked-array check by which numpy's first call of it imports ``numpy.ma``)."""
    ordered = np.sort(values)
    return int(np.count_nonzero(ordered[1:] != ordered[:-1])) + 1 if len(ordered) else 0


@dataclass(frozen=True, slots=True)
class StepRead:
    """What a step read: the held state, the batch, its bounding and the new position."""

    held: Held
    batch: Batch
    bounded: Bounded
    token: str
    #: of a step that leaves records pending or re-judges the state's: the rows that settle,
    #: their bounding and what else the settle keeps (:class:`~dpcr.engines.duckdb_held.
    #: Carried`); None: every row settles and every row is a new record's
    settles: tuple[Batch, Bounded, Carried] | None = None


def data_step(
    holder: HeldState, request: AggregateRequest, run: EngineRun, read: StepRead,
    window: StepWindow,
) -> DataStep:
    """The step's totals, reports and settle from the bounded batch."""
    from dpcr.engines.base import Aggregates, BoundingReport
    from dpcr.engines.state import state_load_report, with_counters
    from dpcr.queries import Sum

    held, batch, b, token = read.held, read.batch, read.bounded, read.token
    lo, hi, times = window.lo, window.hi, window.times
    settled_old, settled_new = window.settled_old, window.settled_new
    queries, state, con = request.queries, run.store, run.connection
    c = held.counters
    records = batch.counts()[0]
    refuse_lost_records(state, c.get("records", 0) + records)
    first = settled_old + 1
    values = interval_values(queries, batch, b, times, first)
    # (the report counts the rows by the last release time, as the SQL step's aggregation)
    seen = batch.ts <= times[-1] if times else np.zeros(len(batch.ts), dtype=bool)
    units, kept, nn = b.new_units, b.kept, batch.nn
    if not seen.all():
        kept, nn, ids = kept[seen], nn[:, seen], b.ids[seen]
        units = _distinct(ids[~held.seeds.known[ids]])
    dropped = int(np.count_nonzero(~kept))
    non_numeric = {q.name: int(np.count_nonzero(nn[i] & kept))
                   for i, q in enumerate(queries) if isinstance(q, Sum)}  # fmt: skip
    new = BoundingReport(units=units, mutations=len(kept), kept=int(kept.sum()),
                         dropped={"at_most_k": dropped} if dropped else {},
                         non_numeric={k: v for k, v in non_numeric.items() if v})  # fmt: skip
    agg = Aggregates(first_interval=first, last_interval=len(times), values=values, report=new)
    combined_values = {}
    for i, q in enumerate(queries):
        out = np.zeros((max(0, hi - lo + 1), 1), dtype=np.int64)
        for t in range(lo, min(first - 1, hi) + 1):
            out[t - lo, 0] = held.totals.get(i, {}).get(t, 0)
        a = max(lo, first)
        if a <= hi:
            out[a - lo:, 0] = values[q.name][a - first:hi - first + 1, 0]
        combined_values[q.name] = out
    d, moves = with_counters(new.dropped, {}, c)
    report = BoundingReport(
        units=c.get("units", 0) + units, mutations=c.get("mutations", 0) + new.mutations,
        kept=c.get("kept", 0) + new.kept, dropped={k: v for k, v in sorted(d.items()) if v},
        dropped_moves={k: dict(sorted(m.items())) for k, m in sorted(moves.items())},
        non_numeric={q.name: c.get("nn:" + q.name, 0) + non_numeric[q.name]
                     for q in queries if isinstance(q, Sum)
                     if c.get("nn:" + q.name, 0) + non_numeric[q.name]},
    )  # fmt: skip
    combined = Aggregates(first_interval=lo, last_interval=hi, values=combined_values,
                          report=report)  # fmt: skip
    ts = batch.ts
    load = state_load_report(request.source, c, request.quarantine_path
                             if request.on_error == "quarantine" else None,
                             new={"records": records, "valid": len(ts),
                                  "tombstones": batch.tombstones})  # fmt: skip

    def settle(new_state: StoreHead) -> None:
        try:
            if read.settles is not None:
                rows, bounded, carried = read.settles
                settle_held(request, held, rows, bounded, agg, (settled_old, settled_new),
                            new_state, carried)  # fmt: skip
            else:
                settle_held(request, held, batch, b, agg, (settled_old, settled_new), new_state)
            holder.settled(con)
        except BaseException:
            holder.forget()
            raise

    span = (min(int(ts.min()), c.get("min_ts", 2**63)), max(int(ts.max()), c.get(
        "max_ts", -(2**63)))) if len(ts) else (c.get("min_ts"), c.get("max_ts"))  # fmt: skip
    return DataStep(load, combined, *span, int(np.count_nonzero(ts > window.clock)), token,
                    settle)  # fmt: skip


def hold_stored(held: Held, request: AggregateRequest, scratch: Callable[[], Path]) -> bool:
    """Hold the pending mutations of the state file that :func:`read_held` read (the rows of
    table ``pending``, :attr:`Held.stored`) as :attr:`Held.later`, from their records parsed
    again as a step parses them; whether that was shown to give the same rows (else the
    step runs in SQL). ``scratch()``: the owner-only folder of the copies of records staged
    when they are written."""
    stored, held.stored = held.stored, None
    if stored is None:
        return True
    records, part, unit, entry, ts, seq, op, has_before, after, raw = zip(*stored, strict=True)
    try:
        lines = [json.loads(r) for r in raw]
    except (TypeError, ValueError):
        return False
    if any(type(t) is not str or "\n" in t for t in lines) or set(part) != {0}:
        return False
    batch = read_batch("".join(t + "\n" for t in lines).encode(), request)
    n = len(stored)
    if batch is None or batch.counts() != (n, n) or batch.has_before is None or not (
        list(batch.entries) == list(unit) == list(entry) and batch.ts.tolist() == list(ts)
        and batch.seq is not None and batch.seq.tolist() == list(seq)
        and [_OPS[c] for c in batch.op.tolist()] == list(op)
        and batch.has_before.tolist() == list(has_before)
    ):  # fmt: skip
        return False
    rows = dataclasses.replace(batch, line=np.array(records, dtype=np.int64), records=None,
                               tombstones=0, lines=None)  # fmt: skip
    held.later = Later(rows, list(after), list(raw), [None] * n, request.source, scratch())
    return True


_OPS = ("insert", "update", "delete")


def _with_later(later: Later | None, new: Batch, offset: int) -> tuple[Batch, int]:
    """The rows a step judges: the state's pending mutations (``later``, first) and the new
    records' (``new``, of the lines after ``offset``); and how many are pending ones."""
    if later is None or not len(later.rows.ts):
        return new, 0
    return later.rows.concat(new, offset), len(later.rows.ts)


def bound_all(held: Held, new: Batch, request: AggregateRequest, scratch: Callable[[], Path],
              settle_at: int, data: bytes) -> tuple[Batch, Bounded, Any] | None:  # fmt: skip
    """The rows a step judges (the held pending mutations and the ``new`` records', read
    from ``data``), their bounding, and what the settle at ``settle_at`` needs when it does
    not settle them all (the settling rows bounded apart: in each unit's history they come
    before the others, so their verdicts are those of the whole); None: in SQL.
    ``scratch()``: the owner-only folder of the copies of the records left pending, staged
    when they are written."""
    k = request.constraint.k  # type: ignore[union-attr]
    offset = held.head.lines
    if len(new.ts) and (new.seq is None or new.line is None or new.has_before is None) and (
        held.later is not None or int(new.ts.max()) > settle_at
    ):  # (a reader that gives no sequence numbers, lines or rows before: nothing is held)
        return None
    batch, carried = _with_later(held.later, new, offset)
    b = bound(held, batch, k, carried)
    if b is None:
        return None
    now = batch.ts <= settle_at
    if not carried and bool(now.all()):
        return batch, b, None
    rows = batch if bool(now.all()) else batch.take(now)
    sb = b if rows is batch else bound(held, rows, k, int(np.count_nonzero(now[:carried])))
    if sb is None:
        return None
    later = None
    if not now.all():
        later = _later(held.later, batch, ~now, (carried, offset), data,
                       (request.source, held.later.scratch if held.later else scratch()))
    fresh = batch.take(np.arange(len(batch.ts)) >= carried) if carried else batch
    return batch, b, (rows, sb, Carried(new=fresh, ids=b.ids[carried:], later=later))


def _later(old: Later | None, batch: Batch, rows: np.ndarray, at_lines: tuple[int, int],
           data: bytes, source: tuple[Any, Path | None]) -> Later:  # fmt: skip
    """The :class:`Later` of the rows ``rows`` (a mask) of ``batch``, whose first
    ``carried`` rows are ``old``'s and the others records of the lines ``data`` (numbered
    after ``offset``; ``at_lines``: both); ``source``: the source and the folder of the
    copies of records staged when they are written."""
    carried, offset = at_lines
    at = np.flatnonzero(rows).tolist()
    kept = batch.take(rows)
    assert kept.line is not None and batch.line is not None
    lines = data.split(b"\n") if any(i >= carried for i in at) else []
    after: list[str | None] = []
    raw: list[str | None] = []
    text: list[bytes | None] = []
    for i in at:
        if i < carried:
            assert old is not None
            after.append(old.after[i])
            raw.append(old.raw[i])
            text.append(old.text[i])
        else:
            after.append(None)
            raw.append(None)
            text.append(lines[int(batch.line[i]) - 1])
    rows_only = dataclasses.replace(kept, line=kept.line + offset, records=None, tombstones=0,
                                    lines=None)  # (their records counted where they were read)
    return Later(rows_only, after, raw, text, *source)
