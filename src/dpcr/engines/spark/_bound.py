"""Bounding and per-interval aggregation as Spark DataFrame operations: the rules of
:mod:`dpcr.bounding.sql` and :func:`dpcr.engines.duckdb.aggregate`, over the valid mutations
of :func:`dpcr.engines.spark._load.validate` (already hash-partitioned by unit, so every window
below only sorts within a partition).

Per unit, in (ts, seq, entry, record) order: ``rank_u``, the unit's first timestamp and the class
of its first row; per (unit, entry): the state machines' previous state and stays. Each unit
keeps a prefix of its history (at most k, time-bounded, state machine, hybrid), so within a
(unit, entry) the kept rows are a prefix too, and the previous *kept* f value of a kept row is
its previous f value: one ``lag`` over the (unit, entry) gives every contribution f(after) -
f(previous kept after).

Contributions are then exploded to (query, unit, interval, key, change) and summed per
(query, interval, key): a histogram's row adds 1 at its key and −1 at the previous row's, a
grouped sum's row its value v at its key and −v₀ (the previous row's value) at the previous
row's key. When a unit owns several entries they are first summed per unit and interval, and
clamped to the query's L1 sensitivity (counts and sums) or dropped when their L1 norm over the
keys exceeds it (histograms: 2; grouped sums: :func:`dpcr.queries.grouped_bounds`). Only the
small totals and the report's counts are collected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid, SimpleConstraint
from dpcr.bounding.state_machine import OpLimits, StateMachine
from dpcr.engines.base import Aggregates, BoundingReport
from dpcr.engines.spark._open import candidates, columns, fill, key_of, value_of
from dpcr.engines.spark._records import error_histograms, is_open, machines, no_f
from dpcr.engines.totals import change_sql
from dpcr.errors import ChangelogError
from dpcr.queries import Events, GroupedSum, Histogram, Query, Sum

_ORDER = ("ts", "seq", "entry", "record")
_SM_REASONS = {1: "state_transition", 2: "state_allowance", 3: "unknown_state"}


def _machine_columns(frame: DataFrame, ms: list[StateMachine], seeded: bool = False) -> DataFrame:
    """``bad{j}`` (failure code) and ``cut{j}`` (4 * rank_u + code of the unit's first failure)
    of every state machine (see :func:`dpcr.bounding.sql._machine_sql`). ``seeded``: the
    histories continue earlier rows summarised in ``s_ne``, ``s_st{j}``, ``s_comp{j}``,
    ``s_cn{j}`` (per (unit, entry)) and ``s_cut{j}`` (per unit), and ``_re`` numbers each
    (unit, entry)'s rows of ``frame``."""
    if not ms:
        return frame
    by_entry = Window.partitionBy("unit", "entry").orderBy(*_ORDER)
    rank_e = F.row_number().over(by_entry)
    if seeded:
        rank_e = F.col("_re") + F.coalesce(F.col("s_ne"), F.lit(0))
    frame = frame.withColumn("rank_e", rank_e)
    deleted = F.col("op") == "delete"
    for j, m in enumerate(ms):
        st, pst, comp = F.col(f"st{j}"), F.col(f"pst{j}"), F.col(f"comp{j}")
        previous = F.lag(st).over(by_entry)
        count = F.row_number().over(
            Window.partitionBy("unit", "entry", f"comp{j}").orderBy(*_ORDER)
        )
        if seeded:
            previous = F.when(F.col("_re") == 1, F.col(f"s_st{j}")).otherwise(previous)
            stays = F.when(comp == F.col(f"s_comp{j}"), F.col(f"s_cn{j}")).otherwise(F.lit(0))
            count = count + stays
        frame = frame.withColumn(f"pst{j}", previous).withColumn(f"cn{j}", count)
        moves = F.lit(False)
        for a, b in m.transitions:
            moves = moves | ((pst == a) & (st == b))
        allowance = F.lit(None).cast("long")
        for i in range(len(m.composites)):
            allowance = F.when(comp == i, F.lit(m.composite_allowance(i))).otherwise(allowance)
        initial = st.isin(*m.initial) if m.initial else F.lit(False)
        terminal = pst.isin(*m.terminal) if m.terminal else F.lit(False)
        if isinstance(m, OpLimits):  # any live state (its immutable values), as in the SQL
            initial = st.isNotNull()
            terminal = pst.isNotNull() if m.deletes else F.lit(False)
        bad = (
            F.when(~deleted & st.isNull(), 3)
            .when(F.col("rank_e") == 1, F.when(~deleted & initial, 0).otherwise(1))
            .when(pst.isNull(), 1)
            .when(deleted, F.when(terminal, 0).otherwise(1))
            .when(~((pst == st) | moves), 1)
            .when(F.col(f"cn{j}") - 1 > allowance, 2)
            .otherwise(0)
        )
        frame = frame.withColumn(f"bad{j}", bad)
        cut = F.min(F.when(F.col(f"bad{j}") > 0, 4 * F.col("rank_u") + F.col(f"bad{j}")))
        cut = cut.over(Window.partitionBy("unit"))
        if seeded:
            cut = F.least(cut, F.col(f"s_cut{j}"))  # (least skips a NULL)
        frame = frame.withColumn(f"cut{j}", cut)
    return frame


def _keep(c: SimpleConstraint, ms: list[StateMachine]) -> tuple[Column, Column]:
    """(keep, reason) of one simple constraint."""
    rank = F.col("rank_u")
    if isinstance(c, StateMachine):
        cut = F.col(f"cut{ms.index(c)}")
        at = F.floor(cut / 4)
        keep = (rank <= c.k) & (cut.isNull() | (rank < at))
        code = F.lit("at_most_k")
        for value, name in _SM_REASONS.items():
            code = F.when(cut % 4 == value, F.lit(name)).otherwise(code)
        reason = F.when(cut.isNotNull() & (at <= c.k), code).otherwise(F.lit("at_most_k"))
        return keep, reason
    if isinstance(c, AtMostK):
        return rank <= c.k, F.lit("at_most_k")
    return (F.col("ts") - F.col("first_ts")) <= c.bound, F.lit("time_bounded")


def _keep_rule(constraint: Constraint, ms: list[StateMachine]) -> tuple[Column, Column]:
    if not isinstance(constraint, Hybrid):
        return _keep(constraint, ms)
    if constraint.default is not None:
        keep, reason = _keep(constraint.default, ms)
    else:
        keep, reason = F.lit(False), F.lit("unknown_class")
    cls = F.col("cls")
    for name, c in reversed(list(constraint.classes.items())):
        k, r = _keep(c, ms)
        keep = F.when(cls == name, k).otherwise(keep)
        reason = F.when(cls == name, r).otherwise(reason)
    return keep, reason


def _move(constraint: Constraint, ms: list[StateMachine]) -> Column | None:
    """The row's move under its class's machine (see :func:`dpcr.bounding.sql._move_sql`)."""
    if not ms:
        return None

    def one(c: SimpleConstraint | None) -> Column:
        if not isinstance(c, StateMachine):
            return F.lit(None).cast("string")
        j = ms.index(c)
        to = F.when(F.col("op") == "delete", F.lit("(deleted)")).otherwise(
            F.coalesce(F.col(f"st{j}"), F.lit("(unknown)")))  # fmt: skip
        return F.concat(F.coalesce(F.col(f"pst{j}"), F.lit("(none)")), F.lit(" -> "), to)

    if not isinstance(constraint, Hybrid):
        return one(constraint)
    move = one(constraint.default)
    for name, c in reversed(list(constraint.classes.items())):
        move = F.when(F.col("cls") == name, one(c)).otherwise(move)
    return move


def bound(
    valid: DataFrame, queries: Sequence[Query], constraint: Constraint, *, seeded: bool = False
) -> DataFrame:
    """Every valid mutation with ``kept``, ``reason``, ``rank_u`` and, per query, ``p{i}`` (the
    previous f of its (unit, entry)). ``seeded``: the rows continue histories whose earlier
    rows are summarised in seed columns (NULL for a unit or entry without earlier rows): per
    unit ``s_n``, ``s_first_ts``, ``s_cls``, ``s_cut{j}``; per (unit, entry) ``s_ne``,
    ``s_f{i}``, ``s_st{j}``, ``s_comp{j}``, ``s_cn{j}`` (see
    :func:`dpcr.engines.duckdb.aggregate`): every rank, first time, class, state and previous
    value is then that of the whole history."""
    ms = machines(constraint)
    unit = Window.partitionBy("unit")
    ordered = unit.orderBy(*_ORDER)
    by_entry = Window.partitionBy("unit", "entry").orderBy(*_ORDER)
    rank = F.row_number().over(ordered)
    first_ts = F.min("ts").over(unit)
    cls = F.first("cls").over(ordered)
    if seeded:
        rank = rank + F.coalesce(F.col("s_n"), F.lit(0))
        first_ts = F.coalesce(F.col("s_first_ts"), first_ts)
        cls = F.coalesce(F.col("s_cls"), cls)
        valid = valid.withColumn("_re", F.row_number().over(by_entry))
    frame = valid.withColumn("rank_u", rank).withColumn("first_ts", first_ts)
    frame = frame.withColumn("cls", cls)
    frame = _machine_columns(frame, ms, seeded)
    keep, reason = _keep_rule(constraint, ms)
    frame = frame.withColumn("kept", keep).withColumn("reason", reason)
    move = _move(constraint, ms)
    if move is not None:
        frame = frame.withColumn("mv", move)
    for i, q in enumerate(queries):
        value, kind = no_f(q)  # (f before an entry's first row)
        if seeded:
            carried = F.coalesce(F.col(f"s_f{i}"), F.lit(value).cast(kind))
            previous = F.when(F.col("_re") == 1, carried).otherwise(F.lag(f"f{i}").over(by_entry))
        else:
            previous = F.lag(f"f{i}", 1, value).over(by_entry)
        frame = frame.withColumn(f"p{i}", previous)
    return frame


Report = tuple[BoundingReport, dict[str, int], dict[str, int]]


def drops_unknown(query: Query) -> bool:
    """Whether ``query`` has declared keys and drops a value outside them (f = -2), which the
    report counts (``unknown_keys``)."""
    return (isinstance(query, Histogram | GroupedSum) and query.unknown in ("drop", None)
            and not query.open)  # fmt: skip


def _report(bounded: DataFrame, queries: Sequence[Query], constraint: Constraint) -> Report:
    """The bounding report of ``bounded`` (with the per-query non-numeric and unknown-key
    counts)."""
    return reports(bounded, queries, constraint, F.lit(False))[0]


def reports(
    bounded: DataFrame, queries: Sequence[Query], constraint: Constraint, part: Column
) -> tuple[Report, Report]:
    """:func:`_report` of all of ``bounded`` and of its rows where ``part`` holds, in one
    pass (and one more for the dropped moves of state machines)."""
    kept = F.col("kept")
    sums = []
    for i, q in enumerate(queries):
        if isinstance(q, Sum):
            sums.append(F.sum(F.when(kept & F.col(f"nn{i}"), 1).otherwise(0)).alias(f"nn{i}"))
        if drops_unknown(q):
            sums.append(F.sum(F.when(kept & (F.col(f"f{i}") == -2), 1).otherwise(0)).alias(f"u{i}"))
    rows = (
        bounded.withColumn("_part", part)
        .groupBy("cls", "kept", "reason", "_part")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.when(F.col("rank_u") == 1, 1).otherwise(0)).alias("units"),
            *sums,
        )
        .collect()
    )
    moves: list[Any] = []
    if machines(constraint):
        moves = (bounded.filter(~kept & F.col("mv").isNotNull()).withColumn("_part", part)
                 .groupBy("reason", "mv", "_part").count().collect())  # fmt: skip
    whole = _assemble(rows, moves, queries, constraint)
    inside = _assemble([r for r in rows if r["_part"]], [r for r in moves if r["_part"]],
                       queries, constraint)  # fmt: skip
    return whole, inside


