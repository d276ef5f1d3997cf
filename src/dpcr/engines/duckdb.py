"""Bounding and per-interval aggregation as DuckDB SQL over the canonical changelog table.

Input: a table with columns (record, unit, entry, ts, seq, op, before, after) holding only valid
mutations (see :func:`dpcr.changelog.load`). Output: for every query, a small integer array of
per-interval changes (interval × key), the bounding report, and the per-unit bounding state.

Bounding (per privacy unit, independent of every other unit) is SQL built by
:mod:`dpcr.bounding.sql` from the constraint: it keeps a prefix of each unit's history (at most
k, time-bounded, state machine, hybrid) and labels every dropped mutation with its reason.

Contributions: the change of f for a kept mutation is f(after) - f(previous kept after of the
same (unit, entry)), with f(null) = 0. Summed over an interval this telescopes per (unit, entry),
so one entry's change per interval is within the query's sensitivity. When the privacy unit is a
separate column (one unit owns several entries), each unit's per-interval change is clamped to
the sensitivity (counts and sums) or dropped when its L1 norm exceeds 2 (histograms); clamps are
counted. Everything an entry carries from one mutation to the next is keyed by (unit, entry), so
removing one unit's mutations changes no other unit's kept rows or contributions.

Values: a sum reads the column as a number; missing, non-numeric, NaN and infinite values count
as 0 (``non_numeric`` in the report). A histogram value outside the keys counts nothing
(``unknown_keys``) unless the query says ``unknown = "other"`` or ``"error"``. An open
histogram's f is the key itself (text): every key a kept row holds is a candidate key
(:attr:`~dpcr.engines.base.Aggregates.candidates`, with the first interval one holds it in),
and its values have a column per candidate key (:func:`~dpcr.engines.base.open_columns`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np

from dpcr.bounding.constraints import Constraint, Hybrid
from dpcr.bounding.sql import (
    BY_ENTRY,
    OP_CODE,
    ORDER,
    bounding_sql,
)
from dpcr.changelog import (
    NotPlain,
    Report,
    Steps,
    consumed_record,
    mark_checked,
    typed_rejects,
    typed_seq,
    typed_source,
    unchecked,
)
from dpcr.engines._fvalues import numbered_rows
from dpcr.engines._intervals import uniform_step, with_interval
from dpcr.engines._ranked import narrow_ranked, no_key, no_value, ranked_sql, settle_marks
from dpcr.engines.base import (
    AggregateRequest,
    Aggregates,
    BoundingReport,
    DataStep,
    EngineResult,
    EngineRun,
    open_columns,
)
from dpcr.engines.checks import check_histogram_keys, missing_columns
from dpcr.engines.totals import (
    SETTLING,
    aggregate_once,
    aggregate_query,
    candidate_keys,
    exhausted_values,
)
from dpcr.queries import (
    Count,
    Exhausted,
    GroupedSum,
    Histogram,
    Query,
    Sum,
    has_open_keys,
)


def checks_liveness(
    queries: Sequence[Query], constraint: Constraint, *, unit_is_entry: bool, retire: bool
) -> bool:
    """True when :func:`aggregate` (not seeded) totals these queries in one pass over the
    ranked rows (counts and sums of one entry per unit under a simple rule), and so checks
    the liveness of a changelog whose check was left to it (:func:`dpcr.changelog.unchecked`)
    in the ranking window's sort."""
    return (
        unit_is_entry and not (retire or bounding_sql(constraint, retire=retire).machines)
        and not isinstance(constraint, Hybrid)
        and all(isinstance(q, Count | Sum) and not isinstance(q, Exhausted | GroupedSum)
                for q in queries)
    )  # fmt: skip


