"""A row's f for each query as SQL (:func:`f_sql`), and the numbered rows the ranking of
:func:`dpcr.engines.duckdb.aggregate` reads (:func:`numbered_rows`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dpcr._sql import json_path, lit, num
from dpcr.bounding.sql import finite_number_sql
from dpcr.queries import Count, Events, Exhausted, GroupedSum, Query, Scalar, Sum

__all__ = ["f_sql", "numbered_rows"]


def _where_sql(where: Mapping[str, tuple[Scalar, ...]]) -> str:
    """SQL true when the row ``after`` matches ``where`` (TRUE for an empty filter)."""
    clauses = []
    for column, values in where.items():
        path = json_path(column)
        strs = [v for v in values if isinstance(v, str)]
        nums = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        bools = [v for v in values if isinstance(v, bool)]
        parts = []
        if strs:
            parts.append(
                f"json_extract_string(after, {path}) IN ({', '.join(lit(s) for s in strs)})"
            )
        if nums:
            parts.append(
                f"{finite_number_sql(path)} IN ({', '.join(num(n) for n in nums)})"
            )
        if bools:
            lits = ", ".join(lit("true" if b else "false") for b in bools)
            parts.append(f"json_extract_string(after, {path}) IN ({lits})")
        clauses.append("(" + " OR ".join(parts) + ")")
    return " AND ".join(clauses) if clauses else "TRUE"


def f_sql(query: Query, number: str, gone: str = "after IS NULL") -> str:
    """SQL for f(after) as an integer; histograms give the key index, -1 (no key) or -2 (a value
    outside the keys, which counts nothing); an open histogram gives the key as text (NULL: no
    key, :func:`no_key`). ``number`` is the column holding a sum's value as
    a finite number (NULL: missing); ``gone`` is true when there is no row after."""
    if isinstance(query, Events):
        return _event_code_sql(query, gone)
    where = _where_sql(query.where)
    if isinstance(query, Exhausted):
        return "0"  # its values come from the dropped rows (exhausted_values)
    if isinstance(query, Count):
        return f"CASE WHEN NOT ({gone}) AND {where} THEN 1 ELSE 0 END"
    if isinstance(query, GroupedSum):
        return _grouped_f_sql(query, number, gone, where)
    if isinstance(query, Sum):
        # The kind's f of a finite number (in its steps_range); missing, non-numeric, NaN and
        # infinite values count as 0 (least/greatest skip NULLs in DuckDB: test explicitly).
        steps = query.steps_sql(number)
        return f"CASE WHEN {gone} OR NOT ({where}) OR {number} IS NULL THEN 0 ELSE {steps} END"
    path = json_path(query.column)
    if query.open:  # the key itself (NULL: no key); every value is a candidate key
        return (
            f"CASE WHEN {gone} OR NOT ({where}) THEN NULL::VARCHAR ELSE "
            f"json_extract_string(after, {path}) END"
        )
    cases = " ".join(f"WHEN {lit(key)} THEN {i}" for i, key in enumerate(query.categories))
    other = len(query.categories) if query.unknown == "other" else -2
    return (
        f"CASE WHEN {gone} OR NOT ({where}) THEN -1 ELSE "
        f"CASE json_extract_string(after, {path}) {cases} ELSE {other} END END"
    )


def _grouped_f_sql(query: GroupedSum, number: str, gone: str, where: str) -> str:
    """f of a grouped sum: no key -1, a key outside the declared ones -2 (``unknown = "drop"``),
    else j·W + (v − lo) for key number j and value v (0 when missing; W =
    :attr:`~dpcr.queries.GroupedSum.code_width`); open, the text ``'v:key'`` (NULL: no key)."""
    lo = query.value_range[0]
    value = f"CASE WHEN {number} IS NULL THEN 0 ELSE {query.steps_sql(number)} END"
    key = f"json_extract_string(after, {json_path(query.by)})"
    if query.open:
        return (
            f"CASE WHEN {gone} OR NOT ({where}) OR {key} IS NULL THEN NULL::VARCHAR "
            f"ELSE CAST({value} AS VARCHAR) || ':' || {key} END"
        )
    cases = " ".join(f"WHEN {lit(k)} THEN {j}" for j, k in enumerate(query.categories))
    other = len(query.categories) if query.unknown == "other" else -2
    index = f"CASE {key} {cases} ELSE {other} END"
    return (
        f"CASE WHEN {gone} OR NOT ({where}) OR {key} IS NULL THEN -1 ELSE "
        f"CASE WHEN {index} < 0 THEN {index} ELSE {index} * {query.code_width} + "
        f"({value}) - ({lo}) END END"
    )


def _event_code_sql(query: Events, gone: str) -> str:
    """f of an :class:`Events` query: 0 when there is no row after, else 1 + (the row matches
    the filter of the row before) + 2 (it matches the filter of the row after). The previous
    row's f (the lag of the bounded history) then says whether the entry was live and what it
    matched: :func:`dpcr.engines.totals.change_sql` tells the event from the two."""
    before, after = (_where_sql(w) for w in query.row_filters)
    return (
        f"CASE WHEN {gone} THEN 0 ELSE 1 + CASE WHEN {before} THEN 1 ELSE 0 END "
        f"+ CASE WHEN {after} THEN 2 ELSE 0 END END"
    )


def _number_sql(column: str, typed: dict[str, str] | None) -> str:
    """The value of ``column`` of the row after as a finite DOUBLE (NULL: missing, not a
    number, NaN or infinite): the typed column when the source has one, else from the JSON."""
    if typed is not None and column in typed:
        return typed[column]
    return finite_number_sql(json_path(column))


def numbered_rows(
    queries: Sequence[Query], source: str, gone: str, parsed: dict[str, str] | None, *,
    no_rejects: bool,
) -> str:  # fmt: skip
    """The rows of ``source`` (a relation and its WHERE clause) as the ranking reads them:
    with ``deleted`` (SQL ``gone``: there is no row after), each query's ``f{i}`` and, for a
    sum, ``x{i}`` (its number: from the columns ``parsed`` has, else the JSON) and ``nn{i}``
    (it is missing). ``no_rejects``: with a column ``rejected``, FALSE (the rows of a checked
    load whose source has no verdicts of its own, :func:`dpcr.changelog.typed_rejects`).

    1. rank within unit, unit start and class (state machines: states per entry, failure
    code); 2. keep flag (state machines: the unit's first failure); 3. f values and interval.
    Bounding keeps a prefix of each unit's history, so for a kept row the previous row of its
    (unit, entry) is kept too: the previous kept f is the lag over all rows. When each unit
    is one entry that lag runs in the ranking window (one sort for both)."""
    f_cols = ", ".join(f"{f_sql(q, f'x{i}', gone)} AS f{i}" for i, q in enumerate(queries))
    xs = "".join(
        f", {_number_sql(q.column, parsed)} AS x{i}"
        for i, q in enumerate(queries)
        if isinstance(q, Sum)
    )
    for i, q in enumerate(queries):
        if isinstance(q, Sum):
            f_cols += f", (NOT ({gone}) AND x{i} IS NULL) AS nn{i}"
    if no_rejects:
        f_cols += ", FALSE AS rejected"
    return f"(SELECT *, {gone} AS deleted, {f_cols} FROM (SELECT *{xs} FROM {source})) AS numbered"
