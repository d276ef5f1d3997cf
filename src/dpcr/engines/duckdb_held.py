"""What a session holds of the incremental state (:mod:`dpcr.engines.duckdb_memory`): the newest
seed of every unit by integer id, the counters and totals, read once from the state file; the
settle of a step from memory, which moves them forward and keeps the rows the SQL step's settle
(:func:`dpcr.engines.incremental.settle`) appends to the state file for the same records; and
the write of the rows kept, for any number of steps, in one transaction."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr._duck import afterwards
from dpcr.engines.held_columns import (
    Batch,
    Bounded,
    Carried,
    Held,
    Later,
    Seeds,
    Sequences,
    Settled,
    StepWindow,
)
from dpcr.engines.state import DICT_BASE, text_sql

if TYPE_CHECKING:
    import duckdb

    from dpcr.engines.base import AggregateRequest, StoreHead

__all__ = [
    "Batch", "Bounded", "Carried", "Held", "Later", "Seeds", "Sequences", "StepWindow",
    "interval_values", "plain_seeds", "read_held", "read_totals", "seed_columns", "settle_held",
    "write_held",
]  # fmt: skip


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



def seed_columns(queries: int) -> str:
    """SQL of the columns a session holds of a unit's newest row ``x`` of table seeds: ``u``,
    ``known`` (it has settled rows), ``n``, ``f0`` .., ``live``, ``record``, and what a step
    from memory needs of it (:func:`plain_seeds`): ``plain`` (no class or first time) and
    ``one`` (the unit is its one entry)."""
    fs = "".join(f", coalesce(x.f{i}, 0) AS f{i}" for i in range(queries))
    return ("x.u, x.n IS NOT NULL AS known, coalesce(x.n, 0) AS n, "
            "x.n IS NULL OR (x.first_ts IS NULL AND x.cls = '') AS plain, "
            f"x.e = x.u AND coalesce(x.ne, 0) = 0 AS one{fs}, coalesce(x.live, FALSE) AS live, "
            "coalesce(x.record, 0) AS record")  # fmt: skip


def plain_seeds(cols: dict[str, np.ndarray]) -> bool:
    """Whether every seed row of ``cols`` (:func:`seed_columns`) is one a step from memory
    holds."""
    return bool(np.all(np.asarray(cols["plain"])) and np.all(np.asarray(cols["one"])))


def read_totals(con: duckdb.DuckDBPyConnection) -> dict[int, dict[int, int]] | None:
    """The attached state's totals by query and interval (None: some are keyed, which a
    step from memory does not hold)."""
    from dpcr.engines.state import SCHEMA

    totals: dict[int, dict[int, int]] = {}
    for qi, iv, key, value in con.execute(f"SELECT q, iv, key, value FROM {SCHEMA}.totals"
                                          ).fetchall():  # fmt: skip
        if key != 0:
            return None
        totals.setdefault(int(qi), {})[int(iv)] = int(value)
    return totals


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
    cols = con.execute(
        f"SELECT {text_sql('x.u', 'nm.name')} AS unit, {seed_columns(q)}, coalesce(x.v, 0) AS v, "
        f"{_as_held(q)} AS whole FROM (SELECT * FROM {s}.seeds QUALIFY row_number() OVER "
        f"(PARTITION BY u, e ORDER BY v DESC) = 1) x LEFT JOIN {s}.names nm ON nm.id = x.u"
    ).fetchnumpy()
    if not plain_seeds(cols):
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
    seeds.v = np.asarray(cols["v"], dtype=np.int64)
    totals = read_totals(con)
    if totals is None or con.execute(f"SELECT count(*) FROM {s}.clamps").fetchall()[0][0]:
        return None
    rows = int(con.execute(f"SELECT count(*) FROM {s}.seeds").fetchall()[0][0])
    stored = con.execute(f"SELECT record, part, unit, entry, ts, seq, op, has_before, "
                         f"after::VARCHAR, raw FROM {s}.pending ORDER BY record, part"
                         ).fetchall() if later else []  # fmt: skip
    columns = [d[0] for d in con.execute(f"SELECT * FROM {s}.seeds LIMIT 0").description]
    return Held(head, c, seeds, totals, rows,
                sequences=_sequences(con, seeds) if head.explicit else None,
                stored=stored or None, whole=columns == list(_seed_table(q))
                and bool(np.all(np.asarray(cols["whole"]))))  # fmt: skip


def _as_held(queries: int) -> str:
    """SQL of whether the newest seed row ``x`` is as the held seeds have it (no column that
    :func:`seed_columns` reads as another value: :attr:`Held.whole`)."""
    fs = "".join(f" AND x.f{i} IS NOT NULL" for i in range(queries))
    return ("coalesce(x.n IS NOT NULL AND x.first_ts IS NULL AND x.cls = '' AND x.e = x.u "
            f"AND x.ne = 0{fs} AND x.live IS NOT NULL AND x.record IS NOT NULL "
            "AND x.v IS NOT NULL, FALSE)")  # fmt: skip


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
    held.pending.append(Settled(version, distinct, units, {
        "keys": _keys_rows(carried.new if carried is not None else batch, head.lines),
        "names": {"id": sid[fresh],
                  "name": np.array([seeds.keys[j] for j in units[fresh].tolist()],
                                   dtype=object)},
        "seeds": {"u": sid, "n": b.rank[last],  # (the other columns: _insert_seeds)
                  **{f"f{i}": batch.f[i, last] for i in range(len(queries))},
                  "live": live, "record": record, "v": np.full(n_keys, version, dtype=np.int64)},
        "totals": {"q": np.array([r[0] for r in totals], dtype=np.int32),
                   "iv": np.array([r[1] for r in totals], dtype=np.int64),
                   "key": np.zeros(len(totals), dtype=np.int32),
                   "value": np.array([r[2] for r in totals], dtype=np.int64)},
    }))  # fmt: skip
    seeds.n[units] = b.rank[last]
    for i in range(len(queries)):  # (a row at a time: a 2-d scatter costs several times more)
        seeds.f[i, units] = batch.f[i, last]
    seeds.known[units] = True
    seeds.live[units], seeds.record[units] = live, record
    if held.whole:  # (the version of each unit's newest row: of use to a rewrite alone)
        seeds.v[units] = version
    if held.whole and _rewrites(held):  # (table seeds' rows after it, from the held seeds)
        known = seeds.known[:seeds.size]
        kept: Any = slice(0, seeds.size) if known.all() else np.flatnonzero(known)
        held.pending[-1] = dataclasses.replace(held.pending[-1], newest={
            "u": seeds.sid[kept].copy(), "n": seeds.n[kept].copy(),
            **{f"f{i}": seeds.f[i, kept].copy() for i in range(len(queries))},
            "live": seeds.live[kept].copy(), "record": seeds.record[kept].copy(),
            "v": seeds.v[kept].copy()})  # fmt: skip
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
    held.counters, held.rows, held.pending, held.tally = c, rows, [], None


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


def _rewrites(held: Held) -> bool:
    """Whether the settle of the last of the steps not written (:attr:`Held.pending`)
    rewrites table seeds (:func:`_rewritten`, counted on from what it counted for the steps
    before: :attr:`Held.tally`)."""
    from dpcr.engines.incremental import compact_due

    steps, tally = held.pending, held.tally
    if tally is not None and tally[0] == len(steps) - 1:
        rows, base = tally[1], tally[2]
    else:
        c = dict(held.counters)
        rows = _rewritten(c, held.rows, steps[:-1])[1]
        base = c.get("rows:seeds")
    c = {} if base is None else {"rows:seeds": base}
    rows += len(steps[-1].rows["seeds"]["v"])
    due = compact_due(c, rows)
    if due:
        rows = c["rows:seeds"] = steps[-1].distinct
    held.tally = (len(steps), rows, c.get("rows:seeds"))
    return due


def _rewritten(c: dict[str, int], rows: int, steps: list[Settled]) -> tuple[int, int]:
    """The index of the last of ``steps`` whose settle rewrites table ``seeds``, of ``rows``
    rows before them (:func:`dpcr.engines.incremental.compact`; -1: none does), and the
    table's rows after them; ``c``'s count of the rows after its last rewrite is then the one
    after the steps."""
    from dpcr.engines.incremental import compact_due

    last = -1
    for i, step in enumerate(steps):
        rows += len(step.rows["seeds"]["v"])
        if compact_due(c, rows):
            last, rows = i, step.distinct
            c["rows:seeds"] = rows
    return last, rows


def _append_seeds(con: duckdb.DuckDBPyConnection, steps: list[Settled], c: dict[str, int],
                  rows: int) -> int:  # fmt: skip
    """Append the ``steps``' rows of table ``seeds`` and rewrite it as the last of the steps'
    settles that would rewrite it does (:func:`dpcr.engines.incremental.compact`: the earlier
    rewrites change nothing that rewrite leaves, the newest row of each key with its own
    version; their counts are the keys held after them); returns the table's rows after."""
    from dpcr.engines.incremental import rewrite_seeds
    from dpcr.engines.state import SCHEMA

    last, rows = _rewritten(c, rows, steps)
    newest = steps[last].newest if last >= 0 else None
    if newest is not None:  # (the rows the rewrite keeps, held: the table made of them)
        con.execute(f"CREATE TABLE {SCHEMA}._dpcr_compact AS SELECT * FROM {SCHEMA}.seeds "
                    "LIMIT 0")  # fmt: skip
        _insert_seeds(con, f"{SCHEMA}._dpcr_compact", newest)
        con.execute(f"DROP TABLE {SCHEMA}.seeds")
        con.execute(f"ALTER TABLE {SCHEMA}._dpcr_compact RENAME TO seeds")
    elif last >= 0:  # (of the rows the rewrite reads, the newest of each unit is all it keeps)
        read = steps[:last + 1]
        _insert_seeds(con, f"{SCHEMA}.seeds", _newest(_joined([p.rows["seeds"] for p in read]),
                                                      np.concatenate([p.ids for p in read])))
        rewrite_seeds(con)
    if last + 1 < len(steps):
        _insert_seeds(con, f"{SCHEMA}.seeds",
                      _joined([p.rows["seeds"] for p in steps[last + 1:]]))  # fmt: skip
    return rows


