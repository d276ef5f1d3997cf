"""What a session holds of the incremental state (:mod:`dpcr.engines.duckdb_memory`): the newest
seed of every unit by integer id, the counters and totals, read once from the state file; and
the settle of a step from memory, which appends to the state file what the SQL step's settle
(:func:`dpcr.engines.incremental.settle`) appends for the same rows, then moves the held seeds
forward."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import duckdb

    from dpcr.engines.base import AggregateRequest, StoreHead

__all__ = ["Batch", "Bounded", "Held", "Seeds", "read_held", "settle_held"]


@dataclass(frozen=True, slots=True)
class Batch:
    """The new records of a step, in file order: entry text, ts (µs), op code (0 insert,
    1 update, 2 delete) and per query the f of the row after."""

    entries: list[str]
    ts: np.ndarray
    op: np.ndarray
    f: np.ndarray  # (queries, rows)
    nn: np.ndarray  # (queries, rows): a sum's row after without a number



class Seeds:
    """The newest seed of every unit of the state (each unit one entry), by integer id: the
    state's id of each (``sid``), whether the state counts it as a unit (``known``: it has
    settled rows), its settled rows, last f per query, liveness and that insert's or
    delete's record number."""

    def __init__(self, queries: int) -> None:
        self.ids: dict[str, int] = {}
        self.keys: list[str] = []
        self.sid = np.zeros(0, dtype=np.int64)
        self.next_sid = 1
        self.known = np.zeros(0, dtype=bool)
        self.n = np.zeros(0, dtype=np.int64)
        self.f = np.zeros((queries, 0), dtype=np.int64)
        self.live = np.zeros(0, dtype=bool)
        self.record = np.zeros(0, dtype=np.int64)

    def grow(self, names: Sequence[str]) -> np.ndarray:
        """The ids of ``names``, new ones added (not live, no row, f 0; state ids after the
        state's)."""
        ids = self.ids
        out = np.empty(len(names), dtype=np.int64)
        start = len(self.keys)
        for r, name in enumerate(names):
            j = ids.get(name)
            if j is None:
                j = ids[name] = len(self.keys)
                self.keys.append(name)
            out[r] = j
        added = len(self.keys) - start
        if added:
            fresh = np.arange(self.next_sid, self.next_sid + added, dtype=np.int64)
            self.sid = np.concatenate([self.sid, fresh])
            self.next_sid += added
            self.known = np.concatenate([self.known, np.zeros(added, dtype=bool)])
            self.n = np.concatenate([self.n, np.zeros(added, dtype=np.int64)])
            self.f = np.concatenate([self.f, np.zeros((self.f.shape[0], added), np.int64)], 1)
            self.live = np.concatenate([self.live, np.zeros(added, dtype=bool)])
            self.record = np.concatenate([self.record, np.zeros(added, dtype=np.int64)])
        return out


@dataclass(slots=True)
class Held:
    """The incremental state as its last settle left it: head, counters, seeds, totals."""

    head: Any  # dpcr.engines.state.StateHead
    counters: dict[str, int]
    seeds: Seeds
    totals: dict[int, dict[int, int]]  # query -> base interval -> exact change (key 0)
    rows: int  # rows of table seeds



@dataclass(frozen=True, slots=True)
class Bounded:
    """A batch bounded continuing every history: ``ids`` per row, the rows in history
    order ``order``, per row its rank in its unit, kept, and per query the previous f; the
    units new to the state; per unit whose rows hold an insert or a delete, the last one
    (``changed``: the ids, ``live``: an insert, ``record``: its record number)."""

    ids: np.ndarray
    order: np.ndarray
    rank: np.ndarray
    kept: np.ndarray
    prev: np.ndarray  # (queries, rows)
    new_units: int
    changed: np.ndarray
    live: np.ndarray
    record: np.ndarray



