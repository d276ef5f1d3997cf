"""A state file left behind the store by a session that was killed, brought level with the
store by one settle instead of a rebuild.

A long-running session runs its steps from memory (:mod:`dpcr.engines.duckdb_memory`) and
writes what they settle to the state file in batches; killed between two batches, it leaves a
state file whose head is an earlier head of the store's. Each step it lost read only plain new
lines, dated after the last released interval, and settled the rows dated by the interval it
released; of wal2json and Debezium, it held the others pending and judged them again, first,
with the next step's (:func:`~dpcr.engines.duckdb_memory.bound_all`). Those lines, read as one
batch after the rows the state file keeps pending and settled once, give the state the steps
would have left: the same newest seed of every unit, totals, dictionary texts, counters and
pending rows (but the seed version, which counts settles, the seed rows each step appended,
and, after a step that released several intervals at once, the numbers the dictionary gives
new texts: :func:`_number_as_steps`), because with no record late the rows dated by the
store's last interval come, in each unit's history, before every row left pending, and the
state is what one read of the whole source gives, whatever the steps' boundaries.

:func:`replay` does it only when it can show all of this, and otherwise writes nothing (the
step then rebuilds the state from the whole source, which releases the same):

* the state holds what a step from memory continues (:func:`~dpcr.engines.duckdb_held.
  read_held`: pending rows only of wal2json or Debezium, each given again by its line as a
  step reads it (:func:`~dpcr.engines.duckdb_memory.hold_stored`), each unit one entry, no
  per-unit class, time or clamp), under the release's fingerprint, with its columns checked
  and sequence numbers only when the source gives them (wal2json, Debezium: then each new
  (entry, LSN) above its entry's last); the release is one that steps from memory
  (:func:`~dpcr.engines.duckdb_memory.accepts`) and the store has no freeze point (so no
  record was ever late);
* the state's head is behind the store's (fewer records, no later interval), both positions
  are block positions, the file's first bytes are those the store's position describes and,
  of them, the first the state's position describes (:func:`dpcr.changelog.position.between`);
* the bytes between are at most :data:`REPLAY_BYTES` and :data:`REPLAY_SHARE` of the
  store's (a rebuild costs less beyond), plain lines only, exactly as many records
  as the store counts past the state's, each dated after the end of the state's last released
  interval and by the end of the store's (of wal2json and Debezium: or kept pending), each a
  valid mutation given its entry's history (judged with the pending rows).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpcr.engines.duckdb_held import (
    Batch,
    Held,
    interval_values,
    read_held,
    settle_held,
    write_held,
)
from dpcr.engines.duckdb_memory import bound_all, hold_stored, read_batch
from dpcr.engines.memory_sources import accepts, explicit

if TYPE_CHECKING:
    import duckdb

    from dpcr.engines.base import AggregateRequest, StoreHead

__all__ = ["REPLAY_BYTES", "replay"]

#: Bytes between the two positions up to which a state behind the store is replayed (the lines
#: are held in memory while they are parsed: ≈ 5 bytes of memory a byte), and the share of
#: the store's consumed bytes they may be: beyond either, the state is rebuilt. A replay parses
#: lines in Python, about 1.5 times the CPU a line of the rebuild's read costs in DuckDB: at
#: 10^6 lines, a `dpcr run` after a session killed at day 300 with 43 steps not written (14 %
#: of the bytes) took 1.9-2.1 s CPU replayed against 2.8-3.2 rebuilt, at day 200 with 71
#: (35 %) 2.3 against 2.1 (benchmarks/restart.py).
REPLAY_BYTES = 128 << 20
REPLAY_SHARE = 0.25


def replay(
    request: AggregateRequest, con: duckdb.DuckDBPyConnection, store: StoreHead, *,
    times: Sequence[int], t_last_old: int | None, fingerprint: str, blocks: Path | None,
    scratch: Callable[[], Path],
) -> Held | None:
    """Bring the state attached to ``con`` to the ``store``'s head by one settle of the source's
    lines between the two heads (module docstring), in one transaction; returns what it holds
    then, or None when that cannot be shown (nothing written). ``times``: the base intervals'
    release times t_1 .. up to ``store.t_last`` at least; ``t_last_old``: the end of the
    state's last released interval; ``blocks``: the source's kept block digests;
    ``scratch()``: the owner-only folder of the copies of records left pending, staged when
    they are written."""
    from dpcr.changelog.position import BlockPosition, SourceRewritten, between, parse_token
    from dpcr.engines.base import Aggregates, BoundingReport

    if not accepts(request) or request.frozen or store.t_last is None:
        return None
    held = read_held(request, con, later=explicit(request))
    if held is None or not hold_stored(held, request, scratch):
        return None
    head, end = held.head, parse_token(store.token)
    start = parse_token(head.token)
    if not (
        isinstance(start, BlockPosition) and isinstance(end, BlockPosition)
        and head.fingerprint == fingerprint and head.columns_ok
        and head.explicit == explicit(request)
        and 0 < head.records < store.records and head.interval <= store.interval
        and 0 < start.size < end.size <= start.size + REPLAY_BYTES
        and end.size - start.size <= end.size * REPLAY_SHARE
    ):  # fmt: skip
        return None
    path = Path(str(getattr(request.source, "path", "")))
    try:
        with open(path, "rb") as f:  # (the state's last line ended: a step from memory's)
            f.seek(start.size - 1)
            if f.read(1) != b"\n":
                return None
        data = between(path, start, end, blocks=blocks)
    except (SourceRewritten, OSError):
        return None  # (the step's own check of the position tells)
    new = read_batch(data, request)
    if new is None or not len(new.ts) or new.counts()[0] != store.records - head.records:
        return None
    if t_last_old is not None and int(new.ts.min()) <= t_last_old:
        return None  # (a record late: what a step from memory never settles)
    if held.later is not None or int(new.ts.max()) > store.t_last:
        _number_as_steps(held, new, times, store.t_last)
    got = bound_all(held, new, request, scratch, store.t_last, data)
    if got is None:  # (a record pending of a source without sequence numbers, or invalid)
        return None
    batch, b, settles = got
    settled = (bisect.bisect_right(times, t_last_old) if t_last_old is not None else 0,
               bisect.bisect_right(times, store.t_last))  # fmt: skip
    first = settled[0] + 1
    agg = Aggregates(first_interval=first, last_interval=len(times),
                     values=interval_values(request.queries, batch, b, times, first),
                     report=BoundingReport(units=0, mutations=0, kept=0, dropped={}))  # fmt: skip
    if settles is None:
        settle_held(request, held, batch, b, agg, settled, store)
    else:
        rows, bounded, carried = settles
        settle_held(request, held, rows, bounded, agg, settled, store, carried)
    write_held(con, held)
    return held


def _number_as_steps(held: Held, new: Batch, times: Sequence[int], t_last: int) -> None:
    """Give the units new to the held seeds among the pending rows and ``new``'s their ids in
    the order steps that each released one interval would have (a settle numbers the texts it
    adds to the dictionary in the order of their ids): by the interval of their first row that
    settles (up to ``t_last``), then by their first line; the others by their first line,
    after them. (Steps that released several intervals at once numbered a step's texts by
    their first line: the numbers may then differ, the texts and every count do not.)"""
    rows = [new] if held.later is None else [held.later.rows, new]
    entries = [str(e) for b in rows for e in (b.entries.tolist() if isinstance(
        b.entries, np.ndarray) else b.entries)]  # fmt: skip
    ts = np.concatenate([b.ts for b in rows])
    settles = np.searchsorted(np.asarray(times, dtype=np.int64), ts, side="left")
    settles[ts > t_last] = len(times)
    ids = held.seeds.ids
    first: dict[str, int] = {}
    for entry, interval in zip(entries, settles.tolist(), strict=True):
        if entry not in ids:
            first[entry] = min(first.get(entry, interval), interval)
    if first:  # (dict order: first line; the sort is stable)
        held.seeds.grow(sorted(first, key=first.__getitem__))
