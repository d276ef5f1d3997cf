"""Resuming a release: late mutations and the digest of the records already consumed.

A run that resumes after earlier runs has consumed the source's first ``records_seen`` records
and released every interval up to ``t_last``. A mutation past those records with ``ts <= t_last``
is *late*: it belongs to an interval already released. The first late mutation of a (unit,
entry) freezes it at its record number (a :data:`FrozenPoint`): that mutation and every mutation
of the (unit, entry) with a record number at least as high are left out, of validation too, in
this and every later run (the points are passed back to :func:`~dpcr.changelog.load`). So the
(unit, entry)'s consumed records keep the validity and the kept status they had when their
intervals were released, and its released changes keep telescoping to f(its last kept state).

:func:`raw_digest` digests the first records as read, before validation, so that a run can
refuse a source whose consumed records were rewritten, whatever later records do to their
validity.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import duckdb

from dpcr._sql import ident
from dpcr.changelog._sources import check_identifier
from dpcr.changelog._sql import record_digest
from dpcr.changelog._stage_rows import Staged
from dpcr.errors import ConfigError

#: A frozen (unit, entry): its unit, its entry and the record number from which its mutations are
#: left out.
FrozenPoint = tuple[str, str, int]


def _run(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> None:
    con.execute(sql, params).fetchall()


def _fetch(
    con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None
) -> list[tuple[Any, ...]]:
    return con.execute(sql, params).fetchall()


def check_frozen(frozen: Iterable[FrozenPoint]) -> list[FrozenPoint]:
    out: list[FrozenPoint] = []
    for point in frozen:
        if (
            not isinstance(point, tuple | list)
            or len(point) != 3
            or not isinstance(point[0], str)
            or not isinstance(point[1], str)
            or isinstance(point[2], bool)
            or not isinstance(point[2], int)
        ):
            raise ConfigError(
                f"a frozen point is (unit, entry, record) as returned in LoadReport.frozen, "
                f"got {point!r}"
            )
        out.append((point[0], point[1], int(point[2])))
    return out


def check_late(exclude_late: tuple[int, int] | None) -> None:
    if exclude_late is None:
        return
    ok = (
        isinstance(exclude_late, tuple | list)
        and len(exclude_late) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in exclude_late)
    )
    if not ok or exclude_late[0] < 0:
        raise ConfigError(
            "exclude_late must be (records_seen, t_last): the number of records consumed by "
            f"earlier runs (>= 0) and the end of the last released interval, got {exclude_late!r}"
        )


def last_consumed(con: duckdb.DuckDBPyConnection, rows: str, seen: int) -> int:
    """The record number of the last of the first ``seen`` records of table ``rows`` (record
    numbers can have gaps; 0 for none)."""
    return int(
        _fetch(
            con,
            f"SELECT coalesce(max(record), 0) FROM (SELECT record FROM {rows} "
            "ORDER BY record LIMIT ?)",
            [seen],
        )[0][0]
    )


def freeze_points(
    con: duckdb.DuckDBPyConnection,
    rows: str,
    fz: str,
    *,
    boundary: int,
    t_last: int | None,
    given: list[FrozenPoint],
) -> tuple[int, tuple[FrozenPoint, ...]]:
    """Table ``fz`` (unit, entry, record): the ``given`` freeze points and those of the late
    mutations of ``rows`` (numbered above ``boundary``, dated at or before ``t_last``). Returns
    how many mutations of ``rows`` the points leave out, and every point (one per (unit, entry),
    the lowest)."""
    _run(con, f"CREATE TEMP TABLE {fz} (unit VARCHAR, entry VARCHAR, record BIGINT)")
    if given:
        con.executemany(f"INSERT INTO {fz} VALUES (?, ?, ?)", given)
        # One point per (unit, entry), the lowest (a point given twice changes nothing).
        _run(
            con,
            f"CREATE OR REPLACE TEMP TABLE {fz} AS SELECT unit, entry, min(record) AS record "
            f"FROM {fz} GROUP BY unit, entry",
        )
    if t_last is not None:
        _run(
            con,
            f"INSERT INTO {fz} SELECT unit, entry, min(record) FROM {rows} g "
            f"WHERE record > ? AND ts <= ? AND NOT EXISTS (SELECT 1 FROM {fz} f "
            "WHERE f.unit = g.unit AND f.entry = g.entry) GROUP BY unit, entry",
            [int(boundary), int(t_last)],
        )
    points = _fetch(con, f"SELECT unit, entry, record FROM {fz} ORDER BY unit, entry")
    late = 0
    if points:  # (no points: nothing to count, and no join of every row with them)
        late = int(
            _fetch(
                con,
                f"SELECT count(*) FROM {rows} g JOIN {fz} f USING (unit, entry) "
                "WHERE g.record >= f.record",
            )[0][0]
        )
    return late, tuple((str(u), str(e), int(r)) for u, e, r in points)


def freeze(
    con: duckdb.DuckDBPyConnection,
    staged: Staged,
    good: str,
    fz: str,
    exclude_late: tuple[int, int] | None,
    given: list[FrozenPoint],
) -> tuple[int, tuple[FrozenPoint, ...]]:
    """Remove the mutations of frozen (unit, entry)s from table ``good``; return how many were
    removed and every freeze point (the given ones and those of this run's late mutations)."""
    if exclude_late is None and not given:
        return 0, ()
    seen, t_last = exclude_late if exclude_late is not None else (0, None)
    late, points = freeze_points(
        con, good, fz, boundary=last_consumed(con, staged.table, seen), t_last=t_last,
        given=given,
    )  # fmt: skip
    if late:
        _run(
            con,
            f"DELETE FROM {good} g USING {fz} f WHERE g.unit = f.unit AND g.entry = f.entry "
            "AND g.record >= f.record",
        )
    return late, points


def _raw_table(table: str) -> str:
    return ident(f"{table}_raw")


def create_raw(
    con: duckdb.DuckDBPyConnection, table: str, staged: Staged, *, digests: bool = True,
    view: bool = False,
) -> None:  # fmt: skip
    """Table ``{table}_raw``: per source record (valid, invalid or tombstone) its number and,
    with ``digests``, a digest of the record number and the record as read (see
    :func:`raw_digest`; without, the digest column is NULL). A SQLite log's table also has
    column ``digest2``, its records' ``raw2`` digests (:func:`log_digest`), with or without
    ``digests``. ``view``: the staged rows stay (the load's output is a view of them);
    without digests ``{table}_raw`` is then a temporary view of their record numbers rather
    than a copy."""
    for kind in ("VIEW", "TABLE"):  # (an earlier load's, of either kind)
        with contextlib.suppress(duckdb.Error):
            _run(con, f"DROP {kind} IF EXISTS {_raw_table(table)}")
    if staged.digests:  # digested as the source was read (a SQLite log)
        _run(
            con,
            f"CREATE OR REPLACE TABLE {_raw_table(table)} AS SELECT record::BIGINT AS record, "
            f"digest, digest2 FROM {staged.digests} SEMI JOIN {staged.table} USING (record)",
        )
        return
    if not digests:  # (in no order: a reader that needs one sorts, see last_consumed)
        _run(
            con,
            f"CREATE {'TEMP VIEW' if view else 'TABLE'} {_raw_table(table)} AS "
            f"SELECT record::BIGINT AS record, NULL::UBIGINT AS digest FROM {staged.table}",
        )
        return
    _run(
        con,
        f"CREATE OR REPLACE TABLE {_raw_table(table)} AS "
        f"SELECT record::BIGINT AS record, {record_digest('record', 'raw')} AS digest "
        f"FROM ({staged.raw_sql}) SEMI JOIN {staged.table} USING (record)",
    )


def raw_digest(con: duckdb.DuckDBPyConnection, table: str, records: int) -> str:
    """A digest of the first ``records`` source records as read by the last :func:`load` into
    ``table`` (valid, quarantined and tombstones alike).

    It changes when one of those records is rewritten, removed or reordered, and never because
    of records appended after them, nor of what validation decides: compare it with the digest
    of an earlier load to refuse rewritten history.
    """
    return _digest_sum(con, table, records, "digest")


def log_digest(con: duckdb.DuckDBPyConnection, table: str, records: int) -> str:
    """:func:`raw_digest` in the ``raw2`` format, for a SQLite log only: the sum of
    :func:`~dpcr.changelog._sql.log_record_digest` over the first ``records`` records (the
    same guarantees, in about half the time; computed by every load of a SQLite log)."""
    return _digest_sum(con, table, records, "digest2")


def _digest_sum(con: duckdb.DuckDBPyConnection, table: str, records: int, column: str) -> str:
    check_identifier(table, key="table")
    if isinstance(records, bool) or not isinstance(records, int) or records < 0:
        raise ConfigError(f"records must be an integer >= 0, got {records!r}")
    try:
        row = _fetch(
            con,
            f"SELECT count(*), CASE WHEN count({column}) = count(*) THEN "
            f"coalesce(sum({column}), 0) END FROM (SELECT {column} FROM "
            f"{_raw_table(table)} ORDER BY record LIMIT ?)",
            [records],
        )[0]
    except duckdb.CatalogException as exc:
        raise ConfigError(
            f"no table {table}_raw in this connection; load the changelog into table {table!r} "
            "with dpcr.changelog.load first"
        ) from exc
    except duckdb.BinderException as exc:  # no column digest2: not a SQLite log
        raise ConfigError(
            f"table {table!r} was not loaded from a SQLite log, whose records alone have raw2 "
            "digests"
        ) from exc
    if row[0] and row[1] is None:
        raise ConfigError(
            f"table {table!r} was loaded with raw_digests=False; load it again with "
            "raw_digests=True to digest its records"
        )
    return f"{int(row[0])}:{int(row[1])}"


def consumed_record(con: duckdb.DuckDBPyConnection, table: str, records: int) -> int:
    """The record number of the last of the first ``records`` source records read by the last
    :func:`~dpcr.changelog.load` into ``table`` (0 for none). Record numbers count lines, or a
    log's sequence numbers, so they can exceed the count of records; a mutation is new exactly
    when its record number is above this one. Without a ``{table}_raw`` table (a changelog
    table not made by ``load``) record numbers are taken to be counts: ``records``."""
    check_identifier(table, key="table")
    try:
        return last_consumed(con, _raw_table(table), records)
    except duckdb.CatalogException:
        return records
