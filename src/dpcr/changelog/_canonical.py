"""The canonical changelog table that :func:`dpcr.changelog.load` leaves in the connection."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import duckdb

from dpcr._duck import afterwards
from dpcr._sql import ident
from dpcr.changelog._resume import _fetch, _run
from dpcr.errors import DpcrError


def create_output(
    con: duckdb.DuckDBPyConnection,
    table: str,
    valid: str,
    rows: str,
    *,
    ordered: bool = True,
    joined: str | None = None,
    before_rows: bool = True,
    view: bool = False,
) -> None:
    """The canonical table: the valid mutations with their rows, in (ts, seq, record) order
    (the delete half of a split update before its insert half). ``joined``: a subquery of
    the valid mutations (the columns of ``valid``) with their ``before`` and ``after`` that
    needs no join of ``valid`` with ``rows``. ``before_rows=False``: column ``before`` is
    NULL (and ``joined`` need not carry it).

    ``view``: a temporary view over ``joined`` instead of a table (not ordered; see
    :func:`dpcr.changelog.load`, ``materialize``).

    Updates and deletes given without a before row get the after row of the (unit, entry)'s
    previous valid mutation (there are none under a unit column: phase 1 rejects them); the
    window runs only when some need it.
    """
    missing = before_rows and _fetch(
        con, f"SELECT count(*) FROM {valid} WHERE op <> 'insert' AND NOT has_before"
    )[0][0]
    before = "CASE WHEN op = 'insert' THEN NULL ELSE before END" if before_rows else "NULL"
    after = "CASE WHEN op = 'delete' THEN NULL ELSE after END"
    source = joined or (
        f"(SELECT v.*, {'r.before, ' if before_rows else ''}r.after "
        f"FROM (SELECT record, {'before, ' if before_rows else ''}after FROM {rows}) r "
        f"JOIN {valid} v USING (record))"
    )
    if missing:
        before = "CASE WHEN op = 'insert' THEN NULL ELSE coalesce(before, prev_after) END"
        source = (
            f"(SELECT *, lag({after}) OVER w AS prev_after FROM {source} "
            "WINDOW w AS (PARTITION BY unit, entry ORDER BY ts, seq, record))"
        )
    # A table and a temporary view of the same name would shadow each other: a view replaces
    # the table of an earlier load, a table the temporary view of one.
    with contextlib.suppress(duckdb.CatalogException):
        _run(con, f"DROP TABLE IF EXISTS {ident(table)}" if view
             else f"DROP VIEW IF EXISTS temp.{ident(table)}")  # fmt: skip
    select = f"""
        SELECT record::BIGINT AS record, unit::VARCHAR AS unit, entry::VARCHAR AS entry,
               ts::BIGINT AS ts, seq::BIGINT AS seq, op::VARCHAR AS op,
               ({before})::JSON AS before, ({after})::JSON AS after
        FROM {source}"""
    if view:
        _run(con, f"CREATE OR REPLACE TEMP VIEW {ident(table)} AS {select}")
        return
    with _build_on_the_right(con):
        _run(
            con,
            f"CREATE OR REPLACE TABLE {ident(table)} AS {select} "
            f"{'ORDER BY ts, seq, record, part' if ordered else ''}",
        )


@contextlib.contextmanager
def _build_on_the_right(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Hash joins build their table from the right side as written. DuckDB builds from the side
    it estimates smaller; for the canonical table the two sides are equally long and it picked
    the rows with their JSON text, where the valid mutations (narrow) build for less than
    two thirds of the time."""
    option, old = "disabled_optimizers", None
    try:
        current = str(_fetch(con, f"SELECT current_setting('{option}')")[0][0])
        names = {n.strip() for n in current.split(",") if n.strip()} | {"build_side_probe_side"}
        _run(con, f"SET {option} = '{','.join(sorted(names))}'")
        old = current
    except duckdb.Error:  # a DuckDB without this optimizer: nothing to switch off
        pass
    with afterwards(con, *([] if old is None else [f"SET {option} = '{old}'"])):
        yield


def typed_name(table: str) -> str:
    """The temporary view of the narrow typed rows of the output ``table`` (see
    :func:`typed_source`; not named after the table, as the table's own helpers are)."""
    return ident(f"_dpcr_typed_{table}")