def _assemble(
    rows: list[Any], move_rows: list[Any], queries: Sequence[Query], constraint: Constraint
) -> Report:
    units = mutations = kept_n = 0
    dropped: dict[str, int] = {}
    by_class: dict[str, dict[str, int]] = {}
    non_numeric: dict[str, int] = {}
    unknown: dict[str, int] = {}
    for r in rows:
        n = int(r["n"])
        units += int(r["units"])
        mutations += n
        cls = by_class.setdefault(str(r["cls"]), {"units": 0, "kept": 0, "dropped": 0})
        cls["units"] += int(r["units"])
        if r["kept"]:
            kept_n += n
            cls["kept"] += n
        else:
            dropped[str(r["reason"])] = dropped.get(str(r["reason"]), 0) + n
            cls["dropped"] += n
        for i, q in enumerate(queries):
            if isinstance(q, Sum) and r[f"nn{i}"]:
                non_numeric[q.name] = non_numeric.get(q.name, 0) + int(r[f"nn{i}"])
            if drops_unknown(q) and r[f"u{i}"]:
                unknown[q.name] = unknown.get(q.name, 0) + int(r[f"u{i}"])
    moves: dict[str, dict[str, int]] = {}
    for r in sorted(move_rows, key=lambda r: (str(r["reason"]), str(r["mv"]))):
        by_move = moves.setdefault(str(r["reason"]), {})
        by_move[str(r["mv"])] = by_move.get(str(r["mv"]), 0) + int(r["count"])
    report = BoundingReport(
        units=units,
        mutations=mutations,
        kept=kept_n,
        dropped=dropped,
        by_class=dict(sorted(by_class.items())) if isinstance(constraint, Hybrid) else {},
        dropped_moves=moves,
    )
    ordered_nn = {q.name: non_numeric[q.name] for q in queries if q.name in non_numeric}
    ordered_uk = {q.name: unknown[q.name] for q in queries if q.name in unknown}
    return report, ordered_nn, ordered_uk


