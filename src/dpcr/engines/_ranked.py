"""The ranked rows :func:`dpcr.engines.duckdb.aggregate` bounds: :func:`ranked_sql` in
general, :func:`narrow_ranked` for a one-pass aggregation, whose rows are narrowed to the
window's sort keys.

DuckDB's window operator sorts each unit's rows by the order keys and carries every other
column beside them: on 10^7 rows, one carried integer column cost about 40 % of the sort of
the keys alone, and each lag over a carried column as much again (docs/benchmarks.md). When
every unit is one entry and the queries are counts and sums
(:func:`dpcr.engines.duckdb.checks_liveness`), what a row passes on besides its keys -- its
op, whether it has a row after, each query's f and whether a sum's value is missing -- fits
in one integer ``code`` of a few bits. The window orders by its own keys and then by
``code`` (and ``record`` where the order leaves it out), so every column it passes on is a
sort key and nothing is carried; the extra keys order only rows that the window's order
leaves tied. One lag of ``code`` gives the previous row's op and f's together. Where the
order ends in ``record`` and the code is short, both are one key, ``record << bits | code``
(at 10^6 rows the window's statement took 12 % less CPU than with two keys).

The rows come out as :meth:`dpcr.bounding.sql.BoundingSql.ranked` gives them (same columns
and values); :func:`narrow_ranked` returns None where the code would not fit in 62 bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from dpcr._sql import lit
from dpcr.bounding.sql import OP_CODE, BoundingSql, by_unit
from dpcr.changelog import plain_break
from dpcr.queries import Count, GroupedSum, Histogram, Query, Sum

__all__ = ["ITEM", "narrow_ranked", "no_key", "no_value", "ranked_sql", "settle_marks",
           "settled_units"]  # fmt: skip

_BITS = 62  # the code is a BIGINT >= 0
#: A code of at most this many bits shares its sort key with the record number, below 2^40:
#: ``record << bits | code`` orders as (record, code), in one key instead of two.
_PACKED = _BITS - 40


def _field_ranges(queries: Sequence[Query]) -> list[tuple[int, int]] | None:
    """Per query the range [lo, hi] of its f (f = 0 without a row after or a number), or None
    when a query is neither a count nor a sum."""
    ranges = []
    for q in queries:
        if isinstance(q, Count):
            ranges.append((0, 1))
        elif isinstance(q, Sum):
            a, b = q.steps_range
            ranges.append((min(int(a), 0), max(int(b), 0)))
        else:
            return None
    return ranges


#: A code of at most this many bits goes into the per-unit item of a settle (:data:`ITEM`).
_ITEM_CODE = 48
#: The column of :func:`narrow_ranked`'s rows (with ``settle_at``) that holds, packed in one
#: HUGEINT, what the per-unit summary of a settle takes from a unit's last settled row: the
#: record of its liveness seed (bits 88 and up), its rank (bits 48 to 87) and its code (the
#: bits below 48): :func:`settled_units` unpacks it.
ITEM = "s_item"

_Field = tuple[str, int, int, int, str]  # (name, offset, lo, width, type)


class _Layout(NamedTuple):
    """The code of a row that :func:`narrow_ranked` sorts on (:func:`_layout`)."""

    #: SQL of the code over the numbered rows, valid where ``within`` holds
    code: str
    #: SQL true when every field of the row lies in its range (false or NULL otherwise)
    within: str
    #: the fields ``f{i}`` and ``nn{i}``
    fields: list[_Field]
    #: the offset of the rejected bit
    rejected: int
    #: the bits used
    bits: int


def _layout(queries: Sequence[Query], check: bool) -> _Layout | None:
    """The code of a row that :func:`narrow_ranked` sorts on, as SQL over the numbered rows;
    None when a query is neither a count nor a sum or the code does not fit. The code is
    read only where every field is in its range: :func:`_checked` raises an internal error
    for a row where one is not (or is NULL), one test for all of them."""
    ranges = _field_ranges(queries)
    if ranges is None:
        return None
    parts = ["op_code::BIGINT", "(deleted::BIGINT << 2)"]
    within: list[str] = []
    fields: list[_Field] = []
    at = 3
    for i, (q, (lo, hi)) in enumerate(zip(queries, ranges, strict=True)):
        width = (hi - lo).bit_length()
        fields.append((f"f{i}", at, lo, width, "INTEGER" if isinstance(q, Count) else "BIGINT"))
        within.append(f"f{i} BETWEEN {lo} AND {hi}")
        parts.append(f"((f{i} - ({lo}))::BIGINT << {at})" if lo else f"(f{i}::BIGINT << {at})")
        at += width
        if isinstance(q, Sum):
            fields.append((f"nn{i}", at, 0, 1, "BOOLEAN"))
            parts.append(f"(nn{i}::BIGINT << {at})")
            at += 1
    code = " | ".join(parts)
    rejected = at
    if check:  # (a rejected record's op may be NULL: code 3 then; this bit alone is read)
        code = f"coalesce({code}, 3) | (rejected::BIGINT << {at})"
        at += 1
    if at > _BITS:
        return None
    return _Layout(code, " AND ".join(within) or "TRUE", fields, rejected, at)


def _checked(value: str, within: str) -> str:
    """SQL of ``value`` where ``within`` holds, else an internal error."""
    fail = lit("internal error: a record number or a field of the ranking's code outside its "
               "range; please report this")  # fmt: skip
    return f"CASE WHEN {within} THEN {value} ELSE error({fail}) END"


def _field(code: str, offset: int, lo: int, width: int, kind: str) -> str:
    """SQL of a field of a code (:func:`_layout`)."""
    value = f"(({code} >> {offset}) & {(1 << width) - 1})"
    return f"{value} = 1" if kind == "BOOLEAN" else f"({value} + ({lo}))::{kind}"


def _item(first: str) -> str:
    """SQL of :data:`ITEM` in :func:`narrow_ranked`'s decoding select (``code``, ``record``,
    ``rank_u``; ``first``: the first row's record)."""
    fail = lit("internal error: a record number or rank at or above 2^40; please report this")
    lr = f"CASE WHEN (code & 3) = 2 THEN record ELSE {first} END"
    return (f"CASE WHEN {lr} BETWEEN 0 AND {(1 << 40) - 1} AND rank_u < {1 << 40} THEN "
            f"(({lr})::HUGEINT << 88) | (rank_u::HUGEINT << 48) | code "
            f"ELSE error({fail}) END")  # fmt: skip