def read_held(request: AggregateRequest, con: duckdb.DuckDBPyConnection) -> Held | None:
    """The seeds, counters and totals of the attached state (None: none is attached, or it
    holds what the fast path does not keep: pending rows, per-unit classes or times, a unit
    with several entries)."""
    import duckdb

    from dpcr.engines.state import SCHEMA, counters, nothing_pending, read_head

    s = SCHEMA
    try:
        head = read_head(con)
        if head is None or not nothing_pending(con):
            return None
    except duckdb.Error:
        return None
    q = len(request.queries)
    fs = "".join(f", coalesce(x.f{i}, 0) AS f{i}" for i in range(q))
    cols = con.execute(
        f"SELECT nm.name AS unit, x.u, x.n IS NOT NULL AS known, coalesce(x.n, 0) AS n, "
        f"x.n IS NULL OR (x.first_ts IS NULL AND x.cls = '') AS plain, "
        f"x.e = x.u AND coalesce(x.ne, 0) = 0 AS one{fs}, coalesce(x.live, FALSE) AS live, "
        f"coalesce(x.record, 0) AS record FROM (SELECT * FROM {s}.seeds QUALIFY row_number() "
        f"OVER (PARTITION BY u, e ORDER BY v DESC) = 1) x JOIN {s}.names nm ON nm.id = x.u"
    ).fetchnumpy()
    if not (np.all(np.asarray(cols["plain"])) and np.all(np.asarray(cols["one"]))):
        return None
    c = counters(con)
    seeds = Seeds(q)
    keys = [str(k) for k in cols["unit"].tolist()]
    seeds.keys = keys
    seeds.ids = {k: j for j, k in enumerate(keys)}
    seeds.sid = np.asarray(cols["u"], dtype=np.int64)
    seeds.next_sid = c.get("ids", 0) + 1
    seeds.known = np.asarray(cols["known"], dtype=bool)
    seeds.n = np.asarray(cols["n"], dtype=np.int64)
    seeds.f = np.asarray([np.asarray(cols[f"f{i}"], dtype=np.int64) for i in range(q)],
                         dtype=np.int64).reshape(q, len(keys))  # fmt: skip
    seeds.live = np.asarray(cols["live"], dtype=bool)
    seeds.record = np.asarray(cols["record"], dtype=np.int64)
    totals: dict[int, dict[int, int]] = {}
    for qi, iv, key, value in con.execute(f"SELECT q, iv, key, value FROM {s}.totals").fetchall():
        if key != 0:
            return None
        totals.setdefault(int(qi), {})[int(iv)] = int(value)
    if con.execute(f"SELECT count(*) FROM {s}.clamps").fetchall()[0][0]:
        return None
    rows = int(con.execute(f"SELECT count(*) FROM {s}.seeds").fetchall()[0][0])
    return Held(head, c, seeds, totals, rows)