def _check_histogram_keys(bounded: DataFrame, queries: Sequence[Query]) -> None:
    for i in error_histograms(tuple(queries)):
        q = queries[i]
        assert isinstance(q, Histogram)
        rows = (
            bounded.where(F.col("kept") & (F.col(f"f{i}") == -2) & (F.col("op") != "delete"))
            .orderBy("record")
            .select("record", f"hv{i}")
            .limit(1)
            .collect()
        )
        if rows:
            record, value = int(rows[0][0]), rows[0][1]
            raise ChangelogError(
                f"record {record}: field {q.column!r} has value {value!r}, which is not "
                f"among the keys of histogram {q.name!r} {list(q.categories)}; add it to "
                "keys, or remove unknown = 'error' from the query (the default, 'drop', "
                "counts such values nowhere and reports them; 'other' counts them under "
                "the key 'other')",
                record=record,
                field=q.column,
                reason="unknown_key",
            )


def _change(i: int, d: int | Column, *, key: Column | None = None,
            okey: Column | None = None) -> Column:  # fmt: skip
    """One change of query ``i``: ``d`` at key number ``key`` (0: a scalar's), or at the key
    text ``okey`` (open keys')."""
    return F.struct(
        F.lit(i).alias("q"),
        (F.lit(0).cast("long") if key is None else key).alias("key"),
        (F.lit(None).cast("string") if okey is None else okey).alias("okey"),
        (F.lit(d) if isinstance(d, int) else d).cast("long").alias("d"),
    )


