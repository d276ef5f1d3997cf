"""Reading line formats (JSON lines, Debezium, wal2json): the file as one row per line, and
DuckDB's parallel JSON reader over it when every line is a JSON object."""

from __future__ import annotations

from pathlib import Path

import duckdb

from dpcr._sql import lit
from dpcr.changelog._set_aside import SetAside, scan_lines
from dpcr.changelog._stage_rows import Staged, _drop, _run
from dpcr.errors import ConfigError

#: DuckDB's own longest line (its default ``max_line_size``): a larger setting makes its
#: reader's buffers larger (+23 % of memory reading a 300 MB file with 16 MiB), so a file is
#: first read with it, and a longer line is measured by the scan that follows a refusal.
DUCKDB_LINE = 2_000_000


def line_size(limit: int, longest: int | None = None) -> int:
    """DuckDB's ``max_line_size`` for a first read (lines of at most ``limit`` bytes), or for
    the read after a scan found the ``longest`` line (a margin: DuckDB can refuse a line of
    exactly the setting when it crosses its buffers)."""
    if longest is None:
        return min(limit, DUCKDB_LINE)
    return max(DUCKDB_LINE, longest + 1024)


def _read_csv_lines(con: duckdb.DuckDBPyConnection, path: str, table: str, limit: int) -> None:
    _run(
        con,
        f"CREATE TEMP TABLE {table} AS SELECT line FROM read_csv(?, "
        "columns = {'line': 'VARCHAR'}, header = false, auto_detect = false, "
        "delim = chr(1) || chr(2) || chr(3) || chr(4), quote = '', escape = '', "
        f"strict_mode = false, max_line_size = {int(limit)})",
        [path],
    )


def read_lines(
    con: duckdb.DuckDBPyConnection,
    path: str,
    table: str,
    name: str,
    *,
    limit: int,
    scratch: Path | None = None,
) -> SetAside | None:
    """One row per line (``rowid`` = line number - 1), blank lines kept so numbering holds.

    A line longer than ``limit`` bytes or not UTF-8 makes DuckDB's reader refuse the file: then
    (only then) the file is scanned and such lines are set aside (:mod:`~dpcr.changelog.
    _set_aside`): the table holds the lines of the returned copy, which the caller reads
    instead of ``path`` (and marks with :func:`mark_lines`), made in ``scratch`` (None: the
    system's temporary folder). None: the table holds the file's own lines."""
    try:
        _read_csv_lines(con, path, table, line_size(limit))
        return None
    except duckdb.IOException as exc:
        raise ConfigError(f"{name}: cannot read the file ({exc}); check [source] path") from exc
    except duckdb.Error:
        _drop(con, table)
    scan = scan_lines(Path(path), limit, directory=scratch)
    try:
        _read_scanned(con, str(scan.path or path), table, name, line_size(limit, scan.longest))
    except BaseException:
        if scan.path is not None:
            scan.path.unlink(missing_ok=True)
        raise
    return scan if scan.path is not None else None


def _read_scanned(
    con: duckdb.DuckDBPyConnection, path: str, table: str, name: str, size: int
) -> None:
    """:func:`read_lines` after a scan (``size``: a line size that fits every line)."""
    try:
        _read_csv_lines(con, path, table, size)
        return
    except duckdb.Error:
        _drop(con, table)
    # A line that contains the (control-character) delimiter: read the file whole instead.
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


def mark_lines(staged: Staged, aside: SetAside | None, lines: str) -> str | None:
    """Note the copy ``aside`` (from :func:`read_lines` into table ``lines``) in ``staged``;
    return the path to read from now on instead of the source's (None: the source's)."""
    if aside is None or aside.path is None:
        return None
    staged.set_aside, staged.mark = aside.path, aside.mark
    staged.marks = f"SELECT rowid + 1 AS record, line AS text FROM {lines}"
    return str(aside.path)


def line_raw_sql(lines: str) -> str:
    return f"SELECT rowid + 1 AS record, to_json(line) AS raw FROM {lines}"


#: ``line`` without leading and trailing blanks, tabs, line feeds and carriage returns (DuckDB's
#: line reader ends a line at CR, LF or CR LF, so the lines of a CR CR LF file keep a LF).
TRIM = "trim(line, ' ' || chr(9) || chr(10) || chr(13))"
LTRIM = "ltrim(line, ' ' || chr(9) || chr(10) || chr(13))"

#: The line's top-level keys repeat one (a line that is not a JSON object: false). DuckDB's JSON
#: reader refuses such a file, so only the line-by-line paths, which take the first copy when
#: they extract a field, need it: producers differ on which copy counts, so the record is
#: malformed instead.
REPEATED_KEY = (
    "coalesce(try(len(json_keys(line)) <> len(list_distinct(json_keys(line)))), FALSE)"
)

#: A line that is not blank (a line with "{" is not; only the others are trimmed, which copies).
_NOT_BLANK = "CASE WHEN line IS NULL THEN FALSE WHEN contains(line, '{') THEN TRUE " \
    f"ELSE {TRIM} <> '' END"  # fmt: skip


def fast_records(
    con: duckdb.DuckDBPyConnection,
    path: str,
    lines: str | None,
    columns: dict[str, str],
    table: str,
    *,
    made: bool = False,
) -> str | None:
    """Read JSON lines with DuckDB's parallel reader into ``table``; return a relation with
    ``__record`` (the line number) and the typed ``columns``, or None when some line is not a
    JSON object (then the caller takes the line-by-line path, which reports such lines).
    A line ``null`` reads as a row of NULLs; callers tell it apart with the line text.
    ``lines``: the table of the file's lines (:func:`read_lines`), or None when the caller
    has checked that the reader's rows are the file's lines (then numbered by the rows).
    ``made``: ``table`` holds the reader's rows already."""
    spec = "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in columns.items()) + "}"
    try:
        if not made:
            _run(
                con,
                f"CREATE TEMP TABLE {table} AS SELECT * FROM read_json(?, "
                f"format = 'newline_delimited', columns = {spec})",
                [path],
            )
    except duckdb.Error:
        _drop(con, table)
        return None
    if lines is None:
        return f"(SELECT rowid + 1 AS __record, * FROM {table})"
    n_rows = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    n_lines, n_records = con.execute(
        f"SELECT count(*), count(*) FILTER ({_NOT_BLANK}) FROM {lines}"
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
        f"WHERE {_NOT_BLANK}",
    )
    return f"(SELECT * FROM {numbered} POSITIONAL JOIN {table})"
