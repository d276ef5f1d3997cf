"""wal2json ``format-version 2`` messages (one JSON object per line) into the rows table.

A message is ``{"action", "xid", "timestamp", "lsn", "schema", "table", "columns",
"identity"}``; ``columns`` and ``identity`` are arrays of ``{"name", "type", "value"}``:

====== ================================ =============================================
action staged as                        rows
====== ================================ =============================================
I      insert                           after = ``columns``
U      update                           before = ``identity``, after = ``columns``
D      delete                           before = ``identity``
B, C   skipped and counted (tombstone)  transaction begin/commit: never a mutation
M      skipped and counted (tombstone)  a logical decoding message, not a row change
T      ``unknown_op`` (value ``T``)     a TRUNCATE names no rows, so it cannot be
                                        charged to entries: refused, or quarantined
other  ``unknown_op``
====== ================================ =============================================

``identity`` is every column under ``REPLICA IDENTITY FULL`` and only the key columns (or
nothing, for an update that keeps its key) under the default identity; the loader fills a
missing ``before`` of an update from the entry's previous row. ``timestamp`` (the commit time,
``include-timestamp``) is the time; ``lsn`` (``include-lsn``, ``"16/B374D848"``) is the sequence
number ``hi * 2^32 + lo``, so a change replayed with its LSN is a ``duplicate`` of its entry;
without an LSN the record number is used (replays then go unnoticed). The entry id is the key
columns' value in ``columns`` (in ``identity`` for deletes). With ``Wal2jsonSource.table``,
messages of other tables are not records of the source at all (record numbers keep counting
lines, so they have gaps). An insert or update whose ``columns`` lack a key column names no
entry (``missing_entry``): the key of ``identity`` is the row's key before the change.
"""

from __future__ import annotations

import duckdb

from dpcr._sql import lit
from dpcr.changelog._sources import Wal2jsonSource, describe
from dpcr.changelog._stage_debezium import entry_sql, key_sql
from dpcr.changelog._stage_lines import LTRIM, TRIM, line_raw_sql, mark_lines, read_lines
from dpcr.changelog._stage_rows import Staged, _drop, _rows_from_text, _run

__all__ = ["stage_wal2json"]

_FIELDS = ("action", "lsn", "timestamp", "schema", "table", "columns", "identity")
_LSN = r"^\s*([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})\s*$"


def _lsn_sql(col: str) -> str:
    """An LSN ``hi/lo`` (hex) as the decimal text of ``hi * 2^32 + lo``; other text as written
    (then the loader reports ``bad_seq``)."""
    part = "TRY_CAST('0x' || regexp_extract({c}, {p}, {i}) AS HUGEINT)"
    hi = part.format(c=col, p=lit(_LSN), i=1)
    lo = part.format(c=col, p=lit(_LSN), i=2)
    return (
        f"CASE WHEN regexp_matches({col}, {lit(_LSN)}) "
        f"THEN ({hi} * 4294967296 + {lo})::VARCHAR ELSE {col} END"
    )


def _row_sql(col: str) -> str:
    """The text of a row object from the JSON column ``col`` (an array of name/value objects)
    and its list ``{col}_l`` (``col`` cast to JSON[], when it is an array) with names
    ``{col}_n``: NULL when absent or null; the text as written when it is not such an array
    (the loader then reports ``bad_json``). The object is written member by member (names
    without repeats, so it is the object ``map_from_entries`` would give)."""
    entries, names = f"{col}_l", f"{col}_n"
    member = "to_json(c ->> 'name') || ':' || coalesce((c -> 'value')::VARCHAR, 'null')"
    as_object = (
        f"CASE WHEN list_bool_or(list_transform({names}, lambda n: n IS NULL)) "
        f"OR len(list_distinct({names})) <> len({names}) THEN NULL "
        f"ELSE '{{' || array_to_string(list_transform({entries}, lambda c: {member}), ',') "
        "|| '}' END"
    )
    return (
        f"CASE WHEN {col} IS NULL OR {col}::VARCHAR = 'null' THEN NULL "
        f"WHEN len({entries}) = 0 THEN '{{}}' "
        f"ELSE coalesce(({as_object})::VARCHAR, {col}::VARCHAR) END"
    )


