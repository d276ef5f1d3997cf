"""Runs that cost what is new: the bounding state of every unit, carried from run to run.

A release's *settled* rows are its valid mutations dated at or before ``t_last``, the end of the
last released interval: no later record can change their verdicts, ranks or contributions
(late records freeze their entry instead, :mod:`dpcr.changelog._resume`). The state file keeps
what later rows need of them, so a run reads only the records appended since the last one
(:func:`dpcr.changelog._increment.load_increment`) and bounds them continuing every history:

=========== ================================================================================
table       rows
=========== ================================================================================
meta        the store head the state belongs to (records, interval, position), format
pending     mutations that passed phases 1-2 dated after ``t_last`` (re-judged every run)
names       the dictionary: an integer id per unit and entry text the seeds hold that is
            not an integer (an integer below ``DICT_BASE`` is its own id)
seeds       per (unit, entry), by ids: its settled rows' last f per query, last state per
            machine, last settled insert or delete (liveness seed); and its unit's settled
            rows ``n``, first time, class, first state-machine failure
keys        per (unit, entry, seq): its first record (explicit sequence numbers only)
totals      exact change per settled base interval, query and key (clamps: clamped units)
okeys       per open histogram: the candidate keys settled rows hold, with their first interval
ototals     per open histogram: exact change per settled base interval and key (its text)
qlines      quarantine lines whose verdict is final
counters    the reports' counts over settled rows and consumed records; the seed version;
            the units in the state (per class ``u:<class>``); the largest id (``ids``)
=========== ================================================================================

``seeds`` only gains rows: a run appends a new version ``v`` of each (unit, entry) it settles,
one row each, and readers take the newest (:func:`~dpcr.engines.seeds.lookup_seeds`); the rows
a run appends for a unit all carry the unit's columns, so its newest row holds the newest.
Replacing the old rows instead would rewrite most of the file's row groups at every
checkpoint, a cost of the whole state per run; appending costs what is new, and the table is
rewritten with its newest versions only once it has doubled (:data:`COMPACT_GROWTH`). A run
turns the texts of the units and entries it sees into ids (those that are not integers with
one read of ``names``), and reads the seeds of those units once by id.

Every table holds exact, per-unit data: the file is created owner-only (0600) in an owner-only
folder (0700) next to the store and is operator-only (docs/store.md). It is written after the
store commits, in one transaction, and names the store head it matches; a state that does not
match the store (a crash between the two commits, an older dpcr) is rebuilt from the whole
source, which gives the same releases.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import duckdb

from dpcr._duck import one_thread
from dpcr._sql import insert_columns
from dpcr.bounding.constraints import Constraint, Hybrid
from dpcr.bounding.sql import bounding_sql
from dpcr.changelog import Increment, ensure_raw, mark_checked, mark_unchecked
from dpcr.engines.base import Aggregates, open_columns
from dpcr.engines.duckdb import aggregate, dropped_moves
from dpcr.engines.seeds import (
    MERGED,
    TOUCHED_ENTRIES,
    TOUCHED_NAMES,
    TOUCHED_UNITS,
    one_entry,
    own_entries,
    settling_seeds,
)
from dpcr.engines.state import (
    DICT_BASE,
    SCHEMA,
    SEP,
    StateHead,
    add,
    counters,
    fetch,
    id_sql,
    seed_columns,
    state_totals,
    write_head,
)
from dpcr.engines.totals import SETTLING
from dpcr.queries import GroupedSum, Histogram, Query, Sum, has_open_keys

__all__ = ["seeded_aggregate", "settle"]

_LIVENESS = ("update_before_insert", "delete_before_insert", "double_insert")

#: The row of ``_dpcr_bounded`` (seeded) that is the first of a unit the state does not know
#: (:data:`~dpcr.engines.seeds.TOUCHED_UNITS`): whose rank within its unit is 1.
_NEW_UNIT = "rank_u = 1"


def seeded_view(con: duckdb.DuckDBPyConnection, valid: str, name: str, queries: int,
                machines: int, *, empty: bool = False, text: Sequence[int] = ()) -> None:
    """View ``name``: the rows of ``valid`` with their seed columns (see
    :func:`dpcr.engines.duckdb.aggregate`, ``seeded``): the state's newest seeds of the run's
    units that the load looked up (:func:`~dpcr.engines.seeds.lookup_seeds`); ``empty``: the
    state has none, all are NULL (``text``: the queries whose f is text, open histograms)."""
    cols = ["u.n AS s_n", "u.first_ts AS s_first_ts", "u.cls AS s_cls", "e.ne AS s_ne"]
    cols += [f"e.f{i} AS s_f{i}" for i in range(queries)]
    for j in range(machines):
        cols += [f"u.cut{j} AS s_cut{j}", f"e.st{j} AS s_st{j}", f"e.comp{j} AS s_comp{j}",
                 f"e.cn{j} AS s_cn{j}"]  # fmt: skip
    if empty:
        types = {"s_cls": "VARCHAR"} | {f"s_st{j}": "VARCHAR" for j in range(machines)}
        types |= {f"s_f{i}": "VARCHAR" for i in text}
        nulls = [f"NULL::{types.get(c.split(' AS ')[1], 'BIGINT')} AS {c.split(' AS ')[1]}"
                 for c in cols]  # fmt: skip
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT *, {', '.join(nulls)} "
                    f"FROM {valid}")  # fmt: skip
        return
    if own_entries(con):  # (one row a unit, its entry's: one join by the unit)
        cols = [f"CASE WHEN {'e.n IS NOT NULL' if c[0] == 'u' else 'v.entry = e.entry'} "
                f"THEN e.{c[2:].replace(' AS ', ' END AS ')}" for c in cols]  # fmt: skip
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT v.*, {', '.join(cols)} FROM "
            f"{valid} v LEFT JOIN {TOUCHED_ENTRIES} e ON e.unit = v.unit"
        )
        return
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT v.*, {', '.join(cols)} FROM {valid} v "
        f"LEFT JOIN {TOUCHED_UNITS} u USING (unit) "
        f"LEFT JOIN {TOUCHED_ENTRIES} e USING (unit, entry)"
    )


def seeded_aggregate(
    con: duckdb.DuckDBPyConnection,
    inc: Increment,
    *,
    queries: Sequence[Query],
    constraint: Constraint,
    release_times: Sequence[int],
    lo: int,
    hi: int,
    settled: int,
    unit_is_entry: bool,
    progress: Any = None,
    empty: bool = False,
    settle_at: int | None = None,
) -> tuple[Aggregates, Aggregates]:
    """Totals of base intervals ``lo .. hi`` (``release_times`` may go further): those up to
    ``settled`` (the settled base intervals) from the state, the others from this run's rows
    bounded continuing every history; the report covers settled and new rows alike. Returns
    that and the aggregation of this run's rows (intervals ``settled + 1 ..``) for
    :func:`settle`, which is to settle the rows dated at or before ``settle_at`` (the same
    pass summarises them when it can). An ``inc`` whose liveness check was deferred
    (``Increment.unchecked``) is checked by the aggregation, which raises
    :class:`dpcr.changelog.NotPlain` when a history is not plain: the caller loads again with
    the check."""
    machines = bounding_sql(constraint).machines
    seeded_view(con, inc.valid, "_dpcr_seeded", len(queries), machines, empty=empty,
                text=open_queries(queries))  # fmt: skip
    if inc.unchecked:  # (the ranking window checks the histories, or NotPlain is raised)
        mark_unchecked(con, "_dpcr_seeded")
    else:  # (a session's connection: not an earlier step's mark, whose aggregation failed)
        mark_checked(con, "_dpcr_seeded")
    first = settled + 1
    agg = aggregate(
        con, table="_dpcr_seeded", queries=queries, constraint=constraint,
        release_times=release_times, first_interval=first, unit_is_entry=unit_is_entry,
        # An empty state seeds nothing: without state machines (whose cut columns the state
        # keeps from the seeded rows) the rows are bounded as a full load's are.
        progress=progress, seeded=not empty or machines > 0, summarise_to=_upto(settle_at),
        # (without explicit sequence numbers every row's is its record number)
        seq_is_record=not inc.explicit, numbers=inc.numbers,
    )  # fmt: skip
    r = agg.report
    # A unit the state knows has settled rows (``s_n`` >= 1): every rank of its rows here is
    # above 1. A new unit's first row here has rank 1 (and its class is the unit's).
    new_units = r.units if empty else int(  # (empty: every unit is new)
        fetch(con, f"SELECT count(*) FROM _dpcr_bounded WHERE {_NEW_UNIT}")[0][0])
    new_by_class: dict[str, int] = {}
    if isinstance(constraint, Hybrid):
        new_by_class = {cls: u["units"] for cls, u in r.by_class.items()} if empty else dict(
            fetch(con, f"SELECT cls, count(*) FROM _dpcr_bounded WHERE {_NEW_UNIT} "
                       "GROUP BY cls"))  # fmt: skip
    combined = state_totals(con, queries=queries, constraint=constraint, lo=lo, hi=hi,
                            settled=settled, new=agg, added=(new_units, new_by_class))
    return combined, agg


def settle(
    con: duckdb.DuckDBPyConnection,
    inc: Increment,
    agg: Aggregates,
    *,
    queries: Sequence[Query],
    constraint: Constraint,
    t_new: int | None,
    settled_old: int,
    settled_new: int,
    head: StateHead,
) -> None:
    """Carry this run's rows dated at or before ``t_new`` (base intervals up to
    ``settled_new``) into the state, keep the later ones as pending, and record ``head``: one
    transaction, after the store committed (see the module docstring). The state's text
    columns are written without DuckDB's dictionary-FSST compression (:data:`UNCOMPRESSED`)."""
    con.execute(f"SET disabled_compression_methods = '{UNCOMPRESSED}'")
    try:
        _settle(con, inc, agg, queries=queries, constraint=constraint, t_new=t_new,
                settled_old=settled_old, settled_new=settled_new, head=head)  # fmt: skip
    finally:
        with suppress(duckdb.Error):
            con.execute("RESET disabled_compression_methods")


