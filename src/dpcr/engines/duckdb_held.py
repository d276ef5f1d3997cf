"""What a session holds of the incremental state (:mod:`dpcr.engines.duckdb_memory`): the newest
seed of every unit by integer id, the counters and totals, read once from the state file; the
settle of a step from memory, which moves them forward and keeps the rows the SQL step's settle
(:func:`dpcr.engines.incremental.settle`) appends to the state file for the same records; and
the write of the rows kept, for any number of steps, in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.engines.state import DICT_BASE, own_id, text_sql

if TYPE_CHECKING:
    import duckdb

    from dpcr.engines.base import AggregateRequest, StoreHead

__all__ = [
    "Batch", "Bounded", "Carried", "Held", "Later", "Seeds", "Sequences", "StepWindow",
    "interval_values", "read_held", "settle_held", "write_held",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Batch:
    """The new records of a step, in file order: entry text (or, when every entry is an
    integer, their values), ts (µs), op code (0 insert, 1 update, 2 delete) and per query the
    f of the row after."""

    entries: list[str] | np.ndarray
    ts: np.ndarray
    op: np.ndarray
    f: np.ndarray  # (queries, rows)
    nn: np.ndarray  # (queries, rows): a sum's row after without a number
    #: A source whose records carry sequence numbers of their own (wal2json): each row's
    #: sequence number and line number in the chunk (from 1), the chunk's records (rows and
    #: tombstones) and lines (None: one record and one line per row, numbered in order).
    seq: np.ndarray | None = None
    line: np.ndarray | None = None
    records: int | None = None
    tombstones: int = 0
    lines: int | None = None
    #: Per row, whether its record gave the row before (wal2json: None otherwise).
    has_before: np.ndarray | None = None

    def counts(self) -> tuple[int, int]:
        """The records and the lines the batch read."""
        rows = len(self.ts)
        return (rows if self.records is None else self.records,
                rows if self.lines is None else self.lines)  # fmt: skip

    def numbers(self, offset: int, rows: np.ndarray) -> np.ndarray:
        """The record numbers of the batch's rows ``rows`` (indices), lines numbered after
        ``offset``."""
        return offset + (rows + 1 if self.line is None else self.line[rows])



class Seeds:
    """The newest seed of every unit of the state (each unit one entry), by integer id: the
    state's id of each (``sid``), whether the state counts it as a unit (``known``: it has
    settled rows), its settled rows, last f per query, liveness and that insert's or
    delete's record number."""

    def __init__(self, queries: int) -> None:
        self._ids: dict[str, int] = {}
        self._keys: list[str] = []
        #: integers added by :meth:`_integer_ids` after ``_keys`` whose texts are not yet in
        #: ``_keys`` and ``_ids`` (added when either is read: most steps read neither)
        self._later: list[np.ndarray] = []
        self.size = 0  # the keys
        self.sid = np.zeros(0, dtype=np.int64)
        self.next_sid = DICT_BASE + 1
        self.known = np.zeros(0, dtype=bool)
        self.n = np.zeros(0, dtype=np.int64)
        self.f = np.zeros((queries, 0), dtype=np.int64)
        self.live = np.zeros(0, dtype=bool)
        self.record = np.zeros(0, dtype=np.int64)
        #: per integer 0 .. len - 1, 1 + the index of the key that is its text (0: none),
        #: built on the first look-up of integers (:meth:`_integer_ids`)
        self._by_integer: np.ndarray | None = None

    @property
    def keys(self) -> list[str]:
        """The key (unit text) of each index."""
        self._texts()
        return self._keys

    @keys.setter
    def keys(self, keys: list[str]) -> None:
        self._keys, self._later, self.size = keys, [], len(keys)
        self._ids = {k: j for j, k in enumerate(keys)}

    @property
    def ids(self) -> dict[str, int]:
        """The index of each key."""
        self._texts()
        return self._ids

    def _texts(self) -> None:
        if self._later:
            texts = list(map(str, np.concatenate(self._later).tolist()))
            self._later = []
            start = len(self._keys)
            self._keys.extend(texts)
            self._ids.update(zip(texts, range(start, start + len(texts)), strict=True))

    def grow(self, names: Sequence[str] | np.ndarray) -> np.ndarray:
        """The ids of ``names`` (texts, or integers whose texts they stand for), new ones
        added (not live, no row, f 0; state ids after the state's). The columns may be longer
        than the keys (room for the next ones)."""
        if isinstance(names, np.ndarray):
            by_integer = self._integer_ids(names)
            if by_integer is not None:
                return by_integer
            names = list(map(str, names.tolist()))
        ids = self.ids
        got = list(map(ids.get, names))  # (one look-up a name: most are known)
        if None in got:
            keys = self.keys
            start = len(keys)
            # the new names, each once, in the order of their first row
            rows = [r for r, j in enumerate(got) if j is None]
            new = list(dict.fromkeys([names[r] for r in rows]))
            ids.update(zip(new, range(start, start + len(new)), strict=True))
            keys.extend(new)
            self.size = len(keys)
            for r in rows:
                got[r] = ids[names[r]]
            if len(keys) > len(self.n):
                self._reserve(max(len(keys), 2 * len(self.n)))
            for j in range(start, len(keys)):  # (an integer text is its own id)
                own = own_id(keys[j])
                if own is None:
                    own, self.next_sid = self.next_sid, self.next_sid + 1
                elif self._by_integer is not None and 0 <= own < len(self._by_integer):
                    self._by_integer[own] = j + 1
                self.sid[j] = own
        return np.array(got, dtype=np.int64)

    def _integer_ids(self, values: np.ndarray) -> np.ndarray | None:
        """:meth:`grow` of the texts of the integers ``values`` (each an integer's text is
        its own state id, :func:`~dpcr.engines.state.own_id`), by one array look-up; None when
        they are not all in ``0 .. 2**22`` or beyond four times the keys held."""
        if not len(values):
            return np.zeros(0, dtype=np.int64)
        low, high = int(values.min()), int(values.max())
        table = self._by_integer
        if low < 0 or high >= max(1 << 22, 4 * self.size):
            return None
        if table is None or high >= len(table):
            size = max(high + 1, 2 * len(table) if table is not None else 0)
            table = self._by_integer = self._integer_table(size)
        got = table[values] - 1
        new = got < 0
        if new.any():
            # the new integers, each once, in the order of their first row
            fresh, at = np.unique(values[new], return_index=True)
            fresh = fresh[np.argsort(at, kind="stable")]
            start = self.size
            self._later.append(fresh)
            self.size += len(fresh)
            if self.size > len(self.n):
                self._reserve(max(self.size, 2 * len(self.n)))
            self.sid[start:self.size] = fresh
            table[fresh] = np.arange(start + 1, self.size + 1)
            got = table[values] - 1
        out: np.ndarray = got.astype(np.int64, copy=False)
        return out

    def _integer_table(self, size: int) -> np.ndarray:
        """The look-up table of :attr:`_by_integer` over ``0 .. size - 1``, from the keys'
        state ids (an integer key's id is its value)."""
        table = np.zeros(size, dtype=np.int64)
        sid = self.sid[:self.size]
        held = np.flatnonzero((sid >= 0) & (sid < size))
        table[sid[held]] = held + 1
        return table

    def _reserve(self, size: int) -> None:
        added = size - len(self.n)
        self.n = np.concatenate([self.n, np.zeros(added, dtype=np.int64)])
        self.f = np.concatenate([self.f, np.zeros((self.f.shape[0], added), np.int64)], 1)
        self.live = np.concatenate([self.live, np.zeros(added, dtype=bool)])
        self.sid = np.concatenate([self.sid, np.zeros(added, dtype=np.int64)])
        self.known = np.concatenate([self.known, np.zeros(added, dtype=bool)])
        self.record = np.concatenate([self.record, np.zeros(added, dtype=np.int64)])


