"""Staging of table-shaped sources: CSV and Parquet (the SQLite log: ``_stage_sqlite``)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from dpcr._sql import ident, json_path, lit
from dpcr.changelog._phase1 import _op_sql, blank_entry, op_name
from dpcr.changelog._set_aside import scan_csv
from dpcr.changelog._sources import (
    EPOCH_FACTORS,
    CsvSource,
    ParquetSource,
    describe,
)
from dpcr.changelog._sql import MAX_US, MIN_US
from dpcr.changelog._stage_lines import line_size
from dpcr.changelog._stage_rows import (
    _ROW_COLUMNS,
    _SCALARS,
    Staged,
    _columns,
    _drop,
    _rows_from_text,
    _run,
    check_utf8,
)
from dpcr.errors import ChangelogError, ConfigError


def _tabular_rows(
    con: duckdb.DuckDBPyConnection,
    source: CsvSource | ParquetSource,
    src: str,
    staged: Staged,
    columns: dict[str, str],
    text: Callable[[str, str], str],
) -> None:
    """The rows table from the typed table ``src`` (which has a ``record`` column)."""
    names = source.field_names()
    found = [c for c in columns if c != "record"]
    for key in ("entry", "ts", "op", "after", "unit"):
        name = names[key]
        if name is not None and name not in columns:
            raise ConfigError(
                f"{describe(source)} has no column {name!r} (the {key} field); columns found: "
                f'{", ".join(found)}. Rename the column or set [source] {key} = "<column>"'
            )

    def col(key: str) -> str:
        name = names[key]
        if name is None or name not in columns:
            return "NULL::VARCHAR"
        return text(ident(name), columns[name])

    ts_us = _typed_ts(names["ts"], columns, staged.ts_factor)
    staged.ts_typed = ts_us is not None
    ts_col = f", {ts_us} AS ts_us" if ts_us is not None else ""
    typed = {
        key: names[key]
        for key in ("before", "after")
        if names[key] is not None and _is_object_type(columns.get(str(names[key]), ""))
    }
    if len(typed) == 2:
        # Both rows are typed objects (Parquet STRUCT or MAP): JSON straight from the values,
        # no text round trip.
        x = f"""(
            SELECT record, FALSE AS malformed, FALSE AS tombstone,
                   {col("entry")} AS entry, {col("ts")} AS ts_raw, {col("seq")} AS seq_raw,
                   {col("op")} AS op_raw, {col("unit")} AS unit{ts_col},
                   to_json({ident(str(typed["before"]))}) AS b,
                   to_json({ident(str(typed["after"]))}) AS a,
                   {ident(str(typed["before"]))} IS NOT NULL AS b_given,
                   {ident(str(typed["after"]))} IS NOT NULL AS a_given
            FROM {src})"""
        structs = all(
            columns[str(n)].upper().startswith("STRUCT") for n in typed.values()
        )
        staged.given_is_object = structs
        rows = _rows_from_objects(x, staged, unique_keys=structs)
        kind = "VIEW" if structs else "TABLE"
        _run(con, f"CREATE TEMP {kind} {staged.table} AS {rows}")
    else:
        x = f"""(
            SELECT record, FALSE AS malformed, FALSE AS tombstone,
                   {col("entry")} AS entry, {col("ts")} AS ts_raw, {col("seq")} AS seq_raw,
                   {col("op")} AS op_raw, {col("before")} AS before_raw,
                   {col("after")} AS after_raw, {col("unit")} AS unit{ts_col}
            FROM {src})"""
        rows = _rows_from_text(x, staged.unit_column, extra=", ts_us" if ts_us else "")
        _run(con, f"CREATE TEMP TABLE {staged.table} AS {rows}")
    pairs = ", ".join(f"{lit(c)}, {ident(c)}" for c in columns if c != "record")
    staged.raw_sql = f"SELECT record, json_object({pairs}) AS raw FROM {src}"


_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT",
                  "UINTEGER", "UBIGINT", "HUGEINT")  # fmt: skip


def _typed_ts(name: str | None, columns: dict[str, str], factor: int) -> str | None:
    """Microseconds from a time column that is an integer (epoch units times ``factor``) or a
    timestamp, NULL outside years 1-9999 (as :func:`~dpcr.changelog._sql.ts_expr` gives for
    the same value as text); None for other types (then the text is parsed)."""
    if name is None or name not in columns:
        return None
    t = columns[name].upper()
    c = ident(name)
    if t in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT"):
        # (the range of the integer itself, which needs no wider type: MIN_US <= x * factor
        # <= MAX_US exactly when ceil(MIN_US / factor) <= x <= floor(MAX_US / factor))
        lo, hi = -(-MIN_US // factor), MAX_US // factor
        return f"(CASE WHEN {c} BETWEEN {lo} AND {hi} THEN {c}::BIGINT * {int(factor)} END)"
    if t in _INTEGER_TYPES:
        us = f"(TRY_CAST({c} AS HUGEINT) * {int(factor)})"
    elif t.startswith("TIMESTAMP") and t not in ("TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS"):
        us = f"epoch_us({c})"
    else:
        return None
    return f"(CASE WHEN {us} BETWEEN {MIN_US} AND {MAX_US} THEN {us}::BIGINT END)"


def _is_object_type(sqltype: str) -> bool:
    t = sqltype.upper()
    return t.startswith(("STRUCT", "MAP")) and not t.endswith("]")


def _rows_from_objects(x: str, staged: Staged, *, unique_keys: bool = False) -> str:
    """The rows table from ``x`` whose ``b`` and ``a`` are JSON objects or NULL (typed object
    columns): the same columns :func:`_rows_from_text` gives, without parsing text.

    ``unique_keys``: both columns are STRUCTs, whose field names are unique, so every non-null
    value is a usable object and its text is never needed (no search for a repeated key)."""
    u = staged.unit_column
    units = (
        "NULL::VARCHAR AS b_u, NULL::VARCHAR AS a_u"
        if u is None
        else f"json_extract_string(b, {json_path(u)}) AS b_u, "
        f"json_extract_string(a, {json_path(u)}) AS a_u"
    )
    extra = ", ts_us" if staged.ts_typed else ""
    if unique_keys:
        return f"""
            SELECT {_SCALARS}{extra},
                   b AS before, b_given AS before_given,
                   NULL::VARCHAR AS before_text, b_u AS before_unit,
                   a AS after, a_given AS after_given,
                   NULL::VARCHAR AS after_text, a_u AS after_unit
            FROM (SELECT *, {units} FROM {x})
        """
    return f"""
        SELECT {_SCALARS}{extra}, {_ROW_COLUMNS}
        FROM (
            SELECT * EXCLUDE (b, a, b_given, a_given), b, a, b::VARCHAR AS b_t, a::VARCHAR AS a_t,
                   CASE WHEN b IS NOT NULL THEN 'OBJECT' END AS b_ty,
                   CASE WHEN a IS NOT NULL THEN 'OBJECT' END AS a_ty, {units}
            FROM {x}
        )
    """


def _read_csv(
    con: duckdb.DuckDBPyConnection, src: str, path: Path, spec: str, delimiter: str, limit: int
) -> None:
    _run(
        con,
        f"CREATE TEMP TABLE {src} AS SELECT * FROM read_csv(?, header = true, "
        f"auto_detect = false, columns = {spec}, delim = ?, quote = '\"', escape = '\"', "
        f"strict_mode = true, null_padding = false, max_line_size = {int(limit)})",
        [str(path), delimiter],
    )


def _header(source: CsvSource, name: str) -> list[str]:
    """The names in the first line of the CSV file (read alone: a later row that is not UTF-8
    or too long is a record, set aside, while the header is the file's)."""
    limit = source.max_record_bytes
    try:
        with Path(source.path).open("rb") as f:
            first = f.readline(limit + 2)
        if len(first) > limit + 1 and not first.endswith(b"\n"):
            raise ChangelogError(
                f"{name}: the header line is longer than [source] max_record_bytes = {limit}",
                record=0,
                reason="too_long",
            )
        text = first.decode("utf-8-sig").rstrip("\r\n")
        return next(csv.reader([text], delimiter=source.delimiter), [])
    except UnicodeDecodeError:
        check_utf8(Path(source.path), name)
        raise
    except (OSError, csv.Error) as exc:
        raise ConfigError(f"{name}: cannot read the header ({exc})") from exc


def _stage_csv(
    con: duckdb.DuckDBPyConnection, source: CsvSource, prefix: str, staged: Staged
) -> None:
    src = f"{prefix}_src"
    staged.temp_tables.append(src)
    name = describe(source)
    # The header names the columns; DuckDB's sniffer is off so that no row is ever skipped or
    # re-typed: every row must have exactly the header's columns.
    header = _header(source, name)
    if not header or len(set(header)) != len(header):
        raise ChangelogError(
            f"{name}: the first line must be a header naming every column once, "
            f"got {header!r}",
            record=0,
            reason="bad_csv",
        )
    spec = "{" + ", ".join(f"{lit(c)}: 'VARCHAR'" for c in header) + "}"
    limit = source.max_record_bytes
    try:
        _read_csv(con, src, Path(source.path), spec, source.delimiter, line_size(limit))
    except duckdb.IOException as exc:
        raise ConfigError(f"{name}: cannot read the file ({exc}); check [source] path") from exc
    except duckdb.Error as exc:
        # A row too long, not UTF-8 or without the header's fields: set such rows aside
        # (only now: a valid file is read once).
        _drop(con, src)
        detail = " / ".join(str(exc).splitlines()[:3])  # DuckDB's line, row and column count
        fields = len(header)
        aside = scan_csv(Path(source.path), delimiter=source.delimiter, fields=fields, limit=limit,
                         directory=staged.scratch)  # fmt: skip
        if aside.path is not None:  # (deleted once staging is done, whatever happens)
            staged.set_aside, staged.mark = aside.path, aside.mark
        try:  # (the scan measured every row)
            path = aside.path or Path(source.path)
            _read_csv(con, src, path, spec, source.delimiter, line_size(limit, aside.longest))
            ok = True
            if aside.path is not None:
                first = ident(header[0])
                marked = f"count(*) FILTER (WHERE starts_with({first}, {lit(aside.mark)}))"
                rows, marks = con.execute(f"SELECT count(*), {marked} FROM {src}").fetchall()[0]
                if (rows, marks) != (aside.rows, aside.count):  # rows split otherwise
                    detail = "its rows cannot be told apart around the malformed ones"
                    ok = False
        except duckdb.Error as again:
            detail = " / ".join(str(again).splitlines()[:3])
            ok = False
        if not ok:
            raise ChangelogError(
                f"{name}: not a well-formed CSV file ({detail}); every row needs the same "
                "columns as the header, and fields with the delimiter or quotes must be quoted",
                reason="bad_csv",
            ) from exc
    columns = _columns(con, src)
    if "record" in columns:
        raise ConfigError(f"{name}: a column may not be named 'record'; rename it")
    _run(con, f"ALTER TABLE {src} ADD COLUMN record BIGINT")
    _run(con, f"UPDATE {src} SET record = rowid + 1")
    if staged.set_aside is not None:
        staged.marks = f"SELECT record, {ident(header[0])} AS text FROM {src}"
    _tabular_rows(con, source, src, staged, _columns(con, src), lambda c, _t: c)


def _parquet_text(col: str, sqltype: str) -> str:
    t = sqltype.upper()
    if t.startswith(("STRUCT", "MAP")) or t.endswith("[]") or t == "JSON":
        return f"to_json({col})::VARCHAR"
    if t == "TIMESTAMP WITH TIME ZONE":
        return f"strftime(timezone('UTC', {col}), '%Y-%m-%dT%H:%M:%S.%fZ')"
    if t.startswith("TIMESTAMP"):
        return f"strftime({col}::TIMESTAMP, '%Y-%m-%dT%H:%M:%S.%f')"
    return f"CAST({col} AS VARCHAR)"


def _stage_parquet(
    con: duckdb.DuckDBPyConnection, source: ParquetSource, prefix: str, staged: Staged
) -> None:
    src = f"{prefix}_src"
    staged.temp_tables.append(src)
    try:
        columns = _columns(con, f"SELECT * FROM read_parquet({lit(str(source.path))})")
    except duckdb.Error as exc:
        raise ConfigError(
            f"{describe(source)}: cannot read the Parquet file ({exc}); check [source] path"
        ) from exc
    if "record" in columns:
        raise ConfigError(f"{describe(source)}: a column may not be named 'record'; rename it")
    # A view: the file is scanned as the rows table is built (and again only to quote
    # quarantined records), never copied whole.
    _run(
        con,
        f"CREATE TEMP VIEW {src} AS SELECT * EXCLUDE (file_row_number), "
        f"file_row_number + 1 AS record FROM read_parquet({lit(str(source.path))}, "
        "file_row_number = true)",
    )
    _tabular_rows(con, source, src, staged, _columns(con, src), _parquet_text)


#: Integer types whose every value is a BIGINT (an entry id of such a column is a typed key).
_KEY_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER")
#: Types of a STRUCT field read as a number without its JSON text: its value as a DOUBLE is
#: the number its JSON text parses to (a FLOAT's shortest text is not the float's value).
_NUMBER_TYPES = ("DOUBLE", *_KEY_TYPES)


def typed_parquet_sql(
    con: duckdb.DuckDBPyConnection,
    source: ParquetSource,
    src: str,
    numbers: tuple[str, ...],
    *,
    by_entry: bool,
    seq: bool = False,
    verdicts: Staged | None = None,
) -> str | None:
    """The valid mutations' narrow typed rows of a Parquet file whose rows are STRUCTs and
    whose time is typed, every unit its entry and every sequence number its record number
    (``seq``: or its own, from an integer sequence column; the rows then have a column
    ``explicit_seq``, see :func:`dpcr.changelog._canonical.typed_seq`):
    a SELECT over the rows view ``src`` (columns ``record`` and the file's) with the columns
    of the canonical table (``unit`` and ``entry`` a BIGINT when the entry column is an
    integer type that fits one, its text otherwise; ``before`` NULL; ``after`` the JSON of
    the row, computed only where read), ``opc`` (the operation's code, as
    :data:`dpcr.bounding.sql.OP_CODE` gives it from ``op``), ``no_after`` (the mutation is a
    delete) and, for each
    of ``numbers`` that is a numeric field of the row after, ``"num:<column>"``: its finite
    value as a DOUBLE, NULL when missing, NaN or infinite (what
    :func:`dpcr.bounding.sql.finite_number_sql` reads from the JSON). None when the file is
    not of that kind. The caller removes the records that are not valid mutations.

    ``verdicts`` (the file's staged rows): every record is there, with a column ``rejected``,
    true when phase 1 rejects the record (the verdict :func:`typed_verdicts_sql` counts); None
    when that verdict cannot be read from the typed columns."""
    names = source.field_names()
    columns = _columns(con, src)
    entry, ts, op, after = (names[k] for k in ("entry", "ts", "op", "after"))
    ts_us = _typed_ts(ts, columns, EPOCH_FACTORS[source.epoch_unit])
    seq_sql = _typed_seq(names["seq"], columns, allowed=seq)
    if (
        not by_entry or ts_us is None or seq_sql is None
        or entry not in columns or op not in columns or after not in columns
        or not columns[str(after)].upper().startswith("STRUCT")
    ):  # fmt: skip
        return None
    entry_t = columns[str(entry)].upper()
    key = (
        f"CAST({ident(str(entry))} AS BIGINT)"
        if entry_t in _KEY_TYPES
        else _parquet_text(ident(str(entry)), entry_t)
    )
    a = ident(str(after))
    fields = dict(con.sql(f"SELECT {a} FROM {src} LIMIT 0").types[0].children)
    nums = ""
    for column in dict.fromkeys(numbers):
        kind = fields.get(column)
        if kind is not None and str(kind).upper() in _NUMBER_TYPES:
            v = f"struct_extract(a, {lit(column)})::DOUBLE"
            nums += f", CASE WHEN isfinite({v}) THEN {v} END AS {ident('num:' + column)}"
    op_code = _op_sql(_parquet_text(ident(str(op)), columns[str(op)]), code=True)
    explicit = ", TRUE AS explicit_seq" if seq_sql != "record" else ""
    b = rejected = ""
    if verdicts is not None:
        verdict = _verdict(con, source, src, verdicts, seq=seq)
        if verdict is None:
            return None
        b = f", {verdict.before} AS b"
        rejected = f", coalesce({verdict.rejected('k')}, TRUE) AS rejected"
    return f"""
        SELECT record, k AS unit, k AS entry, t AS ts, s AS seq, {op_name("oc")} AS op, oc AS opc,
               NULL::JSON AS before, CASE WHEN oc = 2 THEN NULL ELSE to_json(a) END::JSON
               AS after, oc = 2 AS no_after{nums}{explicit}{rejected}
        FROM (SELECT record, {key} AS k, {ts_us} AS t, {seq_sql} AS s, {op_code} AS oc, {a} AS a{b}
              FROM {src})
    """


def typed_times(con: duckdb.DuckDBPyConnection, source: ParquetSource, src: str) -> str | None:
    """A SELECT of the time column of the rows view ``src`` of a Parquet file as ``ts`` when
    that column is, for every record whose time is valid, its time in microseconds
    (:func:`_typed_ts` of a BIGINT column counted in microseconds): a plain column, whose
    least and greatest values DuckDB reads from the file's statistics. None otherwise."""
    name = source.field_names()["ts"]
    columns = _columns(con, src)
    if name is None or columns.get(name, "").upper() != "BIGINT" or (
        EPOCH_FACTORS[source.epoch_unit] != 1
    ):  # fmt: skip
        return None
    return f"SELECT {ident(name)} AS ts FROM {src}"


def _typed_seq(name: str | None, columns: dict[str, str], *, allowed: bool) -> str | None:
    """The sequence number of a typed row: the record number without a sequence column
    ``name``; with one (when ``allowed``) of an integer type, its value, or the record number
    where it is NULL (phase 1's :func:`dpcr.changelog._sql.seq_expr` of its text, which is
    never refused); None otherwise."""
    if name is None or name not in columns:
        return "record"
    if not allowed or columns[name].upper() not in _KEY_TYPES:
        return None
    return f"coalesce(CAST({ident(name)} AS BIGINT), record)"


def typed_verdicts_sql(
    con: duckdb.DuckDBPyConnection, source: ParquetSource, src: str, staged: Staged, *,
    seq: bool = False,
) -> str | None:
    """Phase 1's verdicts on a file of :func:`typed_parquet_sql`'s kind whose rows before and
    after are both STRUCTs (``staged.given_is_object``), read from the typed columns: a SELECT
    of one row, the number of records and of those phase 1 rejects (every unit its entry);
    with ``seq`` (the file may have an integer sequence column, as :func:`typed_parquet_sql`
    with ``seq``; else it has none) also of those whose sequence number is not their record
    number. None for any other file.

    For such a file phase 1 (:func:`dpcr.changelog._phase1.phase1_sql`) can reject a record
    only for its operation, its rows given or missing for the operation, its entry (NULL, or
    blank text) or its time (NULL or out of range); no record is split (every unit its entry,
    no key column) and no sequence number is refused (there is no sequence column, or an
    integer one, whose text phase 1 reads as that integer; NULL is the record number). The
    checks below are those, on the same expressions (the entry's text is NULL or blank only
    when the integer is NULL), without converting the rows to text."""
    verdict = _verdict(con, source, src, staged, seq=seq)
    if verdict is None:
        return None
    renumbered, s = (", count(*) FILTER (WHERE s <> record)", f", {verdict.seq} AS s") if seq \
        else ("", "")  # fmt: skip
    return (
        f"SELECT count(*), count(*) FILTER (WHERE {verdict.rejected('e')}){renumbered} FROM "
        f"(SELECT record, {verdict.key} AS e, {verdict.ts} AS t, {verdict.op} AS oc, "
        f"{verdict.before} AS b, {verdict.after} AS a{s} FROM {src})"
    )


@dataclass(frozen=True, slots=True)
class _Verdict:
    """Phase 1's verdict on a typed row (:func:`typed_verdicts_sql`): the expressions of the
    entry as phase 1 checks it (``key``), the time, operation (its code), rows before and
    after and the sequence number, and whether the entry's text can be blank (``text``)."""

    key: str
    ts: str
    op: str
    before: str
    after: str
    seq: str
    text: bool

    def rejected(self, e: str) -> str:
        """SQL true when phase 1 rejects the record, over the columns ``e`` (``key``), ``t``,
        ``oc``, ``b`` and ``a`` (the other expressions; ``oc`` the operation's code)."""
        missing = f"{e} IS NULL OR {blank_entry(e)}" if self.text else f"{e} IS NULL"
        return (
            "oc IS NULL OR (oc <> 2 AND a IS NULL) OR (oc = 0 AND b IS NOT NULL) "
            f"OR (oc = 2 AND a IS NOT NULL) OR {missing} OR t IS NULL"
        )


def _verdict(
    con: duckdb.DuckDBPyConnection, source: ParquetSource, src: str, staged: Staged, *,
    seq: bool,
) -> _Verdict | None:
    """The expressions of :func:`typed_verdicts_sql`'s verdicts, None where it gives none."""
    if not staged.given_is_object or not staged.ts_typed:
        return None
    names = source.field_names()
    columns = _columns(con, src)
    entry, ts, op, before, after = (names[k] for k in ("entry", "ts", "op", "before", "after"))
    ts_us = _typed_ts(ts, columns, EPOCH_FACTORS[source.epoch_unit])
    seq_sql = _typed_seq(names["seq"], columns, allowed=seq)
    if (
        ts_us is None or seq_sql is None or names["unit"] is not None
        or any(c not in columns for c in (entry, op, before, after))
    ):  # fmt: skip
        return None
    entry_t = columns[str(entry)].upper()
    e = ident(str(entry))
    # (the text phase 1 checks; an integer's is NULL only when the integer is, never blank)
    text = entry_t not in _KEY_TYPES
    return _Verdict(
        key=_parquet_text(e, entry_t) if text else e, ts=ts_us,
        op=_op_sql(_parquet_text(ident(str(op)), columns[str(op)]), code=True),
        before=ident(str(before)), after=ident(str(after)), seq=seq_sql, text=text,
    )  # fmt: skip