#: The compression method the state's writes leave out: dictionary-FSST, which DuckDB picks
#: for the state's unit and entry keys, costs more than the rest of writing them (a first run
#: over 10^7 mutations of 2M entries: its three seed inserts took 1.5 s of CPU without it, 3.3 s
#: with it), for a file 2.5 times smaller (49 MB instead of 126 MB).
UNCOMPRESSED = "dict_fsst"


def _settle(
    con: duckdb.DuckDBPyConnection,
    inc: Increment,
    agg: Aggregates,
    *,
    queries: Sequence[Query],
    constraint: Constraint,
    t_new: int | None,
    settled_old: int,
    settled_new: int,
    head: StateHead,
) -> None:
    """:func:`settle`."""
    s = SCHEMA
    t = _upto(t_new)
    summary = _summary(con, t)
    c = counters(con)  # (this connection is the state's only writer: read once, before)
    columns, mode = _new_seeds(con, inc, constraint, queries, t, summary=summary,
                               seeded="rows:seeds" in c)  # fmt: skip
    con.execute("BEGIN TRANSACTION")
    try:
        c["version"] = c.get("version", 0) + 1  # of the seeds appended below
        for k, v in (("records", inc.records), ("split", inc.split),
                     ("tombstones", inc.tombstones), ("late", inc.late)):  # fmt: skip
            add(c, k, v)
        for reason, n in fetch(con, f"SELECT reason, count(*) FROM {inc.bad} WHERE reason <> "
                            f"'tombstone' AND (reason NOT IN {_LIVENESS} OR ts <= ?) "
                            "GROUP BY reason", [t]):  # fmt: skip
            add(c, f"q:{reason}", n)
        valid, lo_ts, hi_ts = fetch(con, f"SELECT count(*), min(ts), max(ts) FROM {inc.good} "
                                 "WHERE chk IS NULL AND ts <= ?", [t])[0]  # fmt: skip
        add(c, "valid", valid)
        if lo_ts is not None:
            c["min_ts"] = min(c.get("min_ts", lo_ts), int(lo_ts))
            c["max_ts"] = max(c.get("max_ts", hi_ts), int(hi_ts))
        _settle_counts(con, c, queries, t, summary=summary)
        settling = f"(SELECT * FROM _dpcr_bounded WHERE ts <= {t})"
        for reason, moves in dropped_moves(con, settling, bounding_sql(constraint).move).items():
            for move, n in moves.items():
                add(c, f"mv:{reason}{SEP}{move}", n)
        if isinstance(constraint, Hybrid):
            for cls, k_, d_ in fetch(con, f"SELECT cls, count(*) FILTER (WHERE kept), count(*) "
                                  f"FILTER (WHERE NOT kept) FROM {settling} GROUP BY cls"):
                add(c, f"c:kept:{cls}", k_)
                add(c, f"c:dropped:{cls}", d_)
        _seed(con, c, columns, mode)
        con.execute(f"DELETE FROM {s}.pending")
        con.execute(f"INSERT INTO {s}.pending SELECT * FROM _dpcr_sp")
        if inc.keys is not None:
            _one_writer(con, f"INSERT INTO {s}.keys SELECT * FROM {inc.keys}")
        con.execute(
            f"INSERT INTO {s}.qlines SELECT record, part, line FROM {inc.bad}_lines "
            f"WHERE reason NOT IN {_LIVENESS} OR ts <= {t}"
        )
        rows = []
        for i, q in enumerate(queries):
            vals = agg.values[q.name]
            per = agg.clamps.get(q.name)
            if has_open_keys(q):
                _settle_open(con, i, q, agg, settled_old, settled_new)
                continue
            for iv in range(max(settled_old + 1, agg.first_interval), settled_new + 1):
                r = iv - agg.first_interval
                rows += [(i, iv, k, int(v)) for k, v in enumerate(vals[r]) if v]
                if per is not None and per[r]:
                    con.execute(f"INSERT INTO {s}.clamps VALUES (?, ?, ?)", [i, iv, int(per[r])])
        kinds = ("INTEGER", "BIGINT", "INTEGER", "BIGINT")
        insert_columns(con, f"{s}.totals",
                       [([r[j] for r in rows], kind) for j, kind in enumerate(kinds)])
        write_head(con, c, head)
    except BaseException:
        with suppress(duckdb.Error):  # (a failed COMMIT may have ended the transaction)
            con.execute("ROLLBACK")
        raise