def _moves(i: int, q: Histogram | GroupedSum) -> list[Column]:
    """A kept mutation's two changes of keyed query ``i`` (see
    :func:`dpcr.engines.totals.aggregate_query`): d at the key of its f, −d₀ at the key of the
    previous row's f (none where there is no key). A histogram's d is 1; a grouped sum's is
    the row's value, decoded from its f: ``'v:key'`` (open keys), or j·W + (v − lo) for key
    number j (declared keys, W = :attr:`~dpcr.queries.GroupedSum.code_width`)."""
    out = []
    for sign, name in ((1, f"f{i}"), (-1, f"p{i}")):
        f = F.col(name)
        if is_open(q):
            d = F.lit(sign) if isinstance(q, Histogram) else value_of(f) * sign
            out.append(F.when(f.isNotNull(), _change(i, d, okey=key_of(q, f))))
        elif isinstance(q, Histogram):
            out.append(F.when(f >= 0, _change(i, sign, key=f)))
        else:
            w, lo = q.code_width, q.value_range[0]
            key, value = F.expr(f"{name} div {w}"), F.expr(f"{name} % {w} + ({lo})")
            out.append(F.when(f >= 0, _change(i, value * sign, key=key)))
    return out


def _changes(bounded: DataFrame, queries: Sequence[Query], first: int) -> DataFrame:
    """(q, unit, iv, key, okey, d): every kept mutation's changes in intervals ``first ..``
    (``okey``: open keys' key text, else NULL)."""
    items = []
    for i, q in enumerate(queries):
        if isinstance(q, Histogram | GroupedSum):
            items += _moves(i, q)
        else:
            items.append(_change(i, F.expr(change_sql(q, f"f{i}", f"p{i}"))))
    moves = bounded.where(F.col("kept") & (F.col("iv") >= first)).select(
        "unit", "iv", F.explode(F.array(*items)).alias("m")
    )
    return moves.where(F.col("m").isNotNull()).select(
        "unit", "iv", *[F.col(f"m.{c}").alias(c) for c in ("q", "key", "okey", "d")]
    )


