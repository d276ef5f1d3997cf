"""The state's seeds (table ``seeds``, :mod:`dpcr.engines.incremental`): per (unit, entry) of
the units a step touches, the newest seed read once (:func:`lookup_seeds`), and the new seed
rows a settle writes (:func:`settling_seeds`), by text; their ids are the integers' own and
the others' from the state's dictionary (table ``names``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress

import duckdb

from dpcr.bounding.constraints import Constraint
from dpcr.bounding.sql import bounding_sql
from dpcr.changelog import Increment
from dpcr.engines.state import DICT_BASE, SCHEMA, fetch, id_sql, text_sql
from dpcr.engines.totals import SETTLED_UNITS

__all__ = ["MERGED", "TOUCHED_ENTRIES", "TOUCHED_NAMES", "TOUCHED_UNITS", "lookup_seeds",
           "one_entry", "own_entries", "settling_seeds"]


#: The state's newest seeds of the units (and their entries) a run touches, by text
#: (:func:`lookup_seeds`): per (unit, entry) its own columns and per unit, of the units the
#: state knows (those with settled rows), the unit's; and the ids of the texts of the run's
#: units and entries that have one: the integers' own and those the state's dictionary holds.
TOUCHED_UNITS, TOUCHED_ENTRIES = "_dpcr_touched_units", "_dpcr_touched_entries"
TOUCHED_NAMES = "_dpcr_touched_names"


def lookup_seeds(con: duckdb.DuckDBPyConnection, rows: str, units: str, *,
                 columns: Sequence[tuple[str, str, str]],
                 known: Mapping[str, str] | None = None) -> str:  # fmt: skip
    """Read the state's newest seeds of the units of ``rows`` (a SELECT of the run's mutations,
    text ``unit`` and ``entry``), whose table ``units`` holds each once, into
    :data:`TOUCHED_UNITS` and :data:`TOUCHED_ENTRIES`, and the ids of their texts into
    :data:`TOUCHED_NAMES`: one scan of the dictionary for the texts that are not integers
    (none when all are: :func:`~dpcr.engines.state.id_sql`), one of ``seeds`` for the units'
    ids (``columns``: :func:`~dpcr.engines.state.seed_columns`; ``known``: the SQL of the
    columns whose value every row holds, which are not read). Returns
    :data:`TOUCHED_ENTRIES`, whose ``live`` and ``record`` seed the liveness check."""
    s = SCHEMA
    # (each text once: the units, held once by ``units``, and the entries that are no unit)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {_TOUCHED_TEXTS} AS SELECT name, {id_sql('name', 'n')} "
        "AS id, is_unit FROM (SELECT name, try_cast(name AS BIGINT) AS n, is_unit FROM ("
        f"SELECT unit AS name, TRUE AS is_unit FROM {units} UNION ALL SELECT DISTINCT r.entry, "
        f"FALSE FROM ({rows}) r ANTI JOIN {units} u ON u.unit = r.entry WHERE r.entry <> r.unit))"
    )
    # (the texts that are integers are their own ids; the dictionary is read only for the
    # others, and not at all when there are none; ``is_unit``: a unit's text, whose seeds
    # are read by id, with no join of texts)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {TOUCHED_NAMES} AS SELECT id, name, is_unit FROM "
        f"{_TOUCHED_TEXTS} WHERE id IS NOT NULL UNION ALL SELECT d.id, d.name, t.is_unit FROM "
        f"{s}.names d JOIN (SELECT name, is_unit FROM {_TOUCHED_TEXTS} WHERE id IS NULL) t "
        "ON d.name = t.name"
    )
    con.execute(f"DROP TABLE {_TOUCHED_TEXTS}")
    replaced = ", ".join(f"{value} AS {name}" for name, value in (known or {}).items())
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {_TOUCHED_SEEDS} AS SELECT * REPLACE ({replaced}) "
        f"FROM {s}.seeds WHERE u IN (SELECT id FROM {TOUCHED_NAMES} WHERE is_unit)"
        if known else f"CREATE OR REPLACE TEMP TABLE {_TOUCHED_SEEDS} AS SELECT * FROM "
        f"{s}.seeds WHERE u IN (SELECT id FROM {TOUCHED_NAMES} WHERE is_unit)"
    )
    every = "".join(f", x.{name}" for name, _, _ in columns)
    per_unit = "".join(f", {name}" for name, _, of in columns if of == "unit")
    newest = f"(SELECT * FROM {_TOUCHED_SEEDS} QUALIFY row_number() OVER (PARTITION BY {{}} " \
        "ORDER BY v DESC) = 1) x"  # fmt: skip
    # (every row of a unit a settle writes carries the unit's columns: its newest row's hold
    # the newest; when each unit has its own entry alone, that is the entry's newest row. A
    # settle appends one row per key, and a rewrite keeps one: rows of one version alone, as
    # after a first run or a rewrite, are each the newest of its key, with no sort)
    own, single = fetch(con, f"SELECT coalesce(bool_and(e = u), TRUE), "
                             f"coalesce(min(v) = max(v), TRUE) FROM {_TOUCHED_SEEDS}")[0]
    # (an integer's text is its id's decimal form: only the dictionary's ids are joined)
    texts = f"(SELECT id, name FROM {TOUCHED_NAMES} WHERE id >= {DICT_BASE})"
    unit = text_sql("x.u", "un.name")
    entry = unit if own else text_sql("x.e", "en.name")
    of_entries = "" if own else f" LEFT JOIN {texts} en ON en.id = x.e"
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {TOUCHED_ENTRIES} AS SELECT {unit} AS unit, "
        f"{entry} AS entry{every}, x.u AS uid FROM "
        f"{f'{_TOUCHED_SEEDS} x' if single else newest.format('u, e')} "
        f"LEFT JOIN {texts} un ON un.id = x.u{of_entries}"
    )
    _drop(con, TOUCHED_UNITS)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_OWN} AS SELECT {bool(own)} AS own")
    con.execute(
        f"CREATE TEMP VIEW {TOUCHED_UNITS} AS SELECT unit{per_unit} FROM {TOUCHED_ENTRIES} "
        "WHERE n IS NOT NULL" if own else
        f"CREATE TEMP TABLE {TOUCHED_UNITS} AS SELECT {unit} AS unit{per_unit} FROM "
        f"{newest.format('u')} LEFT JOIN {texts} un ON un.id = x.u WHERE x.n IS NOT NULL"
    )  # fmt: skip
    con.execute(f"DROP TABLE {_TOUCHED_SEEDS}")
    return TOUCHED_ENTRIES


_TOUCHED_SEEDS, _TOUCHED_TEXTS = "_dpcr_touched_seeds", "_dpcr_touched_texts"

#: The last insert or delete of a group of bounded rows in (ts, seq, record) order, as the
#: liveness seed's ``live`` and ``record`` (NULL when it has none): as ``sl`` of
#: :func:`_seed_selects`, from the grouping of the other seeds.
_LAST = (
    ", max({'ts': ts, 'seq': seq, 'record': record, 'live': op = 'insert'}) "
    "FILTER (WHERE op <> 'update') AS _dpcr_last"
)


def _drop(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Drop the temporary table or view ``name`` if there is one."""
    for kind in ("VIEW", "TABLE"):
        with suppress(duckdb.CatalogException):
            con.execute(f"DROP {kind} IF EXISTS {name}")


