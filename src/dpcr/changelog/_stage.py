"""Read a source into one table of rows with the same columns for every format.

Every source becomes a DuckDB table ``{prefix}_rows`` with one row per record (blank lines are not
records):

============ ======= =========================================================================
record       BIGINT  1-based record number (line, data row, or the log's ``seq`` for SQLite)
malformed    BOOLEAN the record is not a JSON object (line formats only)
tombstone    BOOLEAN a record that is skipped and counted, never an error (a Debezium tombstone,
                     a wal2json begin/commit/message)
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

The change-data-capture formats (Debezium, wal2json) add ``before_entry VARCHAR``: the entry id
from the key columns of the row before (NULL when it has none). An update whose ``before_entry``
differs from ``entry`` changed the row's key.

``Staged.raw_sql`` selects ``(record, raw)``: the original record for the quarantine file (the line
as a JSON string for line formats, an object of the row's fields for tabular ones).

A source whose reader refused some records (too long, not UTF-8, a malformed CSV row) is read
from a copy with those records marked (:mod:`dpcr.changelog._set_aside`); the rows table then
has ``pre_chk VARCHAR``, their phase-1 verdict (``Staged.pre_checked``), and their ``raw`` is
what the quarantine file keeps of them.

JSON lines are staged here, Debezium envelopes in ``_stage_debezium`` and wal2json messages in
``_stage_wal2json`` (reading lines: ``_stage_lines``); CSV and Parquet in ``_stage_tabular``,
the SQLite log in ``_stage_sqlite``; :class:`Staged` and the SQL shared by all formats in
``_stage_rows``.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from dpcr._sql import ident, json_path, lit
from dpcr.changelog._once import Restage
from dpcr.changelog._raw_lines import LazyLines, ensure_raw, plain_lines
from dpcr.changelog._set_aside import apply_marks
from dpcr.changelog._sources import (
    EPOCH_FACTORS,
    CsvSource,
    DebeziumSource,
    JsonlSource,
    ParquetSource,
    SourceConfig,
    SqliteSource,
    Wal2jsonSource,
    check_unit_column,
    describe,
)
from dpcr.changelog._stage_debezium import stage_debezium
from dpcr.changelog._stage_lines import (
    LTRIM,
    REPEATED_KEY,
    TRIM,
    fast_records,
    line_raw_sql,
    mark_lines,
    read_lines,
)
from dpcr.changelog._stage_rows import (
    _ROW_COLUMNS,
    _SCALARS,
    Staged,
    _drop,
    _json_type,
    _run,
    common_keys,
    row_columns,
)
from dpcr.changelog._stage_sqlite import stage_sqlite
from dpcr.changelog._stage_tabular import _stage_csv, _stage_parquet
from dpcr.changelog._stage_wal2json import stage_wal2json
from dpcr.errors import ConfigError

__all__ = ["Staged", "stage"]

# Tests set this to check that the line-by-line path agrees with DuckDB's JSON reader.
_force_slow_path = False


def _extracted(i: int) -> str:
    """Element ``i`` of the extracted list ``l`` as JSON, NULL when absent or JSON null."""
    return f"CASE WHEN l[{i}]::VARCHAR = 'null' THEN NULL ELSE l[{i}] END"


def _null_lines(con: duckdb.DuckDBPyConnection, lines: str, table: str) -> str:
    """A small table of the numbers of the lines that read ``null``."""
    _run(
        con,
        f"CREATE TEMP TABLE {table} AS SELECT rowid + 1 AS record FROM {lines} "
        f"WHERE strlen(line) < 64 AND {TRIM} = 'null'",
    )
    return f"(SELECT record FROM {table})"


def _lazy_records(
    con: duckdb.DuckDBPyConnection,
    source: JsonlSource,
    columns: dict[str, str],
    fast: str,
    nulls: str,
    rawlines: str,
    staged: Staged,
) -> tuple[str | None, str]:
    """The records of a JSON-lines file read by DuckDB's JSON reader alone, numbered by its
    rows, when that numbering is the file's (see :mod:`dpcr.changelog._raw_lines`): every line
    is one record (the reader's rows equal the file's lines, which rules out blank lines) and
    the file has no carriage return or byte-order mark. The lines are then not copied into a
    table: ``staged.lazy`` fetches those a reader needs. Table ``nulls`` lists the lines that
    read ``null`` (malformed records).

    Returns (the relation or None, what the JSON reader did: "" it did not run, "table" table
    ``fast`` holds its rows, "refused" it refused the file). None: number the records by
    :func:`read_lines`'s table, without running the JSON reader again when it ran."""
    n_lines = plain_lines(Path(source.path), source.max_record_bytes)
    if n_lines is None:
        return None, ""
    relation = fast_records(con, str(source.path), None, columns, fast)
    if relation is None:
        return None, "refused"
    n_rows = int(con.execute(f"SELECT count(*) FROM {fast}").fetchall()[0][0])
    if n_rows != n_lines:
        return None, "table"
    # A line `null` reads as a row of NULLs, like `{}`: the text tells them apart. Their lines
    # are fetched as any record's text is (malformed records are quarantined with it).
    lazy = LazyLines(path=Path(source.path), table=rawlines)
    empty = " AND ".join(f"{ident(c)} IS NULL" for c in columns) or "TRUE"
    ensure_raw(con, lazy, f"SELECT rowid + 1 AS record FROM {fast} WHERE {empty}")
    bare = f"(SELECT record, trim(line, ' ' || chr(9)) AS t FROM {rawlines})"
    given = con.execute(f"SELECT count(*) FROM {bare} WHERE t <> ''").fetchall()[0][0]
    if given != len(lazy.fetched):
        return None, "table"  # a blank line read as a row: let the line reader number them
    _run(con, f"CREATE TEMP TABLE {nulls} AS SELECT record FROM {bare} WHERE t = 'null'")
    staged.lazy = lazy
    staged.raw_sql = f"SELECT record, to_json(line) AS raw FROM {rawlines}"
    staged.line_count = n_lines
    return relation, "table"