@dataclass(frozen=True, slots=True, kw_only=True)
class StepWindow:
    """The intervals of a step: base intervals ``lo .. hi`` to total, those settled before
    the step and after it, the release times ``times`` (t_1 .. , as far as the step reads),
    the public clock and the end of the last interval the step releases."""

    lo: int
    hi: int
    settled_old: int
    settled_new: int
    times: list[int]
    clock: int
    settle_at: int | None


@dataclass(slots=True)
class Held:
    """The incremental state as its last settle left it: head, counters, seeds, totals."""

    head: Any  # dpcr.engines.state.StateHead
    counters: dict[str, int]
    seeds: Seeds
    totals: dict[int, dict[int, int]]  # query -> base interval -> exact change (key 0)
    rows: int  # rows of table seeds in the state file
    #: the steps settled since the state file was last written (:func:`write_held`)
    pending: list[_Settled] = field(default_factory=list)
    #: with explicit sequence numbers: the highest of each entry that table keys holds
    sequences: Sequences | None = None
    #: the mutations the state keeps pending, held (None: none)
    later: Later | None = None
    #: the rows of the state file's table pending, as :func:`read_held` read them (for
    #: :mod:`dpcr.engines.duckdb_memory` to hold as :attr:`later`), or None
    stored: list[tuple[Any, ...]] | None = None


