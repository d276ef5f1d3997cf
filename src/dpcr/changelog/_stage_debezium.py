"""Debezium change events (one envelope per line) into the rows table of ``_stage``.

What an envelope gives:

* ``op``, ``before``, ``after``; ``ts`` from ``source.ts_ms`` (else the envelope's ``ts_ms``).
* ``seq``, the position of the change in the database's log, used to order ties and to find
  replayed events (a repeated position of an entry is a ``duplicate``): ``source.lsn``
  (PostgreSQL); else MySQL's binlog position ``source.file``/``pos``/``row`` as the integer
  ``file number * 2^43 + pos * 2^13 + row`` (``pos < 2^30``, ``row < 2^13``; a position outside
  that is ``bad_seq``); else ``source.scn`` (Oracle); else the record number (no replay
  detection).
* Decimals (``decimal.handling.mode=precise``): an object ``{"scale": s, "value": base64}``
  anywhere in a row (variable-scale NUMERIC) is self-describing; a bare base64 string in a
  column whose schema (the envelope's ``schema``, when the converter sends it) is
  ``org.apache.kafka.connect.data.Decimal`` gets the schema's ``scale``, and in an envelope
  without a schema the scale declared in ``DebeziumSource.decimal_scales``. Both are decoded
  exactly: the unscaled big-endian two's-complement integer times 10^-scale. ``string`` mode
  (decimal text) and ``double`` mode (JSON numbers) need nothing: queries read both as numbers.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from dpcr._sql import json_path, lit
from dpcr.changelog._sources import DebeziumSource, describe
from dpcr.changelog._sql import DECIMAL_OBJECT, debezium_decode_expr
from dpcr.changelog._stage_lines import (
    LTRIM,
    REPEATED_KEY,
    TRIM,
    fast_records,
    line_raw_sql,
    mark_lines,
    read_lines,
)
from dpcr.changelog._stage_rows import Staged, _drop, _rows_from_text, _run

__all__ = ["entry_sql", "key_sql", "stage_debezium"]

_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_SOURCE = "STRUCT(ts_ms VARCHAR, lsn VARCHAR, file VARCHAR, pos VARCHAR, \"row\" VARCHAR, " \
    "scn VARCHAR)"  # fmt: skip
_ENVELOPE = f"op VARCHAR, before JSON, after JSON, source {_SOURCE}, ts_ms VARCHAR"


def key_sql(keys: tuple[str, ...], row: str) -> str:
    """The entry id from the key columns of the JSON column ``row``: the value as text (a
    composite key: a JSON array of the values); NULL when a key column is missing or null."""
    parts = [f"({row} -> {json_path(k)})" for k in keys]
    missing = " OR ".join(f"coalesce({p}::VARCHAR, 'null') = 'null'" for p in parts)
    value = f"{parts[0]} ->> '$'" if len(parts) == 1 else f"to_json([{', '.join(parts)}])"
    return f"CASE WHEN NOT ({missing}) THEN ({value})::VARCHAR END"


def entry_sql(keys: tuple[str, ...]) -> str:
    """The entry id of a row-change record: the key of its row after when it has one (an
    insert or update), else of its row before (a delete)."""
    return f"CASE WHEN after_given THEN {key_sql(keys, 'after')} ELSE {key_sql(keys, 'before')} END"


def _position_sql(lsn: str, file: str, pos: str, row: str, scn: str) -> str:
    """``seq_raw`` from the source's position fields (text columns); see the module docstring."""
    num = "TRY_CAST(regexp_extract({c}, '^\\s*([0-9]+)\\s*$', 1) AS HUGEINT)"
    file_no = f"TRY_CAST(regexp_extract({file}, '([0-9]+)$', 1) AS HUGEINT)"
    p, r = num.format(c=pos), f"coalesce({num.format(c=row)}, 0)"
    binlog = (
        f"CASE WHEN {file_no} < 1048576 AND {p} < 1073741824 AND {r} < 8192 "
        f"THEN ({file_no} * 8796093022208 + {p} * 8192 + {r})::VARCHAR "
        f"ELSE {file} || ':' || {pos} || ':' || coalesce({row}, '0') END"
    )
    return (
        f"coalesce({lsn}, CASE WHEN {file} IS NOT NULL AND {pos} IS NOT NULL THEN {binlog} END, "
        f"{scn})"
    )