def _unnumbered_records(
    con: duckdb.DuckDBPyConnection,
    source: JsonlSource,
    columns: dict[str, str],
    fast: str,
    rawlines: str,
    staged: Staged,
) -> str | None:
    """The records of a JSON-lines file as a view over DuckDB's JSON reader, not numbered
    (``record`` NULL, none malformed yet: see ``Staged.unnumbered``), when the file's lines
    can be numbered as the reader's rows (:func:`_lazy_records`; its reader is the caller's,
    which checks the rest). None: the file has a carriage return, a byte-order mark or a
    line that is too long."""
    n_lines = plain_lines(Path(source.path), source.max_record_bytes)
    if n_lines is None:
        return None
    spec = "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in columns.items()) + "}"
    _run(con, f"CREATE TEMP VIEW {fast} AS SELECT * FROM read_json({lit(str(source.path))}, "
              f"format = 'newline_delimited', columns = {spec})")  # fmt: skip
    staged.lazy = LazyLines(path=Path(source.path), table=rawlines)
    staged.raw_sql = f"SELECT record, to_json(line) AS raw FROM {rawlines}"
    staged.line_count = n_lines
    staged.unnumbered = True
    return f"(SELECT NULL::BIGINT AS __record, * FROM {fast})"


def _stage_jsonl(
    con: duckdb.DuckDBPyConnection,
    source: JsonlSource,
    prefix: str,
    staged: Staged,
    *,
    lazy_raw: bool = False,
    rows_view: bool = False,
    unnumbered: bool = False,
    refused: bool = False,
) -> None:
    lines, fast, nulls = f"{prefix}_lines", f"{prefix}_json", f"{prefix}_nulls"
    staged.temp_tables += [lines, fast, f"{fast}_n", nulls, f"{prefix}_rawlines"]
    names = source.field_names()
    u = staged.unit_column
    types = {"entry": "VARCHAR", "ts": "VARCHAR", "seq": "VARCHAR", "op": "VARCHAR",
             "before": "JSON", "after": "JSON", "unit": "VARCHAR"}  # fmt: skip
    columns = {n: types[k] for k, n in names.items() if n is not None}
    relation, malformed, read = None, "", "refused" if refused else ""
    lazy_raw = lazy_raw and not (_force_slow_path or refused)
    if unnumbered and lazy_raw and rows_view:
        relation = _unnumbered_records(con, source, columns, fast, f"{prefix}_rawlines", staged)
        malformed = "FALSE"
        lazy_raw = False  # (None: the file's lines are not plain, _lazy_records would find)
    if relation is None and lazy_raw:
        relation, read = _lazy_records(con, source, columns, fast, nulls, f"{prefix}_rawlines",
                                       staged)  # fmt: skip
        malformed = f"__record IN (SELECT record FROM {nulls})"
    if relation is None:
        limit = source.max_record_bytes
        aside = read_lines(
            con, str(source.path), lines, describe(source), limit=limit, scratch=staged.scratch
        )
        staged.raw_sql = line_raw_sql(lines)
        # (not again when the lazy attempt ran the JSON reader: its table, or its refusal;
        # nor over a copy with records set aside, whose markers are not JSON)
        slow = _force_slow_path or read == "refused" or aside is not None
        if aside is not None:
            mark_lines(staged, aside, lines)
            _drop(con, fast)
        relation = None if slow else fast_records(
            con, str(source.path), lines, columns, fast, made=read == "table",
        )  # fmt: skip
        if relation is not None:
            malformed = f"__record IN {_null_lines(con, lines, nulls)}"
    if relation is not None:

        def col(key: str) -> str:
            n = names[key]
            return "NULL::VARCHAR" if n is None else ident(n)

        units = (
            "NULL::VARCHAR AS b_u, NULL::VARCHAR AS a_u"
            if u is None
            else f"b ->> {json_path(u)} AS b_u, a ->> {json_path(u)} AS a_u"
        )
        # Objects with the keys of the first row's (a table's columns) skip the search for a
        # repeated key (the verdict is the same).
        try:
            common = common_keys(con, relation, ident(names["after"])) if names["after"] else None
        except duckdb.Error:  # (unnumbered: the first read of the reader's rows)
            if not staged.unnumbered:
                raise
            raise Restage(refused=True) from None
        # (a view over the reader's rows when the caller reads them once: see Staged.view_of)
        view = rows_view and staged.lazy is not None
        _run(
            con,
            f"""
            CREATE TEMP {"VIEW" if view else "TABLE"} {staged.table} AS
            SELECT {_SCALARS}, {row_columns(common)}
            FROM (
                SELECT *, b::VARCHAR AS b_t, {_json_type("b")} AS b_ty, a::VARCHAR AS a_t,
                       {_json_type("a")} AS a_ty, {units}
                FROM (
                    SELECT __record AS record, {malformed} AS malformed,
                           FALSE AS tombstone, {col("entry")} AS entry, {col("unit")} AS unit,
                           {col("ts")} AS ts_raw, {col("seq")} AS seq_raw, {col("op")} AS op_raw,
                           {col("before")}::JSON AS b, {col("after")}::JSON AS a
                    FROM {relation}
                )
            )
            """,
        )
        if view:
            staged.view_of = fast
            return
        for table in (fast, f"{fast}_n"):  # read only into the rows table: free them now
            _drop(con, table)
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
                SELECT record, (l IS NULL OR NOT starts_with({LTRIM}, '{{')
                        OR {REPEATED_KEY}) AS malformed,
                       FALSE AS tombstone,
                       l[1] ->> '$' AS entry, l[2] ->> '$' AS ts_raw, l[3] ->> '$' AS seq_raw,
                       l[4] ->> '$' AS op_raw, {_extracted(5)} AS b, {_extracted(6)} AS a,
                       {"l[7] ->> '$'" if source.unit is not None else "NULL::VARCHAR"} AS unit,
                       l[8] ->> '$' AS b_u, l[9] ->> '$' AS a_u
                FROM (
                    SELECT rowid + 1 AS record, line,
                           try(json_extract(line, [{", ".join(lit(p) for p in paths)}])) AS l
                    FROM {lines}
                    WHERE line IS NOT NULL AND {TRIM} <> ''
                )
            )
        )
        """,
    )


def stage(
    source: SourceConfig,
    con: duckdb.DuckDBPyConnection,
    prefix: str,
    unit_column: str | None,
    temp_tables: list[str],
    *,
    digests: bool = True,
    lazy_raw: bool = False,
    scratch: Path | None = None,
    rows_view: bool = False,
    unnumbered: bool = False,
    refused: bool = False,
) -> Staged:
    """Create the rows table ``{prefix}_rows`` (and helper tables) for ``source``; with a
    ``unit_column``, its value in the rows before and after is extracted too. The name of every
    temporary table created is appended to ``temp_tables`` (for the caller to drop).
    ``digests``: the caller will digest the records (a source read in batches digests each
    batch as it arrives: ``Staged.digests``). ``lazy_raw``: a JSON-lines file whose lines need
    no table of their own is not copied line by line (``Staged.lazy``; the file must stay in
    place while the staged rows are used). ``scratch``: the folder of the private copy of a
    source some of whose records are set aside when read (:mod:`dpcr.changelog._set_aside`;
    None: the system's temporary folder). ``rows_view``: the caller reads the rows once
    (then frees them, :func:`free_rows`), so a JSON-lines file read in place may stage them
    as a view over the JSON reader's rows instead of a copy (``Staged.view_of``).
    ``unnumbered`` (with both): that view may be the reader itself, its rows not numbered yet
    (``Staged.unnumbered``: the caller numbers and checks them). ``refused``: DuckDB's JSON
    reader refused the file already (a JSON-lines file is then read line by line at once)."""
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
    elif isinstance(source, Wal2jsonSource):
        keys = source.key_columns
        labels |= {
            "entry": f"columns.{keys[0]}" if len(keys) == 1 else "key",
            "ts": "timestamp",
            "seq": "lsn",
            "op": "action",
            "before": "identity",
            "after": "columns",
        }
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
        scratch=scratch,
    )
    staged.temp_tables.append(staged.table)
    if not Path(source.path).exists():
        raise ConfigError(f"{describe(source)}: no such file; check [source] path")
    if unit_column is not None:
        check_unit_column(unit_column)  # (on every path, before any SQL names it)
    try:
        if isinstance(source, JsonlSource):
            _stage_jsonl(con, source, prefix, staged, lazy_raw=lazy_raw, rows_view=rows_view,
                         unnumbered=unnumbered, refused=refused)  # fmt: skip
        elif isinstance(source, CsvSource):
            _stage_csv(con, source, prefix, staged)
        elif isinstance(source, ParquetSource):
            _stage_parquet(con, source, prefix, staged)
        elif isinstance(source, DebeziumSource):
            stage_debezium(con, source, prefix, staged, fast=not _force_slow_path)
        elif isinstance(source, Wal2jsonSource):
            stage_wal2json(con, source, prefix, staged)
        else:
            stage_sqlite(con, source, prefix, staged, digests=digests)
        if staged.mark:  # records set aside when the source was read
            marks = f"{prefix}_marks"
            staged.temp_tables.append(marks)
            raw = (staged.raw_sql, staged.marks, staged.mark)
            staged.raw_sql = apply_marks(con, staged.table, *raw, marks)
            staged.pre_checked = True
    finally:
        if staged.set_aside is not None:
            staged.set_aside.unlink(missing_ok=True)
    return staged


def free_rows(con: duckdb.DuckDBPyConnection, staged: Staged, *, keep: bool) -> None:
    """Done with the rows of a view (``staged.view_of``): drop it and the table it reads, or,
    with ``keep``, make the rows a table of their own first (the view's table is dropped
    either way). Nothing to do for rows staged as a table."""
    if not staged.view_of:
        return
    view, table = staged.table, staged.view_of
    if staged.unnumbered:  # (a view over the reader: its reader numbers the rows)
        assert not keep, "unnumbered rows are read once, by their one reader"
        _run(con, f"DROP VIEW IF EXISTS {view}")
        _run(con, f"DROP VIEW IF EXISTS {table}")
        staged.view_of = ""
        return
    if keep:
        copy = f"{view}_t"
        _run(con, f"CREATE TEMP TABLE {copy} AS SELECT * FROM {view}")
        _run(con, f"DROP VIEW {view}")
        _run(con, f"ALTER TABLE {copy} RENAME TO {view.split('.')[-1]}")
    else:
        _run(con, f"DROP VIEW IF EXISTS {view}")
    _drop(con, table)
    staged.view_of = ""
