"""The data step of a long-running session from what it holds in memory.

A :class:`~dpcr.release._session.Session` (``dpcr follow``, ``release.session()``) runs a step
every time an interval closes. The SQL data step (:mod:`dpcr.release._incremental`) costs
about a hundred DuckDB statements whatever the step reads. A session instead keeps the newest
seed of every unit of the incremental state (its settled rows ``n``, the last f of each query,
its last insert or delete) in numpy columns keyed by integer ids, and runs the common step in
Python and numpy: the new lines parsed once, bounded and aggregated, and one batch of seeds per
state table appended after the store commits, as the SQL step's settle appends them (the state
file stays what a fresh process, ``dpcr run``, continues from; a crash loses what a crash of
the SQL step loses).

It accepts (:func:`accepts`) a JSON-lines source with the default field names and no unit
field, each unit one entry, ``at_most_k``, ``on_exhausted = "freeze"``, and count and sum
queries without ``where`` (a sum over a top-level column). A step runs here only when every
new line is plain: a JSON object with only the fields entry (an integer or printable text),
ts (an epoch integer), op (``insert``, ``update`` or ``delete``, as written), before and after
(objects, or null where the op has none), summed values that are finite JSON numbers or null
or missing, no repeated key; dated after the last released interval and at or before the end
of the interval this step releases; and each mutation valid given its entry's history
(no quarantine verdict). Anything else -- a blank, long or malformed line, a sequence number,
a late, quarantined or pending record, freeze points, a file that does not end with a line
end, a state not at the store's head -- takes the SQL step, from the state file, which the
held seeds always match after a settle; the next step reads the seeds again.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.release._source import DataStep, read_at_position, refuse_lost_records

if TYPE_CHECKING:
    import duckdb

    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import SourceState

__all__ = ["HeldState", "accepts"]

#: Entry texts taken as written: printable ASCII without blanks at either end.
_ENTRY = re.compile(r"[!-~](?:[ -~]*[!-~])?\Z")
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: Integers beyond this are read by DuckDB's JSON parser in ways the fast path does not follow.
_EXACT = 2**53


def accepts(settings: ReleaseSettings) -> bool:
    """Whether a session's steps of this release can run from memory (module docstring)."""
    from dpcr.bounding.constraints import AtMostK
    from dpcr.changelog import JsonlSource
    from dpcr.queries import Count, Sum

    source = settings.source
    if not (
        settings.engine.name == "duckdb" and type(source) is JsonlSource
        and source.unit is None and settings.owner is None
        and settings.on_exhausted == "freeze" and type(settings.constraint) is AtMostK
    ):  # fmt: skip
        return False
    names = source.field_names()
    if any(names[k] != k for k in ("entry", "ts", "op", "before", "after")):
        return False
    for q in settings.queries:
        if type(q) is Count and not q.where:
            continue
        if type(q) is Sum and not q.where and _COLUMN.match(q.column):
            continue
        return False
    return True


@dataclass(frozen=True, slots=True)
class _Batch:
    """The new records of a step, in file order: entry text, ts (µs), op code (0 insert,
    1 update, 2 delete) and per query the f of the row after."""

    entries: list[str]
    ts: np.ndarray
    op: np.ndarray
    f: np.ndarray  # (queries, rows)
    nn: np.ndarray  # (queries, rows): a sum's row after without a number


