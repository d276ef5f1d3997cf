"""A clean Parquet file read in two aggregations instead of the three phases' tables.

When every record of a typed Parquet file passes phase 1 (no record rejected, none split, no
sequence number but the record's own) and every history is plain (:mod:`dpcr.changelog._load`,
"Plain histories"), phases 2 and 3 find nothing: there can be no duplicate without explicit
sequence numbers, and a plain history's mutations are all valid. Then the valid mutations are
the file's records themselves, and the load needs neither the per-record table of phase 1 nor
its liveness check over that table: one aggregation over phase 1's verdicts (counted, not kept)
and one over the file's typed rows decide it. The test is exact. When phase 1 rejects nothing
but some histories are not plain, the histories found (by the typed rows, with the entry as
phase 1 writes it) are the liveness check's, and the load goes on through the phases from
there; when phase 1 rejects something, the load goes through the three phases as always.

A caller that checks the histories itself, in the sort its own work makes of each entry's
history anyway, asks for phase 1's verdicts alone (:func:`clean_records`) and leaves the
liveness check to that sort (:func:`dpcr.changelog.load`, ``liveness="defer"``); where the
verdicts can be read from the typed columns, it leaves them to the same pass too, unread here
(the typed rows' column ``rejected``: :func:`dpcr.changelog.typed_rejects`). A file with
an integer sequence column is then clean too: the sort checks that the numbers rise along
every history, so that none repeats and phase 2 finds nothing
(:func:`dpcr.changelog.plain_break`, ``seq``).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from dpcr.changelog._liveness import NOT_PLAIN_SQL

__all__ = ["Probe", "clean_records", "probe"]


@dataclass(frozen=True, slots=True)
class Probe:
    """What :func:`probe` found: the file's ``records``, the SELECT of its typed rows
    (``typed``) and how many of its histories are not plain (their entries: table ``cx``).
    ``times``: a SELECT of the file's time column as ``ts`` where that column is every valid
    record's time itself (see :attr:`relation`)."""

    records: int
    typed: str
    not_plain: int
    times: str | None = None

    @property
    def relation(self) -> tuple[str, str]:
        """``VIEW`` or ``TABLE`` and the SELECT of the records' times (``ts``): a view of the
        time column, whose least and greatest values DuckDB reads from the file's statistics
        and whose rows after a time it finds by them, or else a table of the typed rows'."""
        if self.times is not None:
            return "VIEW", self.times
        return "TABLE", f"SELECT ts FROM ({self.typed})"


def clean_records(
    con: duckdb.DuckDBPyConnection, p1_sql: str, typed: str | None, verdicts: str | None = None,
    *, explicit: bool = False,
) -> int | None:
    """The number of records when phase 1's verdicts (``p1_sql``) reject, split and renumber
    none and there are ``typed`` rows (see :func:`probe`); None otherwise. ``verdicts``: the
    same verdicts counted on the typed columns, (records, rejected[, renumbered]) of a file
    whose records phase 1 never splits
    (:func:`dpcr.changelog._stage_tabular.typed_verdicts_sql`), read instead. ``explicit``:
    records with a sequence number of their own are clean too (phase 2, which compares them,
    is then left to the reader, with phase 3: :func:`dpcr.changelog.plain_break`, ``seq``)."""
    if typed is None:
        return None
    if verdicts is not None:
        counted = con.execute(verdicts).fetchone()
        assert counted is not None
        renumbered = counted[2] if len(counted) > 2 else 0
        return None if counted[1] or (renumbered and not explicit) else int(counted[0])
    row = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE chk IS NOT NULL), count(*) FILTER (WHERE split),"
        f" count(*) FILTER (WHERE chk IS NULL AND seq <> record) FROM ({p1_sql})"
    ).fetchone()
    assert row is not None
    records, rejected, split, renumbered = (int(v) for v in row)
    return None if rejected or split or (renumbered and not explicit) else records


def probe(
    con: duckdb.DuckDBPyConnection,
    p1_sql: str,
    typed: str | None,
    cx: str,
    verdicts: str | None = None,
) -> Probe | None:
    """None when phase 1's verdicts (``p1_sql``, or ``verdicts``: see :func:`clean_records`)
    reject, split or renumber a record (or there are no ``typed`` rows: see
    :func:`dpcr.changelog._stage_tabular.typed_parquet_sql`, whose entry is the unit).
    Otherwise table ``cx`` (column ``entry``, as phase 1 writes it) holds the entries whose
    history is not plain, as the liveness check would find them."""
    records = clean_records(con, p1_sql, typed, verdicts)
    if records is None or typed is None:
        return None
    not_plain = NOT_PLAIN_SQL.format(key="entry", rows=f"({typed})", inserts=1)
    con.execute(f"CREATE TEMP TABLE {cx} AS SELECT entry::VARCHAR AS entry FROM ({not_plain})")
    found = con.execute(f"SELECT count(*) FROM {cx}").fetchone()
    assert found is not None
    return Probe(records=records, typed=typed, not_plain=int(found[0]))