def typed_source(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str] | None:
    """When the output ``table`` of :func:`dpcr.changelog.load` is a view over a Parquet file
    of typed rows (``materialize=False``): the view ``_dpcr_typed_{table}`` of the same mutations
    with typed columns (integer entry ids stay integers; a number a query reads is a DOUBLE
    column instead of JSON text), as a map from each such column of the row after to the
    name of its number column, with ``""`` to the view's name. None otherwise.

    Every column of ``table`` is there too, with the same values but for ``unit`` and
    ``entry``, which are BIGINT when the file's entry ids are integers (their text is then
    the canonical one, ``CAST(entry AS VARCHAR)``), and ``before`` (NULL); ``no_after`` is
    ``after IS NULL``."""
    row = _fetch(
        con,
        "SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name = ?",
        [f"_dpcr_typed_{table}"],
    )
    if not row[0][0]:
        return None
    names = [str(r[0]) for r in _fetch(con, f"DESCRIBE {typed_name(table)}")]
    out = {n.removeprefix("num:"): ident(n) for n in names if n.startswith("num:")}
    out[""] = typed_name(table)
    return out


def typed_seq(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether the typed rows of the output ``table`` (:func:`typed_source`) carry sequence
    numbers of their own (an integer sequence column of the file) rather than their record
    numbers: an order of the rows then reads ``seq``."""
    names = {str(r[0]) for r in _fetch(con, f"DESCRIBE {typed_name(table)}")}
    return "explicit_seq" in names


def typed_rejects(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether the typed rows of the output ``table`` (:func:`typed_source`) are every record
    of the file with phase 1's verdict, column ``rejected`` (true: phase 1 rejects the record,
    which is then no valid mutation), left to the reader with the liveness check
    (:func:`unchecked`): a reader that finds a rejected record raises :class:`NotPlain`."""
    names = {str(r[0]) for r in _fetch(con, f"DESCRIBE {typed_name(table)}")}
    return "rejected" in names


def ts_source(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """The relation that holds the ``ts`` of every row of the output ``table`` of
    :func:`dpcr.changelog.load`, cheapest first: ``{table}_ts`` (a table, or a view of the
    file's time column) when the output is a view over the source (``materialize=False``), else
    the table itself."""
    row = _fetch(
        con,
        "SELECT (SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = ?) + "
        "(SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name = ?)",
        [f"{table}_ts"] * 2,
    )
    return ident(f"{table}_ts") if row[0][0] else ident(table)


def unchecked_name(table: str) -> str:
    """The temporary view whose presence says that the histories of the output ``table`` are
    not checked for liveness (see :func:`unchecked`)."""
    return ident(f"_dpcr_unchecked_{table}")


def unchecked(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """True when :func:`dpcr.changelog.load` (``liveness="defer"``) left the liveness check
    of the output ``table`` to its reader: every record passed phase 1, and the table holds
    every one of them as a mutation, which is right only when every history is plain (see
    :mod:`dpcr.changelog._load`, "Plain histories"). The reader checks that (a row of a
    history that is not plain breaks :func:`dpcr.changelog.plain_break`) or loads the
    source again with the check."""
    row = _fetch(
        con,
        "SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name = ?",
        [f"_dpcr_unchecked_{table}"],
    )
    return bool(row[0][0])


class NotPlain(DpcrError):
    """A reader of a changelog whose liveness check was left to it (:func:`unchecked`) found
    a history that is not plain, or could not check every history: the caller loads the
    source again with the check (:func:`dpcr.changelog.load`, ``liveness="check"``)."""

    def __init__(self, table: str) -> None:
        super().__init__(
            f"internal error: the histories of {table!r} were not checked for liveness; "
            "please report this with the input"
        )


def mark_unchecked(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Record that the liveness check of ``table`` (a relation of valid mutations) is left to
    its reader (see :func:`unchecked`)."""
    _run(con, f"CREATE OR REPLACE TEMP VIEW {unchecked_name(table)} AS SELECT 1 AS unchecked")


def mark_checked(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Record that the reader found every history of the output ``table`` plain (see
    :func:`unchecked`): later readers need not check it again."""
    _run(con, f"DROP VIEW IF EXISTS temp.{unchecked_name(table)}")