@dataclass(frozen=True, slots=True)
class Later:
    """The mutations a step leaves pending (valid, dated after the last released interval:
    the rows of the state's table ``pending``), held: as the rows of a batch whose ``line``
    is each one's record number, and per row what table ``pending`` holds of it beside: the
    JSON text of its row after (``after``) and of its record (``raw``), or, for a record read
    from memory, its line (``text``), which :func:`write_held` has DuckDB stage as the SQL
    step stages it (``source``: the source, ``scratch``: the owner-only folder of the copy)."""

    rows: Batch
    after: list[str | None]
    raw: list[str | None]
    text: list[bytes | None]
    source: Any
    scratch: Path | None


@dataclass(frozen=True, slots=True)
class Carried:
    """What a settle of a step that did not settle all its rows needs beside them: the new
    records' rows ``new`` and their ids (each new mutation's sequence number goes to table
    ``keys`` whether it settles or not) and the rows it leaves pending."""

    new: Batch
    ids: np.ndarray
    later: Later | None


class Sequences:
    """Per unit of the seeds (by index; each unit one entry), the highest sequence number
    the state's table ``keys`` holds of it; and, by text, those of the entries the seeds lack
    (mutations the state holds no row of: quarantined ones)."""

    NONE = np.iinfo(np.int64).min

    def __init__(self, top: np.ndarray, other: dict[str, int]) -> None:
        self.top = top
        self.other = other

    def _fit(self, size: int) -> None:
        if len(self.top) < size:
            added = max(size, 2 * len(self.top)) - len(self.top)
            self.top = np.concatenate([self.top, np.full(added, self.NONE, dtype=np.int64)])

    def of(self, seeds: Seeds, ids: np.ndarray) -> np.ndarray:
        """The highest sequence number held of each unit of ``ids`` (:data:`NONE`: none)."""
        self._fit(seeds.size)
        got: np.ndarray = self.top[ids]
        if self.other:
            keys = seeds.keys
            for r in np.flatnonzero(got == self.NONE).tolist():
                j = int(ids[r])
                seq = self.other.pop(keys[j], None)
                if seq is not None:
                    self.top[j] = got[r] = seq
        return got

    def unseen(self, seeds: Seeds, ids: np.ndarray, seq: np.ndarray) -> bool:
        """Whether no row's (entry ``ids``, sequence number ``seq``) is a duplicate (the
        loader's phase 2): none repeats one of the rows, and each is above the highest its
        entry has in the state."""
        pairs = np.lexsort((seq, ids))
        same = (ids[pairs][1:] == ids[pairs][:-1]) & (seq[pairs][1:] == seq[pairs][:-1])
        return not same.any() and bool(np.all(seq > self.of(seeds, ids)))

    def advance(self, size: int, ids: np.ndarray, seq: np.ndarray) -> None:
        """Hold the sequence numbers ``seq`` of the units ``ids`` too."""
        self._fit(size)
        np.maximum.at(self.top, ids, seq)


def _sequences(con: duckdb.DuckDBPyConnection, seeds: Seeds) -> Sequences:
    """The :class:`Sequences` of the state's table ``keys``."""
    from dpcr.engines.state import SCHEMA

    top = np.full(seeds.size, Sequences.NONE, dtype=np.int64)
    other: dict[str, int] = {}
    ids = seeds.ids
    for entry, seq in con.execute(f"SELECT entry, max(seq) FROM {SCHEMA}.keys "
                                  "GROUP BY entry").fetchall():  # fmt: skip
        j = ids.get(str(entry))
        if j is None:
            other[str(entry)] = int(seq)
        else:
            top[j] = int(seq)
    return Sequences(top, other)



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