def aggregate(
    con: duckdb.DuckDBPyConnection,
    *,
    table: str,
    queries: Sequence[Query],
    constraint: Constraint,
    release_times: Sequence[int],
    first_interval: int,
    unit_is_entry: bool,
    exclude_late: tuple[int, int] | None = None,
    progress: Report | None = None,
    seeded: bool = False,
    retire: bool = False,
    summarise_to: int | None = None,
    seq_is_record: bool = False,
    numbers: dict[str, str] | None = None,
) -> Aggregates:
    """Bound the changelog and total each query's change over intervals
    ``first_interval .. len(release_times)`` (1-based; ``release_times`` are t_1 .. t_n).

    ``exclude_late = (records_seen, t_last)`` leaves out, from this aggregation only, mutations
    numbered above ``records_seen`` whose timestamp is at or before ``t_last`` (they belong to
    intervals already released) and counts them as ``late``. A table loaded with
    ``dpcr.changelog.load(..., exclude_late=..., frozen=...)`` has none: the loader leaves late
    mutations out for good, with every later mutation of their (unit, entry).
    ``progress(done, total)`` is called as the work advances (thousandths of it).

    ``seeded``: ``table`` holds the rows after a settled prefix of every history, with that
    prefix summarised in seed columns (:mod:`dpcr.engines.incremental`: per unit
    ``s_n``, ``s_first_ts``, ``s_cls``, ``s_cut{j}``; per (unit, entry) ``s_ne``, ``s_f{i}``,
    ``s_st{j}``, ``s_comp{j}``, ``s_cn{j}``): ranks, unit starts, classes, state-machine states
    and previous values continue the prefix's, so the rows are bounded exactly as in the whole
    history. The report then counts this table's rows only.

    ``retire``: ``on_exhausted = "retire"`` -- every entry of a unit whose history is cut gets a
    delete at the unit's retirement time (:func:`dpcr.bounding.sql.bounding_sql`).

    ``summarise_to``: a time; when the totals come from one pass over the bounded rows (every
    unit one entry, counts and sums, no state machine), that pass also summarises the rows
    dated at or before it in table :data:`SETTLING` (see :func:`aggregate_once`), which
    :func:`dpcr.engines.incremental.settle` reads instead of bounding the rows again.
    ``seq_is_record``: every row's ``seq`` is its ``record`` (the order then leaves it out).
    ``numbers``: columns of ``table`` that hold the numbers of the row after a sum reads, as
    finite DOUBLEs (from a column of the row after to the name of its column), read instead
    of the JSON.

    A ``table`` whose liveness check the load left to its reader
    (:func:`dpcr.changelog.unchecked`) is checked here: the ranking window, which sorts each
    history anyway, marks every mutation :func:`dpcr.changelog.plain_break` marks, over every row
    (those after the last release time too, which count for nothing else); when one is
    marked, or the rows cannot be checked so (:func:`checks_liveness` is false, or with
    ``exclude_late`` or ``seeded``), :class:`dpcr.changelog.NotPlain` is raised and the
    caller loads the source again with the check; when none is, the table counts as checked
    from then on (:func:`dpcr.changelog.mark_checked`).
    """
    check = unchecked(con, table)
    if check and (
        exclude_late is not None or seeded
        or not checks_liveness(queries, constraint, unit_is_entry=unit_is_entry, retire=retire)
    ):  # fmt: skip
        raise NotPlain(table)
    n = len(release_times)
    late, source = _times_and_late(con, table, release_times, exclude_late)

    t_n = int(release_times[-1]) if n else None
    bsql = bounding_sql(constraint, retire=retire)
    # A view over a Parquet file of typed rows has a narrow typed twin: integer keys, numbers
    # without their JSON text (dpcr.changelog.typed_source).
    typed = typed_source(con, table) if exclude_late is None else None
    gone = "after IS NULL"
    # (the numbers of the typed twin, or those the caller has)
    parsed = typed if typed is not None else numbers
    if typed is not None:
        source, gone = typed[""], "no_after"
    horizon = f"WHERE ts <= {t_n}" if t_n is not None else "WHERE FALSE"
    if check:  # (every row is ranked and checked; aggregate_once leaves out the later ones)
        horizon = ""
    # (a checked load's records that phase 1 rejects: the typed rows' verdicts, or none)
    no_rejects = check and (typed is None or not typed_rejects(con, table))
    rows = numbered_rows(queries, f"{source} {horizon}", gone, parsed, no_rejects=no_rejects)
    # (typed rows' seq is the record unless the file's own; a checked seq needs no record)
    seq = not seq_is_record and (typed is None or typed_seq(con, table))
    record = not (check and seq)
    # Counts and sums of one entry per unit, simple rule: the report, totals and summary from one
    # pass over the ranked rows (a view), narrowed to the window's sort keys (engines._ranked).
    one_pass = not seeded and checks_liveness(queries, constraint, unit_is_entry=unit_is_entry,
                                              retire=retire)  # fmt: skip
    ranked = narrow_ranked(bsql, queries, rows, seq=seq, record=record, check=check,
                           op_code=OP_CODE if typed is None else "opc",
                           settle_at=summarise_to) if one_pass else None  # fmt: skip
    if ranked is None:
        ranked = ranked_sql(bsql, queries, rows, seeded=seeded, unit_is_entry=unit_is_entry,
                             seq=seq, record=record, check=check)  # fmt: skip
        if one_pass and summarise_to is not None:  # (a code too wide for the narrow window)
            ranked = settle_marks(ranked, summarise_to, seq=seq, record=record)
    steps = Steps(con, progress, 3)
    steps.next()
    _create_temp(con, "VIEW" if one_pass else "TABLE", "_dpcr_ranked", ranked)
    steps.next()
    # Without per-unit windows (state machines' first failure) ``kept`` and ``reason`` are plain
    # expressions over the ranked rows: a view, not a second copy of them.
    _create_temp(
        con, "TABLE" if bsql.unit_cols or retire else "VIEW", "_dpcr_bounded",
        bsql.bounded("_dpcr_ranked", seeded=seeded, unit_is_entry=unit_is_entry),
    )  # fmt: skip
    if one_pass:
        steps.next()
        agg = aggregate_once(con, queries, release_times, first_interval, late,
                             summarise_to=summarise_to, check_plain=check)  # fmt: skip
        steps.close()
        if agg is None:
            raise NotPlain(table)
        if check:
            mark_checked(con, table)
        return agg
    check_histogram_keys(con, queries, source)

    counted = _bounding_counts(con, queries, constraint, seeded=seeded, move=bsql.move)

    if unit_is_entry:
        lag_cols = ", ".join(f"f{i}, p{i}" for i in range(len(queries)))
    else:
        lag_cols = ", ".join(
            f"f{i}, lag(f{i}, 1, {no_value(i, q, seeded)}) OVER ({BY_ENTRY} ORDER BY {ORDER}) "
            f"AS p{i}"
            for i, q in enumerate(queries)
        )
    steps.next()
    kept_rows = f"SELECT unit, entry, ts, {lag_cols} FROM _dpcr_bounded WHERE kept"
    retired = 0
    if retire:
        kept_rows, retired = _with_retirements(con, kept_rows, queries, t_n)
    contrib = with_interval(kept_rows, release_times)
    # Each query sums the contributions once per interval when every unit is one entry: a view
    # (one pass over the kept rows per query) costs less than a copy of them, unless the
    # intervals need a join (unequal lengths).
    _create_temp(
        con, "VIEW" if unit_is_entry and uniform_step(release_times) is not None else "TABLE",
        "_dpcr_contrib", f"SELECT * FROM ({contrib}) WHERE iv >= {int(first_interval)}",
    )  # fmt: skip

    values, clamps, candidates = _query_totals(
        con, queries, release_times, first_interval, unit_is_entry=unit_is_entry, seeded=seeded
    )
    steps.close()
    clamped = {name: int(per_iv.sum()) for name, per_iv in clamps.items()}
    report = BoundingReport(late=late, clamped=clamped, retired=retired, **counted)
    return Aggregates(first_interval=first_interval, last_interval=n, values=values,
                      report=report, clamps=clamps, candidates=candidates)  # fmt: skip