class _Refused(Exception):
    """A new record the fast path does not take: the step runs in SQL."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Refused("repeated key")
    return out


def _constant(name: str) -> Any:
    raise _Refused(name)  # (NaN, Infinity: no JSON)


_DECODER = json.JSONDecoder(object_pairs_hook=_unique, parse_constant=_constant)
#: An escaped surrogate (which Python reads and DuckDB's parser may not).
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse(data: bytes, settings: ReleaseSettings, factor: int) -> _Batch:
    """The records of ``data`` (complete lines), or :class:`_Refused`."""
    if not data.endswith(b"\n") or b"\r" in data or _SURROGATE.search(data):
        raise _Refused("line ends")
    lines = data[:-1].split(b"\n")
    limit = settings.source.max_record_bytes  # type: ignore[union-attr]
    if any(not line or len(line) > limit for line in lines):
        raise _Refused("blank or long line")
    try:
        text = data.decode("utf-8")
        records = _DECODER.decode("[" + text[:-1].replace("\n", ",") + "]")
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # (json: ValueError)
        raise _Refused("not JSON") from exc
    if len(records) != len(lines):
        raise _Refused("not one value per line")
    return _columns(records, settings, factor)


def _columns(records: list[Any], settings: ReleaseSettings, factor: int) -> _Batch:
    """:func:`parse`'s batch from the decoded records (a pass per field)."""
    from dpcr.changelog._sql import MAX_US, MIN_US
    from dpcr.queries import Sum

    if not all(type(r) is dict and r.keys() <= _FIELDS for r in records):
        raise _Refused("fields")
    try:
        raw_entries = [r["entry"] for r in records]
        raw_ts = [r["ts"] for r in records]
        op = np.array([_CODES[r["op"]] for r in records], dtype=np.int8)
    except (KeyError, TypeError) as exc:  # (a missing field, an op that is not one)
        raise _Refused("fields") from exc
    afters = [r.get("after") for r in records]
    for code, before, after in zip(op.tolist(), [r.get("before") for r in records], afters,
                                   strict=True):  # fmt: skip
        if not (before is None or (code and type(before) is dict)) or (
            (code < 2) != (type(after) is dict) or (code == 2 and after is not None)
        ):  # fmt: skip
            raise _Refused("rows")
    if not all((type(e) is int and -_EXACT <= e <= _EXACT)
               or (type(e) is str and _ENTRY.match(e)) for e in raw_entries):  # fmt: skip
        raise _Refused("entry")
    entries = [e if type(e) is str else str(e) for e in raw_entries]
    lo, hi = -(-MIN_US // factor), MAX_US // factor
    if not all(type(t) is int and lo <= t <= hi for t in raw_ts):
        raise _Refused("ts")
    ts = np.array(raw_ts, dtype=np.int64) * factor
    queries = settings.queries
    gone = op == 2
    f = np.zeros((len(queries), len(records)), dtype=np.int64)
    nn = np.zeros((len(queries), len(records)), dtype=bool)
    for i, q in enumerate(queries):
        if not isinstance(q, Sum):
            f[i] = ~gone
            continue
        values = [a.get(q.column) if a is not None else None for a in afters]
        if not {type(v) for v in values} <= _NUMBERS or any(
            type(v) is int and not -_EXACT <= v <= _EXACT for v in values
        ):  # fmt: skip
            raise _Refused("value")
        x = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
        if np.isinf(x).any():
            raise _Refused("value")
        missing = np.isnan(x)  # (JSON has no NaN: parse_constant refuses it)
        nn[i] = missing & ~gone
        y = np.minimum(np.maximum(x, float(q.lower)), float(q.upper)) / float(q.grid)
        whole = np.trunc(y)  # (half away from zero, as DuckDB's round)
        rounded = whole + (y - whole >= 0.5) - (whole - y >= 0.5)
        f[i] = np.where(missing, 0, rounded).astype(np.int64)
    return _Batch(entries, ts, op, f, nn)


_CODES = {"insert": 0, "update": 1, "delete": 2}
_NUMBERS = frozenset((int, float, type(None)))
_FIELDS = frozenset(("entry", "ts", "op", "before", "after"))


class _Seeds:
    """The newest seed of every unit of the state (each unit one entry), by integer id."""

    def __init__(self, queries: int) -> None:
        self.ids: dict[str, int] = {}
        self.keys: list[str] = []
        self.n = np.zeros(0, dtype=np.int64)
        self.f = np.zeros((queries, 0), dtype=np.int64)
        self.live = np.zeros(0, dtype=bool)

    def grow(self, names: Sequence[str]) -> np.ndarray:
        """The ids of ``names``, new ones added (not live, no row, f 0)."""
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
            self.n = np.concatenate([self.n, np.zeros(added, dtype=np.int64)])
            self.f = np.concatenate([self.f, np.zeros((self.f.shape[0], added), np.int64)], 1)
            self.live = np.concatenate([self.live, np.zeros(added, dtype=bool)])
        return out


@dataclass(slots=True)
class _Held:
    """The incremental state as its last settle left it: head, counters, seeds, totals."""

    head: Any  # dpcr.engines.state.StateHead
    counters: dict[str, int]
    seeds: _Seeds
    totals: dict[int, dict[int, int]]  # query -> base interval -> exact change (key 0)
    rows: dict[str, int]  # rows of each seed table


class HeldState:
    """What a session holds of the incremental state (module docstring); empty until a step
    reads it, and emptied whenever the SQL step, or a failure, moved the state."""

    def __init__(self) -> None:
        self._held: _Held | None = None

    def forget(self) -> None:
        self._held = None

    def step(
        self, settings: ReleaseSettings, con: duckdb.DuckDBPyConnection, state: SourceState,
        frozen: tuple[tuple[str, str, int], ...], window: tuple[int, int, int, int],
        times: list[int], *, clock: int, settle_at: int | None, progress: Any,
    ) -> DataStep | None:
        """The data step from memory, or None when it must run in SQL (nothing written).
        ``window``: base intervals ``lo``, ``hi``, and those settled before and after."""
        from dpcr.changelog import EPOCH_FACTORS
        from dpcr.changelog.position import parse_token

        old = parse_token(state.digest)
        if frozen or settle_at is None or old is None or not state.records \
                or state.t_last is None:  # fmt: skip
            self.forget()
            return None
        held = self._held if self._held is not None else _read_held(settings, con)
        self._held = None
        head = held.head if held is not None else None
        if head is None or (head.records, head.interval, head.token, head.fingerprint) != (
            state.records, state.interval, state.digest, settings.fingerprint()
        ) or not head.columns_ok or head.explicit:  # fmt: skip
            return None
        assert held is not None
        factor = EPOCH_FACTORS[settings.source.epoch_unit]  # type: ignore[union-attr]
        path = Path(str(getattr(settings.source, "path", "")))

        def read(_source: Any, size: int) -> _Batch | None:
            if size < old.size:
                return None
            with open(path, "rb") as f:
                f.seek(old.size - 1 if old.size else 0)
                data = f.read(size - old.size + (1 if old.size else 0))
            if old.size and data[:1] != b"\n":
                return None  # (the consumed bytes did not end a line)
            try:
                return parse(data[1 if old.size else 0:], settings, factor)
            except _Refused:
                return None

        progress("load changelog", 0, 1)
        batch, token = read_at_position(settings, con, state, read, bounded=True)
        progress("load changelog", 1, 1)
        if batch is None or not len(batch.ts):
            return None
        if int(batch.ts.min()) <= state.t_last or int(batch.ts.max()) > settle_at:
            return None  # (late or pending records)
        step = _bound(held, batch, settings.constraint.k)  # type: ignore[union-attr]
        if step is None:
            return None
        self._held = held  # (a step that fails from here on forgets it: Session)
        return _data_step(self, settings, con, state, held, batch, step, window, times,
                          clock=clock, token=token)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Bounded:
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


def _bound(held: _Held, batch: _Batch, k: int) -> _Bounded | None:
    """Rank, keep and the previous f of every row, in each unit's history order (ts, then
    record); None when a row's liveness verdict is not valid (the SQL step quarantines it:
    an insert of a live entry, an update or a delete of one that is not). The held seeds
    change only at settle (new ids, not live and without rows, are harmless)."""
    seeds = held.seeds
    known = len(seeds.keys)
    ids = seeds.grow(batch.entries)
    n = len(ids)
    at = np.arange(n)
    order = np.lexsort((at, batch.ts, ids))
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
    return _Bounded(
        ids, order, rank, rank <= k, prev, len(np.unique(ids[ids >= known])),
        changed=sid[rows], live=op[rows] == 0, record=held.head.lines + order[rows] + 1,
    )  # fmt: skip


def _data_step(
    holder: HeldState, settings: ReleaseSettings, con: duckdb.DuckDBPyConnection,
    state: SourceState, held: _Held, batch: _Batch, b: _Bounded,
    window: tuple[int, int, int, int], times: list[int], *, clock: int, token: str,
) -> DataStep:
    """The step's totals, reports and settle from the bounded batch."""
    from dpcr.engines.base import Aggregates, BoundingReport
    from dpcr.engines.state import with_counters
    from dpcr.queries import Sum

    lo, hi, settled_old, settled_new = window
    queries = settings.queries
    c = held.counters
    refuse_lost_records(state, c.get("records", 0) + len(batch.ts))
    first = settled_old + 1
    iv = np.searchsorted(np.asarray(times, dtype=np.int64), batch.ts, side="left") + 1
    width = max(0, len(times) - first + 1)
    kept = b.kept
    values: dict[str, np.ndarray] = {}
    for i, q in enumerate(queries):
        out = np.zeros((width, 1), dtype=np.int64)
        sel = kept & (iv >= first)
        np.add.at(out[:, 0], iv[sel] - first, (batch.f[i] - b.prev[i])[sel])
        values[q.name] = out
    dropped = int(np.count_nonzero(~kept))
    non_numeric = {q.name: int(np.count_nonzero(batch.nn[i] & kept))
                   for i, q in enumerate(queries) if isinstance(q, Sum)}  # fmt: skip
    new = BoundingReport(units=b.new_units, mutations=len(kept), kept=int(kept.sum()),
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
        units=c.get("units", 0) + b.new_units, mutations=c.get("mutations", 0) + new.mutations,
        kept=c.get("kept", 0) + new.kept, dropped={k: v for k, v in sorted(d.items()) if v},
        dropped_moves={k: dict(sorted(m.items())) for k, m in sorted(moves.items())},
        non_numeric={q.name: c.get("nn:" + q.name, 0) + non_numeric[q.name]
                     for q in queries if isinstance(q, Sum)
                     if c.get("nn:" + q.name, 0) + non_numeric[q.name]},
    )  # fmt: skip
    combined = Aggregates(first_interval=lo, last_interval=hi, values=combined_values,
                          report=report)  # fmt: skip
    ts = batch.ts
    load = _load_report(settings, c, len(ts))

    def settle(new_state: Any) -> None:
        try:
            _settle(settings, con, held, batch, b, agg, (settled_old, settled_new), new_state)
        except BaseException:
            holder.forget()
            raise

    return DataStep(load, combined, min(int(ts.min()), c.get("min_ts", 2**63)),
                    max(int(ts.max()), c.get("max_ts", -(2**63))),
                    int(np.count_nonzero(ts > clock)), token, settle)  # fmt: skip


def _load_report(settings: ReleaseSettings, c: dict[str, int], new: int) -> Any:
    from dpcr.changelog import REASONS, LoadReport, describe

    quarantined = {k[2:]: v for k, v in c.items() if k.startswith("q:")}
    return LoadReport(
        source=describe(settings.source), records=c.get("records", 0) + new,
        valid=c.get("valid", 0) + new,
        quarantined={r: quarantined[r] for r in REASONS if quarantined.get(r)},
        quarantine_path=settings.quarantine_path if settings.on_error == "quarantine"
        else None,
        tombstones=c.get("tombstones", 0), split=c.get("split", 0), late=c.get("late", 0),
    )  # fmt: skip


def _read_held(settings: ReleaseSettings, con: duckdb.DuckDBPyConnection) -> _Held | None:
    """The seeds, counters and totals of the attached state (None: none is attached, or it
    holds what the fast path does not keep: pending rows, per-unit classes or times)."""
    import duckdb

    from dpcr.changelog import latest
    from dpcr.engines.state import SCHEMA, counters, nothing_pending, read_head

    s = SCHEMA
    try:
        head = read_head(con)
        if head is None or not nothing_pending(con):
            return None
    except duckdb.Error:
        return None
    q = len(settings.queries)
    fs = "".join(f", e.f{i}" for i in range(q))
    cols = con.execute(
        f"SELECT u.unit, u.n, u.first_ts IS NULL AND u.cls = '' AS plain, "
        f"e.entry IS NOT DISTINCT FROM u.unit AND coalesce(e.ne, 0) = 0 AS one{fs}, "
        f"coalesce(l.live, FALSE) AS live "
        f"FROM {latest(f'{s}.units', 'unit', 'TRUE')} u "
        f"LEFT JOIN {latest(f'{s}.entries', 'unit, entry', 'TRUE')} e USING (unit) "
        f"LEFT JOIN {latest(f'{s}.live', 'unit, entry', 'TRUE')} l "
        "ON l.unit = u.unit AND l.entry = u.unit"
    ).fetchnumpy()
    if not (np.all(np.asarray(cols["plain"])) and np.all(np.asarray(cols["one"]))):
        return None
    seeds = _Seeds(q)
    keys = [str(k) for k in cols["unit"].tolist()]
    seeds.keys = keys
    seeds.ids = {k: j for j, k in enumerate(keys)}
    seeds.n = np.asarray(cols["n"], dtype=np.int64)
    seeds.f = np.asarray([np.asarray(cols[f"f{i}"], dtype=np.int64) for i in range(q)],
                         dtype=np.int64).reshape(q, len(keys))  # fmt: skip
    seeds.live = np.asarray(cols["live"], dtype=bool)
    totals: dict[int, dict[int, int]] = {}
    for qi, iv, key, value in con.execute(f"SELECT q, iv, key, value FROM {s}.totals").fetchall():
        if key != 0:
            return None
        totals.setdefault(int(qi), {})[int(iv)] = int(value)
    if con.execute(f"SELECT count(*) FROM {s}.clamps").fetchall()[0][0]:
        return None
    rows = dict(zip(("units", "entries", "live"), con.execute(
        f"SELECT (SELECT count(*) FROM {s}.units), (SELECT count(*) FROM {s}.entries), "
        f"(SELECT count(*) FROM {s}.live)").fetchall()[0], strict=True))  # fmt: skip
    return _Held(head, counters(con), seeds, totals, {k: int(v) for k, v in rows.items()})


def _settle(
    settings: ReleaseSettings, con: duckdb.DuckDBPyConnection, held: _Held, batch: _Batch,
    b: _Bounded, agg: Any, settled: tuple[int, int], new_state: Any,
) -> None:
    """Append the step's seeds, totals and counters to the state in one transaction (as
    :func:`dpcr.engines.incremental.settle` does), then move the held seeds forward."""
    import duckdb

    from dpcr.engines.state import SCHEMA, StateHead, add, write_head
    from dpcr.queries import Sum

    s = SCHEMA
    queries = settings.queries
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
    # The seeds: per unit its last row in history order.
    order = b.order
    ids_sorted = b.ids[order]
    last = order[np.flatnonzero(np.append(ids_sorted[1:] != ids_sorted[:-1], True))]
    units = b.ids[last]
    keys = [held.seeds.keys[j] for j in units.tolist()]
    con.execute("SET disabled_compression_methods = 'dict_fsst'")
    try:
        con.execute("BEGIN TRANSACTION")
        try:
            if b.new_units:
                add(c, "units", b.new_units)
            n_keys = len(keys)
            names = np.array(keys, dtype=object)
            version_col = np.full(n_keys, version, dtype=np.int64)
            _insert(con, f"{s}.units", {"unit": names, "n": b.rank[last],
                                        "first_ts": np.full(n_keys, None, dtype=object),
                                        "cls": np.full(n_keys, "", dtype=object),
                                        "v": version_col})  # fmt: skip
            _insert(con, f"{s}.entries", {
                "unit": names, "entry": names, "ne": np.zeros(n_keys, dtype=np.int64),
                **{f"f{i}": batch.f[i, last] for i in range(len(queries))}, "v": version_col,
            })  # fmt: skip
            live_keys = np.array([held.seeds.keys[j] for j in b.changed.tolist()], dtype=object)
            _insert(con, f"{s}.live", {
                "unit": live_keys, "entry": live_keys, "live": b.live,
                "record": b.record.astype(np.int64),
                "v": np.full(len(b.changed), version, dtype=np.int64),
            })  # fmt: skip
            appended = {"units": len(keys), "entries": len(keys), "live": len(b.changed)}
            rows = _compact(con, c, held.rows, appended, version)
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
                token=new_state.digest, lines=head.lines + len(ts), explicit=False,
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
    seeds = held.seeds
    seeds.n[units] = b.rank[last]
    seeds.f[:, units] = batch.f[:, last]
    seeds.live[b.changed] = b.live
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


def _compact(con: duckdb.DuckDBPyConnection, c: dict[str, int], rows: dict[str, int],
             appended: dict[str, int], version: int) -> dict[str, int]:  # fmt: skip
    """:func:`dpcr.engines.incremental._seed`'s rewrite of a seed table grown
    :data:`~dpcr.engines.incremental.COMPACT_GROWTH` times, from the held row counts."""
    from dpcr.changelog import latest
    from dpcr.engines.incremental import COMPACT_GROWTH
    from dpcr.engines.state import SCHEMA

    s = SCHEMA
    out = {}
    for table, key in (("units", "unit"), ("entries", "unit, entry"), ("live", "unit, entry")):
        n = rows[table] + appended[table]
        base = c.get(f"rows:{table}")
        if base is None:
            c[f"rows:{table}"] = n
        elif n > COMPACT_GROWTH * base:
            con.execute(f"CREATE TABLE {s}._dpcr_compact AS SELECT *, {version} AS v "
                        f"FROM {latest(f'{s}.{table}', key, 'TRUE')}")  # fmt: skip
            con.execute(f"DROP TABLE {s}.{table}")
            con.execute(f"ALTER TABLE {s}._dpcr_compact RENAME TO {table}")
            n = int(con.execute(f"SELECT count(*) FROM {s}.{table}").fetchall()[0][0])
            c[f"rows:{table}"] = n
        out[table] = n
    return out


def _suppress(*kinds: type[BaseException]) -> Any:
    from contextlib import suppress

    return suppress(*kinds)

