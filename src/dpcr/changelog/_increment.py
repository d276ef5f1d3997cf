"""Loading only what is new: the records appended after those earlier runs consumed.

A run that resumes a release has a *settled* prefix of every (unit, entry)'s history: its valid
mutations dated at or before ``t_last`` (the end of the last released interval). New records
dated there are late (:mod:`dpcr.changelog._resume`) and cannot change it, so whatever the
three validation phases of :func:`dpcr.changelog.load` decide about the settled rows is final.
Earlier runs keep, in a state schema (see :mod:`dpcr.engines.incremental`):

* ``pending``: the mutations that passed phases 1 and 2 and are dated after ``t_last``, with
  their raw records (their liveness is decided again with every run, as later records can
  precede them);
* the seeds, read by :attr:`Prior.lookup`: per (unit, entry), the last insert or delete among
  its settled mutations, valid or not, which is all phase 3 needs of the settled rows (see the
  liveness proof in :mod:`dpcr.changelog._load`);
* ``keys``: the (unit, entry, seq) of every mutation that passed phase 1, when sequence numbers
  are explicit (phase 2 compares a new mutation with all earlier ones).

:func:`load_increment` runs phase 1 on the new records only, phase 2 against ``keys``, the
freeze of late records, and phase 3 over ``pending`` and the new mutations with those
seeds, so each mutation gets exactly the verdict a load of the whole source gives it. A first
load of a JSON-lines file parses it once, straight into phase 1's table
(:mod:`dpcr.changelog._once`).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import duckdb

from dpcr._duck import afterwards
from dpcr.changelog._liveness import LAST_INSERT_OR_DELETE, LIVENESS_VERDICT, NOT_PLAIN_SQL
from dpcr.changelog._messages import bad_rows, message, quarantine_line, raw_of
from dpcr.changelog._once import Restage, create_once
from dpcr.changelog._phase1 import (
    BAD_COLUMNS,
    bad_insert,
    create_p1,
    drop_any,
    number_columns,
    parts_sql,
    phase1_sql,
)
from dpcr.changelog._raw_lines import LazyLines, ensure_raw
from dpcr.changelog._report import REASONS, OnError
from dpcr.changelog._resume import FrozenPoint, _fetch, _run, freeze_points, last_consumed
from dpcr.changelog._sources import JsonlSource, SourceConfig, describe
from dpcr.changelog._stage import free_rows, stage
from dpcr.changelog._stage_rows import Staged, _columns
from dpcr.errors import ChangelogError, DpcrError

__all__ = ["Increment", "NeedsFullRead", "Prior", "load_increment"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Prior:
    """What earlier runs leave for the next: the state ``schema`` (tables ``pending`` and, with
    ``explicit`` sequence numbers, ``keys``; the seeds through ``lookup``), the number of the
    last record they consumed (new records are numbered after it), the end ``t_last`` of the
    last released interval and the freeze points."""

    schema: str
    last_record: int
    t_last: int | None
    frozen: tuple[FrozenPoint, ...] = ()
    explicit: bool = False
    #: Records consumed among those read (a load of the whole source with a history): the
    #: last consumed record is the last of the first ``seen``; None: ``last_record``.
    seen: int | None = None
    #: The state holds nothing yet (a load of the whole source): no seeds to join.
    empty: bool = False
    #: ``lookup(con, rows, units)``: reads the state's seeds of the units of ``rows`` (a
    #: SELECT of the mutations, text unit and entry), whose table ``units`` holds each once,
    #: and returns a table of them with per (unit, entry) ``live`` and ``record``: the last
    #: insert or delete of its settled mutations (None: the state holds nothing, ``empty``).
    lookup: Callable[[duckdb.DuckDBPyConnection, str, str], str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Increment:
    """What :func:`load_increment` read. Tables (temporary, in the caller's connection):
    ``valid`` (a view: record, part, unit, entry, ts, seq, op, after: the valid mutations of
    ``pending`` and of the new records), ``good`` (the mutations that passed phases 1 and 2 and
    are not frozen, with ``chk``: their liveness verdict, and ``pend``: a pending one; after a
    first load also ``after``, and a view when every history is plain), ``rows``
    (record and ``after`` of the new records: their staged rows, or, when a first load freed
    those, a view of ``good``) and ``bad`` (every rejected
    mutation, with ``line``: its quarantine line, and ``final``: a verdict later records cannot
    change). Counts are of the new records (``records``, ``split``, ``tombstones``, ``late``,
    ``explicit``: some carry a sequence number of their own) and of every rejected mutation
    of this load (``quarantined``)."""

    valid: str
    good: str
    bad: str
    records: int
    split: int
    tombstones: int
    late: int
    quarantined: dict[str, int]
    frozen: tuple[FrozenPoint, ...]
    explicit: bool
    lines: int
    raw_sql: str
    rows: str
    keys: str | None = None
    #: Lines fetched on demand from ``tail``: call ``ensure_raw(con, lazy, records)`` before
    #: reading ``raw_sql`` (:mod:`dpcr.changelog._raw_lines`), and before ``tail`` is deleted.
    lazy: LazyLines | None = None
    #: ``good`` holds only new rows and every history in it is plain (see
    #: :mod:`dpcr.changelog._liveness`): each has one insert and at most one delete, after it.
    plain: bool = False
    #: Columns of ``valid`` that hold, per column of the row after read as a number, its value
    #: as a finite DOUBLE (NULL: missing, not a number, NaN or infinite), parsed once by phase
    #: 1 (a first load's): from a column of the row after to the name of its DOUBLE column.
    numbers: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The liveness check (phase 3) was left to the reader (``liveness="defer"``): ``good``
    #: holds every mutation that passed phases 1 and 2 as valid, which is right only when
    #: every history is plain (``plain`` is then set): the reader checks that in its own
    #: sort of each history, or loads the source again with the check (see
    #: :func:`dpcr.changelog.unchecked`). With ``explicit`` sequence numbers phase 2 is left
    #: to it too: every mutation that passed phase 1 is in ``good``, which is right only when
    #: the sequence numbers rise along every history (none repeats), which it checks as well.
    unchecked: bool = False
    #: Table (unit): every unit of ``good``, once, when the state has seeds to look up (None:
    #: an empty state's load). The lookups of the units' seeds semi-join it.
    units: str | None = None


def _offset(con: duckdb.DuckDBPyConnection, staged: Staged, prefix: str, offset: int,
            temps: list[str]) -> Staged:  # fmt: skip
    """The staged rows renumbered after the ``offset`` records earlier runs consumed (a view:
    no copy of the rows)."""
    if offset == 0:  # the whole source: its own numbers
        return staged
    if staged.lazy is not None:  # (its lines are fetched by their numbers in the tail)
        staged.lazy.offset = int(offset)
    table = f"{prefix}_rows_n"
    temps.append(table)
    _run(
        con,
        f"CREATE TEMP VIEW {table} AS SELECT * REPLACE (record + {int(offset)} AS record) "
        f"FROM {staged.table}",
    )
    raw = f"SELECT record + {int(offset)} AS record, raw FROM ({staged.raw_sql})"
    count = None if staged.line_count is None else staged.line_count + int(offset)
    return dataclasses.replace(staged, table=table, raw_sql=raw, line_count=count)


def load_increment(
    tail: SourceConfig,
    con: duckdb.DuckDBPyConnection,
    prior: Prior,
    *,
    record_offset: int,
    on_error: OnError,
    unit_column: str | None,
    full_source: SourceConfig,
    temps: list[str],
    scratch: Path | None = None,
    numbers: tuple[str, ...] = (),
    liveness: Literal["check", "defer"] = "check",
) -> Increment:
    """Validate the records of ``tail`` (the new records of ``full_source``; their numbers are
    offset by ``record_offset``) against what ``prior`` keeps; see the module docstring.
    Temporary tables are appended to ``temps`` for the caller to drop. ``on_error="raise"``
    raises for the rejected mutation with the lowest record number. ``scratch`` and
    ``numbers``: as for :func:`~dpcr.changelog.load`. ``liveness="defer"``: on a first load
    (``prior.empty``, nothing late or frozen) the liveness check is left to the reader of
    ``valid`` (``Increment.unchecked``); otherwise it is made here (``"check"``)."""
    prefix = f"_dpcr_{uuid.uuid4().hex[:12]}"
    s = prior.schema
    # The whole source, read in place (a first load's parse of it may be its phase 1).
    in_place = record_offset == 0 and Path(tail.path) == Path(full_source.path)
    p1, parts, bad, good, fz = (f"{prefix}_{n}" for n in ("p1", "parts", "bad", "good", "fz"))
    valid = f"{prefix}_valid"
    # A first load reads the staged rows once: phase 1 carries on what later steps read. A
    # JSON-lines file whose every unit is its entry is parsed by that one read, straight into
    # phase 1's table (dpcr.changelog._once).
    once = prior.empty and in_place and unit_column is None \
        and isinstance(tail, JsonlSource) and tail.unit is None  # fmt: skip

    def read(once: bool, refused: bool) -> tuple[Staged, dict[str, str]]:
        staged = stage(tail, con, prefix, unit_column, temps, lazy_raw=True, scratch=scratch,
                       rows_view=prior.empty, unnumbered=once, refused=refused)  # fmt: skip
        staged = _offset(con, staged, prefix, record_offset, temps)
        key_moves = "before_entry" in _columns(con, staged.table)
        # (integer keys: no freeze point or late record compares a key with a text key)
        typed = _create_p1(con, staged, p1, unit_column, temps, key_moves=key_moves,
                           numbers=numbers, empty=prior.empty,
                           typed_keys=prior.t_last is None and not prior.frozen)  # fmt: skip
        return staged, typed

    staged, typed = _read_once(con, read, once, p1, temps)
    _run(con, f"CREATE TEMP TABLE {bad} ({BAD_COLUMNS})")
    # (keys as text: a first load's may be integers, _once)
    _run(con, bad_insert(bad, f"SELECT * REPLACE ({_TEXT_KEYS}, unit_value::VARCHAR AS "
                              "unit_value), 0 AS part, unit_value::VARCHAR AS unit, NULL::BIGINT "
                              f"AS other FROM {p1} WHERE chk IS NOT NULL"))  # fmt: skip
    records, split, explicit = _fetch(
        con,
        f"SELECT count(*), count(*) FILTER (WHERE split), "
        f"count(*) FILTER (WHERE chk IS NULL AND seq <> record) > 0 FROM {p1}",
    )[0]
    lines = staged.line_count if staged.line_count is not None else int(_fetch(
        con, f"SELECT coalesce(max(record), {int(record_offset)}) FROM ({staged.raw_sql})",
    )[0][0])  # fmt: skip
    last = prior.last_record
    if prior.seen is not None:  # (p1 has a row per staged record, numbered)
        last = last_consumed(con, p1 if staged.unnumbered else staged.table, prior.seen)
    narrowed = bool(staged.view_of)
    if narrowed:
        _narrow_rows(con, staged, bad, f"{prefix}_rows_bad", temps)
    _run(
        con,
        f"CREATE TEMP VIEW {parts} AS "
        f"{parts_sql(p1, split, after=prior.empty, numbers=tuple(typed.values()))}",
    )
    if explicit and not prior.explicit and prior.last_record > 0:
        raise NeedsFullRead("sequence numbers became explicit")
    # A first load with nothing to freeze may leave phase 2 to the reader too: its sort of
    # each history finds that the sequence numbers rise along it, so that none repeats
    # (dpcr.changelog.unchecked), or the source is loaded again with every check.
    unseen = liveness == "defer" and prior.empty and not prior.frozen and prior.t_last is None
    keys = _phase2(con, parts, bad, s, f"{prefix}_keys", temps, check=not unseen) \
        if explicit or prior.explicit else None  # fmt: skip
    kept, late, frozen = _kept(con, parts, bad, fz, prefix, temps, prior, keys=keys, last=last)
    # Phase 3 over pending and new mutations, each (unit, entry) continuing from its seed
    # (or, deferred, in the reader's sort: a first load, nothing left out).
    defer = liveness == "defer" and prior.empty and kept == parts and not prior.frozen
    if keys is not None and unseen and not defer:  # (cannot be: nothing is late)
        raise DpcrError("internal error: a deferred check of sequence numbers left rows out")
    touched = None if prior.empty else f"{prefix}_units"
    if touched:
        temps.append(touched)
    plain = _good_table(con, kept, good, prior, defer=defer, touched=touched,
                        carry="".join(f", {n}" for n in typed.values()))  # fmt: skip
    not_live = f"SELECT * REPLACE (unit::VARCHAR AS unit, {_TEXT_KEYS}), op AS op_raw, " \
        f"NULL AS ts_raw, NULL AS seq_raw, unit::VARCHAR AS unit_value " \
        f"FROM {good} WHERE chk IS NOT NULL"  # fmt: skip
    _run(con, bad_insert(bad, not_live))
    _valid_view(con, valid, good, staged.table, f"{s}.pending", carried=typed, empty=prior.empty)
    counts = dict(_fetch(con, f"SELECT reason, count(*) FROM {bad} GROUP BY reason"))
    tombstones = int(counts.pop("tombstone", 0))
    if set(counts) - set(REASONS):
        raise DpcrError(f"internal error: unknown reasons {set(counts) - set(REASONS)}")
    if on_error == "raise" and counts:
        _raise_first(con, staged, bad, s, full_source, unit_column)
    _lines(con, staged, bad, s, full_source, unit_column, rejected=bool(counts))
    # (a first load, every unit its entry: good has every valid record's after)
    rows = _after_of(con, good, f"{prefix}_after", temps) if narrowed else staged.table
    return Increment(
        valid=valid, good=good, bad=bad, records=int(records), split=int(split),
        tombstones=tombstones, late=late,
        quarantined={r: int(counts[r]) for r in REASONS if r in counts},
        frozen=frozen, explicit=bool(explicit) or prior.explicit, lines=lines,
        raw_sql=staged.raw_sql, rows=rows, keys=keys, lazy=staged.lazy, plain=plain,
        numbers=typed, unchecked=defer, units=touched,
    )  # fmt: skip


def _phase2(con: duckdb.DuckDBPyConnection, parts: str, bad: str, s: str, keys: str,
            temps: list[str], *, check: bool = True) -> str:  # fmt: skip
    """View ``keys``: the (unit, entry, seq, record) of the new mutations (``parts``, which
    it reads again rather than copies), keys as text; phase 2 puts into ``bad`` every one
    whose (unit, entry, seq) an earlier mutation has, among the new ones or those the state
    schema ``s`` keeps. ``check=False``: the view alone (the reader checks, see
    :func:`load_increment`)."""
    temps.append(keys)
    _run(con, f"CREATE TEMP VIEW {keys} AS SELECT unit::VARCHAR AS unit, {_TEXT_KEYS}, seq, "
              f"record FROM {parts}")  # fmt: skip
    if not check:
        return keys
    _run(
        con,
        bad_insert(
            bad,
            f"""SELECT p.*, 'duplicate:seq' AS chk, d.first AS other, op AS op_raw,
                NULL AS ts_raw, NULL AS seq_raw, unit AS unit_value FROM {parts} p JOIN (
                SELECT unit, entry, seq, min(record) AS first FROM (
                    SELECT unit, entry, seq, record FROM {parts}
                    UNION ALL SELECT unit, entry, seq, record FROM {s}.keys)
                GROUP BY unit, entry, seq HAVING count(*) > 1) d USING (unit, entry, seq)
                WHERE p.record <> d.first""",
        ),
    )
    return keys


def _kept(con: duckdb.DuckDBPyConnection, parts: str, bad: str, fz: str, prefix: str,
          temps: list[str], prior: Prior, *, keys: str | None,
          last: int) -> tuple[str, int, tuple[FrozenPoint, ...]]:  # fmt: skip
    """The mutations of ``parts`` that take part in phase 3 (a view, or ``parts`` itself):
    neither duplicates (in ``bad``) nor frozen; and the late ones and the freeze points
    (:func:`~dpcr.changelog._resume.freeze_points`, into ``fz``; ``last``: the last consumed
    record). The views leave rows out by hash anti joins with the few rows to leave out (a
    correlated ``NOT EXISTS`` would hold a copy of every row, with its after, while it runs)."""
    nodup = parts
    duplicates = keys is not None and _fetch(
        con, f"SELECT count(*) FROM {bad} WHERE reason = 'duplicate'"
    )[0][0]
    if duplicates:
        nodup = f"{prefix}_nodup"
        temps.append(nodup)
        _run(con, f"CREATE TEMP VIEW {nodup} AS SELECT * FROM {parts} ANTI JOIN (SELECT record, "
                  f"part FROM {bad} WHERE reason = 'duplicate') USING (record, part)")  # fmt: skip
    # Late mutations freeze their (unit, entry) from their record on; earlier points apply
    # to the new records too (pending rows precede every point: they were consumed before).
    late, frozen = freeze_points(con, nodup, fz, boundary=last, t_last=prior.t_last,
                                 given=list(prior.frozen))  # fmt: skip
    if not late:  # nothing frozen to leave out
        return nodup, late, frozen
    kept = f"{prefix}_kept"
    temps.append(kept)
    _run(
        con,
        f"""CREATE TEMP VIEW {kept} AS SELECT g.* FROM {nodup} g ANTI JOIN {fz} f
        ON f.unit = g.unit AND f.entry = g.entry AND g.record >= f.record""",
    )
    return kept, late, frozen


def _read_once(
    con: duckdb.DuckDBPyConnection,
    read: Callable[[bool, bool], tuple[Staged, dict[str, str]]],
    once: bool,
    p1: str,
    temps: list[str],
) -> tuple[Staged, dict[str, str]]:
    """``read(once, refused)``: the source staged and phase 1 in ``p1``, parsed once when
    ``once`` (:mod:`dpcr.changelog._once`); when that asks for the usual staging, what was
    made is dropped and the source read again so (``refused``: the JSON reader refused it)."""
    before = len(temps)
    try:
        return read(once, False)
    except Restage as again:  # (read the usual way: as often as a file does without it)
        if not once:
            raise
        for name in (p1, *temps[before:]):
            drop_any(con, name)
        del temps[before:]
        return read(False, again.refused)


#: The entry as text (a first load's keys may be integers: :mod:`dpcr.changelog._once`).
_TEXT_KEYS = "entry::VARCHAR AS entry"


def _create_p1(con: duckdb.DuckDBPyConnection, staged: Staged, p1: str, unit_column: str | None,
               temps: list[str], *, key_moves: bool, numbers: tuple[str, ...],
               empty: bool, typed_keys: bool = False) -> dict[str, str]:  # fmt: skip
    """Phase 1 into ``p1`` (:func:`~dpcr.changelog._phase1.create_p1`). A first load
    (``empty``: no pending rows) carries each row's after through the phases, so that the valid
    mutations need no join with the rows table, and the ``numbers`` parsed from it once:
    returns their columns (:func:`~dpcr.changelog._phase1.number_columns`; none otherwise).
    Rows staged unnumbered go through :func:`~dpcr.changelog._once.create_once` (which may
    raise :class:`~dpcr.changelog._once.Restage`; ``typed_keys``: as there)."""
    by_entry = unit_column is None and not staged.unit_field and not key_moves
    # Rows staged as a view are read by phase 1, then freed (_narrow_rows): a first load's
    # valid mutations carry their after, each its record's without split updates (every
    # unit the entry). Otherwise they are a table, as they were.
    if not by_entry:
        free_rows(con, staged, keep=True)
    carry = ", after" if empty else ""
    typed = number_columns(numbers) if empty else {}
    p1_sql = phase1_sql(staged, unit_column, key_moves=key_moves, carry=carry, numbers=numbers,
                        typed_numbers=bool(typed))  # fmt: skip
    nums = "".join(f", {n}" for n in typed.values())
    if not staged.unnumbered:
        create_p1(con, p1, p1_sql, temps, by_entry=by_entry, extra=carry + nums)
    else:  # (a first load of a JSON-lines file: dpcr.changelog._once)
        create_once(con, staged, p1, p1_sql, temps, extra=carry + nums, typed_keys=typed_keys)
    return typed


def _after_of(con: duckdb.DuckDBPyConnection, good: str, name: str, temps: list[str]) -> str:
    """View ``name``: (record, after) of the mutations of ``good``, which carries them."""
    temps.append(name)
    _run(con, f"CREATE TEMP VIEW {name} AS SELECT record, after FROM {good}")
    return name


def _narrow_rows(con: duckdb.DuckDBPyConnection, staged: Staged, bad: str, table: str,
                 temps: list[str]) -> None:  # fmt: skip
    """Free the staged rows (a view over the JSON reader's rows, read by phase 1) but for what
    the rejected records' lines read of them: the rows before and after of the records phase
    1 rejected for one of them (every other line shows a value of its own), copied into
    ``table``, which the staged rows then are."""
    of_rows = f"SELECT record FROM {bad} WHERE fkey IN ('before', 'after')"
    where = f"record IN ({of_rows})" if _fetch(con, f"SELECT count(*) FROM ({of_rows})")[0][0] \
        else "FALSE"  # fmt: skip
    temps.append(table)
    _run(con, f"CREATE TEMP TABLE {table} AS SELECT record, before, before_text, after, "
              f"after_text FROM {staged.table} WHERE {where}")  # fmt: skip
    free_rows(con, staged, keep=False)
    staged.table = table


def _valid_view(
    con: duckdb.DuckDBPyConnection,
    valid: str,
    good: str,
    rows: str,
    pending: str,
    *,
    carried: dict[str, str],
    empty: bool,
) -> None:
    """View ``valid``: the valid mutations of ``good`` with their after rows, from the new
    records' ``rows`` or the ``pending`` table (only the narrow columns were copied); after a
    first load (``empty``) every row of ``good`` carries its after, and the ``carried``
    number columns (and none is pending)."""
    if empty:
        values = "".join(f", CASE WHEN op = 'delete' THEN NULL ELSE {n} END AS {n}"
                         for n in carried.values())  # fmt: skip
        _run(con, f"CREATE TEMP VIEW {valid} AS SELECT record, part, unit, entry, ts, seq, op, "
                  f"CASE WHEN op = 'delete' THEN NULL ELSE after END AS after{values} "
                  f"FROM {good} WHERE chk IS NULL")  # fmt: skip
        return
    _run(
        con,
        f"""CREATE TEMP VIEW {valid} AS SELECT g.record, g.part, g.unit, g.entry, g.ts, g.seq,
            g.op, CASE WHEN g.op = 'delete' THEN NULL
                       ELSE CASE WHEN g.pend THEN p.after ELSE r.after END END AS after
        FROM {good} g
        LEFT JOIN (SELECT record, after FROM {rows}) r ON NOT g.pend AND r.record = g.record
        LEFT JOIN {pending} p ON g.pend AND p.record = g.record AND p.part = g.part
        WHERE g.chk IS NULL""",
    )


class NeedsFullRead(Exception):
    """The increment cannot be judged from the state alone: read the whole source."""


def _good_table(
    con: duckdb.DuckDBPyConnection,
    parts: str,
    good: str,
    prior: Prior,
    *,
    defer: bool = False,
    touched: str | None = None,
    carry: str = "",
) -> bool:
    """Phase 3 (liveness) over the pending mutations and the new ones (``parts``), each
    (unit, entry) continuing from the last insert or delete of its settled rows (of the state
    ``prior``; ``prior.empty``: there are none, nor pending mutations). ``pend`` marks the
    pending ones. ``carry``: more columns of ``parts`` the rows keep when empty
    (``", _num0"``). ``defer`` (when empty): no check; every row counts as valid
    (``Increment.unchecked``). ``touched`` (unless empty): the table of the rows' units to
    make, for :attr:`Prior.lookup`, which reads their seeds once."""
    s, empty, lookup = prior.schema, prior.empty, prior.lookup
    if empty:  # (the rows carry their after)
        seeds = f"SELECT record, part, unit, entry, ts, seq, op, has_before, FALSE AS pend, " \
            f"NULL::BOOLEAN AS s_live, NULL::BIGINT AS s_record, after{carry} " \
            f"FROM {parts}"  # fmt: skip
    else:
        rows = f"""
            SELECT record, part, unit, entry, ts, seq, op, has_before, FALSE AS pend
            FROM {parts}
            UNION ALL
            SELECT record, part, unit, entry, ts, seq, op, has_before, TRUE FROM {s}.pending
        """
        if touched is None or lookup is None:
            raise DpcrError("internal error: a lookup of seeds without its units' table")
        _run(con, f"CREATE TEMP TABLE {touched} AS SELECT DISTINCT unit FROM ({rows})")
        live = lookup(con, rows, touched)
        seeds = f"SELECT g.*, l.live AS s_live, l.record AS s_record FROM ({rows}) g " \
            f"LEFT JOIN {live} l USING (unit, entry)"  # fmt: skip
    drops = [f"DROP TABLE IF EXISTS {name}" for name in (f"{good}_cx", f"{good}_seeded")]
    with afterwards(con, *drops):
        return _verdicts(con, good, seeds, empty=empty, defer=defer and empty)


def _verdicts(
    con: duckdb.DuckDBPyConnection, good: str, seeds: str, *, empty: bool, defer: bool = False
) -> bool:
    """Table (or view) ``good``: the rows of ``seeds`` with their liveness verdicts. True when
    they are the new rows alone and every history is plain (or, ``defer``, is taken to be:
    the reader checks it)."""
    if not empty:  # read twice below: the join is made once
        _run(con, f"CREATE TEMP TABLE {good}_seeded AS {seeds}")
        seeds = f"SELECT * FROM {good}_seeded"
    # Plain histories (see dpcr.changelog._load) need no window; a live seed means no insert.
    inserts = "CASE WHEN bool_or(coalesce(s_live, FALSE)) THEN 0 ELSE 1 END"
    not_plain = NOT_PLAIN_SQL.format(key="unit, entry", rows=f"({seeds})", inserts=inserts)
    if not defer:
        _run(con, f"CREATE TEMP TABLE {good}_cx AS {not_plain}")
    if defer or not _fetch(con, f"SELECT count(*) FROM {good}_cx")[0][0]:
        # Every history is plain: a view of the rows (its readers scan them, which costs
        # less than a copy); of the new ones alone when the state is empty, else of the
        # table of the joined rows, kept under another name.
        if not empty:
            _run(con, f"ALTER TABLE {good}_seeded RENAME TO {good}_plain")
            seeds = f"SELECT * FROM {good}_plain"
        _run(con, f"CREATE TEMP VIEW {good} AS SELECT * EXCLUDE (s_live, s_record), "
                  f"NULL::VARCHAR AS chk, NULL::BIGINT AS other FROM ({seeds})")  # fmt: skip
        return empty
    _run(
        con,
        f"""
        CREATE TEMP TABLE {good} AS
        SELECT * EXCLUDE (s_live, s_record), NULL::VARCHAR AS chk, NULL::BIGINT AS other
        FROM ({seeds}) ANTI JOIN {good}_cx USING (unit, entry)
        UNION ALL
        SELECT * EXCLUDE (prev, s_live, s_record), {LIVENESS_VERDICT}
        FROM (
            SELECT *, coalesce({LAST_INSERT_OR_DELETE},
                CASE WHEN s_live IS NOT NULL THEN {{'live': s_live, 'record': s_record}} END)
                AS prev
            FROM ({seeds}) SEMI JOIN {good}_cx USING (unit, entry)
        )
        """,
    )
    return False


def _bad_rows(
    con: duckdb.DuckDBPyConnection, staged: Staged, bad: str, s: str
) -> Iterable[tuple[dict[str, object], str]]:
    """Every rejected mutation of ``bad`` in (record, part) order, with its raw record (from the
    new records, or from the pending rows it was kept with)."""
    ensure_raw(con, staged.lazy, f"SELECT record FROM {bad}")
    raws = f"SELECT record, raw::VARCHAR AS raw FROM ({staged.raw_sql}) UNION ALL " \
        f"SELECT DISTINCT record, raw FROM {s}.pending"  # fmt: skip
    return bad_rows(con, staged, bad, raws=raws)


def _raise_first(con: duckdb.DuckDBPyConnection, staged: Staged, bad: str, s: str,
                 source: SourceConfig, unit_column: str | None) -> None:  # fmt: skip
    from dpcr.changelog._messages import field_label

    for row, _raw in _bad_rows(con, staged, bad, s):
        if row["fkey"] == "record":
            row["value"] = raw_of(con, staged, int(str(row["record"])), str(row["reason"]))
        raise ChangelogError(
            f"{describe(source)}: record {row['record']}: "
            f"{message(row, staged, source, unit_column)}",
            record=int(str(row["record"])),
            field=field_label(str(row["fkey"]), staged, unit_column),
            reason=str(row["reason"]),
        )


def _lines(con: duckdb.DuckDBPyConnection, staged: Staged, bad: str, s: str,
           source: SourceConfig, unit_column: str | None, *,
           rejected: bool = True) -> None:  # fmt: skip
    """Table ``{bad}_lines`` (record, part, reason, ts, line): the quarantine line of every
    rejected mutation of this load (tombstones have none; ``rejected``: False when ``bad``
    holds tombstones only, and the raw records are not read)."""
    lines = [
        (row["record"], row["part"], row["reason"], row["ts"],
         quarantine_line(row, raw, staged, source, unit_column))
        for row, raw in (_bad_rows(con, staged, bad, s) if rejected else ())
    ]  # fmt: skip
    _run(con, f"CREATE OR REPLACE TEMP TABLE {bad}_lines (record BIGINT, part INTEGER, "
              "reason VARCHAR, ts BIGINT, line VARCHAR)")  # fmt: skip
    if lines:
        con.executemany(f"INSERT INTO {bad}_lines VALUES (?, ?, ?, ?, ?)", lines)