def read_held(request: AggregateRequest, con: duckdb.DuckDBPyConnection, *,
              later: bool = False) -> Held | None:  # fmt: skip
    """The seeds, counters and totals of the attached state (None: none is attached, or it
    holds what the fast path does not keep: pending rows (unless ``later``: then they are
    read into :attr:`Held.stored`), per-unit classes or times, a unit with several
    entries)."""
    import duckdb

    from dpcr.engines.state import SCHEMA, counters, nothing_pending, read_head

    s = SCHEMA
    try:
        head = read_head(con)
        if head is None or (not later and not nothing_pending(con)):
            return None
    except duckdb.Error:
        return None
    q = len(request.queries)
    fs = "".join(f", coalesce(x.f{i}, 0) AS f{i}" for i in range(q))
    cols = con.execute(
        f"SELECT {text_sql('x.u', 'nm.name')} AS unit, "
        "x.u, x.n IS NOT NULL AS known, coalesce(x.n, 0) AS n, "
        f"x.n IS NULL OR (x.first_ts IS NULL AND x.cls = '') AS plain, "
        f"x.e = x.u AND coalesce(x.ne, 0) = 0 AS one{fs}, coalesce(x.live, FALSE) AS live, "
        f"coalesce(x.record, 0) AS record FROM (SELECT * FROM {s}.seeds QUALIFY row_number() "
        f"OVER (PARTITION BY u, e ORDER BY v DESC) = 1) x LEFT JOIN {s}.names nm ON nm.id = x.u"
    ).fetchnumpy()
    if not (np.all(np.asarray(cols["plain"])) and np.all(np.asarray(cols["one"]))):
        return None
    c = counters(con)
    seeds = Seeds(q)
    keys = [str(k) for k in cols["unit"].tolist()]
    seeds.keys = keys
    seeds.sid = np.asarray(cols["u"], dtype=np.int64)
    seeds.next_sid = DICT_BASE + c.get("ids", 0) + 1
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
    stored = con.execute(f"SELECT record, part, unit, entry, ts, seq, op, has_before, "
                         f"after::VARCHAR, raw FROM {s}.pending ORDER BY record, part"
                         ).fetchall() if later else []  # fmt: skip
    return Held(head, c, seeds, totals, rows,
                sequences=_sequences(con, seeds) if head.explicit else None,
                stored=stored or None)  # fmt: skip