def _new_seeds(con: duckdb.DuckDBPyConnection, inc: Increment, constraint: Constraint,
               queries: Sequence[Query], t: int, *, summary: bool,
               seeded: bool) -> tuple[list[tuple[str, str, str]], str]:  # fmt: skip
    """The rows kept as pending (``_dpcr_sp``) and the new seeds
    (:func:`~dpcr.engines.seeds.settling_seeds`) of a settle at ``t``: the seeds' columns and
    how :data:`~dpcr.engines.seeds.MERGED` holds them."""
    columns = seed_columns(len(queries), bounding_sql(constraint).machines,
                           open_queries(queries))  # fmt: skip
    _pending(con, inc, t)
    mode = settling_seeds(con, inc, constraint, columns, len(queries), t, summary=summary,
                          seeded=seeded)  # fmt: skip
    return columns, mode


def open_queries(queries: Sequence[Query]) -> tuple[int, ...]:
    """The numbers of the queries with open keys among ``queries`` (their f is text)."""
    return tuple(i for i, q in enumerate(queries) if has_open_keys(q))


def _settle_open(con: duckdb.DuckDBPyConnection, i: int, q: Query, agg: Aggregates,
                 settled_old: int, settled_new: int) -> None:  # fmt: skip
    """Carry open histogram ``i``'s totals of base intervals ``settled_old + 1 ..
    settled_new`` into the state, with the candidate keys that settled rows hold first (a key
    first held after ``settled_new`` is held by a pending row only: the next run finds it)."""
    s = SCHEMA
    keys = open_columns(q, agg.candidates.get(q.name, {}))
    vals = agg.values[q.name]
    rows = []
    for iv in range(max(settled_old + 1, agg.first_interval), settled_new + 1):
        r = iv - agg.first_interval
        rows += [(i, iv, keys[k], int(v)) for k, v in enumerate(vals[r]) if v]
    kinds = ("INTEGER", "BIGINT", "VARCHAR", "BIGINT")
    insert_columns(con, f"{s}.ototals",
                   [([r[j] for r in rows], kind) for j, kind in enumerate(kinds)])  # fmt: skip
    first = [(k, iv) for k, iv in agg.candidates.get(q.name, {}).items() if iv <= settled_new]
    if first:
        con.execute(
            f"INSERT INTO {s}.okeys SELECT {i}, k, iv FROM (SELECT unnest(?::VARCHAR[]) AS k, "
            f"unnest(?::BIGINT[]) AS iv) n WHERE NOT EXISTS (SELECT 1 FROM {s}.okeys o "
            f"WHERE o.q = {i} AND o.key = n.k)",
            [[k for k, _ in first], [iv for _, iv in first]],
        )