def _decimal_columns(schema: Any) -> dict[str, int]:
    """Column -> scale of the Decimal columns of an envelope schema's ``before``/``after``."""
    out: dict[str, int] = {}
    if not isinstance(schema, dict):
        return out
    for part in schema.get("fields") or []:
        if not isinstance(part, dict) or part.get("field") not in ("before", "after"):
            continue
        for column in part.get("fields") or []:
            if not isinstance(column, dict) or column.get("name") != _DECIMAL:
                continue
            params = column.get("parameters") or {}
            try:
                scale = int(str(params.get("scale")))
            except ValueError:
                continue  # no usable scale: the value stays text (non-numeric to a query)
            if isinstance(column.get("field"), str):
                out[column["field"]] = scale
    return out


def _scales(
    con: duckdb.DuckDBPyConnection, x: str, source: DebeziumSource
) -> dict[str, dict[str | None, int]]:
    """Column -> {schema hash -> scale} for every Decimal column of the distinct schemas in
    ``x`` (hash NULL: envelopes without a schema, from ``decimal_scales``)."""
    out: dict[str, dict[str | None, int]] = {}
    rows = con.execute(
        f"SELECT sh, any_value(schema_text) FROM {x} WHERE sh IS NOT NULL GROUP BY sh"
    ).fetchall()
    for sh, text in rows:
        try:
            schema = json.loads(text)
        except ValueError:
            continue
        for column, scale in _decimal_columns(schema).items():
            out.setdefault(column, {})[sh] = scale
    for column, scale in (source.decimal_scales or {}).items():
        out.setdefault(column, {})[None] = scale
    return out


def _wrap_decimals(col: str, scales: dict[str, dict[str | None, int]]) -> str:
    """``col`` (minified JSON text) with each bare base64 decimal of a column in ``scales``
    (per schema hash ``sh``) rewritten as the self-describing ``{"scale":s,"value":"..."}``."""
    expr = col
    for column, by_schema in sorted(scales.items()):
        whens = " ".join(
            f"WHEN sh = {lit(h)} THEN {s}" for h, s in by_schema.items() if h is not None
        )
        if None in by_schema:
            whens += f" WHEN sh IS NULL THEN {by_schema[None]}"
        scale = f"(CASE {whens} END)"
        path = json_path(column)
        expr = (
            f"(CASE WHEN {scale} IS NOT NULL AND json_type({expr}, {path}) = 'VARCHAR' "
            f"THEN json_merge_patch({expr}, json_object({lit(column)}, json_object('scale', "
            f"{scale}, 'value', json_extract_string({expr}, {path}))))::VARCHAR "
            f"ELSE {expr} END)"
        )
    return expr


