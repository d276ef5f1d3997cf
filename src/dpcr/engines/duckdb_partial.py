"""The data step of a process that holds nothing yet (``dpcr run`` from cron) from memory.

A long-running session holds the newest seed of every unit (:mod:`dpcr.engines.duckdb_memory`);
a fresh process has none, and reading every unit's seed costs about what the SQL step costs
(a window over the whole seeds table). A step needs the seeds of the units its new lines touch
only: this reads the new lines once (:func:`~dpcr.engines.memory_batch.read_batch`), the newest
seed of each unit they name (by its id: an integer's own, or the state's dictionary's), the
counters and totals, and then bounds, aggregates and settles exactly as a session's step does
(:func:`~dpcr.engines.duckdb_memory.bound`, :func:`~dpcr.engines.duckdb_memory.data_step`,
:func:`~dpcr.engines.duckdb_held.settle_held`); once the store has committed, the rows of the
settle are written to the state file in one transaction
(:func:`~dpcr.engines.duckdb_held.write_held`). The state file is then the one the SQL step
leaves: the same tables with the same rows.

It runs when a session's step would (:func:`~dpcr.engines.memory_sources.accepts`) for a
JSON-lines source, the state file is at the store's head and keeps no pending mutation, and
every new line is plain and dated after the last released interval and by the end of the
interval this run releases, and the new lines are few enough: at most as many bytes as a
killed session's lost steps are replayed from (:data:`~dpcr.engines.duckdb_replay.
REPLAY_BYTES`, and :data:`~dpcr.engines.duckdb_replay.REPLAY_SHARE` of the file: a line parsed
in Python costs more than a line of DuckDB's reader). Anything else (no new line, a late,
pending or quarantined record, freeze points, a wal2json or Debezium source, whose sequence
numbers the state keeps per entry) takes the SQL step, which reads the state file as it was:
nothing here writes it before the settle.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr._duck import afterwards
from dpcr.engines.duckdb_held import (
    Held,
    Seeds,
    StepWindow,
    plain_seeds,
    read_totals,
    seed_columns,
    write_held,
)
from dpcr.engines.duckdb_memory import (
    HeldState,
    StepRead,
    bound,
    data_step,
    new_lines,
    read_batch,
)
from dpcr.engines.duckdb_replay import REPLAY_BYTES, REPLAY_SHARE
from dpcr.engines.memory_sources import explicit
from dpcr.engines.state import (
    DICT_BASE,
    SCHEMA,
    attach,
    counters,
    own_id,
    read_head,
)

if TYPE_CHECKING:
    import duckdb

    from dpcr.engines.base import AggregateRequest, DataStep, EngineRun
    from dpcr.engines.held_columns import Batch

__all__ = ["partial_step", "read_touched"]


class _Touched(HeldState):
    """The seeds of the units one step touches, held for that step: its settle writes the
    state file at once."""

    def __init__(self, held: Held, known: int) -> None:
        super().__init__()
        self.adopt(held)
        #: the units held with settled rows before the step (of the state's, :meth:`settled`)
        self.known = known

    def settled(self, con: duckdb.DuckDBPyConnection) -> None:
        """Write the step's rows. The keys of table seeds after it are those of the state
        file (not only the held ones'): counted when the write rewrites the table."""
        held = self._held
        if held is None or not held.pending:
            return
        from dpcr.engines.incremental import compact_due

        step = held.pending[-1]
        if compact_due(dict(held.counters), held.rows + len(step.rows["seeds"]["v"])):
            import dataclasses

            outside = _known_keys(con) - self.known
            held.pending[-1] = dataclasses.replace(step, distinct=step.distinct + outside)
        write_held(con, held)


def _pending(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the attached state keeps pending mutations (its result fetched whole: an
    open result would keep the connection from registering the ids)."""
    return bool(con.execute(f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.pending)").fetchall()[0][0])


def _known_keys(con: duckdb.DuckDBPyConnection) -> int:
    """The keys of the state's table seeds whose newest row has settled rows (those a
    session holds as known)."""
    row = con.execute(
        f"SELECT count(*) FILTER (WHERE n IS NOT NULL) FROM (SELECT n FROM {SCHEMA}.seeds "
        "QUALIFY row_number() OVER (PARTITION BY u, e ORDER BY v DESC) = 1)"
    ).fetchone()
    return int(row[0]) if row else 0


def read_touched(request: AggregateRequest, con: duckdb.DuckDBPyConnection, head: Any,
                 entries: list[str] | np.ndarray) -> tuple[Held, int] | None:  # fmt: skip
    """The attached state (whose head is ``head``) as :func:`~dpcr.engines.duckdb_held.
    read_held` reads it, but of the seeds those of the units ``entries`` (texts, or integers
    whose texts they stand for) alone; and how many of them have settled rows. None: the
    state holds what a step from memory does not keep (per-unit classes or times, a unit with
    several entries, keyed totals, clamps)."""
    q = len(request.queries)
    ids, texts = _unit_ids(con, entries)
    cols = _newest_seeds(con, q, ids)
    if not plain_seeds(cols):
        return None
    clamps, rows = con.execute(
        f"SELECT (SELECT count(*) FROM {SCHEMA}.clamps), (SELECT count(*) FROM {SCHEMA}.seeds)"
    ).fetchall()[0]
    totals = read_totals(con)
    if totals is None or clamps:
        return None
    c = counters(con)
    sid = np.asarray(cols["u"], dtype=np.int64)
    seeds = Seeds(q)
    seeds.next_sid = DICT_BASE + c.get("ids", 0) + 1
    if texts is None:  # (integers: each its own id, its text made when it is read)
        at = seeds.grow(sid)
    else:
        by_id = dict(zip(ids.tolist(), texts, strict=True))
        seeds.keys = [by_id[u] for u in sid.tolist()]
        seeds.sid = sid
        at = np.arange(len(sid))
        seeds.n, seeds.live, seeds.record = (np.zeros(len(sid), dtype=np.int64),
                                             np.zeros(len(sid), dtype=bool),
                                             np.zeros(len(sid), dtype=np.int64))  # fmt: skip
        seeds.known, seeds.f = np.zeros(len(sid), dtype=bool), np.zeros((q, len(sid)), np.int64)
    seeds.known[at] = np.asarray(cols["known"], dtype=bool)
    seeds.n[at] = np.asarray(cols["n"], dtype=np.int64)
    for i in range(q):
        seeds.f[i, at] = np.asarray(cols[f"f{i}"], dtype=np.int64)
    seeds.live[at] = np.asarray(cols["live"], dtype=bool)
    seeds.record[at] = np.asarray(cols["record"], dtype=np.int64)
    held = Held(head, c, seeds, totals, int(rows))
    return held, int(np.count_nonzero(seeds.known[:seeds.size]))


def _newest_seeds(con: duckdb.DuckDBPyConnection, queries: int,
                  ids: np.ndarray) -> dict[str, np.ndarray]:  # fmt: skip
    """The newest row of table seeds of each unit of ``ids`` (state ids, repeats allowed):
    its columns as a session holds them (:func:`~dpcr.engines.duckdb_held.seed_columns`), in
    the order of their keys ``u``, ``e``. The rows of the units are read as they are and the
    newest of each key (the highest version ``v``) taken here: a window over them in SQL costs
    more than the read."""
    con.register(_IDS, {"id": ids})
    with afterwards(con, lambda: con.unregister(_IDS)):
        got: dict[str, np.ndarray] = con.execute(
            f"SELECT {seed_columns(queries)}, x.e AS _e, x.v AS _v FROM {SCHEMA}.seeds x "
            f"WHERE x.u IN (SELECT id FROM {_IDS})"
        ).fetchnumpy()
    e, v = np.asarray(got.pop("_e")), np.asarray(got.pop("_v"))
    rows = _newest_rows(np.asarray(got["u"]), e, v)
    return {name: np.asarray(column)[rows] for name, column in got.items()}


def _newest_rows(u: np.ndarray, e: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The row of each key (``u``, ``e``) with the highest version ``v`` (of rows with the
    same key and version, the last), in the order of the keys."""
    order = np.argsort(u)
    if len(u) < 2 or bool((u[order[1:]] != u[order[:-1]]).all()):
        return order  # (each unit one row, the usual case: one key each, a sort by it)
    order = np.lexsort((v, e, u))
    u, e = u[order], e[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (u[1:] != u[:-1]) | (e[1:] != e[:-1])
    rows: np.ndarray = order[last]
    return rows


_IDS = "_dpcr_touched_ids"


def _unit_ids(con: duckdb.DuckDBPyConnection,
              entries: list[str] | np.ndarray) -> tuple[np.ndarray, list[str] | None]:  # fmt: skip
    """The state ids of the units ``entries`` (an integer's text is its own id; another's is
    found in table ``names``; a text it lacks has none), and their texts (None: ``entries``
    are integers, each its own id, repeats kept)."""
    if isinstance(entries, np.ndarray) and (not len(entries) or int(entries.max()) < DICT_BASE):
        return entries.astype(np.int64, copy=False), None
    texts: list[str] = []
    ids: list[int] = []
    named: list[str] = []
    for text in dict.fromkeys(map(str, entries.tolist()) if isinstance(entries, np.ndarray)
                              else entries):  # fmt: skip
        got = own_id(text)
        if got is None:
            named.append(text)
        else:
            texts.append(text)
            ids.append(got)
    if named:
        con.register(_IDS, {"name": np.array(named, dtype=object)})
        with afterwards(con, lambda: con.unregister(_IDS)):
            found = con.execute(f"SELECT nm.name, nm.id FROM {SCHEMA}.names nm "
                                f"WHERE nm.name IN (SELECT name FROM {_IDS})").fetchall()
        for name, id_ in found:
            texts.append(str(name))
            ids.append(int(id_))
    return np.array(ids, dtype=np.int64), texts


def partial_step(request: AggregateRequest, run: EngineRun, window: StepWindow,
                 path: Path) -> DataStep | None:  # fmt: skip
    """The data step from memory with the touched units' seeds of the state file at ``path``
    (module docstring), or None when it must run in SQL (the state file unchanged; it may be
    left attached)."""
    from dpcr.changelog.position import parse_token

    state, con = run.store, run.connection
    old, settle_at = parse_token(state.token), window.settle_at
    if request.frozen or settle_at is None or old is None or not state.records \
            or state.t_last is None or explicit(request) or not path.exists():  # fmt: skip
        return None
    source = Path(str(getattr(request.source, "path", "")))
    if not source.is_file() or source.stat().st_size <= old.size:
        return None  # (nothing new, most likely: not worth a second check of the position)
    attach(con, path, fresh=False)
    head = read_head(con)
    if head is None or (head.records, head.interval, head.token, head.fingerprint) != (
        state.records, state.interval, state.token, run.fingerprint
    ) or not head.columns_ok or head.explicit or _pending(con):  # fmt: skip
        return None

    def read(_source: Any, size: int) -> Batch | None:
        if size <= old.size:
            return None  # (nothing new: the SQL step answers from the state alone)
        if size - old.size > min(REPLAY_BYTES, REPLAY_SHARE * size):
            return None  # (lines parsed in Python cost more a line than the SQL step's)
        data = new_lines(source, old.size, size)
        return None if data is None else read_batch(data, request)

    run.progress("load changelog", 0, 1)
    batch, token = run.at_position(read, bounded=True)
    run.progress("load changelog", 1, 1)
    if batch is None or not len(batch.ts) or int(batch.ts.max()) > settle_at \
            or int(batch.ts.min()) <= state.t_last:  # (pending or late records)  # fmt: skip
        return None
    con.execute("SET threads = 1")  # (small statements: a second thread costs more than it saves)
    got = read_touched(request, con, head, batch.entries)
    if got is None:
        return None
    held, known = got
    b = bound(held, batch, request.constraint.k)  # type: ignore[union-attr]
    if b is None:
        return None
    return data_step(_Touched(held, known), request, run, StepRead(held, batch, b, token),
                     window)  # fmt: skip