def settled_units(queries: Sequence[Query], *, check: bool, pairs: str) -> str:
    """SELECT of the per-unit summary of a settle (the columns of
    :func:`dpcr.engines.totals.settling_columns`' items) from ``pairs``, a SELECT of
    (``unit``, ``it``: the unit's :data:`ITEM`, which :func:`narrow_ranked` gave for
    ``queries`` and ``check``)."""
    layout = _layout(queries, check)
    if layout is None or layout.bits > _ITEM_CODE:  # (no item is made then)
        raise ValueError("internal error: no settle item for these queries; please report this")
    fs = "".join(f", {_field('code', *f[1:])} AS s_{f[0]}" for f in layout.fields
                 if f[0].startswith("f"))  # fmt: skip
    return (f"SELECT unit, n AS s_n, NULL::BIGINT AS s_first_ts, '' AS s_cls{fs}, "
            "CASE WHEN (code & 3) = 3 THEN NULL ELSE (code & 3) <> 2 END AS s_live, lr AS s_lr "
            f"FROM (SELECT unit, (it >> 88)::BIGINT AS lr, ((it >> 48) & {(1 << 40) - 1})::BIGINT"
            f" AS n, (it & {(1 << _ITEM_CODE) - 1})::BIGINT AS code FROM ({pairs}))")  # fmt: skip