def _one_writer(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Run ``sql`` (an append to a state table) on one thread. Rows appended by several
    threads leave partly filled row groups, which the checkpoints of later runs merge by
    rewriting much of the table: for ``keys``, a row per mutation of the history (at 10^7,
    3.8 s at the first step after a full run, then about 1 s at each of the next few, where
    the step costs 2 s)."""
    with one_thread(con):
        con.execute(sql)


def _upto(t_new: int | None) -> int:
    """The rows that settle are those dated at or before this (none when ``t_new`` is None)."""
    return -(2**63) if t_new is None else int(t_new)


def _summary(con: duckdb.DuckDBPyConnection, t: int) -> bool:
    """Whether the aggregation summarised the rows that settle at ``t`` (:data:`SETTLING`)."""
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = ?", [SETTLING]
    ).fetchone()
    if not row or not row[0]:
        return False
    upto = con.execute(f"SELECT any_value(upto) FROM {SETTLING}").fetchone()
    return upto is not None and upto[0] == t


def _settle_counts(con: duckdb.DuckDBPyConnection, c: dict[str, int], queries: Sequence[Query],
                   t: int, *, summary: bool) -> None:  # fmt: skip
    """Add the counts of the bounding report over the rows that settle at ``t`` to ``c``: one
    scan of them, or of their summary (:data:`SETTLING`, rows per interval, kept and reason)."""
    settling = f"(SELECT * FROM _dpcr_bounded WHERE ts <= {t})"
    names = ["mutations", "kept"]
    counts = ["count(*)", "count(*) FILTER (WHERE kept)"]
    for i, q in enumerate(queries):
        if isinstance(q, Sum):
            names.append(f"nn:{q.name}")
            counts.append(f"count(*) FILTER (WHERE kept AND nn{i})")
        if isinstance(q, Histogram | GroupedSum) and q.unknown in ("drop", None) and not q.open:
            names.append(f"uk:{q.name}")
            counts.append(f"count(*) FILTER (WHERE kept AND f{i} = -2)")
    by_reason = f"SELECT reason, count(*) FROM {settling} WHERE NOT kept GROUP BY reason"
    if summary:  # (counts and sums only: no histogram)
        settling = SETTLING  # (a row per interval, kept and reason)
        counts = ["sum(s_c)", "sum(s_c) FILTER (WHERE kept)"] + [
            f"sum(s_nn{i}) FILTER (WHERE kept)" for i, q in enumerate(queries)
            if isinstance(q, Sum)]  # fmt: skip
        counts = [f"coalesce({x}, 0)" for x in counts]
        by_reason = f"SELECT reason, sum(s_c) FROM {settling} WHERE NOT kept GROUP BY reason " \
            "HAVING sum(s_c) > 0"  # fmt: skip
    row = fetch(con, f"SELECT {', '.join(counts)} FROM {settling}")[0]
    for name, n in zip(names, row, strict=True):
        add(c, name, n)
    for reason, n in fetch(con, by_reason):
        add(c, f"d:{reason}", n)


#: Table ``seeds`` is rewritten with only the newest version of each key once it holds this
#: many times the rows it held after its last rewrite.
COMPACT_GROWTH = 2.0

def _seed(con: duckdb.DuckDBPyConnection, c: dict[str, int],
          columns: Sequence[tuple[str, str, str]], mode: str) -> None:  # fmt: skip
    """Append the new seeds (:data:`MERGED`, as ``mode`` says:
    :func:`~dpcr.engines.seeds.settling_seeds`) as version ``c["version"]`` of their (unit,
    entry) keys (:func:`_append_seeds`: ids after ``DICT_BASE + c["ids"]`` for texts new to
    the state's dictionary, which holds the texts that are not integers), and
    count the units new to the state (``units``, and per class ``u:<class>``). Older versions
    stay (readers take the newest, :func:`~dpcr.engines.seeds.lookup_seeds`): appending
    touches only new row groups of the state file, where deleting the old versions would
    rewrite most of them at every checkpoint; once the table has grown
    :data:`COMPACT_GROWTH` times since its last rewrite it is rewritten with the newest
    versions only (amortised O(1) per new row)."""
    s, v = SCHEMA, int(c["version"])
    base = c.get("ids", 0)
    old = {"empty": "", "own": " AND NOT coalesce(known, FALSE)"}.get(
        mode, f" AND unit NOT IN (SELECT unit FROM {TOUCHED_UNITS})")  # fmt: skip
    new_units = fetch(con, f"SELECT cls, count(DISTINCT unit) FROM {MERGED} WHERE n IS NOT "
                           f"NULL{old} GROUP BY cls")  # fmt: skip
    c["ids"] = base + _append_seeds(con, columns, mode, v, DICT_BASE + base)
    for cls, n in new_units:
        add(c, "units", n)
        if cls is not None:
            add(c, f"u:{cls}", n)
    rows = int(fetch(con, f"SELECT count(*) FROM {s}.seeds")[0][0])
    compact(con, c, rows)


def _append_seeds(con: duckdb.DuckDBPyConnection, columns: Sequence[tuple[str, str, str]],
                  mode: str, v: int, first: int) -> int:  # fmt: skip
    """Append the rows of :data:`MERGED` (as ``mode`` says) to table ``seeds`` as version
    ``v``, by ids: a text that is an integer below :data:`~dpcr.engines.state.DICT_BASE` is
    its own, the others the dictionary's, where texts new to it are added numbered after
    ``first``. Returns how many numbers after ``first`` it used."""
    s = SCHEMA
    names = ", ".join(name for name, _, _ in columns)
    if mode == "empty" and one_entry(con):  # (ids numbered in the merged rows)
        own = f"(SELECT *, {id_sql('unit', '_dpcr_n')} AS _dpcr_own FROM (SELECT *, " \
            f"try_cast(unit AS BIGINT) AS _dpcr_n FROM {MERGED}))"  # fmt: skip
        con.execute(f"INSERT INTO {s}.names SELECT {first} + id, unit FROM {own} "
                    "WHERE _dpcr_own IS NULL")  # fmt: skip
        con.execute(f"INSERT INTO {s}.seeds SELECT coalesce(_dpcr_own, {first} + id), "
                    f"coalesce(_dpcr_own, {first} + id), {names}, {v} FROM {own}")  # fmt: skip
        added = int(fetch(con, f"SELECT count(*) FROM {MERGED}")[0][0])  # (ids used, or not)
    elif mode == "own":  # (the state's ids of the units it holds: no join of them by text)
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _dpcr_sn AS SELECT name, old IS NULL AS fresh, "
            f"coalesce(old, {first} + row_number() OVER (PARTITION BY old IS NULL)) AS id "
            f"FROM (SELECT m.unit AS name, t.id AS old FROM {MERGED} m "
            f"LEFT JOIN {TOUCHED_NAMES} t ON t.name = m.unit WHERE m.uid IS NULL)"
        )
        con.execute(f"INSERT INTO {s}.names SELECT id, name FROM _dpcr_sn WHERE fresh")
        con.execute(
            f"INSERT INTO {s}.seeds SELECT coalesce(m.uid, n.id), coalesce(m.uid, n.id), "
            f"{', '.join(f'm.{n}' for n, _, _ in columns)}, {v} FROM {MERGED} m "
            "LEFT JOIN _dpcr_sn n ON n.name = m.unit"
        )
        added = int(fetch(con, "SELECT count(*) FROM _dpcr_sn WHERE fresh")[0][0])
    else:
        # (the texts the state knows, and those that are integers, are in TOUCHED_NAMES;
        # an empty state's integers are their own ids)
        texts = f"SELECT DISTINCT name FROM (SELECT unit AS name FROM {MERGED} UNION ALL " \
            f"SELECT entry FROM {MERGED} WHERE entry <> unit)"  # fmt: skip
        if mode == "empty":
            con.execute(f"CREATE OR REPLACE TEMP TABLE _dpcr_so AS SELECT name, "
                        f"{id_sql('name', 'n')} AS id FROM (SELECT name, try_cast(name AS "
                        f"BIGINT) AS n FROM ({texts}))")  # fmt: skip
            texts, known = "SELECT name FROM _dpcr_so WHERE id IS NULL", "_dpcr_so"
        else:
            texts += f" WHERE name NOT IN (SELECT name FROM {TOUCHED_NAMES})"
            known = TOUCHED_NAMES
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _dpcr_sn AS SELECT {first} + row_number() OVER () "
            f"AS id, name FROM ({texts})"
        )
        con.execute(f"INSERT INTO {s}.names SELECT id, name FROM _dpcr_sn")
        ids = f"(SELECT id, name FROM _dpcr_sn UNION ALL SELECT id, name FROM {known} " \
            "WHERE id IS NOT NULL)"  # fmt: skip
        con.execute(
            f"INSERT INTO {s}.seeds SELECT iu.id, CASE WHEN m.entry = m.unit THEN iu.id "
            f"ELSE ie.id END, {', '.join(f'm.{n}' for n, _, _ in columns)}, {v} "
            f"FROM {MERGED} m JOIN {ids} iu ON iu.name = m.unit "
            f"LEFT JOIN {ids} ie ON m.entry <> m.unit AND ie.name = m.entry"
        )
        added = int(fetch(con, "SELECT count(*) FROM _dpcr_sn")[0][0])
    return added


def compact(con: duckdb.DuckDBPyConnection, c: dict[str, int], rows: int) -> int:
    """Rewrite table ``seeds`` (which holds ``rows`` rows) when :func:`compact_due` says so
    (:func:`rewrite_seeds`). Returns the rows it then holds."""
    if compact_due(c, rows):
        rows = c["rows:seeds"] = rewrite_seeds(con)
    return rows


def compact_due(c: dict[str, int], rows: int) -> bool:
    """Whether table ``seeds``, now of ``rows`` rows, holds :data:`COMPACT_GROWTH` times the
    rows counted in ``c["rows:seeds"]`` after its last rewrite (or first fill, which this
    records when ``c`` has no count yet)."""
    base = c.get("rows:seeds")
    if base is None:
        c["rows:seeds"] = rows
        return False
    return rows > COMPACT_GROWTH * base


def rewrite_seeds(con: duckdb.DuckDBPyConnection) -> int:
    """Rewrite table ``seeds`` with the newest version of each key alone, each with its own
    version (a unit's newest row holds its columns); returns its rows."""
    s = SCHEMA
    con.execute(f"CREATE TABLE {s}._dpcr_compact AS SELECT * FROM {s}.seeds "
                "QUALIFY row_number() OVER (PARTITION BY u, e ORDER BY v DESC) = 1")
    con.execute(f"DROP TABLE {s}.seeds")
    con.execute(f"ALTER TABLE {s}._dpcr_compact RENAME TO seeds")
    return int(fetch(con, f"SELECT count(*) FROM {s}.seeds")[0][0])


def _pending(con: duckdb.DuckDBPyConnection, inc: Increment, t: int) -> None:
    """Table ``_dpcr_sp``: this run's rows dated after ``t``, kept as pending with their text."""
    s = SCHEMA
    columns = "g.record, g.part, g.unit, g.entry, g.ts, g.seq, g.op, g.has_before"
    if fetch(con, f"SELECT EXISTS (SELECT 1 FROM {inc.good} WHERE ts > {t})")[0][0]:
        # the raw text of the new rows kept as pending (a source read in place fetches it now)
        ensure_raw(con, inc.lazy, f"SELECT record FROM {inc.good} WHERE ts > {t} AND NOT pend")
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE _dpcr_sp AS SELECT {columns},
                CASE WHEN g.pend THEN p.after ELSE r.after END AS after,
                CASE WHEN g.pend THEN p.raw ELSE r2.raw::VARCHAR END AS raw
            FROM (SELECT * FROM {inc.good} WHERE ts > {t}) g
            LEFT JOIN (SELECT record, after FROM {inc.rows}) r
                ON NOT g.pend AND r.record = g.record
            LEFT JOIN ({inc.raw_sql}) r2 ON NOT g.pend AND r2.record = g.record
            LEFT JOIN {s}.pending p ON g.pend AND p.record = g.record AND p.part = g.part"""
        )
    else:  # (nothing stays pending: the joins that fetch the rows' text would read them all)
        con.execute(f"CREATE OR REPLACE TEMP TABLE _dpcr_sp AS SELECT {columns}, "
                    f"p.after, p.raw FROM {inc.good} g, {s}.pending p WHERE FALSE")  # fmt: skip