def settle_held(
    request: AggregateRequest, held: Held, batch: Batch, b: Bounded, agg: Any,
    settled: tuple[int, int], new_state: StoreHead, carried: Carried | None = None,
) -> None:
    """Move the held seeds, totals, counters and head forward by the step (as
    :func:`dpcr.engines.incremental.settle` moves the state file) and keep the rows the
    step appends to the state file for :func:`write_held`. ``batch``: the rows that settle
    (``b`` their bounding); ``carried``: what else the step read and leaves pending (None:
    every row it read settles, and it read every row from the new records)."""
    from dpcr.engines.state import StateHead

    queries = request.queries
    c = dict(held.counters)
    head = held.head
    records, lines = batch.counts()
    version = c["version"] = c.get("version", 0) + 1
    if records or len(batch.ts):  # (a step that read nothing and settles no pending row
        _count(c, queries, batch, b)  # changes no count, as settle_unchanged)
    # The seeds: per unit its last row in history order (every unit of the batch settles).
    order = b.order
    ids_sorted = b.ids[order]
    last = order[np.flatnonzero(np.append(ids_sorted[1:] != ids_sorted[:-1], True))] \
        if len(order) else order  # fmt: skip
    units = b.ids[last]  # (ascending, as b.changed)
    seeds = held.seeds
    live, record = seeds.live[units], seeds.record[units]  # (copies)
    at = np.searchsorted(units, b.changed)
    live[at], record[at] = b.live, b.record.astype(np.int64)
    sid = seeds.sid[units]
    fresh = sid > DICT_BASE + c.get("ids", 0)  # (units new to the state's dictionary)
    if seeds.next_sid - 1 > DICT_BASE + c.get("ids", 0) + int(fresh.sum()):
        sid = _number_settled(seeds, units[fresh], DICT_BASE + c.get("ids", 0))[units]
    c["ids"] = c.get("ids", 0) + int(fresh.sum())
    n_keys = len(units)
    totals = [(i, t, int(agg.values[q.name][t - agg.first_interval, 0]))
              for i, q in enumerate(queries)
              for t in range(max(settled[0] + 1, agg.first_interval), settled[1] + 1)]
    totals = [r for r in totals if r[2]]
    # (each unit one entry, every unit held seeded: the state's keys are the held units)
    # (the keys of table seeds after the step: the units with settled rows)
    distinct = int(np.count_nonzero(seeds.known[:seeds.size])) + int(np.count_nonzero(
        ~seeds.known[units]))  # fmt: skip
    held.pending.append(_Settled(version, distinct, units, {
        "keys": _keys_rows(carried.new if carried is not None else batch, head.lines),
        "names": {"id": sid[fresh],
                  "name": np.array([seeds.keys[j] for j in units[fresh].tolist()],
                                   dtype=object)},
        "seeds": {"u": sid, "e": sid, "n": b.rank[last],
                  "first_ts": np.full(n_keys, None, dtype=object),
                  "cls": np.full(n_keys, "", dtype=object), "ne": np.zeros(n_keys, dtype=np.int64),
                  **{f"f{i}": batch.f[i, last] for i in range(len(queries))},
                  "live": live, "record": record, "v": np.full(n_keys, version, dtype=np.int64)},
        "totals": {"q": np.array([r[0] for r in totals], dtype=np.int32),
                   "iv": np.array([r[1] for r in totals], dtype=np.int64),
                   "key": np.zeros(len(totals), dtype=np.int32),
                   "value": np.array([r[2] for r in totals], dtype=np.int64)},
    }))  # fmt: skip
    seeds.n[units] = b.rank[last]
    seeds.f[:, units] = batch.f[:, last]
    seeds.known[units] = True
    seeds.live[units], seeds.record[units] = live, record
    for i, t, v in totals:
        held.totals.setdefault(i, {})[t] = v
    held.counters = c
    new, new_ids = (carried.new, carried.ids) if carried is not None else (batch, b.ids)
    if held.sequences is not None and new.seq is not None:
        held.sequences.advance(seeds.size, new_ids, new.seq)
    held.later = carried.later if carried is not None else None
    held.head = StateHead(
        records=new_state.records, interval=new_state.interval, token=new_state.token,
        lines=head.lines + lines, explicit=head.explicit, fingerprint=head.fingerprint,
        columns_ok=head.columns_ok,
    )  # fmt: skip


def _number_settled(seeds: Seeds, settling: np.ndarray, base: int) -> np.ndarray:
    """Number the units given ids after ``base`` (those the state's dictionary lacks: texts
    of units with no settled row, which a step met in rows it leaves pending) anew: those of
    ``settling`` first, ``base + 1`` on, as the SQL step's settle numbers the new texts it
    settles, then the others; returns the ids."""
    sid = seeds.sid
    provisional = np.flatnonzero(sid[:seeds.size] > base)
    provisional = provisional[np.argsort(sid[provisional], kind="stable")]
    first = np.isin(provisional, settling)
    renumbered = np.concatenate([provisional[first], provisional[~first]])
    sid[renumbered] = base + 1 + np.arange(len(renumbered))
    seeds.next_sid = base + 1 + len(renumbered)
    return sid


def _count(c: dict[str, int], queries: Sequence[Any], batch: Batch, b: Bounded) -> None:
    """Add to the counters ``c`` what a settle of ``batch`` (bounded ``b``) counts."""
    from dpcr.engines.state import add
    from dpcr.queries import Sum

    ts = batch.ts
    for key, value in (("records", batch.counts()[0]), ("split", 0),
                       ("tombstones", batch.tombstones), ("late", 0)):  # fmt: skip
        add(c, key, value)
    add(c, "valid", len(ts))
    if len(ts):
        c["min_ts"] = min(c.get("min_ts", int(ts.min())), int(ts.min()))
        c["max_ts"] = max(c.get("max_ts", int(ts.max())), int(ts.max()))
    add(c, "mutations", len(ts))
    add(c, "kept", int(b.kept.sum()))
    for i, q in enumerate(queries):
        if isinstance(q, Sum):
            add(c, f"nn:{q.name}", int(np.count_nonzero(batch.nn[i] & b.kept)))
    if not b.kept.all():
        add(c, "d:at_most_k", int(np.count_nonzero(~b.kept)))
    if b.new_units:  # (and per class: the one class "" of at_most_k)
        add(c, "units", b.new_units)
        add(c, "u:", b.new_units)