def _query_totals(
    con: duckdb.DuckDBPyConnection, queries: Sequence[Query], release_times: Sequence[int],
    first_interval: int, *, unit_is_entry: bool, seeded: bool,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, dict[str, int]]]:
    """Each query's totals over intervals ``first_interval ..`` from ``_dpcr_contrib`` (an
    ``exhausted`` query's from ``_dpcr_bounded``), the per-interval clamps of the queries
    that have any, and each open query's candidate keys."""
    n = len(release_times)
    values: dict[str, np.ndarray] = {}
    clamps: dict[str, np.ndarray] = {}
    width = max(0, n - first_interval + 1)
    candidates: dict[str, dict[str, int]] = {}
    for i, q in enumerate(queries):
        if isinstance(q, Exhausted):
            values[q.name] = exhausted_values(con, release_times, first_interval, width)
            continue
        keys = None
        if has_open_keys(q):
            candidates[q.name] = candidate_keys(con, i, release_times, seeded=seeded,
                                                valued=isinstance(q, GroupedSum))  # fmt: skip
            keys = open_columns(q, candidates[q.name])
        values[q.name], per_iv = aggregate_query(con, i, q, first_interval, width, unit_is_entry,
                                                 columns=keys)  # fmt: skip
        if per_iv.any():
            clamps[q.name] = per_iv
    return values, clamps, candidates


