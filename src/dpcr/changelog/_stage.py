"""Read a source into one table of rows with the same columns for every format.

Every source becomes a DuckDB table ``{prefix}_rows`` with one row per record (blank lines are not
records):

============ ======= =========================================================================
record       BIGINT  1-based record number (line, data row, or the log's ``seq`` for SQLite)
malformed    BOOLEAN the record is not a JSON object (line formats only)
tombstone    BOOLEAN a Debezium tombstone (skipped and counted, never an error)
entry        VARCHAR entry id as text
unit         VARCHAR the record-level unit field, when the source names one
ts_raw       VARCHAR timestamp as written (parsed by the loader, see ``Staged.ts_factor``)
seq_raw      VARCHAR sequence number as written (NULL: use the record number)
op_raw       VARCHAR operation as written
before       JSON    the row before, minified, when given as a JSON object; else NULL
before_given BOOLEAN a non-null ``before`` was given (an object or not)
before_text  VARCHAR ``before`` as written, only when it was given but is not an object
after, after_given, after_text: the same for the row after
============ ======= =========================================================================

``Staged.raw_sql`` selects ``(record, raw)``: the original record for the quarantine file (the line
as a JSON string for line formats, an object of the row's fields for tabular ones).

The line formats (JSON lines, Debezium) are staged here; table-shaped sources (CSV, Parquet,
SQLite) in ``_stage_tabular``; :class:`Staged` and the SQL shared by all formats in
``_stage_rows``.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from dpcr._sql import ident, json_path, lit
from dpcr.changelog._sources import (
    EPOCH_FACTORS,
    CsvSource,
    DebeziumSource,
    JsonlSource,
    ParquetSource,
    SourceConfig,
    SqliteSource,
    describe,
)
from dpcr.changelog._sql import DECIMAL_OBJECT, debezium_decode_expr
from dpcr.changelog._stage_rows import (
    _ROW_COLUMNS,
    _SCALARS,
    Staged,
    _drop,
    _rows_from_text,
    _run,
    check_utf8,
)
from dpcr.changelog._stage_tabular import _stage_csv, _stage_parquet, _stage_sqlite
from dpcr.errors import ConfigError

__all__ = ["Staged", "stage"]

# Tests set this to check that the line-by-line path agrees with DuckDB's JSON reader.
_force_slow_path = False


def _read_lines(con: duckdb.DuckDBPyConnection, path: str, table: str, name: str) -> None:
    """One row per line (``rowid`` = line number - 1), blank lines kept so numbering holds."""
    try:
        _run(
            con,
            f"CREATE TEMP TABLE {table} AS SELECT line FROM read_csv(?, "
            "columns = {'line': 'VARCHAR'}, header = false, auto_detect = false, "
            "delim = chr(1) || chr(2) || chr(3) || chr(4), quote = '', escape = '', "
            "strict_mode = false)",
            [path],
        )
    except duckdb.IOException as exc:
        raise ConfigError(f"{name}: cannot read the file ({exc}); check [source] path") from exc
    except duckdb.Error:
        # Text that is not UTF-8, or a line that contains the (control-character) delimiter:
        # then read the file whole instead.
        _drop(con, table)
        check_utf8(Path(path), name)
        try:
            _run(
                con,
                f"CREATE TEMP TABLE {table} AS SELECT unnest(l) AS line "
                "FROM (SELECT string_split(replace(content, chr(13) || chr(10), chr(10)), "
                "chr(10)) AS l FROM read_text(?))",
                [path],
            )
        except duckdb.Error as exc:
            raise ConfigError(f"{name}: cannot read the file ({exc})") from exc
        # read_text keeps a final empty piece after the last newline; it is blank and skipped.


def _line_raw_sql(lines: str) -> str:
    return f"SELECT rowid + 1 AS record, to_json(line) AS raw FROM {lines}"


def _fast_records(
    con: duckdb.DuckDBPyConnection,
    path: str,
    lines: str,
    columns: dict[str, str],
    table: str,
) -> str | None:
    """Read JSON lines with DuckDB's parallel reader into ``table``; return a relation with
    ``__record`` (the line number) and the typed ``columns``, or None when some line is not a
    JSON object (then the caller takes the line-by-line path, which reports such lines).
    A line ``null`` reads as a row of NULLs; callers tell it apart with the line text."""
    spec = "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in columns.items()) + "}"
    try:
        _run(
            con,
            f"CREATE TEMP TABLE {table} AS SELECT * FROM read_json(?, "
            f"format = 'newline_delimited', columns = {spec})",
            [path],
        )
    except duckdb.Error:
        _drop(con, table)
        return None
    n_rows = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    n_lines, n_records = con.execute(
        f"SELECT count(*), count(*) FILTER (line IS NOT NULL AND trim(line) <> '') FROM {lines}"
    ).fetchall()[0]
    if n_rows != n_records:  # the reader saw the lines differently: trust the slow path
        _drop(con, table)
        return None
    if n_lines == n_records:
        return f"(SELECT rowid + 1 AS __record, * FROM {table})"
    numbered = f"{table}_n"
    _run(
        con,
        f"CREATE TEMP TABLE {numbered} AS SELECT rowid + 1 AS __record FROM {lines} "
        "WHERE line IS NOT NULL AND trim(line) <> ''",
    )
    return f"(SELECT * FROM {numbered} POSITIONAL JOIN {table})"


def _extracted(i: int) -> str:
    """Element ``i`` of the extracted list ``l`` as JSON, NULL when absent or JSON null."""
    return f"CASE WHEN l[{i}]::VARCHAR = 'null' THEN NULL ELSE l[{i}] END"


def _null_lines(con: duckdb.DuckDBPyConnection, lines: str, table: str) -> str:
    """A small table of the numbers of the lines that read ``null``."""
    _run(
        con,
        f"CREATE TEMP TABLE {table} AS SELECT rowid + 1 AS record FROM {lines} "
        "WHERE length(line) < 64 AND trim(line) = 'null'",
    )
    return f"(SELECT record FROM {table})"


def _stage_jsonl(
    con: duckdb.DuckDBPyConnection, source: JsonlSource, prefix: str, staged: Staged
) -> None:
    lines, fast, nulls = f"{prefix}_lines", f"{prefix}_json", f"{prefix}_nulls"
    staged.temp_tables += [lines, fast, f"{fast}_n", nulls]
    _read_lines(con, str(source.path), lines, describe(source))
    staged.raw_sql = _line_raw_sql(lines)
    names = source.field_names()
    u = staged.unit_column
    types = {"entry": "VARCHAR", "ts": "VARCHAR", "seq": "VARCHAR", "op": "VARCHAR",
             "before": "JSON", "after": "JSON", "unit": "VARCHAR"}  # fmt: skip
    columns = {n: types[k] for k, n in names.items() if n is not None}
    relation = None if _force_slow_path else _fast_records(
        con, str(source.path), lines, columns, fast
    )  # fmt: skip
    if relation is not None:

        def col(key: str) -> str:
            n = names[key]
            return "NULL::VARCHAR" if n is None else ident(n)

        units = (
            "NULL::VARCHAR AS b_u, NULL::VARCHAR AS a_u"
            if u is None
            else f"b ->> {json_path(u)} AS b_u, a ->> {json_path(u)} AS a_u"
        )
        _run(
            con,
            f"""
            CREATE TEMP TABLE {staged.table} AS
            SELECT {_SCALARS}, {_ROW_COLUMNS}
            FROM (
                SELECT *, b::VARCHAR AS b_t, json_type(b) AS b_ty, a::VARCHAR AS a_t,
                       json_type(a) AS a_ty, {units}
                FROM (
                    SELECT __record AS record,
                           __record IN {_null_lines(con, lines, nulls)} AS malformed,
                           FALSE AS tombstone, {col("entry")} AS entry, {col("unit")} AS unit,
                           {col("ts")} AS ts_raw, {col("seq")} AS seq_raw, {col("op")} AS op_raw,
                           {col("before")}::JSON AS b, {col("after")}::JSON AS a
                    FROM {relation}
                )
            )
            """,
        )
        return
    # Line by line: every line is parsed on its own, so a bad line is reported, not fatal.
    order = ["entry", "ts", "seq", "op", "before", "after", "unit"]
    paths = [f'$."{n}"' if (n := names[k]) is not None else "$.__dpcr_absent__" for k in order]
    if u is not None:  # the unit column inside before and after
        paths += [f'$."{source.before}"."{u}"', f'$."{source.after}"."{u}"']
    else:
        paths += ["$.__dpcr_absent__"] * 2
    _run(
        con,
        f"""
        CREATE TEMP TABLE {staged.table} AS
        SELECT {_SCALARS}, {_ROW_COLUMNS}
        FROM (
            SELECT *, b::VARCHAR AS b_t, json_type(b) AS b_ty, a::VARCHAR AS a_t,
                   json_type(a) AS a_ty
            FROM (
                SELECT record, (l IS NULL OR NOT starts_with(ltrim(line), '{{')) AS malformed,
                       FALSE AS tombstone,
                       l[1] ->> '$' AS entry, l[2] ->> '$' AS ts_raw, l[3] ->> '$' AS seq_raw,
                       l[4] ->> '$' AS op_raw, {_extracted(5)} AS b, {_extracted(6)} AS a,
                       {"l[7] ->> '$'" if source.unit is not None else "NULL::VARCHAR"} AS unit,
                       l[8] ->> '$' AS b_u, l[9] ->> '$' AS a_u
                FROM (
                    SELECT rowid + 1 AS record, line,
                           try(json_extract(line, [{", ".join(lit(p) for p in paths)}])) AS l
                    FROM {lines}
                    WHERE line IS NOT NULL AND trim(line) <> ''
                )
            )
        )
        """,
    )


_ENVELOPE = "op VARCHAR, before JSON, after JSON, source STRUCT(ts_ms VARCHAR, lsn VARCHAR), " \
    "ts_ms VARCHAR"  # fmt: skip


def _stage_debezium(
    con: duckdb.DuckDBPyConnection, source: DebeziumSource, prefix: str, staged: Staged
) -> None:
    lines, fast, x, tomb = (f"{prefix}_{n}" for n in ("lines", "json", "x", "tomb"))
    staged.temp_tables += [lines, fast, f"{fast}_n", x, tomb]
    _read_lines(con, str(source.path), lines, describe(source))
    staged.raw_sql = _line_raw_sql(lines)
    columns = {"payload": f"STRUCT({_ENVELOPE})"} | {
        f.split(" ", 1)[0]: f.split(" ", 1)[1]
        for f in ["op VARCHAR", "before JSON", "after JSON",
                  "source STRUCT(ts_ms VARCHAR, lsn VARCHAR)", "ts_ms VARCHAR"]
    }  # fmt: skip
    relation = None if _force_slow_path else _fast_records(
        con, str(source.path), lines, columns, fast
    )  # fmt: skip
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
            "trim(line) = 'null' OR try(json_extract(line, '$.payload'))::VARCHAR = 'null' "
            "ELSE FALSE END",
        )
        tombstones = f"(SELECT record FROM {tomb})"
        _run(
            con,
            f"""
            CREATE TEMP TABLE {x} AS
            SELECT __record AS record, FALSE AS malformed, __record IN {tombstones} AS tombstone,
                   {pick("op")} AS op_raw, ({pick("before")})::VARCHAR AS before_min,
                   ({pick("after")})::VARCHAR AS after_min,
                   coalesce({pick("source.ts_ms")}, {pick("ts_ms")}) AS ts_raw,
                   {pick("source.lsn")} AS seq_raw
            FROM {relation}
            """,
        )
    else:
        # Line by line. Each envelope field is extracted at the top level and inside "payload".
        fields = ["$.op", "$.before", "$.after", "$.source.ts_ms", "$.ts_ms", "$.source.lsn"]
        n = len(fields)
        paths = ", ".join(
            lit(p) for p in ["$.payload", *fields, *("$.payload" + f[1:] for f in fields)]
        )

        def field(i: int) -> str:  # field i (1-based): from the payload when there is one
            return f"(CASE WHEN l[1] IS NOT NULL THEN l[{i + 1 + n}] ELSE l[{i + 1}] END)"

        def row(i: int) -> str:
            return f"CASE WHEN {field(i)}::VARCHAR = 'null' THEN NULL ELSE {field(i)}::VARCHAR END"

        _run(
            con,
            f"""
            CREATE TEMP TABLE {x} AS
            SELECT record,
                   (l IS NULL OR NOT starts_with(ltrim(line), '{{')) AND trim(line) <> 'null'
                       AS malformed,
                   trim(line) = 'null' OR coalesce(l[1]::VARCHAR = 'null', FALSE) AS tombstone,
                   {field(1)} ->> '$' AS op_raw, {row(2)} AS before_min, {row(3)} AS after_min,
                   coalesce({field(4)} ->> '$', {field(5)} ->> '$') AS ts_raw,
                   {field(6)} ->> '$' AS seq_raw
            FROM (
                SELECT rowid + 1 AS record, line, try(json_extract(line, [{paths}])) AS l
                FROM {lines}
                WHERE line IS NOT NULL AND trim(line) <> ''
            )
            """,
        )
    _drop(con, fast)

    # Decode decimals. Each row's first decimal object (the whole match) is looked up in a
    # small table of the distinct objects, decoded once each, and replaced as plain text; a
    # row that still holds a decimal afterwards (it had several) is decoded match by match.
    # An undecodable one leaves text that is not JSON, reported as bad_json.
    xm, dec = f"{prefix}_xm", f"{prefix}_dec"
    staged.temp_tables += [xm, dec]
    pattern = lit(DECIMAL_OBJECT)

    def first_match(c: str) -> str:
        return f"CASE WHEN contains({c}, '\"scale\":') THEN regexp_extract({c}, {pattern}) END"

    _run(
        con,
        f"CREATE TEMP TABLE {xm} AS SELECT *, {first_match('before_min')} AS bm, "
        f"{first_match('after_min')} AS am FROM {x}",
    )
    _drop(con, x)
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

    # The entry id is the key of the row after (of the row before, for deletes); a composite
    # key is a JSON array of the key columns' values.
    keys = source.key_columns

    def key_of(r: str) -> str:
        parts = [f"({r} -> {json_path(k)})" for k in keys]
        missing = " OR ".join(f"coalesce({p}::VARCHAR, 'null') = 'null'" for p in parts)
        value = f"{parts[0]} ->> '$'" if len(parts) == 1 else f"to_json([{', '.join(parts)}])"
        return f"CASE WHEN NOT ({missing}) THEN ({value})::VARCHAR END"

    x2 = f"""(
        SELECT record, malformed, tombstone, NULL::VARCHAR AS entry, NULL::VARCHAR AS unit,
               ts_raw, seq_raw, op_raw,
               coalesce(before_dec, 'undecodable Debezium decimal in ' || before_min)
                   AS before_raw,
               coalesce(after_dec, 'undecodable Debezium decimal in ' || after_min) AS after_raw
        FROM {decoded})"""
    _run(
        con,
        f"CREATE TEMP TABLE {staged.table} AS SELECT * REPLACE "
        f"(coalesce({key_of('after')}, {key_of('before')}) AS entry) "
        f"FROM ({_rows_from_text(x2, staged.unit_column)})",
    )
    _drop(con, xm)



def stage(
    source: SourceConfig,
    con: duckdb.DuckDBPyConnection,
    prefix: str,
    unit_column: str | None,
    temp_tables: list[str],
) -> Staged:
    """Create the rows table ``{prefix}_rows`` (and helper tables) for ``source``; with a
    ``unit_column``, its value in the rows before and after is extracted too. The name of every
    temporary table created is appended to ``temp_tables`` (for the caller to drop)."""
    labels = {k: k for k in ("entry", "ts", "seq", "op", "before", "after", "unit")}
    unit_field = False
    ts_factor = 1_000_000
    if isinstance(source, DebeziumSource):
        keys = source.key_columns
        labels |= {
            "entry": f"after.{keys[0]}" if len(keys) == 1 else "key",
            "ts": "source.ts_ms",
            "seq": "source.lsn",
        }
        ts_factor = 1_000
    elif not isinstance(source, SqliteSource):
        labels |= {k: v for k, v in source.field_names().items() if v is not None}
        unit_field = source.unit is not None
        ts_factor = EPOCH_FACTORS[source.epoch_unit]
    staged = Staged(
        table=f"{prefix}_rows",
        ts_factor=ts_factor,
        labels=labels,
        unit_field=unit_field,
        unit_column=unit_column,
        temp_tables=temp_tables,
    )
    staged.temp_tables.append(staged.table)
    if not source.path.exists():
        raise ConfigError(f"{describe(source)}: no such file; check [source] path")
    if isinstance(source, JsonlSource):
        _stage_jsonl(con, source, prefix, staged)
    elif isinstance(source, CsvSource):
        _stage_csv(con, source, prefix, staged)
    elif isinstance(source, ParquetSource):
        _stage_parquet(con, source, prefix, staged)
    elif isinstance(source, DebeziumSource):
        _stage_debezium(con, source, prefix, staged)
    else:
        _stage_sqlite(con, source, prefix, staged)
    return staged