def narrow_ranked(
    bsql: BoundingSql, queries: Sequence[Query], rows: str, *, seq: bool, record: bool,
    check: bool, op_code: str = OP_CODE, settle_at: int | None = None,
) -> str | None:  # fmt: skip
    """SELECT of the ranked rows of ``rows`` as ``bsql.ranked(source=rows, columns=...,
    unit_is_entry=True, seq=seq, record=record)`` gives them with the columns ``f{i}``,
    ``nn{i}`` (sums), ``p{i}`` (the previous row's f, 0 before the first) and, with
    ``check``, ``np`` (:func:`dpcr.changelog.plain_break`); None when the rule needs more
    than rank and first time (state machines, classes) or the code does not fit.

    ``rows``: the numbered rows (record, unit, ts, seq, op, ``deleted``, ``f{i}``,
    ``nn{i}``; with ``check``, ``rejected``: the record is no valid mutation, and ``np`` then
    true), every unit one entry. ``seq=False``: every row's seq is its record. ``op_code``:
    SQL of a row's op code (:data:`~dpcr.bounding.sql.OP_CODE`; the typed rows' ``opc``).
    ``settle_at``: with the columns of :func:`settle_marks` for that time, from the same
    sort."""
    layout = _layout(queries, check)
    if layout is None or bsql.machines or bsql.uses_cls or bsql.window_cols or bsql.row_cols:
        return None
    code, within, fields, rejected, at = layout

    decoded = "".join(f", {_field('code', *f[1:])} AS {f[0]}" for f in fields)
    decoded += "".join(
        f", CASE WHEN pcode IS NULL THEN 0 ELSE {_field('pcode', *f[1:])} END AS p{f[0][1:]}"
        for f in fields if f[0].startswith("f")
    )  # fmt: skip
    window = by_unit(True, seq=seq, record=record, then=", code" + ("" if record else ", record"))
    keys = "unit, ts, record" + (", seq" if seq else "")
    inner = f"{keys}, {_checked(code, within)} AS code"
    middle, lags = f"{keys}, code", "lag(code)"
    packed = record and at <= _PACKED
    if packed:  # the record and the code in one sort key: the same order
        ahead = "unit, ts" + (", seq" if seq else "")
        window = f"(PARTITION BY unit ORDER BY ts{', seq' if seq else ''}, rc)"
        fits = f"record BETWEEN 0 AND {(1 << (_BITS - at)) - 1} AND {within}"
        inner = f"{ahead}, {_checked(f'(record << {at}) | ({code})', fits)} AS rc"
        middle = f"{ahead}, rc >> {at} AS record, rc & {(1 << at) - 1} AS code"
        lags = f"{(1 << at) - 1} & lag(rc)"
    first_ts = ", min(ts) OVER (PARTITION BY unit) AS first_ts" if bsql.uses_first_ts else ""
    lags += f" OVER {window} AS pcode"
    marks = ""
    if settle_at is not None:  # (the first row's record: of the packed key, or the record)
        lags += f", lead(ts) OVER {window} AS nts, first_value({'rc' if packed else 'record'}) " \
            f"OVER {window} AS frec"  # fmt: skip
        marks = ", " + _marks(int(settle_at), f"frec >> {at}" if packed else "frec")
        if at <= _ITEM_CODE and not bsql.uses_first_ts:
            marks += f", {_item(f'frec >> {at}' if packed else 'frec')} AS {ITEM}"
    passed, helpers, np_col = "", "pop", ""
    if check:  # the previous row's op code, ts and seq for the liveness check
        lags += f", lag(ts) OVER {window} AS pts"
        passed, helpers = f", pts, ((code >> {rejected}) & 1) = 1 AS rej", "pop, pts, rej"
        if seq:
            lags += f", lag(seq) OVER {window} AS pseq"
            passed, helpers = passed + ", pseq", helpers + ", pseq"
        np_col = ", " + plain_break("", seq=seq, lags=("pop", "pts", "pseq" if seq else None))
        np_col += " OR rej AS np"
    return f"""
    SELECT * EXCLUDE ({helpers}){np_col} FROM (
        SELECT record, unit, ts, {'seq' if seq else 'record AS seq'},
               (code & 3)::UTINYINT AS op_code, ((code >> 2) & 1) = 1 AS deleted{decoded},
               rank_u{', first_ts' if first_ts else ''}{marks}, pcode & 3 AS pop{passed}
        FROM (
            SELECT {middle}, {lags}, row_number() OVER {window} AS rank_u{first_ts}
            FROM (SELECT {inner}
                  FROM (SELECT *, {op_code} AS op_code FROM {rows}))
        )
    )
    """