def _times_and_late(
    con: duckdb.DuckDBPyConnection, table: str, release_times: Sequence[int],
    exclude_late: tuple[int, int] | None,
) -> tuple[int, str]:
    """Table ``_dpcr_times`` (the release times); with ``exclude_late``, the view ``_dpcr_src``
    of ``table`` without the late mutations (see :func:`aggregate`). Returns how many were
    left out and the table or view to bound."""
    con.execute(f"DROP TABLE IF EXISTS {SETTLING}")  # (an earlier aggregation's)
    con.execute("DROP TABLE IF EXISTS _dpcr_times")
    # (one statement: a row per statement costs a round trip each, and holds the interpreter)
    con.execute(
        "CREATE TEMP TABLE _dpcr_times AS SELECT unnest(range(1, len(t) + 1))::BIGINT AS i, "
        "unnest(t)::BIGINT AS hi FROM (SELECT ?::BIGINT[] AS t)",
        [[int(t) for t in release_times]],
    )

    late = 0
    source = table
    if exclude_late is not None:
        records_seen, t_last = exclude_late
        seen = consumed_record(con, table, records_seen)
        late_row = con.execute(
            f"SELECT count(*) FROM {table} WHERE record > ? AND ts <= ?", [seen, t_last]
        ).fetchone()
        late = int(late_row[0]) if late_row else 0
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW _dpcr_src AS SELECT * FROM {table} "
            f"WHERE NOT (record > {int(seen)} AND ts <= {int(t_last)})"
        )
        source = "_dpcr_src"
    return late, source


def _bounding_counts(
    con: duckdb.DuckDBPyConnection, queries: Sequence[Query], constraint: Constraint, *,
    seeded: bool, move: str | None,
) -> dict[str, Any]:
    """The counts of the bounding report from ``_dpcr_bounded``: units, mutations, kept,
    dropped per reason and per state-machine move, per hybrid class, and per query the kept
    mutations without a number (sums) or outside the keys (histograms, ``unknown = "drop"``)."""
    # Every unit has one row of rank 1 (not so for seeded histories, whose ranks go on).
    units = "count(DISTINCT unit)" if seeded else "count(*) FILTER (WHERE rank_u = 1)"
    non_numeric: dict[str, int] = {}
    unknown_keys: dict[str, int] = {}
    # (per query, the kept rows without a number or outside the keys: in the same scan)
    of_queries: list[tuple[dict[str, int], str, str]] = []
    for i, q in enumerate(queries):
        if isinstance(q, Sum):
            of_queries.append((non_numeric, q.name, f"kept AND nn{i}"))
        if isinstance(q, Histogram | GroupedSum) and q.unknown in ("drop", None) and not q.open:
            of_queries.append((unknown_keys, q.name, f"kept AND f{i} = -2"))
    counts = con.execute(
        f"SELECT {units}, count(*), count(*) FILTER (WHERE kept)"
        + "".join(f", count(*) FILTER (WHERE {where})" for _, _, where in of_queries)
        + " FROM _dpcr_bounded"
    ).fetchone()
    assert counts is not None
    for (found, name, _), n in zip(of_queries, counts[3:], strict=True):
        if n:
            found[name] = int(n)
    dropped = dict(
        con.execute(
            "SELECT reason, count(*) FROM _dpcr_bounded WHERE NOT kept GROUP BY reason"
        ).fetchall()
    )
    moves = dropped_moves(con, "_dpcr_bounded", move)
    by_class: dict[str, dict[str, int]] = {}
    if isinstance(constraint, Hybrid):
        for cls, units, kept, drop in con.execute(
            "SELECT cls, count(DISTINCT unit), count(*) FILTER (WHERE kept), "
            "count(*) FILTER (WHERE NOT kept) FROM _dpcr_bounded GROUP BY cls ORDER BY cls"
        ).fetchall():
            by_class[cls] = {"units": units, "kept": kept, "dropped": drop}
    return {
        "units": int(counts[0]), "mutations": int(counts[1]), "kept": int(counts[2]),
        "dropped": {str(k): int(v) for k, v in dropped.items()}, "non_numeric": non_numeric,
        "unknown_keys": unknown_keys, "by_class": by_class, "dropped_moves": moves,
    }  # fmt: skip

def dropped_moves(
    con: duckdb.DuckDBPyConnection, rows: str, move: str | None
) -> dict[str, dict[str, int]]:
    """Dropped rows of ``rows`` per reason and per state-machine move (rows without a machine
    are left out); empty when ``move`` is None."""
    if move is None:
        return {}
    out: dict[str, dict[str, int]] = {}
    for reason, mv, n in con.execute(
        f"SELECT reason, mv, count(*) FROM (SELECT reason, {move} AS mv FROM {rows} "
        "WHERE NOT kept) WHERE mv IS NOT NULL GROUP BY ALL ORDER BY ALL"
    ).fetchall():
        out.setdefault(str(reason), {})[str(mv)] = int(n)
    return out