def stage_debezium(
    con: duckdb.DuckDBPyConnection,
    source: DebeziumSource,
    prefix: str,
    staged: Staged,
    *,
    fast: bool = True,
) -> None:
    """Create ``staged.table`` from the envelopes of ``source`` (``fast``: try DuckDB's JSON
    reader first; the line-by-line path reports lines that are not JSON objects)."""
    lines, js, x, tomb = (f"{prefix}_{n}" for n in ("lines", "json", "x", "tomb"))
    staged.temp_tables += [lines, js, f"{js}_n", x, tomb]
    limit = source.max_record_bytes
    aside = read_lines(
        con, str(source.path), lines, describe(source), limit=limit, scratch=staged.scratch
    )
    staged.raw_sql = line_raw_sql(lines)
    if mark_lines(staged, aside, lines) is not None:
        fast = False  # (the copy's markers are not JSON: the reader would refuse it)
    columns = {
        "schema": "JSON",
        "payload": f"STRUCT({_ENVELOPE})",
        "op": "VARCHAR",
        "before": "JSON",
        "after": "JSON",
        "source": _SOURCE,
        "ts_ms": "VARCHAR",
    }
    relation = fast_records(con, str(source.path), lines, columns, js) if fast else None
    if relation is not None:

        def pick(f: str) -> str:  # a field from the payload when there is one, else top level
            return f"CASE WHEN payload IS NOT NULL THEN payload.{f} ELSE {f} END"

        # A row of NULLs is a tombstone when its line is `null` or has a null payload.
        _run(
            con,
            f"CREATE TEMP TABLE {tomb} AS SELECT record FROM (SELECT rowid + 1 AS record, "
            f"line, rowid + 1 IN (SELECT __record FROM {relation} WHERE payload IS NULL "
            "AND op IS NULL AND before IS NULL AND after IS NULL AND source IS NULL "
            f"AND ts_ms IS NULL) AS empty FROM {lines}) WHERE CASE WHEN empty THEN "
            f"{TRIM} = 'null' OR try(json_extract(line, '$.payload'))::VARCHAR = 'null' "
            "ELSE FALSE END",
        )
        tombstones = f"(SELECT record FROM {tomb})"
        position = _position_sql(
            *(pick(f"source.{f}") for f in ("lsn", "file", "pos", '"row"', "scn"))
        )
        _run(
            con,
            f"""
            CREATE TEMP TABLE {x} AS
            SELECT __record AS record, FALSE AS malformed, __record IN {tombstones} AS tombstone,
                   {pick("op")} AS op_raw, ({pick("before")})::VARCHAR AS before_min,
                   ({pick("after")})::VARCHAR AS after_min,
                   coalesce({pick("source.ts_ms")}, {pick("ts_ms")}) AS ts_raw,
                   {position} AS seq_raw,
                   CASE WHEN payload IS NOT NULL AND coalesce(schema::VARCHAR, 'null') <> 'null'
                        THEN schema::VARCHAR END AS schema_text
            FROM {relation}
            """,
        )
    else:
        # Line by line. Each envelope field is extracted at the top level and inside "payload".
        names = ["op", "before", "after", "source.ts_ms", "ts_ms", "source.lsn", "source.file",
                 "source.pos", "source.row", "source.scn"]  # fmt: skip
        fields = [f"$.{n}" for n in names]
        n = len(fields)
        paths = ", ".join(
            lit(p)
            for p in ["$.payload", *fields, *("$.payload" + f[1:] for f in fields), "$.schema"]
        )

        def field(i: int) -> str:  # field i (1-based): from the payload when there is one
            return f"(CASE WHEN l[1] IS NOT NULL THEN l[{i + 1 + n}] ELSE l[{i + 1}] END)"

        def row(i: int) -> str:
            return f"CASE WHEN {field(i)}::VARCHAR = 'null' THEN NULL ELSE {field(i)}::VARCHAR END"

        def text(i: int) -> str:
            return f"{field(i)} ->> '$'"

        _run(
            con,
            f"""
            CREATE TEMP TABLE {x} AS
            SELECT record,
                   (l IS NULL OR NOT starts_with({LTRIM}, '{{') OR {REPEATED_KEY})
                       AND {TRIM} <> 'null'
                       AS malformed,
                   {TRIM} = 'null' OR coalesce(l[1]::VARCHAR = 'null', FALSE) AS tombstone,
                   {text(1)} AS op_raw, {row(2)} AS before_min, {row(3)} AS after_min,
                   coalesce({text(4)}, {text(5)}) AS ts_raw,
                   {_position_sql(text(6), text(7), text(8), text(9), text(10))} AS seq_raw,
                   CASE WHEN l[1] IS NOT NULL AND coalesce(l[{2 * n + 2}]::VARCHAR, 'null')
                        <> 'null' THEN l[{2 * n + 2}]::VARCHAR END AS schema_text
            FROM (
                SELECT rowid + 1 AS record, line, try(json_extract(line, [{paths}])) AS l
                FROM {lines}
                WHERE line IS NOT NULL AND {TRIM} <> ''
            )
            """,
        )
    _drop(con, js)
    _decode(con, source, prefix, staged, x)