def _keys_rows(batch: Batch, offset: int) -> dict[str, np.ndarray]:
    """The rows of table ``keys`` a settle of ``batch`` appends (with explicit sequence
    numbers: unit and entry texts, sequence number and record of each mutation)."""
    if batch.seq is None:
        n = 0
        texts = np.zeros(0, dtype=object)
    else:
        n = len(batch.ts)
        texts = np.array(batch.entries, dtype=object) if not isinstance(
            batch.entries, np.ndarray) else batch.entries.astype(str).astype(object)  # fmt: skip
    return {"unit": texts, "entry": texts,
            "seq": batch.seq if batch.seq is not None else np.zeros(0, dtype=np.int64),
            "record": batch.numbers(offset, np.arange(n))}  # fmt: skip


def write_held(con: duckdb.DuckDBPyConnection, held: Held) -> None:
    """Append the rows of the steps settled since the last write (:attr:`Held.pending`) to
    the state file and replace its counters and head by the held ones, in one transaction:
    the state file the SQL step's settles would have left after the same steps (each seed
    table rewritten at the step whose settle would rewrite it, :func:`_compact`)."""
    import duckdb

    from dpcr.engines.state import SCHEMA, write_head

    if not held.pending:
        return
    c = dict(held.counters)
    later = _later_rows(con, held.later)
    con.execute("SET disabled_compression_methods = 'dict_fsst'")
    try:
        con.execute("BEGIN TRANSACTION")
        try:
            rows = _append_seeds(con, held.pending, c, held.rows)
            for table in ("names", "totals", "keys"):
                _insert(con, f"{SCHEMA}.{table}", _joined([p.rows[table] for p in held.pending]))
            con.execute(f"DELETE FROM {SCHEMA}.pending")
            _insert(con, f"{SCHEMA}.pending", later)
            write_head(con, c, held.head)
        except BaseException:
            with _suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
    finally:
        with _suppress(duckdb.Error):
            con.execute("RESET disabled_compression_methods")
    held.counters, held.rows, held.pending = c, rows, []


_OP_TEXT = np.array(["insert", "update", "delete"], dtype=object)


def _later_rows(con: duckdb.DuckDBPyConnection, later: Later | None) -> dict[str, np.ndarray]:
    """The rows of table ``pending`` that ``later`` stands for (its columns, in the table's
    order): the texts of the records read from memory staged by DuckDB (:func:`_staged`)."""
    if later is None:
        return {"record": np.zeros(0, dtype=np.int64)}
    rows = later.rows
    after, raw = list(later.after), list(later.raw)
    todo = [i for i, t in enumerate(later.text) if t is not None]
    if todo:
        texts = _staged(con, later, [later.text[i] for i in todo])  # type: ignore[misc]
        for i, (a, r) in zip(todo, texts, strict=True):
            after[i], raw[i] = a, r
    entries = np.array(list(map(str, rows.entries)), dtype=object)
    assert rows.line is not None and rows.seq is not None and rows.has_before is not None
    return {"record": rows.line, "part": np.zeros(len(rows.ts), dtype=np.int32),
            "unit": entries, "entry": entries, "ts": rows.ts, "seq": rows.seq,
            "op": _OP_TEXT[rows.op], "has_before": rows.has_before,
            "after": np.array(after, dtype=object), "raw": np.array(raw, dtype=object)}


