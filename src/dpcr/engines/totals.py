"""The totals of :func:`dpcr.engines.duckdb.aggregate` once its rows are bounded (table
``_dpcr_bounded``) and their contributions made (``_dpcr_contrib``): one pass over every row
when each unit is one entry and the queries are counts and sums (:func:`aggregate_once`, which
can also summarise the rows that settle for the incremental state, :data:`SETTLING`); else one
query at a time (:func:`aggregate_query`), with the per-unit clamps of a unit that owns several
entries; and the values of an ``exhausted`` query (:func:`exhausted_values`)."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import numpy as np

from dpcr._duck import afterwards, one_thread
from dpcr.engines._intervals import with_interval
from dpcr.engines._ranked import ITEM, settled_units
from dpcr.engines.base import Aggregates, BoundingReport
from dpcr.queries import Events, GroupedSum, Histogram, Query, Sum

__all__ = ["SETTLED_UNITS", "SETTLING", "aggregate_once", "aggregate_query", "candidate_keys",
           "change_sql", "exhausted_values", "open_key_sql", "open_value_sql",
           "settling_columns"]


#: The table in which :func:`dpcr.engines.duckdb.aggregate` (``summarise_to``) summarises the
#: settling rows.
SETTLING = "_dpcr_settling"

#: The per-unit summary of :data:`SETTLING`, a row per unit with settled rows
#: (:func:`settling_columns`): a view over it.
SETTLED_UNITS = "_dpcr_settled_units"


def settling_columns(queries: Sequence[Query], sums: Sequence[int], t: int, *,
                     item: bool = False) -> str:  # fmt: skip
    """The aggregates of :data:`SETTLING` over the rows dated at or before ``t``: ``s_c``
    rows, ``s_nn{i}`` of them without a number for sum ``i``; and ``units``, a list with an
    item per unit whose last row dated at or before ``t`` (``settles_last``: see
    :func:`aggregate_once`) is in the group: ``unit``, that row's rank ``s_n`` (the unit's
    settled rows), ``s_first_ts``, ``s_cls`` and ``s_f{i}``, and the liveness seed of a plain
    history (one insert, first, and at most one delete, last:
    :func:`dpcr.engines.incremental.settle`): ``s_live``, the row is no delete, and ``s_lr``,
    its record if it is one, else the insert's (its unit's first row's, ``first_record``).
    :data:`SETTLED_UNITS` gives the items as rows.

    ``item``: the ranked rows carry each row's item packed in one column
    (:data:`dpcr.engines._ranked.ITEM`): the list is two, ``units`` of the units and
    ``items`` of their items, in the same order (:func:`dpcr.engines._ranked.settled_units`
    unpacks them). A list of a struct keeps a list per field, each with its own appends: at
    10^7 rows (2·10^6 units) the list of eight fields cost about as much as the ranking
    window, the two lists about half of it (docs/benchmarks.md)."""
    at = f"FILTER (WHERE ts <= {int(t)})"
    cols = f", count(*) {at} AS s_c"
    cols += "".join(f", count(*) FILTER (WHERE ts <= {int(t)} AND nn{i}) AS s_nn{i}"
                    for i in sums)  # fmt: skip
    last = {"unit": "unit", "s_n": "rank_u", "s_first_ts": "first_ts", "s_cls": "cls"}
    last |= {f"s_f{i}": f"f{i}" for i in range(len(queries))}
    last |= {"s_live": "op <> 'delete'",
             "s_lr": "CASE WHEN op = 'delete' THEN record ELSE first_record END"}  # fmt: skip
    # (a list per group rather than a group per unit: a hash table of every unit, each with
    # every aggregate, cost more than the rest of the summary)
    if item:
        return cols + (f", list(unit) FILTER (WHERE settles_last) AS units, "
                       f"list({ITEM}) FILTER (WHERE settles_last) AS items")  # fmt: skip
    items = ", ".join(f"'{name}': {sql}" for name, sql in last.items())
    return cols + f", list({{{items}}}) FILTER (WHERE settles_last) AS units"


def _settle(con: duckdb.DuckDBPyConnection, queries: Sequence[Query], select: str, rows: str,
            t: int, check: bool) -> None:  # fmt: skip
    """Table :data:`SETTLING` (``select``, grouped by interval, kept and reason, with
    :func:`settling_columns` for time ``t``) from ``rows``, and the view
    :data:`SETTLED_UNITS` over it; the items packed when the ranked rows carry them."""
    sums = [i for i, q in enumerate(queries) if isinstance(q, Sum)]
    item = any(c[0] == ITEM for c in con.execute("DESCRIBE _dpcr_bounded").fetchall())
    con.execute(
        f"CREATE TEMP TABLE {SETTLING} AS {select}"
        f"{settling_columns(queries, sums, t, item=item)} FROM ({rows}) GROUP BY iv, kept, reason"
    )
    pairs = f"SELECT unnest(units) AS unit, unnest(items) AS it FROM {SETTLING}"
    units = settled_units(queries, check=check, pairs=pairs) if item else (
        f"SELECT unnest(units, recursive := true) FROM {SETTLING}")  # fmt: skip
    con.execute(f"CREATE OR REPLACE TEMP VIEW {SETTLED_UNITS} AS {units}")


def change_sql(query: Query, f: str, p: str) -> str:
    """SQL of a kept mutation's change of ``query`` from its f and the previous row's ``p``
    (a count or sum: f - p; histograms move keys instead). An :class:`Events` query: 1 when
    the mutation is a counted event -- an insert (``p`` = 0: not live before) whose row
    matches, an update (live before and after) whose rows match, a delete (``f`` = 0) whose
    row before matches -- else 0 (f codes: :func:`dpcr.engines._fvalues.f_sql`)."""
    if not isinstance(query, Events):
        return f"({f} - {p})"
    was = {"insert": f"{p} = 0", "update": f"{p} IN (2, 4)", "delete": f"{p} IN (2, 4)"}
    now = {"insert": f"{f} IN (3, 4)", "update": f"{f} IN (3, 4)", "delete": f"{f} = 0"}
    return f"CASE WHEN {was[query.op]} AND {now[query.op]} THEN 1 ELSE 0 END"


def aggregate_once(
    con: duckdb.DuckDBPyConnection,
    queries: Sequence[Query],
    release_times: Sequence[int],
    first: int,
    late: int,
    *,
    summarise_to: int | None = None,
    check_plain: bool = False,
) -> Aggregates | None:
    """The totals and the bounding report of :func:`aggregate` from one pass over
    ``_dpcr_bounded`` (every unit one entry; counts and sums only; no state machine, class or
    retirement): per interval, kept or not and reason, the rows, the units' first rows, the
    kept rows without a number per sum, and each query's change.

    ``summarise_to``: the same pass also summarises the rows, into table :data:`SETTLING`
    (``upto``: the time; the rows per interval, kept and reason), with the aggregates of
    :func:`settling_columns`: each unit's summary is that of its last row dated at or before
    the time, which the ranked rows mark (``settles_last``:
    :func:`dpcr.engines._ranked.settle_marks`).

    ``check_plain``: ``_dpcr_bounded`` holds every row, those after the last release time too
    (which count for nothing here; the summary takes those dated at or before
    ``summarise_to`` alone), and its column ``np`` marks a mutation that makes its history
    not plain (:func:`dpcr.changelog.plain_break`): None when one is marked (and no
    :data:`SETTLING` table is left)."""
    n = len(release_times)
    width = max(0, n - first + 1)
    sums = [i for i, q in enumerate(queries) if isinstance(q, Sum)]
    cols = "".join(f", count(*) FILTER (WHERE nn{i}) AS m{i}" for i in sums)
    cols += "".join(f", sum(f{i} - p{i}) AS d{i}" for i in range(len(queries)))
    rows = with_interval("SELECT * FROM _dpcr_bounded", release_times, beyond=check_plain) if (
        n or check_plain
    ) else "SELECT *, 1 AS iv FROM _dpcr_bounded"  # (no interval: every row is beyond it)
    if check_plain:  # (the last column)
        cols += ", count(*) FILTER (WHERE np) AS nb"
    select = f"iv, kept, reason, count(*) AS c, count(*) FILTER (WHERE rank_u = 1) AS u{cols}"
    if summarise_to is None:
        result = con.execute(f"SELECT {select} FROM ({rows}) GROUP BY ALL").fetchall()
    else:
        _settle(con, queries, f"SELECT {int(summarise_to)} AS upto, {select}", rows,
                summarise_to, check_plain)  # fmt: skip
        names = "iv, kept, reason, c, u" + "".join(f", m{i}" for i in sums) + "".join(
            f", d{i}" for i in range(len(queries)))  # fmt: skip
        names += ", nb" if check_plain else ""
        result = con.execute(f"SELECT {names} FROM {SETTLING}").fetchall()
    values = {q.name: np.zeros((width, 1), dtype=np.int64) for q in queries}
    units = mutations = kept = 0
    dropped: dict[str, int] = {}
    non_numeric: dict[str, int] = {}
    broken = 0
    for iv, is_kept, reason, count, firsts, *rest in result:
        if check_plain:
            broken += int(rest.pop())
            if iv is None:  # (after the last release time: checked, not counted)
                continue
        units, mutations = units + int(firsts), mutations + int(count)
        if not is_kept:
            dropped[str(reason)] = dropped.get(str(reason), 0) + int(count)
            continue
        kept += int(count)
        for i, missing in zip(sums, rest, strict=False):
            if missing:
                name = queries[i].name
                non_numeric[name] = non_numeric.get(name, 0) + int(missing)
        if int(iv) >= first:
            for q, total in zip(queries, rest[len(sums) :], strict=True):
                values[q.name][int(iv) - first, 0] += int(total or 0)
    if broken:
        if summarise_to is not None:
            con.execute(f"DROP TABLE IF EXISTS {SETTLING}")
        return None
    report = BoundingReport(units=units, mutations=mutations, kept=kept, dropped=dropped,
                            late=late, non_numeric=non_numeric)  # fmt: skip
    return Aggregates(first_interval=first, last_interval=n, values=values, report=report)


def exhausted_values(
    con: duckdb.DuckDBPyConnection, release_times: Sequence[int], first: int, width: int
) -> np.ndarray:
    """Per interval, the units whose first dropped mutation falls in it (an ``exhausted``
    query): each unit adds 1 once, so its change lies in [0, 1] in one interval only."""
    out = np.zeros((width, 1), dtype=np.int64)
    if width == 0:
        return out
    firsts = "SELECT unit, min(ts) AS ts FROM _dpcr_bounded WHERE NOT kept GROUP BY unit"
    sql = f"SELECT iv, count(*) FROM ({with_interval(firsts, release_times)}) GROUP BY iv"
    for iv, total in con.execute(sql).fetchall():
        if int(iv) >= first:
            out[int(iv) - first, 0] += int(total)
    return out


def open_key_sql(f: str, valued: bool) -> str:
    """The key of an open query's f ``f``: the text itself (a histogram), or the text after the
    first ``':'`` (a grouped sum's ``'v:key'``, :func:`dpcr.engines._fvalues.f_sql`)."""
    return f"substr({f}, strpos({f}, ':') + 1)" if valued else f


def open_value_sql(f: str) -> str:
    """The value of a grouped sum's open f ``'v:key'``."""
    return f"CAST(substr({f}, 1, strpos({f}, ':') - 1) AS BIGINT)"


def candidate_keys(
    con: duckdb.DuckDBPyConnection, i: int, release_times: Sequence[int], *,
    seeded: bool = False, valued: bool = False,
) -> dict[str, int]:
    """The candidate keys of open query ``i``: every key a kept row of ``_dpcr_bounded``
    holds (the rows up to the last release time), with the first base interval one holds it
    in, by that interval and key. ``seeded``: the keys the rows' seeds hold too (an earlier
    interval's, which the state has: the earliest of the two is the key's). ``valued``: a
    grouped sum's f (:func:`open_key_sql`)."""
    if not release_times:
        return {}
    key = open_key_sql(f"f{i}", valued)
    held = f"SELECT ts, {key} AS key FROM _dpcr_bounded WHERE kept AND f{i} IS NOT NULL"
    if seeded:
        held += (f" UNION ALL SELECT ts, {open_key_sql(f's_f{i}', valued)} AS key FROM "
                 f"_dpcr_bounded WHERE kept AND s_f{i} IS NOT NULL")  # fmt: skip
    rows = con.execute(
        f"SELECT key::VARCHAR AS key, min(iv)::BIGINT AS first FROM "
        f"({with_interval(held, release_times)}) GROUP BY key ORDER BY first, key"
    ).fetchnumpy()  # (as arrays: a tuple per key would cost more than the dict)
    return dict(zip(rows["key"].tolist(), rows["first"].tolist(), strict=True))


def _moves(i: int, query: Histogram | GroupedSum, *, open_: bool) -> str:
    """Each kept mutation's (unit, iv, key, d): d at its key, −d at the previous row's key (a
    histogram's d is 1; a grouped sum's the row's value, decoded from its f code)."""
    held = "IS NOT NULL" if open_ else ">= 0"

    def key_value(f: str) -> tuple[str, str]:
        if isinstance(query, Histogram):
            return f, "1"
        if open_:
            return open_key_sql(f, True), open_value_sql(f)
        w, lo = query.code_width, query.value_range[0]
        return f"{f} // {w}", f"{f} % {w} + ({lo})"

    (kf, vf), (kp, vp) = key_value(f"f{i}"), key_value(f"p{i}")
    return f"""
        SELECT unit, iv, {kf} AS key, {vf} AS d FROM _dpcr_contrib WHERE f{i} {held}
        UNION ALL
        SELECT unit, iv, {kp} AS key, -({vp}) AS d FROM _dpcr_contrib WHERE p{i} {held}
    """


def aggregate_query(
    con: duckdb.DuckDBPyConnection,
    i: int,
    query: Query,
    first: int,
    width: int,
    unit_is_entry: bool,
    *,
    columns: Sequence[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(change per interval and key, clamped unit-intervals per interval). ``columns``: an
    open histogram's keys, in the order of the result's columns (its f is the key itself)."""
    nkeys = len(query.keys) if columns is None else len(columns)
    per_unit = not unit_is_entry
    out = np.zeros((width, nkeys), dtype=np.int64)
    clamped = np.zeros(width, dtype=np.int64)
    if width == 0:
        return out, clamped
    if isinstance(query, Histogram | GroupedSum):
        # +1 (a grouped sum: +v) at the new key, -1 (-v) at the previous key (-1 = no key).
        moves = _moves(i, query, open_=columns is not None)
        bound = int(query.l1_sensitivity)
        if unit_is_entry:
            rows_sql = f"SELECT iv, key, sum(d) AS d FROM ({moves}) GROUP BY iv, key"
        else:
            con.execute(
                f"""CREATE OR REPLACE TEMP TABLE _dpcr_unit AS
                SELECT unit, iv, key, sum(d) AS d FROM ({moves}) GROUP BY unit, iv, key"""
            )
            con.execute(
                """CREATE OR REPLACE TEMP TABLE _dpcr_unit_l1 AS
                SELECT unit, iv, sum(abs(d)) AS l1 FROM _dpcr_unit GROUP BY unit, iv"""
            )
            over = f"SELECT iv, count(*) FROM _dpcr_unit_l1 WHERE l1 > {bound} GROUP BY iv"
            rows_sql = f"""SELECT u.iv, u.key, sum(u.d) AS d FROM _dpcr_unit u
                JOIN _dpcr_unit_l1 l USING (unit, iv) WHERE l.l1 <= {bound} GROUP BY u.iv, u.key"""
    else:
        # (an event query's changes do not telescope: a unit's are clamped whatever the unit)
        per_unit = not unit_is_entry or isinstance(query, Events)
        change = change_sql(query, f"f{i}", f"p{i}")
        if not per_unit:
            rows_sql = f"SELECT iv, 0, sum({change}) FROM _dpcr_contrib GROUP BY iv"
        else:
            bound = int(query.l1_sensitivity)
            con.execute(
                f"""CREATE OR REPLACE TEMP TABLE _dpcr_unit AS
                SELECT iv, sum({change}) AS d FROM _dpcr_contrib GROUP BY unit, iv"""
            )
            over = f"SELECT iv, count(*) FROM _dpcr_unit WHERE abs(d) > {bound} GROUP BY iv"
            rows_sql = (f"SELECT iv, 0, sum(greatest(-{bound}, least({bound}, d))) "
                        f"FROM _dpcr_unit GROUP BY iv")  # fmt: skip
    if columns is not None:
        _open_cells(con, rows_sql, columns, out, first)
    else:
        for iv, key, total in con.execute(rows_sql).fetchall():
            out[int(iv) - first, int(key)] += int(total)
    if per_unit:
        for iv, count in con.execute(over).fetchall():
            clamped[int(iv) - first] += int(count)
    return out, clamped


def _key_columns(con: duckdb.DuckDBPyConnection, columns: Sequence[str]) -> None:
    """Table ``_dpcr_columns``: each key of ``columns`` with its column (from arrays: a list
    parameter would be converted a value at a time)."""
    keys = np.empty(len(columns), dtype=object)
    keys[:] = columns
    con.register("_dpcr_columns_in", {"key": keys, "j": np.arange(len(columns), dtype=np.int64)})
    with afterwards(con, lambda: con.unregister("_dpcr_columns_in")):
        con.execute("CREATE OR REPLACE TEMP TABLE _dpcr_columns AS "
                    "SELECT key::VARCHAR AS key, j FROM _dpcr_columns_in")  # fmt: skip


def _open_cells(
    con: duckdb.DuckDBPyConnection, rows_sql: str, columns: Sequence[str], out: np.ndarray,
    first: int,
) -> None:
    """Add the (base interval, key, change) rows of ``rows_sql`` into ``out`` (a column per key
    of ``columns``), the keys matched to their columns in DuckDB and the cells read as arrays
    (as many as the (interval, key) pairs that appear, not a Python object each). A key
    outside ``columns`` is refused: every key a kept row holds is a candidate."""
    _key_columns(con, columns)
    # (one thread: a hash table per thread would hold the cells twice, in memory DuckDB
    # keeps to the end of the run)
    with one_thread(con):
        cells = con.execute(
            f"SELECT r.iv::BIGINT AS iv, coalesce(c.j, -1) AS j, r.d::BIGINT AS d "
            f"FROM ({rows_sql}) r LEFT JOIN _dpcr_columns c ON c.key = r.key::VARCHAR"
        ).fetchnumpy()
    con.execute("DROP TABLE IF EXISTS _dpcr_columns")
    j = np.asarray(cells["j"], dtype=np.int64)
    if (j < 0).any():
        raise ValueError("a key held by a kept row is not among the open histogram's columns")
    # (grouped by base interval and key: every cell at most once)
    out[np.asarray(cells["iv"], dtype=np.int64) - first, j] += np.asarray(cells["d"], np.int64)