def own_entries(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether :func:`lookup_seeds` found every touched unit of the state to hold its own
    entry alone (:data:`TOUCHED_UNITS` is then a view of :data:`TOUCHED_ENTRIES`), as it
    noted in a one-row table (a look-up of the catalog's views costs more); False when the
    connection made no look-up."""
    try:
        return bool(fetch(con, f"SELECT own FROM {_OWN}")[0][0])
    except duckdb.CatalogException:
        return False


#: The one-row table where :func:`lookup_seeds` notes whether :func:`own_entries`.
_OWN = "_dpcr_touched_own"


#: The new seed rows of a settle, by text (:func:`settling_seeds`).
MERGED = "_dpcr_sm"


def one_entry(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether every new seed row of :data:`MERGED` is a unit's own entry."""
    return bool(fetch(con, f"SELECT coalesce(bool_and(entry = unit), TRUE) FROM {MERGED}")[0][0])


def settling_seeds(con: duckdb.DuckDBPyConnection, inc: Increment, constraint: Constraint,
                   columns: Sequence[tuple[str, str, str]], queries: int, t: int, *,
                   summary: bool = False, seeded: bool = False) -> str:  # fmt: skip
    """The new seeds from this run's rows dated at or before ``t`` into :data:`MERGED`, by
    text: per (unit, entry) of the settling rows its ``columns``
    (:func:`~dpcr.engines.state.seed_columns`), each from the settling rows where they have
    any, else the state's newest (:func:`lookup_seeds`: a unit's columns, an entry's, its last
    insert or delete). ``summary``: the seeds come from the aggregation's summary
    (:data:`~dpcr.engines.totals.SETTLED_UNITS`: every unit one entry, no state machine)
    instead of the bounded rows; with plain histories every column does, from one scan of
    it. ``seeded``: the state's
    counters show that a settle appended seeds before, so the state is not asked whether it
    holds none. Returns ``"empty"`` when it holds none (:data:`MERGED` then numbers its rows,
    ``id``), ``"own"`` when every unit holds its own entry alone, in the rows and the state
    (:data:`MERGED` has the state's id of each, ``uid``, and whether it ``known`` the unit),
    else ``"any"``."""
    s = SCHEMA
    empty = not seeded and bool(fetch(con, f"SELECT NOT EXISTS (SELECT 1 FROM {s}.seeds)")[0][0])
    machines = bounding_sql(constraint).machines
    su, se, sl, one = _seed_selects(inc, machines, queries, t, summary=summary)
    ident = ", row_number() OVER () AS id" if empty else ""  # (an empty state has no ids)
    if summary and inc.plain:  # (one row per unit: all three from one scan of the summary)
        # (a unit's settled rows begin with its insert: its liveness seed is theirs)
        fs = "".join(f", s_f{i} AS f{i}" for i in range(queries))
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {MERGED} AS SELECT unit, unit AS entry, s_n AS n, "
            f"s_first_ts AS first_ts, s_cls AS cls, 0 AS ne{fs}, s_live AS live, "
            f"s_lr AS record{ident} FROM {SETTLED_UNITS}"
        )
        return "empty" if empty else "any"
    own, valid = fetch(con, f"SELECT coalesce(bool_and(unit = entry), TRUE), count(*) FILTER "
                            f"(WHERE chk IS NOT NULL) = 0 FROM {inc.good} WHERE ts <= {t}")[0]
    if own and (empty or own_entries(con)):
        # (a step whose settling rows are all valid: each is a bounded row, and the last
        # insert or delete of a unit comes from the same grouping as its other seeds)
        last = not empty and not summary and valid
        if last:
            one = _seed_selects(inc, machines, queries, t, summary=False, liveness=True)[3]
        _own_seeds(con, columns, one, None if last else sl, empty=empty, ident=ident)
        return "empty" if empty else "own"
    for temp, select in (("_dpcr_su", su), ("_dpcr_se", se), ("_dpcr_sl", sl)):
        con.execute(f"CREATE OR REPLACE TEMP TABLE {temp} AS {select}")
    sources = {"unit": ("su", "tu"), "entry": ("se", "te"), "live": ("sl", "te")}
    picked = []
    for name, _, of in columns:
        new, was = sources[of]
        picked.append(f"CASE WHEN {new}.unit IS NULL THEN {'NULL' if empty else f'{was}.{name}'} "
                      f"ELSE {new}.{name} END AS {name}")  # fmt: skip
    old = "" if empty else (
        f" LEFT JOIN {TOUCHED_UNITS} tu ON tu.unit = w.unit LEFT JOIN {TOUCHED_ENTRIES} te "
        "ON te.unit = w.unit AND te.entry = w.entry")  # fmt: skip
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {MERGED} AS SELECT w.unit, w.entry, "
        f"{', '.join(picked)}{ident} FROM (SELECT unit, entry FROM _dpcr_se UNION "
        "SELECT unit, entry FROM _dpcr_sl) w "
        "LEFT JOIN _dpcr_su su ON su.unit = w.unit "
        "LEFT JOIN _dpcr_se se ON se.unit = w.unit AND se.entry = w.entry "
        f"LEFT JOIN _dpcr_sl sl ON sl.unit = w.unit AND sl.entry = w.entry{old}"
    )
    return "empty" if empty else "any"