def _seed_table(queries: int) -> tuple[str, ...]:
    """The columns of table ``seeds`` of a state whose seeds a session holds (each unit its
    one entry, no class, first time or state machine: :func:`dpcr.engines.state.seed_columns`)."""
    return ("u", "e", "n", "first_ts", "cls", "ne", *(f"f{i}" for i in range(queries)), "live",
            "record", "v")  # fmt: skip


def _insert_seeds(con: duckdb.DuckDBPyConnection, table: str,
                  columns: dict[str, np.ndarray]) -> None:  # fmt: skip
    """:func:`_insert` of held seed rows (``u``, ``n``, ``f0`` .., ``live``, ``record``,
    ``v``) into ``table``, a table of :func:`_seed_table`'s columns: the unit its own entry,
    no first time or class, ``ne`` 0."""
    constant = {"e": "u", "first_ts": "NULL", "cls": "''", "ne": "0"}
    _insert(con, table, columns, [constant.get(c, c) for c in _seed_table(
        sum(name.startswith("f") for name in columns))])


def _insert(con: duckdb.DuckDBPyConnection, table: str, columns: dict[str, np.ndarray],
            select: Sequence[str] | None = None) -> None:  # fmt: skip
    """Append the rows whose columns are ``columns`` (in the table's order; ``select``: the
    table's columns as SQL of them) to ``table``, in one statement that scans the arrays
    (binding them as lists costs 3-4 times more)."""
    if not len(next(iter(columns.values()))):
        return
    con.register(_BATCH, columns)
    with afterwards(con, lambda: con.unregister(_BATCH)):
        con.execute(f"INSERT INTO {table} SELECT {', '.join(select or columns)} FROM {_BATCH}")


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