def _lists(col: str) -> str:
    """``{col}_l``: ``col`` as a list of JSON values when it is an array (else NULL)."""
    return f"CASE WHEN json_type({col}) = 'ARRAY' THEN TRY_CAST({col} AS JSON[]) END AS {col}_l"


def _names(col: str) -> str:
    return f"list_transform({col}_l, lambda c: c ->> 'name') AS {col}_n"


def _repeated_key(con: duckdb.DuckDBPyConnection, lines: str) -> str:
    """SQL: the line's top-level keys ``lk`` (NULL when it is not JSON) repeat one. The key
    lists of the first lines that repeat none (a file's few message layouts) need no search."""
    known = [
        [str(k) for k in row[0]]
        for row in con.execute(
            f"SELECT DISTINCT lk FROM (SELECT try(json_keys(line)) AS lk FROM "
            f"(SELECT line FROM {lines} LIMIT 256)) WHERE len(lk) = len(list_distinct(lk))"
        ).fetchall()
    ][:16]
    search = "coalesce(len(lk) <> len(list_distinct(lk)), FALSE)"
    if not known:
        return search
    lists = ", ".join("[" + ", ".join(lit(k) for k in keys) + "]" for keys in known)
    return f"CASE WHEN list_contains([{lists}]::VARCHAR[][], lk) THEN FALSE ELSE {search} END"


def stage_wal2json(
    con: duckdb.DuckDBPyConnection, source: Wal2jsonSource, prefix: str, staged: Staged
) -> None:
    """Create ``staged.table`` from the wal2json messages of ``source``."""
    lines, x = f"{prefix}_lines", f"{prefix}_w2j"
    staged.temp_tables += [lines, x]
    limit = source.max_record_bytes
    aside = read_lines(
        con, str(source.path), lines, describe(source), limit=limit, scratch=staged.scratch
    )
    staged.raw_sql = line_raw_sql(lines)
    mark_lines(staged, aside, lines)
    paths = ", ".join(lit(f"$.{f}") for f in _FIELDS)
    keep = "TRUE"
    if source.table is not None:
        # Messages naming another table are not records of this source; lines that are not
        # messages (bad JSON) and begin/commit markers stay, to be reported and counted.
        keep = (
            "malformed OR action IN ('B', 'C', 'M') OR "
            f"(sch || '.' || tbl) IS NOT DISTINCT FROM {lit(source.table)}"
        )
    repeated = _repeated_key(con, lines)
    _run(
        con,
        f"""
        CREATE TEMP TABLE {x} AS
        SELECT * FROM (
            SELECT record, (l IS NULL OR NOT starts_with({LTRIM}, '{{')
                        OR {repeated}) AS malformed,
                   l[1] ->> '$' AS action, l[2] ->> '$' AS lsn, l[3] ->> '$' AS ts_raw,
                   l[4] ->> '$' AS sch, l[5] ->> '$' AS tbl, l[6] AS cols, l[7] AS ident
            FROM (
                SELECT rowid + 1 AS record, line, try(json_extract(line, [{paths}])) AS l,
                       try(json_keys(line)) AS lk
                FROM {lines}
                WHERE line IS NOT NULL AND (starts_with(line, '{{') OR {TRIM} <> '')
            )
        ) WHERE {keep}
        """,
    )
    rows = f"""(
        SELECT record, malformed, NOT malformed AND action IN ('B', 'C', 'M') AS tombstone,
               NULL::VARCHAR AS entry, NULL::VARCHAR AS unit, ts_raw,
               {_lsn_sql("lsn")} AS seq_raw, action AS op_raw,
               {_row_sql("ident")} AS before_raw, {_row_sql("cols")} AS after_raw
        FROM (SELECT *, {_names("ident")}, {_names("cols")}
              FROM (SELECT *, {_lists("ident")}, {_lists("cols")} FROM {x})))"""
    keys = source.key_columns
    _run(
        con,
        f"CREATE TEMP TABLE {staged.table} AS SELECT * REPLACE "
        f"(CASE WHEN NOT tombstone THEN {entry_sql(keys)} END AS entry), "
        f"{key_sql(keys, 'before')} AS before_entry "
        f"FROM ({_rows_from_text(rows, staged.unit_column)})",
    )
    _drop(con, x)