def _own_seeds(con: duckdb.DuckDBPyConnection, columns: Sequence[tuple[str, str, str]],
               one: str, sl: str | None, *, empty: bool, ident: str) -> None:  # fmt: skip
    """:func:`settling_seeds` when every settling unit holds its own entry alone, in the rows
    and in the state (``empty``: it holds none): the seeds of each unit and its entry from one
    grouping of its rows (``one``, in the statement that joins it), each row's state from
    :data:`TOUCHED_ENTRIES` alone, joined by the unit (``ident``: the ids' column). The
    liveness seeds come from ``sl``, or (None) from ``one``'s column ``_dpcr_last`` (the last
    insert or delete; NULL: none)."""
    if sl is not None:
        con.execute(f"CREATE OR REPLACE TEMP TABLE _dpcr_sl AS {sl}")
    picked = []
    for name, _, of in columns:
        if of == "live" and sl is None:
            new, value = "a._dpcr_last", f"a._dpcr_last.{name}"
        else:
            new = "sl.unit" if of == "live" else "a.unit"
            value = f"{new.split('.')[0]}.{name}"
        picked.append(f"CASE WHEN {new} IS NULL THEN {'NULL' if empty else f'te.{name}'} "
                      f"ELSE {value} END AS {name}")  # fmt: skip
    key = "a.unit" if sl is None else "coalesce(a.unit, sl.unit)"
    old = "" if empty else f" LEFT JOIN {TOUCHED_ENTRIES} te ON te.unit = {key}"
    ids = ident if empty else ", te.uid, te.n IS NOT NULL AS known"
    # (the grouping read once, in the statement that joins it: no copy of it)
    rows = f"({one}) a" + ("" if sl is None else " FULL JOIN _dpcr_sl sl ON sl.unit = a.unit")
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {MERGED} AS SELECT {key} AS unit, {key} AS entry, "
        f"{', '.join(picked)}{ids} FROM {rows}{old}"
    )


