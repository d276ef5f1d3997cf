"""Load a source into the canonical changelog table, validating every record in DuckDB SQL.

Every mutation belongs to one privacy unit, read from the record alone: the entry itself; the
source's unit field; or, with a unit column, ``after[col]`` for an insert, ``before[col]`` for a
delete, and both for an update. An update whose ``before[col]`` and ``after[col]`` differ moves
the entry from one unit to another: it becomes two mutations with the same record, ts and seq,
a delete charged to the old unit followed by an insert charged to the new one. From there on the
history that is validated, bounded and aggregated is keyed by (unit, entry), so whether one
unit's mutation is valid never depends on another unit's records.

Validation runs in three phases; a record (or half of a split update) rejected by one phase takes
no part in the next:

1. **Per record** (no context needed), in this order: ``too_long``, ``bad_encoding``,
   ``bad_csv`` (a record set aside when the source was read, :mod:`dpcr.changelog._set_aside`),
   ``bad_json`` (the record is not a JSON object), ``unknown_op``, ``bad_json`` again for the
   rows (``after`` not an object for an insert/update; ``before`` given for an insert;
   ``before`` not an object for an update/delete; ``after`` given for a delete),
   ``missing_entry``, ``bad_timestamp``, ``bad_seq``,
   ``missing_unit`` (with a unit column also an update or delete without its ``before`` row,
   which cannot be attributed from the record alone). Debezium tombstones are set aside here
   (counted, not errors).
2. **Duplicates**: among the mutations that passed phase 1, one with the same unit, entry and
   sequence number as one with a lower record number is a ``duplicate`` (the first is kept).
3. **Liveness**, in (ts, seq, record) order per (unit, entry): an insert of a live entry is a
   ``double_insert``; an update or delete of an entry that is not live is an
   ``update_before_insert`` / ``delete_before_insert``.

The liveness rule of a sequential validator is: start not live; a valid insert makes the entry live,
a valid delete makes it not live, updates and invalid records change nothing. Phase 3 computes the
state before each mutation m in one window pass as

    live(m) = "the last insert or delete before m (valid or not) is an insert"  (false if none).

Proof: let x be that last insert/delete. If x is an insert, the entry is live after x -- either x
was valid (it made the entry live) or x was a double insert (the entry was live and stays live).
If x is a delete, the entry is not live after x by the symmetric argument. Updates between x and m
change nothing, so the state after x is the state before m. With no insert/delete before m the
entry was never live. So invalid inserts/deletes need not be removed before the window is computed;
``tests/changelog/test_properties.py`` checks this against a sequential validator.

Plain histories. Most histories are an insert, updates, and perhaps a delete, in that order;
those need no window. A (unit, entry)'s history is *plain* when it has exactly one insert, at
most one delete, every other mutation dated strictly after the insert and, if there is a delete,
every other mutation dated strictly before it. In (ts, seq, record) order the insert of a plain
history is then its first mutation and the delete its last, so the sequential rule accepts every
mutation: the insert finds the entry not live, and each update and the delete find it live. One
aggregation (no sort; :data:`~dpcr.changelog._liveness.NOT_PLAIN_SQL`) finds the histories
that are not plain, and only their mutations go through the window. The test is conservative
(a tie in ts with the insert or the delete makes a history not plain), so the verdicts are the
window's in every case. A history that continues from a live state
(:mod:`dpcr.changelog._increment`) is plain when it has no insert, at most one delete, and
every other mutation dated strictly before that delete.

Late records (``exclude_late``, ``frozen``) and their (unit, entry)'s later mutations are left out
before phase 3; see :mod:`dpcr.changelog._resume`.

Updates and deletes without a ``before`` row (some CDC sources omit it) get the ``after`` of the
(unit, entry)'s previous valid mutation, so every valid update/delete in the output has its
``before``; with a unit column such records are ``missing_unit`` instead (phase 1).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Literal

import duckdb

from dpcr._sql import ident
from dpcr.changelog._canonical import create_output, mark_unchecked, typed_name, unchecked_name
from dpcr.changelog._clean import Probe, clean_records, probe
from dpcr.changelog._liveness import (
    LAST_INSERT_OR_DELETE,
    LAST_INSERT_OR_DELETE_BY_ENTRY,
    LIVENESS_VERDICT,
    NOT_PLAIN_SQL,
)
from dpcr.changelog._messages import (
    BAD_SELECT,
    field_label,
    message,
    raw_of,
    row_dict,
    write_quarantine,
)
from dpcr.changelog._phase1 import (
    BAD_COLUMNS,
    bad_insert,
    create_p1,
    drop_any,
    drop_p1,
    parts_sql,
    phase1_sql,
)
from dpcr.changelog._progress import Report, Steps
from dpcr.changelog._report import REASONS, LoadReport, OnError
from dpcr.changelog._resume import (
    FrozenPoint,
    _fetch,
    _run,
    check_frozen,
    check_late,
    create_raw,
    freeze,
)
from dpcr.changelog._sources import (
    ParquetSource,
    SourceConfig,
    check_load_options,
    describe,
)
from dpcr.changelog._stage import Staged, stage
from dpcr.changelog._stage_rows import _columns
from dpcr.changelog._stage_tabular import typed_parquet_sql, typed_times, typed_verdicts_sql
from dpcr.errors import ChangelogError, DpcrError


def load(
    source: SourceConfig,
    con: duckdb.DuckDBPyConnection,
    *,
    table: str = "changelog",
    on_error: OnError = "raise",
    quarantine_path: Path | None = None,
    unit_column: str | None = None,
    exclude_late: tuple[int, int] | None = None,
    frozen: Iterable[FrozenPoint] = (),
    raw_digests: bool = True,
    ordered: bool = True,
    before_rows: bool = True,
    materialize: bool = True,
    progress: Report | None = None,
    on_read: Callable[[], None] | None = None,
    scratch: Path | None = None,
    numbers: Iterable[str] = (),
    liveness: Literal["check", "defer"] = "check",
) -> LoadReport:
    """Read ``source``, validate it, and create (or replace) table ``table`` in ``con``.

    The table holds only the valid mutations, in (ts, seq, record) order, with columns
    ``record BIGINT, unit VARCHAR, entry VARCHAR, ts BIGINT, seq BIGINT, op VARCHAR,
    before JSON, after JSON`` (see ``docs/changelog.md``). ``unit`` is the value of
    ``unit_column`` in the record's rows (see the module docstring for updates that change it),
    or the source's unit field, or the entry id. Table ``{table}_raw`` keeps one digest per
    source record for :func:`raw_digest`.

    ``on_error="raise"`` raises :class:`~dpcr.errors.ChangelogError` for the invalid record with
    the lowest record number (the table is then left untouched); ``"quarantine"`` writes every
    invalid record to ``quarantine_path`` (JSON Lines, rewritten on every call) and counts it.

    ``exclude_late = (records_seen, t_last)`` (records consumed by earlier runs, end of the last
    released interval) and ``frozen`` (the ``frozen`` of the previous run's report) leave out late
    mutations and freeze their (unit, entry) for good; see :mod:`dpcr.changelog._resume`.

    ``raw_digests=False`` skips the per-record digests of ``{table}_raw`` (then
    :func:`raw_digest` refuses the table): for callers that check the source another way.
    ``ordered=False`` leaves the table's rows in no particular order (saves a sort).
    ``before_rows=False`` leaves column ``before`` NULL (saves converting and holding the rows
    before each change, for callers that read only ``after``).
    ``materialize=False`` (with ``before_rows=False`` and ``ordered=False``): when the source
    is cheap to read again (a Parquet file with typed times, nothing split, deduplicated or
    late), ``table`` is a temporary view that reads the file again with the verdicts of this
    load instead of a copy of it (saves holding the copy; every full read of the view costs
    about what phase 1 costs), and the temporary table ``{table}_ts`` (or a view of the file's
    time column: :class:`dpcr.changelog._clean.Probe`) holds the ``ts`` of its rows. The view
    reads helper objects of this load, which stay until the connection closes or they are
    dropped. Otherwise ``table`` is a table, as always, and there is no ``{table}_ts``.
    ``progress(done, total)`` is called as the load advances (thousandths of it).
    ``on_read()`` is called once the source has been read into ``con`` (before validation),
    from the calling thread: a source read by Python code (a SQLite log) no longer holds the
    interpreter, so other Python work runs beside the engine's from then on without slowing
    the read.
    ``scratch``: the folder (owner-only, the caller's) where a private copy of a text source
    is made when some of its records are set aside when read (too long, not UTF-8, a malformed
    CSV row: :mod:`dpcr.changelog._set_aside`); the copy holds raw records and is deleted once
    the source is read. None: the system's temporary folder (``$TMPDIR``); ``dpcr run`` gives
    its ``operator/scratch``.
    ``numbers``: the columns of the row after that the caller reads as numbers (a sum's
    column): a record whose row after, given as JSON text, holds a bare ``NaN`` or infinity
    token in one of them is ``bad_json`` (field after): the record is not JSON, though DuckDB's
    parser reads the token as that number.
    ``liveness="defer"`` (with ``materialize=False``): when every record of a Parquet file of
    typed rows passes phase 1, the liveness check (phase 3), and with an integer sequence
    column the duplicates' (phase 2), is left to the reader of the view,
    which holds every record as a valid mutation: :func:`dpcr.changelog.unchecked` then says
    so, and the reader checks that every history is plain (:func:`dpcr.changelog.plain_break`,
    in a sort of each history it makes anyway) or loads the source again with the check
    (the default, ``"check"``). The report counts every record valid. When phase 1's
    verdicts can be read from the typed columns (both rows STRUCTs), they are left to the
    reader too, unread: the typed view then holds every record with its verdict
    (:func:`dpcr.changelog.typed_rejects`), and a rejected record is a history the reader
    finds not plain.
    """
    quarantine_path = Path(quarantine_path) if quarantine_path is not None else None
    check_load_options(source, table, on_error, quarantine_path, unit_column)
    check_late(exclude_late)
    given = check_frozen(frozen)
    name = describe(source)
    prefix = f"_dpcr_{uuid.uuid4().hex[:12]}"
    staged: Staged | None = None
    temps: list[str] = []
    steps = Steps(con, progress, 5)
    keep: set[str] = set()  # objects a view of the output reads (not dropped)
    done: LoadReport | None = None
    ts_table = ident(f"{table}_ts")
    typed_table, typed = typed_name(table), None
    drop_any(con, f"temp.{unchecked_name(table)}", f"temp.{ts_table}")  # (an earlier load's)
    try:
        steps.next()  # 1. read the source
        # Without record digests a JSON-lines file's lines are read only where a record's
        # text is needed (the quarantined ones), within this load.
        staged = stage(source, con, prefix, unit_column, temps, digests=raw_digests,
                       lazy_raw=not raw_digests, scratch=scratch)  # fmt: skip
        staging = list(temps)  # what reading the source made
        if on_read is not None:
            on_read()
        steps.next()  # 2. per-record checks
        p1, parts, dups, good, fz, cx, live, bad, valid = (
            f"{prefix}_{n}"
            for n in ("p1", "parts", "dups", "good", "fz", "cx", "live", "bad", "valid")
        )
        temps += [valid, live, cx, fz, good, dups, parts, bad, p1]
        key_moves = "before_entry" in _columns(con, staged.table)
        # Without a unit field or column every mutation's unit is its entry.
        by_entry = unit_column is None and not staged.unit_field
        numbers = tuple(numbers)
        p1_sql = phase1_sql(staged, unit_column, key_moves=key_moves, numbers=numbers)
        found = None
        if (
            isinstance(source, ParquetSource) and staged.ts_typed and by_entry and not key_moves
            and exclude_late is None and not given and not (before_rows or materialize or ordered)
        ):  # fmt: skip
            # A clean file needs no per-record table (dpcr.changelog._clean).
            found = _probe_clean(con, source, staged, prefix, p1_sql, cx, numbers,
                                 defer=liveness == "defer")  # fmt: skip
            if found is not None and not found.not_plain:
                keep.update([*staging, bad])
                done = _clean_load(con, source, staged, found, table=table, bad=bad,
                                   unit_column=unit_column, numbers=numbers, on_error=on_error,
                                   quarantine_path=quarantine_path, raw_digests=raw_digests,
                                   name=name)  # fmt: skip
                if liveness == "defer":
                    mark_unchecked(con, table)
                return done
            typed = None
        # Only the columns the later phases read, and the texts as written of the rejected
        # records alone.
        create_p1(con, p1, p1_sql, temps, by_entry=by_entry and not key_moves)
        _run(con, f"CREATE TEMP TABLE {bad} ({BAD_COLUMNS})")
        steps.next()  # 3. duplicates and late records
        split, explicit, rejected = _fetch(
            con,
            f"SELECT count(*) FILTER (WHERE split), "
            f"count(*) FILTER (WHERE chk IS NULL AND seq <> record), "
            f"count(*) FILTER (WHERE chk IS NOT NULL) FROM {p1}",
        )[0]
        split = int(split)
        if rejected:
            _run(
                con,
                bad_insert(
                    bad,
                    f"SELECT *, 0 AS part, unit_value AS unit, NULL::BIGINT AS other FROM {p1} "
                    "WHERE chk IS NOT NULL",
                ),
            )
        # Phase 2: duplicates (same unit, entry and seq as a lower record number). Without
        # explicit sequence numbers (seq = record number) there can be none: the two halves of
        # a split update share a record but not a unit.
        if explicit:
            _run(con, f"CREATE TEMP TABLE {parts} AS {parts_sql(p1, split)}")
            drop_p1(con, p1)
            # Duplicated keys are found by hashing: one aggregation, no sort.
            _run(
                con,
                f"CREATE TEMP TABLE {dups} AS SELECT record, part, first FROM {parts} JOIN ("
                f"SELECT unit, entry, seq, min(record) AS first FROM {parts} "
                "GROUP BY unit, entry, seq HAVING count(*) > 1) USING (unit, entry, seq) "
                "WHERE record <> first",
            )
            _run(
                con,
                bad_insert(
                    bad,
                    f"SELECT p.*, 'duplicate:seq' AS chk, d.first AS other, op AS op_raw, "
                    "NULL AS ts_raw, NULL AS seq_raw, unit AS unit_value "
                    f"FROM {parts} p JOIN {dups} d USING (record, part)",
                ),
            )
            _run(
                con,
                f"CREATE TEMP TABLE {good} AS SELECT * FROM {parts} "
                f"ANTI JOIN {dups} USING (record, part)",
            )
            _run(con, f"DROP TABLE {parts}")
        elif exclude_late is not None or given:
            _run(con, f"CREATE TEMP TABLE {good} AS {parts_sql(p1, split)}")
            drop_p1(con, p1)
        else:  # nothing to remove from it: a view over the per-record table
            _run(con, f"CREATE TEMP VIEW {good} AS {parts_sql(p1, split)}")
        late, points = freeze(con, staged, good, fz, exclude_late, given)
        steps.next()  # 4. liveness
        # Phase 3: liveness before each mutation (see the module docstring for why this equals
        # the sequential rule), with the record of the insert/delete that decided it. Histories
        # that are plainly valid (module docstring, "Plain histories") need no window: one
        # aggregation finds the others, and only their rows are sorted.
        key = "entry" if by_entry else "unit, entry"
        if found is None:  # (else the probe found them: table cx)
            not_plain = NOT_PLAIN_SQL.format(key=key, rows=good, inserts=1)
            _run(con, f"CREATE TEMP TABLE {cx} AS {not_plain}")
        if by_entry:  # the unit is carried through the window's sort as the entry alone
            window = (
                f"SELECT record, part, entry AS unit, entry, ts, seq, op, has_before, prev FROM "
                f"(SELECT * EXCLUDE (unit), {LAST_INSERT_OR_DELETE_BY_ENTRY} AS prev "
                f"FROM {good} SEMI JOIN {cx} USING ({key}))"
            )
        else:
            window = (
                f"SELECT *, {LAST_INSERT_OR_DELETE} AS prev "
                f"FROM {good} SEMI JOIN {cx} USING ({key})"
            )
        columns = "record, part, unit, entry, ts, seq, op, has_before"
        if _fetch(con, f"SELECT count(*) FROM {cx}")[0][0]:
            _run(
                con,
                f"CREATE TEMP TABLE {live} AS SELECT * EXCLUDE (prev), {LIVENESS_VERDICT} "
                f"FROM ({window})",
            )
            _run(
                con,
                bad_insert(
                    bad,
                    f"SELECT *, op AS op_raw, NULL AS ts_raw, NULL AS seq_raw, "
                    f"unit AS unit_value FROM {live} WHERE chk IS NOT NULL",
                ),
            )
            valid_sql = (
                f"SELECT {columns} FROM {live} WHERE chk IS NULL UNION ALL "
                f"SELECT {columns} FROM {good} ANTI JOIN {cx} USING ({key})"
            )
        else:  # every history is plain: the valid mutations are the rows themselves
            valid_sql = f"SELECT {columns} FROM {good}"
        _run(con, f"CREATE TEMP VIEW {valid} AS {valid_sql}")

        steps.next()  # 5. the table and the quarantine file
        counts = dict(_fetch(con, f"SELECT reason, count(*) FROM {bad} GROUP BY reason"))
        tombstones = int(counts.pop("tombstone", 0))
        # Every mutation is accounted for exactly once (a guard against bugs, not bad data).
        total = int(_fetch(con, f"SELECT count(*) FROM {staged.table}")[0][0])
        valid_count = int(_fetch(con, f"SELECT count(*) FROM {valid}")[0][0])
        accounted = valid_count + sum(counts.values()) + tombstones + late
        if set(counts) - set(REASONS) or total + split != accounted:
            raise DpcrError(
                f"{name}: internal error: {total} records ({split} split in two) but "
                f"{valid_count} valid, {counts} invalid, {tombstones} tombstones and {late} "
                "late; please report this with the input"
            )
        if on_error == "raise" and counts:
            first_bad = _fetch(
                con,
                f"{BAD_SELECT.format(bad=bad, rows=staged.table)} "
                "WHERE b.reason <> 'tombstone' ORDER BY b.record, b.part LIMIT 1",
            )
            row = row_dict(first_bad[0])
            if row["fkey"] == "record":
                row["value"] = raw_of(con, staged, int(row["record"]), str(row["reason"]))
            raise ChangelogError(
                f"{name}: record {row['record']}: {message(row, staged, source, unit_column)}",
                record=int(row["record"]),
                field=field_label(row["fkey"], staged, unit_column),
                reason=str(row["reason"]),
            )

        joined = None
        if (
            isinstance(source, ParquetSource) and staged.ts_typed
            and not (split or explicit or late or given) and exclude_late is None
        ):  # fmt: skip
            # Every valid mutation is a whole record (its record number is unique in the file)
            # that passed phase 1 and is not in the bad table: the rows are read once more
            # with phase 1's verdicts instead of joined with the valid mutations. (Typed times
            # only: text times would be parsed again.)
            carried = phase1_sql(staged, unit_column, key_moves=key_moves, numbers=numbers,
                                  carry=", before, after" if before_rows else ", after")
            others = f"ANTI JOIN {bad} USING (record)" if valid_count < total else ""
            joined = (
                "(SELECT record, 0 AS part, unit_value AS unit, entry, ts, seq, op, has_before, "
                f"{'before' if before_rows else 'NULL::JSON AS before'}, after "
                f"FROM ({carried}) {others} WHERE chk IS NULL)"
            )
            if not before_rows:  # nothing reads phase 1's tables again: free them first
                if not (materialize or ordered):
                    _run(con, f"CREATE OR REPLACE TEMP TABLE {ts_table} AS SELECT ts FROM "
                         f"{p1} {others} WHERE chk IS NULL")  # fmt: skip
                    keep.update([*staging, bad])
                    typed = typed_parquet_sql(con, source, f"{prefix}_src", numbers,
                                              by_entry=by_entry and not key_moves)  # fmt: skip
                    if typed is not None:
                        _run(con, f"CREATE OR REPLACE TEMP VIEW {typed_table} AS "
                             f"SELECT * FROM ({typed}) {others}")  # fmt: skip
                for t in (valid, good, live, cx):
                    drop_any(con, t)
                drop_p1(con, p1)
        if not keep:  # (the temporary table and view of an earlier load's view)
            drop_any(con, f"temp.{ts_table}")
        if not keep or typed is None:
            drop_any(con, f"temp.{typed_table}")
        create_output(con, table, valid, staged.table, ordered=ordered, joined=joined,
                      before_rows=before_rows, view=bool(keep))  # fmt: skip
        create_raw(con, table, staged, digests=raw_digests, view=bool(keep))
        quarantined = {r: int(counts[r]) for r in REASONS if r in counts}
        if on_error == "quarantine" and quarantine_path is not None:
            write_quarantine(con, staged, bad, quarantine_path, source, unit_column)
        done = LoadReport(
            source=name,
            records=total,
            valid=valid_count,
            quarantined=quarantined,
            quarantine_path=quarantine_path if on_error == "quarantine" else None,
            tombstones=tombstones,
            split=split,
            late=late,
            frozen=points,
        )
        return done
    finally:
        steps.close()
        if done is None:  # a failed load leaves nothing behind, its view's helpers included
            keep.clear()
            drop_any(con, f"temp.{typed_table}")
        for t in temps:
            if t not in keep:
                drop_any(con, t)


def _probe_clean(
    con: duckdb.DuckDBPyConnection, source: ParquetSource, staged: Staged, prefix: str,
    p1_sql: str, cx: str, numbers: tuple[str, ...], *, defer: bool,
) -> Probe | None:  # fmt: skip
    """What :func:`dpcr.changelog._clean.probe` finds of a Parquet file of typed rows (None:
    not clean, or not of that kind). ``defer`` (``liveness="defer"``): the liveness check is
    the reader's, and so, with an integer sequence column, phase 2; phase 1's verdicts too
    when they can be read from the typed columns: the typed rows then hold every record, with
    its verdict in column ``rejected`` (:func:`dpcr.changelog.typed_rejects`), and the file
    is not read here; otherwise they are counted first."""
    src = f"{prefix}_src"
    if defer:
        checked = typed_parquet_sql(con, source, src, numbers, by_entry=True, seq=True,
                                    verdicts=staged)  # fmt: skip
        if checked is not None:
            count = int(_fetch(con, f"SELECT count(*) FROM {src}")[0][0])
            return Probe(records=count, typed=checked, not_plain=0,
                         times=typed_times(con, source, src))  # fmt: skip
    typed = typed_parquet_sql(con, source, src, numbers, by_entry=True, seq=defer)
    # (phase 1's verdicts counted on the typed columns when they can be)
    verdicts = typed_verdicts_sql(con, source, src, staged, seq=defer)
    if not defer:
        found = probe(con, p1_sql, typed, cx, verdicts)
        return found and replace(found, times=typed_times(con, source, src))
    records = clean_records(con, p1_sql, typed, verdicts, explicit=True)
    return None if records is None or typed is None else Probe(records, typed, 0)


def _clean_load(
    con: duckdb.DuckDBPyConnection, source: ParquetSource, staged: Staged, found: Probe, *,
    table: str, bad: str, unit_column: str | None, numbers: tuple[str, ...], on_error: OnError,
    quarantine_path: Path | None, raw_digests: bool, name: str,
) -> LoadReport:  # fmt: skip
    """The output of a clean file (:mod:`dpcr.changelog._clean`): every record is a valid
    mutation, so ``table`` is the view of the file's rows with phase 1's verdicts, ``{table}_ts``
    their times and the typed view its typed rows, as :func:`load` makes them for a file read
    again (``materialize=False``); nothing is quarantined."""
    _run(con, f"CREATE TEMP TABLE {bad} ({BAD_COLUMNS})")
    kind, times = found.relation
    _run(con, f"CREATE OR REPLACE TEMP {kind} {ident(f'{table}_ts')} AS {times}")
    _run(con, f"CREATE OR REPLACE TEMP VIEW {typed_name(table)} AS SELECT * FROM ({found.typed})")
    carried = phase1_sql(staged, unit_column, key_moves=False, numbers=numbers, carry=", after")
    joined = (
        "(SELECT record, 0 AS part, unit_value AS unit, entry, ts, seq, op, has_before, "
        f"NULL::JSON AS before, after FROM ({carried}) WHERE chk IS NULL)"
    )
    create_output(con, table, bad, staged.table, ordered=False, joined=joined,
                  before_rows=False, view=True)  # fmt: skip
    create_raw(con, table, staged, digests=raw_digests, view=True)
    if on_error == "quarantine" and quarantine_path is not None:
        write_quarantine(con, staged, bad, quarantine_path, source, unit_column)
    return LoadReport(
        source=name, records=found.records, valid=found.records, quarantined={},
        quarantine_path=quarantine_path if on_error == "quarantine" else None, tombstones=0,
        split=0, late=0, frozen=(),
    )  # fmt: skip