def _staged(con: duckdb.DuckDBPyConnection, later: Later,
            lines: list[bytes]) -> list[tuple[str | None, str]]:  # fmt: skip
    """The JSON texts of the row after and of the record of each of ``lines`` (records of
    ``later.source`` read from memory) as the SQL step stages them (the loader's staging of
    a copy of them, :func:`dpcr.changelog.stage`) and keeps them in table ``pending``."""
    import dataclasses
    import os
    import tempfile

    import duckdb

    from dpcr.changelog import ensure_raw, stage

    temps: list[str] = []
    # (a private copy: deleted here, or by the next run's clearing of the scratch folder)
    handle, name = tempfile.mkstemp(prefix="dpcr-pending-", suffix=".jsonl", dir=later.scratch)
    path = Path(name)
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(b"".join(line + b"\n" for line in lines))
        staged = stage(dataclasses.replace(later.source, path=path), con, "_dpcr_later",
                       None, temps, digests=False, scratch=later.scratch)  # fmt: skip
        if staged.lazy is not None:
            ensure_raw(con, staged.lazy, f"SELECT record FROM {staged.table}")
        got = con.execute(
            f"SELECT s.after::VARCHAR, r.raw::VARCHAR FROM {staged.table} s "
            f"JOIN ({staged.raw_sql}) r USING (record) ORDER BY s.record"
        ).fetchall()
    finally:
        path.unlink(missing_ok=True)
        for table in [*temps, "_dpcr_later_rows"]:
            for kind in ("VIEW", "TABLE"):
                with _suppress(duckdb.Error):
                    con.execute(f"DROP {kind} IF EXISTS {table}")
    if len(got) != len(lines):
        from dpcr.errors import DpcrError

        raise DpcrError("internal error: pending records staged otherwise than read")
    return [(a, r) for a, r in got]


@dataclass(frozen=True, slots=True)
class _Settled:
    """The rows a step settled from memory appends to the state file: per table, its
    columns (in the table's order)."""

    version: int
    distinct: int  # the keys of table seeds after the step
    ids: np.ndarray  # the unit id of each row of table seeds
    rows: dict[str, dict[str, np.ndarray]]


def _newest(columns: dict[str, np.ndarray], ids: np.ndarray) -> dict[str, np.ndarray]:
    """The last row of each unit of ``columns`` (rows in the order of their versions, ``ids``
    their units'; each unit one entry, so the unit is each seed table's key)."""
    if not len(ids):
        return columns
    last = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    np.maximum.at(last, ids, np.arange(len(ids)))
    rows = last[last >= 0]
    if len(rows) == len(ids):
        return columns
    return {name: column[rows] for name, column in columns.items()}


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The columns of ``parts`` (same names, in order) end to end."""
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _append_seeds(con: duckdb.DuckDBPyConnection, steps: list[_Settled], c: dict[str, int],
                  rows: int) -> int:  # fmt: skip
    """Append the ``steps``' rows of table ``seeds`` and rewrite it as the last of the steps'
    settles that would rewrite it does (:func:`dpcr.engines.incremental.compact`: the earlier
    rewrites change nothing that rewrite leaves, the newest row of each key with its own
    version; their counts are the keys held after them); returns the table's rows after."""
    from dpcr.engines.incremental import compact_due, rewrite_seeds
    from dpcr.engines.state import SCHEMA

    last = -1
    for i, step in enumerate(steps):
        rows += len(step.rows["seeds"]["v"])
        if compact_due(c, rows):
            last, rows = i, step.distinct
            c["rows:seeds"] = rows
    if last >= 0:  # (of the rows the rewrite reads, the newest of each unit is all it keeps)
        read = steps[:last + 1]
        _insert(con, f"{SCHEMA}.seeds", _newest(_joined([p.rows["seeds"] for p in read]),
                                                np.concatenate([p.ids for p in read])))
        rewrite_seeds(con)
    if last + 1 < len(steps):
        _insert(con, f"{SCHEMA}.seeds", _joined([p.rows["seeds"] for p in steps[last + 1:]]))
    return rows


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


def interval_values(queries: Sequence[Any], batch: Batch, b: Bounded, times: Sequence[int],
                    first: int) -> dict[str, np.ndarray]:  # fmt: skip
    """Per query, the change the kept rows of ``batch`` make to each base interval ``first``
    .. ``len(times)`` (one column: the queries taken here have one key)."""
    iv = np.searchsorted(np.asarray(times, dtype=np.int64), batch.ts, side="left") + 1
    width = max(0, len(times) - first + 1)
    sel = b.kept & (iv >= first) & (iv <= len(times))  # (a row after the last: pending)
    values: dict[str, np.ndarray] = {}
    for i, q in enumerate(queries):
        out = np.zeros((width, 1), dtype=np.int64)
        np.add.at(out[:, 0], iv[sel] - first, (batch.f[i] - b.prev[i])[sel])
        values[q.name] = out
    return values