def _decode(
    con: duckdb.DuckDBPyConnection, source: DebeziumSource, prefix: str, staged: Staged, x: str
) -> None:
    """Decode the decimals of table ``x`` and create the rows table from it.

    Bare base64 values of Decimal columns are first made self-describing objects. Then each
    row's first decimal object (the whole match) is looked up in a small table of the distinct
    objects, decoded once each, and replaced as plain text; a row that still holds a decimal
    afterwards (it had several) is decoded match by match. An undecodable one leaves text that
    is not JSON, reported as bad_json."""
    xs, xm, dec = f"{prefix}_xs", f"{prefix}_xm", f"{prefix}_dec"
    staged.temp_tables += [xs, xm, dec]
    _run(
        con,
        f"CREATE TEMP TABLE {xs} AS SELECT * EXCLUDE (schema_text), schema_text, "
        f"md5(schema_text) AS sh FROM {x}",
    )
    _drop(con, x)
    scales = _scales(con, xs, source)
    if scales:
        b, a = _wrap_decimals("before_min", scales), _wrap_decimals("after_min", scales)
        _run(
            con,
            f"CREATE OR REPLACE TEMP TABLE {xs} AS SELECT * REPLACE "
            f"({b} AS before_min, {a} AS after_min) FROM {xs}",
        )
    pattern = lit(DECIMAL_OBJECT)

    def first_match(c: str) -> str:
        return f"CASE WHEN contains({c}, '\"scale\":') THEN regexp_extract({c}, {pattern}) END"

    _run(
        con,
        f"CREATE TEMP TABLE {xm} AS SELECT * EXCLUDE (schema_text, sh), "
        f"{first_match('before_min')} AS bm, {first_match('after_min')} AS am FROM {xs}",
    )
    _drop(con, xs)
    _run(
        con,
        f"CREATE TEMP TABLE {dec} AS SELECT m, {debezium_decode_expr('m')} AS d "
        f"FROM (SELECT bm AS m FROM {xm} UNION SELECT am FROM {xm}) WHERE m <> ''",
    )

    def once(c: str, m: str, d: str) -> str:
        return f"CASE WHEN {m} IS NULL OR {m} = '' THEN {c} ELSE replace({c}, {m}, {d}) END"

    def rest(c: str, first: str) -> str:
        return f"CASE WHEN contains({first}, '\"scale\":') THEN {debezium_decode_expr(c)} " \
            f"ELSE {first} END"  # fmt: skip

    decoded = f"""(
        SELECT *, {rest("before_min", "b1")} AS before_dec, {rest("after_min", "a1")} AS after_dec
        FROM (
            SELECT x.*, {once("x.before_min", "x.bm", "db.d")} AS b1,
                   {once("x.after_min", "x.am", "da.d")} AS a1
            FROM {xm} x LEFT JOIN {dec} db ON x.bm = db.m LEFT JOIN {dec} da ON x.am = da.m
        ))"""

    # The entry id is the key of the row after (of the row before, for deletes, which have no
    # row after); a composite key is a JSON array of the key columns' values. A row after
    # without its key gives no entry (missing_entry), never the key of the row before.
    keys = source.key_columns
    x2 = f"""(
        SELECT record, malformed, tombstone, NULL::VARCHAR AS entry, NULL::VARCHAR AS unit,
               ts_raw, seq_raw, op_raw,
               coalesce(before_dec, 'undecodable Debezium decimal in ' || before_min)
                   AS before_raw,
               coalesce(after_dec, 'undecodable Debezium decimal in ' || after_min) AS after_raw
        FROM {decoded})"""
    _run(
        con,
        f"CREATE TEMP TABLE {staged.table} AS SELECT * REPLACE ({entry_sql(keys)} AS entry), "
        f"{key_sql(keys, 'before')} AS before_entry "
        f"FROM ({_rows_from_text(x2, staged.unit_column)})",
    )
    _drop(con, xm)