def _with_retirements(
    con: duckdb.DuckDBPyConnection, kept_rows: str, queries: Sequence[Query], t_n: int | None
) -> tuple[str, int]:
    """``kept_rows`` plus one delete per (unit, entry) with kept rows whose unit retires by
    ``t_n``: at the retirement time, f = 0 (a histogram: no key) after the last kept value.
    Every kept row of a retiring unit is at or before its retirement, so the delete comes last.
    Returns the rows and the number of entries that were live when retired."""
    nulls = ", ".join(
        f"{no_key(q)} AS f{i}, arg_max(f{i}, rank_u) AS p{i}"
        for i, q in enumerate(queries)
    )
    horizon = "FALSE" if t_n is None else f"retire_ts <= {int(t_n)}"
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _dpcr_retired AS
        SELECT unit, entry, any_value(retire_ts) AS ts, {nulls},
               NOT arg_max(deleted, rank_u) AS live
        FROM _dpcr_bounded WHERE kept AND retire_ts IS NOT NULL AND {horizon}
        GROUP BY unit, entry"""
    )
    row = con.execute("SELECT count(*) FILTER (WHERE live) FROM _dpcr_retired").fetchone()
    cols = ", ".join(f"f{i}, p{i}" for i in range(len(queries)))
    rows = f"{kept_rows} UNION ALL SELECT unit, entry, ts, {cols} FROM _dpcr_retired"
    return rows, int(row[0]) if row else 0


def _create_temp(con: duckdb.DuckDBPyConnection, kind: str, name: str, select: str) -> None:
    """Temporary ``kind`` (TABLE or VIEW) ``name`` as ``select``, replacing a temporary table
    or view of that name (an earlier run's may be of the other kind)."""
    for old in ("VIEW", "TABLE"):
        with contextlib.suppress(duckdb.CatalogException):
            con.execute(f"DROP {old} IF EXISTS {name}")
    con.execute(f"CREATE TEMP {kind} {name} AS {select}")


def unit_state(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, int, int, int]]:
    """(unit, class, first_ts, kept, dropped) for every unit seen in the last aggregation."""
    return [
        (str(u), str(c), int(f), int(k), int(d))
        for u, c, f, k, d in con.execute(
            "SELECT unit, any_value(cls), min(ts), count(*) FILTER (WHERE kept), "
            "count(*) FILTER (WHERE NOT kept) FROM _dpcr_bounded GROUP BY unit ORDER BY unit"
        ).fetchall()
    ]


class DuckDBEngine:
    """The embedded engine (:class:`~dpcr.engines.base.Engine`): one in-memory DuckDB database
    per aggregation, or the caller's connection ``con`` (then the tables ``changelog`` and the
    bounding tables stay in it for the caller); it keeps no state between runs. A release runs
    :class:`dpcr.engines.duckdb_step.DuckDBReleaseEngine`, in the run's own connection."""

    name = "duckdb"

    def __init__(self, con: duckdb.DuckDBPyConnection | None = None) -> None:
        self._con = con

    def keeps_state(self, request: AggregateRequest) -> bool:
        return False

    def step(self, request: AggregateRequest, run: EngineRun) -> DataStep:
        from dpcr.engines.step import engine_step

        return engine_step(self, request, run)

    def aggregate(self, request: AggregateRequest) -> EngineResult:
        from dpcr.changelog import load
        from dpcr.engines.base import numeric_columns

        con = self._con if self._con is not None else duckdb.connect()
        try:
            con.execute("SET enable_progress_bar = false")
            report = load(
                request.source,
                con,
                table="changelog",
                on_error=request.on_error,  # type: ignore[arg-type]
                quarantine_path=request.quarantine_path,
                unit_column=request.unit_column,
                exclude_late=request.exclude_late,
                frozen=request.frozen,
                ordered=False,
                numbers=numeric_columns(request.queries, request.constraint),
            )
            row = con.execute(
                "SELECT min(ts), max(ts), count(*) FILTER (WHERE ts > ?) FROM changelog",
                [int(request.clock)],
            ).fetchone()
            min_ts, max_ts, not_yet_due = row if row is not None else (None, None, 0)
            missing: list[str] = []
            if report.valid:
                missing = missing_columns(
                    con, table="changelog", queries=request.queries,
                    constraint=request.constraint,
                )  # fmt: skip
            agg = aggregate(
                con, table="changelog", queries=request.queries, constraint=request.constraint,
                release_times=request.release_times, first_interval=request.first_interval,
                unit_is_entry=request.unit_is_entry, retire=request.retire,
            )  # fmt: skip
        finally:
            if self._con is None:
                con.close()
        return EngineResult(
            load=report,
            aggregates=agg,
            min_ts=None if min_ts is None else int(min_ts),
            max_ts=None if max_ts is None else int(max_ts),
            not_yet_due=int(not_yet_due or 0),
            missing_columns=tuple(missing),
        )