def _totals(
    bounded: DataFrame, queries: Sequence[Query], first: int, unit_is_entry: bool
) -> tuple[list[Any], dict[tuple[int, int], int]]:
    """Rows (q, iv, key, okey, t) and the clamped unit-intervals per (query, interval)."""
    changes = _changes(bounded, queries, first)
    # (an event query's changes do not telescope: a unit's are clamped whatever the unit)
    if unit_is_entry and not any(isinstance(q, Events) for q in queries):
        totals = changes.groupBy("q", "iv", "key", "okey").agg(F.sum("d").alias("t"))
        return totals.collect(), {}
    per_unit = changes.groupBy("q", "unit", "iv", "key", "okey").agg(F.sum("d").alias("d"))
    # (each query's L1 bound; keyed queries drop a unit-interval over it, others clamp)
    bounds = F.lit(0).cast("long")
    hist = F.lit(False)
    for i, q in enumerate(queries):
        bounds = F.when(F.col("q") == i, F.lit(int(q.l1_sensitivity))).otherwise(bounds)
        if isinstance(q, Histogram | GroupedSum):
            hist = hist | (F.col("q") == i)
    grouped = per_unit.groupBy("q", "unit", "iv").agg(
        F.sum(F.abs("d")).alias("l1"),
        F.sum("d").alias("d"),
        F.collect_list(F.struct("key", "okey", "d")).alias("kd"),
    )
    grouped = grouped.withColumn("b", bounds).withColumn("hist", hist)
    over = F.when(F.col("hist"), F.col("l1") > F.col("b")).otherwise(F.abs("d") > F.col("b"))
    clamped = grouped.where(over).groupBy("q", "iv").count().collect()
    scalar = grouped.where(~F.col("hist")).select(
        "q", "iv", F.lit(0).cast("long").alias("key"), F.lit(None).cast("string").alias("okey"),
        F.greatest(-F.col("b"), F.least(F.col("b"), F.col("d"))).alias("d"),
    )  # fmt: skip
    histo = (
        grouped.where(F.col("hist") & (F.col("l1") <= F.col("b")))
        .select("q", "iv", F.explode("kd").alias("kd"))
        .select("q", "iv", *[F.col(f"kd.{c}").alias(c) for c in ("key", "okey", "d")])
    )
    totals = scalar.unionByName(histo).groupBy("q", "iv", "key", "okey").agg(
        F.sum("d").alias("t"))  # fmt: skip
    return totals.collect(), {(int(r["q"]), int(r["iv"])): int(r["count"]) for r in clamped}


def aggregate(
    loaded: DataFrame,
    *,
    queries: Sequence[Query],
    constraint: Constraint,
    release_times: Sequence[int],
    first_interval: int,
    unit_is_entry: bool,
) -> Aggregates:
    """:func:`dpcr.engines.duckdb.aggregate` over the validated frame (``status = 'valid'``)."""
    n = len(release_times)
    width = max(0, n - first_interval + 1)
    if n == 0:
        found = candidates(None, queries)
        values = fill([], queries, first_interval, width, columns(queries, found))
        empty = BoundingReport(units=0, mutations=0, kept=0, dropped={})
        return Aggregates(first_interval=first_interval, last_interval=0, values=values,
                          report=empty, candidates=found)  # fmt: skip
    valid = loaded.where((F.col("status") == "valid") & (F.col("ts") <= int(release_times[-1])))
    bounded = bound(valid, queries, constraint)
    keep = ["unit", "entry", "record", "op", "kept", "reason", "rank_u", "cls", "iv"]
    keep += [f"f{i}" for i in range(len(queries))] + [f"p{i}" for i in range(len(queries))]
    keep += [f"nn{i}" for i, q in enumerate(queries) if isinstance(q, Sum)]
    keep += [f"hv{i}" for i in error_histograms(tuple(queries))]
    keep += ["mv"] if machines(constraint) else []
    bounded = bounded.select(*keep).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        report, non_numeric, unknown = _report(bounded, queries, constraint)
        _check_histogram_keys(bounded, queries)
        found = candidates(bounded, queries)
        clamped: dict[int, int] = {}
        rows: list[Any] = []
        if width:
            rows, per_interval = _totals(bounded, queries, first_interval, unit_is_entry)
            for (q, _iv), count in per_interval.items():
                clamped[q] = clamped.get(q, 0) + count
        values = fill(rows, queries, first_interval, width, columns(queries, found))
    finally:
        bounded.unpersist()
    report = BoundingReport(
        units=report.units,
        mutations=report.mutations,
        kept=report.kept,
        dropped=report.dropped,
        clamped={queries[i].name: c for i, c in sorted(clamped.items()) if c},
        non_numeric=non_numeric,
        unknown_keys=unknown,
        by_class=report.by_class,
        dropped_moves=report.dropped_moves,
    )
    return Aggregates(first_interval=first_interval, last_interval=n, values=values,
                      report=report, candidates=found)  # fmt: skip