def _marks(t: int, first: str) -> str:
    """The columns of :func:`settle_marks` from ``nts`` (the next row's time, NULL after the
    last row) and the first row's record ``first``."""
    return f"ts <= {t} AND coalesce(nts > {t}, TRUE) AS settles_last, {first} AS first_record"


def settle_marks(ranked: str, t: int, *, seq: bool, record: bool) -> str:
    """The rows of ``ranked`` (ranked rows, every unit one entry, in the order of
    :func:`~dpcr.bounding.sql.by_unit` with ``seq`` and ``record``) with ``settles_last``
    (the row is its unit's last dated at or before ``t``) and ``first_record`` (the record of
    its unit's first row), which :func:`narrow_ranked` gives from its own sort; here from a
    second one."""
    window = by_unit(True, seq=seq, record=record)
    return (f"SELECT * EXCLUDE (nts, frec), {_marks(int(t), 'frec')} FROM (SELECT *, "
            f"lead(ts) OVER {window} AS nts, first_value(record) OVER {window} AS frec "
            f"FROM ({ranked}))")  # fmt: skip


def no_key(query: Query) -> str:
    """SQL of f before an entry's first mutation and after its delete: 0, or for a histogram
    or a grouped sum no key (-1; an open one's NULL text)."""
    if isinstance(query, Histogram | GroupedSum):
        return "NULL::VARCHAR" if query.open else "-1"
    return "0"


def no_value(i: int, query: Query, seeded: bool) -> str:
    """f of query ``i`` before an entry's first mutation (of a seeded history: its seed's)."""
    return f"coalesce(s_f{i}, {no_key(query)})" if seeded else no_key(query)


def ranked_sql(
    bsql: BoundingSql, queries: Sequence[Query], rows: str, *, seeded: bool,
    unit_is_entry: bool, seq: bool, record: bool, check: bool,
) -> str:  # fmt: skip
    """The ranked rows of ``rows`` (:meth:`~dpcr.bounding.sql.BoundingSql.ranked`) with the
    columns :func:`dpcr.engines.duckdb.aggregate` reads: ``f{i}``, ``nn{i}`` (sums), seed
    columns, and when each unit is one entry ``p{i}`` (the previous row's f) and, with
    ``check``, ``np`` (:func:`dpcr.changelog.plain_break`, or ``rejected``: ``rows`` has
    that column)."""
    columns = ", ".join(f"f{i}" for i in range(len(queries)))
    columns += "".join(f", nn{i}" for i, q in enumerate(queries) if isinstance(q, Sum))

    window = by_unit(True, seq=seq, record=record)
    if seeded:  # seed columns the later windows read
        columns += "".join(f", s_f{i}" for i in range(len(queries)))
        columns += "".join(f", s_cut{j}" for j in range(bsql.machines))
    if unit_is_entry:
        columns += "".join(
            f", lag(f{i}, 1, {no_value(i, q, seeded)}) OVER {window} AS p{i}"
            for i, q in enumerate(queries)
        )
    if check:  # (``rows`` has ``rejected``: the record is no valid mutation)
        columns += f", {plain_break(window, seq=seq)} OR rejected AS np"
    return bsql.ranked(
        source=rows, columns=columns, seeded=seeded, unit_is_entry=unit_is_entry,
        seq=seq, record=record,
    )
