"""The staged rows table: :class:`Staged` (what :func:`~dpcr.changelog._stage.stage` made) and
the SQL helpers that build the rows table's columns, shared by every source format."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from dpcr._sql import json_path, lit
from dpcr.changelog._raw_lines import LazyLines
from dpcr.errors import ChangelogError


@dataclass(slots=True)
class Staged:
    table: str
    ts_factor: int
    labels: dict[str, str]
    unit_field: bool
    unit_column: str | None
    raw_sql: str = ""
    temp_tables: list[str] = field(default_factory=list)
    #: A typed timestamp column of the rows table (``ts_us``, microseconds, NULL when out of
    #: range), set by sources whose time column is already a number or a timestamp; the loader
    #: then uses it instead of parsing ``ts_raw``.
    ts_typed: bool = False
    #: A table of (record, digest, digest2) made while the source was read (the digests of
    #: :func:`~dpcr.changelog._resume.create_raw`; a SQLite log), or "" when they are computed
    #: from ``raw_sql`` afterwards.
    digests: str = ""
    #: ``before_given`` / ``after_given`` hold exactly when ``before`` / ``after`` is an object
    #: (typed STRUCT rows), so the loader tests the flags instead of the JSON values.
    given_is_object: bool = False
    #: The source's lines are read on demand (:mod:`dpcr.changelog._raw_lines`): a reader of
    #: ``raw_sql`` first calls ``ensure_raw(con, staged.lazy, records)``. None: every line is
    #: in ``raw_sql`` already.
    lazy: LazyLines | None = None
    #: The number of lines the source had (blank ones included), when staging counted them.
    line_count: int | None = None
    #: The rows table has column ``pre_chk``: the phase-1 verdict (``reason:record``) of a
    #: record set aside when the source was read (:mod:`dpcr.changelog._set_aside`), else NULL.
    pre_checked: bool = False
    #: A private copy of the source with set-aside records marked, read instead of the
    #: source (deleted once staging is done), its marker prefix, and the SQL selecting
    #: (record, text) of the staged records that may hold a marker.
    set_aside: Path | None = None
    mark: str = ""
    marks: str = ""
    #: The folder of such copies (owner-only: they hold raw records), or None for the system's
    #: temporary folder.
    scratch: Path | None = None
    #: The rows are a view over this table (the JSON reader's rows): each read of them parses
    #: the JSON again, so the caller reads them once and frees them
    #: (:func:`~dpcr.changelog._stage.free_rows`). "": the rows are a table.
    view_of: str = ""
    #: The rows (a view, ``view_of``) are the JSON reader's, not numbered yet: their
    #: ``record`` is NULL. Their one reader copies them, in order and without a filter, into
    #: a table whose ``rowid + 1`` is the record number (``line_count`` rows, the file's
    #: lines), then checks it (:mod:`dpcr.changelog._increment`). ``view_of`` is then a view
    #: over the reader, which parses the file each time it is read.
    unnumbered: bool = False


def _run(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> None:
    con.execute(sql, params).fetchall()


def _drop(con: duckdb.DuckDBPyConnection, table: str) -> None:
    _run(con, f"DROP TABLE IF EXISTS {table}")


def _row_columns(name: str, j: str, common: str = "NULL") -> str:
    """``{name}``, ``{name}_given``, ``{name}_text`` and ``{name}_unit`` from the columns ``{j}``
    (parsed JSON or NULL), ``{j}_t`` (its text as written; NULL when absent or JSON null),
    ``{j}_ty`` (its JSON type) and ``{j}_u`` (the unit column's value in it).

    An object with a key given twice is not a usable row (producers differ on which copy
    counts): it is kept only as text, so the record is ``bad_json``. ``common`` is a SQL list
    of keys without repeats (see :func:`row_columns`): an object with exactly those keys needs
    no search for a repeated key; nor does one whose text has no comma (two members are
    separated by one), which is known without parsing it again."""
    keys = f"json_keys({j})"
    ok = (
        f"CASE WHEN {j}_ty = 'OBJECT' THEN CASE WHEN NOT contains({j}::VARCHAR, ',') THEN TRUE "
        f"WHEN {keys} = {common} THEN TRUE ELSE len({keys}) = len(list_distinct({keys})) END END"
    )
    return (
        f"CASE WHEN {ok} THEN {j} END AS {name}, "
        f"{j}_t IS NOT NULL AS {name}_given, "
        f"CASE WHEN {j}_t IS NOT NULL AND NOT coalesce({ok}, FALSE) "
        f"THEN {j}_t END AS {name}_text, "
        f"CASE WHEN {ok} THEN {j}_u END AS {name}_unit"
    )


def row_columns(common_keys: list[str] | None = None) -> str:
    """The before and after columns of the rows table from ``b``, ``a`` (see
    :func:`_row_columns`). ``common_keys``: the keys, in order, of the objects most rows
    hold (a table's columns), without repeats; such objects skip the search for a repeated
    key (the verdict is the same; the search costs more than the rest of the parsing)."""
    common = "NULL"  # (a list with a repeat would never be a shortcut)
    if common_keys is not None and len(set(common_keys)) == len(common_keys):
        common = f"[{', '.join(lit(k) for k in common_keys)}]::VARCHAR[]"
    return f"{_row_columns('before', 'b', common)}, {_row_columns('after', 'a', common)}"


def common_keys(con: duckdb.DuckDBPyConnection, relation: str, column: str) -> list[str] | None:
    """The keys of the first JSON object in text column ``column`` of ``relation`` that has no
    repeated key (among its first rows), for :func:`row_columns`; None when there is none."""
    row = con.execute(
        f"SELECT k FROM (SELECT json_keys(j) AS k FROM (SELECT try(json({column})) AS j "
        f"FROM {relation} WHERE {column} IS NOT NULL LIMIT 64) WHERE json_type(j) = 'OBJECT') "
        "WHERE len(k) = len(list_distinct(k)) LIMIT 1"
    ).fetchone()
    return None if row is None else [str(k) for k in row[0]]


_ROW_COLUMNS = row_columns()
_SCALARS = "record, malformed, tombstone, entry, unit, ts_raw, seq_raw, op_raw"


def _given_text(col: str) -> str:
    """``col``, or NULL when it is NULL, blank or ``null``. A text that begins with ``{`` (an
    object, most rows) is neither, which is known without trimming it (a copy of every text)."""
    return (
        f"CASE WHEN starts_with({col}, '{{') THEN {col} "
        f"WHEN {col} IS NULL OR trim({col}) IN ('', 'null') THEN NULL ELSE {col} END"
    )


def _json_type(j: str) -> str:
    """``json_type(j)`` of a minified JSON value (what ``json()`` returns): an object is the
    value that begins with ``{``, which is known without parsing it again."""
    return f"CASE WHEN starts_with({j}::VARCHAR, '{{') THEN 'OBJECT' ELSE json_type({j}) END"


def _rows_from_text(
    x: str, unit_column: str | None, *, extra: str = "", common: list[str] | None = None
) -> str:
    """The rows table from ``x`` with text columns (before_raw/after_raw as JSON text);
    ``extra`` names more columns of ``x`` to keep (``", ts_us"``); ``common``: the keys of
    most rows' objects (:func:`row_columns`)."""
    if unit_column is None:
        units = "NULL::VARCHAR AS b_u, NULL::VARCHAR AS a_u"
    else:
        p = json_path(unit_column)
        units = f"json_extract_string(b, {p}) AS b_u, json_extract_string(a, {p}) AS a_u"
    return f"""
        SELECT {_SCALARS}{extra}, {row_columns(common)}
        FROM (
            SELECT *, {_json_type("b")} AS b_ty, {_json_type("a")} AS a_ty, {units}
            FROM (
                SELECT *, try(json(b_t)) AS b, try(json(a_t)) AS a
                FROM (SELECT * EXCLUDE (before_raw, after_raw),
                             {_given_text("before_raw")} AS b_t,
                             {_given_text("after_raw")} AS a_t
                      FROM {x})
            )
        )
    """


def _columns(con: duckdb.DuckDBPyConnection, relation_sql: str) -> dict[str, str]:
    return {str(r[0]): str(r[1]) for r in con.execute(f"DESCRIBE {relation_sql}").fetchall()}


def check_utf8(path: Path, name: str) -> None:
    """Raise :class:`~dpcr.errors.ChangelogError` naming the first line of ``path`` that is not
    UTF-8, and how to fix it; return when the whole file is UTF-8. Called when reading failed,
    so a valid file costs nothing."""
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ChangelogError(
                    f"{name}: line {number} is not UTF-8 text (byte 0x{line[exc.start]:02x} at "
                    f"position {exc.start + 1} of the line); dpcr reads text sources as UTF-8: "
                    "convert the file (for example `iconv -f latin1 -t utf-8 old > new`) or have "
                    "the exporter write UTF-8",
                    record=None,
                    reason="bad_encoding",
                ) from None