def settle_held(
    request: AggregateRequest, con: duckdb.DuckDBPyConnection, held: Held, batch: Batch,
    b: Bounded, agg: Any, settled: tuple[int, int], new_state: StoreHead,
) -> None:
    """Append the step's seeds, totals and counters to the state in one transaction (as
    :func:`dpcr.engines.incremental.settle` does), then move the held seeds forward."""
    import duckdb

    from dpcr.engines.incremental import compact
    from dpcr.engines.state import SCHEMA, StateHead, add, write_head
    from dpcr.queries import Sum

    s = SCHEMA
    queries = request.queries
    c = dict(held.counters)
    head = held.head
    ts = batch.ts
    version = c["version"] = c.get("version", 0) + 1
    for key, value in (("records", len(ts)), ("split", 0), ("tombstones", 0), ("late", 0)):
        add(c, key, value)
    add(c, "valid", len(ts))
    c["min_ts"] = min(c.get("min_ts", int(ts.min())), int(ts.min()))
    c["max_ts"] = max(c.get("max_ts", int(ts.max())), int(ts.max()))
    add(c, "mutations", len(ts))
    add(c, "kept", int(b.kept.sum()))
    for i, q in enumerate(queries):
        if isinstance(q, Sum):
            add(c, f"nn:{q.name}", int(np.count_nonzero(batch.nn[i] & b.kept)))
    if not b.kept.all():
        add(c, "d:at_most_k", int(np.count_nonzero(~b.kept)))
    # The seeds: per unit its last row in history order (every unit of the batch settles).
    order = b.order
    ids_sorted = b.ids[order]
    last = order[np.flatnonzero(np.append(ids_sorted[1:] != ids_sorted[:-1], True))]
    units = b.ids[last]  # (ascending, as b.changed)
    seeds = held.seeds
    live, record = seeds.live[units], seeds.record[units]  # (copies)
    at = np.searchsorted(units, b.changed)
    live[at], record[at] = b.live, b.record.astype(np.int64)
    sid = seeds.sid[units]
    fresh = sid > c.get("ids", 0)  # (units new to the state's dictionary)
    con.execute("SET disabled_compression_methods = 'dict_fsst'")
    try:
        con.execute("BEGIN TRANSACTION")
        try:
            if b.new_units:
                add(c, "units", b.new_units)
            _insert(con, f"{s}.names", {
                "id": sid[fresh],
                "name": np.array([seeds.keys[j] for j in units[fresh].tolist()], dtype=object),
            })  # fmt: skip
            c["ids"] = seeds.next_sid - 1
            n_keys = len(units)
            _insert(con, f"{s}.seeds", {
                "u": sid, "e": sid, "n": b.rank[last],
                "first_ts": np.full(n_keys, None, dtype=object),
                "cls": np.full(n_keys, "", dtype=object), "ne": np.zeros(n_keys, dtype=np.int64),
                **{f"f{i}": batch.f[i, last] for i in range(len(queries))},
                "live": live, "record": record, "v": np.full(n_keys, version, dtype=np.int64),
            })  # fmt: skip
            rows = compact(con, c, held.rows + n_keys)
            totals = [(i, t, int(agg.values[q.name][t - agg.first_interval, 0]))
                      for i, q in enumerate(queries)
                      for t in range(max(settled[0] + 1, agg.first_interval), settled[1] + 1)]
            totals = [r for r in totals if r[2]]
            _insert(con, f"{s}.totals", {
                "q": np.array([r[0] for r in totals], dtype=np.int32),
                "iv": np.array([r[1] for r in totals], dtype=np.int64),
                "key": np.zeros(len(totals), dtype=np.int32),
                "value": np.array([r[2] for r in totals], dtype=np.int64),
            })  # fmt: skip
            new_head = StateHead(
                records=new_state.records, interval=new_state.interval,
                token=new_state.token, lines=head.lines + len(ts), explicit=False,
                fingerprint=head.fingerprint, columns_ok=head.columns_ok,
            )  # fmt: skip
            write_head(con, c, new_head)
        except BaseException:
            with _suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
    finally:
        with _suppress(duckdb.Error):
            con.execute("RESET disabled_compression_methods")
    seeds.n[units] = b.rank[last]
    seeds.f[:, units] = batch.f[:, last]
    seeds.known[units] = True
    seeds.live[units], seeds.record[units] = live, record
    for i, t, v in totals:
        held.totals.setdefault(i, {})[t] = v
    held.counters, held.head, held.rows = c, new_head, rows


def _insert(con: duckdb.DuckDBPyConnection, table: str, columns: dict[str, np.ndarray]) -> None:
    """Append the rows whose columns are ``columns`` (in the table's order) to ``table``, in
    one statement that scans the arrays (binding them as lists costs 3-4 times more)."""
    if not len(next(iter(columns.values()))):
        return
    con.register(_BATCH, columns)
    try:
        con.execute(f"INSERT INTO {table} SELECT {', '.join(columns)} FROM {_BATCH}")
    finally:
        con.unregister(_BATCH)


_BATCH = "_dpcr_held_batch"


def _suppress(*kinds: type[BaseException]) -> Any:
    from contextlib import suppress

    return suppress(*kinds)