def _seed_selects(inc: Increment, machines: int, queries: int, t: int, *, summary: bool,
                  liveness: bool = False) -> tuple[str, str, str, str]:  # fmt: skip
    """The SELECTs of the new seeds per unit, per (unit, entry) and of the liveness, from
    this run's rows dated at or before ``t`` (see :func:`settling_seeds`); and those per unit
    and per (unit, entry) in one, for units that each hold their own entry alone
    (``liveness``: with the last insert or delete of the bounded rows, ``_dpcr_last``)."""
    settling = f"(SELECT * FROM _dpcr_bounded WHERE ts <= {t})"
    cuts = "".join(
        f", least(min(CASE WHEN bad{j} > 0 THEN 4 * rank_u + bad{j} END), "
        f"any_value(s_cut{j})) AS cut{j}"
        for j in range(machines)
    )
    su = (
        f"SELECT unit, max(rank_u) AS n, any_value(first_ts) AS first_ts, any_value(cls) AS "
        f"cls{cuts} FROM {settling} GROUP BY unit"
    )
    # The last settled row of each (unit, entry): hash aggregates (arg_max over the unit's
    # rank; the _null form keeps a NULL state), not a window over every row.
    last = [f"arg_max_null(f{i}, rank_u) AS f{i}" for i in range(queries)]
    for j in range(machines):
        last += [f"arg_max_null({c}{j}, rank_u) AS {c}{j}" for c in ("st", "comp", "cn")]
    ne = "max(rank_e)" if machines else "0"
    se = (
        f"SELECT unit, entry, {ne} AS ne{''.join(', ' + c for c in last)} FROM {settling} "
        "GROUP BY unit, entry"
    )
    one = (
        f"SELECT unit, unit AS entry, {ne} AS ne{''.join(', ' + c for c in last)}, "
        f"max(rank_u) AS n, any_value(first_ts) AS first_ts, any_value(cls) AS cls{cuts}"
        f"{_LAST if liveness else ''} FROM {settling} GROUP BY unit"
    )
    if summary:  # (each unit one entry, no machine)
        per_unit = f"FROM {SETTLED_UNITS}"
        su = f"SELECT unit, s_n AS n, s_first_ts AS first_ts, s_cls AS cls {per_unit}"
        fs = "".join(f", s_f{i} AS f{i}" for i in range(queries))
        se = f"SELECT unit, unit AS entry, 0 AS ne{fs} {per_unit}"
    # The last insert or delete in (ts, seq, record) order: one maximum of a struct that
    # compares by those first (record numbers differ within a history, so ``live`` never
    # decides), instead of one arg_max per column.
    sl = (
        "SELECT unit, entry, m.live AS live, m.record AS record FROM (SELECT unit, entry, "
        "max({'ts': ts, 'seq': seq, 'record': record, 'live': op = 'insert'}) AS m "
        f"FROM {inc.good} WHERE op <> 'update' AND ts <= {t} GROUP BY unit, entry)"
    )
    if inc.plain:  # one insert and at most one delete after it: the delete, if settled, is last
        sl = (
            "SELECT unit, entry, count(*) FILTER (WHERE op = 'delete') = 0 AS live, "
            "coalesce(max(record) FILTER (WHERE op = 'delete'), max(record)) AS record "
            f"FROM {inc.good} WHERE op <> 'update' AND ts <= {t} GROUP BY unit, entry"
        )
    if summary:  # (one row a unit: its seeds as they are)
        one = f"SELECT unit, unit AS entry, 0 AS ne{fs}, s_n AS n, s_first_ts AS first_ts, " \
            f"s_cls AS cls {per_unit}"  # fmt: skip
    return su, se, sl, one
