"""A JSON-lines file parsed once, straight into phase 1's narrow table.

A first load of a JSON-lines file read in place, every unit its entry, stages the records as a
view over DuckDB's JSON reader, not numbered (``Staged.unnumbered``). Phase 1 reads that view
once, into a narrow table in record order: per record its entry (a BIGINT when its text is the
canonical text of one, else the text), time, the sequence number it gives, operation, whether
it gives a row before, its row after and the numbers a sum reads, and, for a rejected record
only, its verdict and the texts the messages quote (one column, NULL for the others). A
column that holds only NULLs is dropped (a NULL takes the memory of a value). A view numbers
the rows by their row id (the table keeps the reader's order) and gives them the columns of
:func:`~dpcr.changelog._phase1.create_p1`.

Then come the checks the staging of a file read in place makes before reading it
(:func:`~dpcr.changelog._stage._lazy_records`): the rows must be the file's lines, and a line
``null``, which the reader reads as a row of NULLs (as it reads ``{}``), is malformed. When
the rows are not the file's lines, when the reader refuses the file, or when a record is
rejected for its row before or after (whose quarantine line quotes the staged row, which is
read only once here), :class:`Restage` asks for the usual staging: such a file is parsed twice,
and every verdict and message is the usual one.

When no record is rejected, none gives a sequence number of its own and every entry is the
canonical text of a BIGINT (the case of :mod:`dpcr.changelog._clean` for a Parquet file), the
view gives the entry and the unit as that BIGINT (``typed_keys``): the later phases, the
bounding and the state's aggregates sort and hash integers. Its text, ``CAST(entry AS
VARCHAR)``, is the entry as the file gives it, which tables of text keys (the state's) store.
"""

from __future__ import annotations

import duckdb

from dpcr.changelog._raw_lines import ensure_raw
from dpcr.changelog._resume import _fetch, _run
from dpcr.changelog._stage_rows import Staged

__all__ = ["Restage", "create_once"]


class Restage(Exception):
    """The rows read unnumbered are not the file's lines, or the reader ``refused`` the file,
    or a record is rejected for its row before or after: stage the file again as usual."""

    def __init__(self, *, refused: bool) -> None:
        super().__init__("stage again")
        self.refused = refused


#: Phase 1's operations, a byte each (their text takes 16).
_OPS = "ENUM('insert', 'update', 'delete')"

#: The texts of a rejected record, one JSON object (NULL for the records that pass).
_REJECTED = (
    "CASE WHEN chk IS NOT NULL THEN to_json({'chk': chk, 'ts_raw': ts_raw, "
    "'seq_raw': seq_raw, 'op_raw': op_raw})::VARCHAR END"
)


def create_once(
    con: duckdb.DuckDBPyConnection,
    staged: Staged,
    p1: str,
    p1_sql: str,
    temps: list[str],
    *,
    extra: str,
    typed_keys: bool,
) -> bool:
    """Phase 1 (``p1_sql`` over the unnumbered rows of ``staged``) into table ``{p1}_t`` and
    view ``p1`` (see the module docstring), carrying the columns ``extra`` (``", after"``).
    ``typed_keys``: the entry may be a BIGINT (the caller's later steps compare no key with
    a text). Returns whether it is. Raises :class:`Restage`."""
    table = f"{p1}_t"
    temps.append(table)
    key = "TRY_CAST(entry AS BIGINT)"
    try:  # (the JSON reader parses the file here: it refuses a line that is not an object)
        _run(
            con,
            f"CREATE TEMP TABLE {table} AS SELECT k, CASE WHEN k IS NULL THEN entry END AS e, "
            f"ts, seq, op::{_OPS} AS op, has_before, {_REJECTED} AS rej{extra} "
            f"FROM (SELECT *, CASE WHEN "
            f"{key}::VARCHAR = entry THEN {key} END AS k FROM ({p1_sql}))",
        )
    except duckdb.Error:  # (as the staging of a file the reader refuses: read it by lines)
        raise Restage(refused=True) from None
    rows, rejected, texts, given, explicit = _fetch(
        con,
        f"SELECT count(*), count(rej), count(e), count(seq), "
        f"count(*) FILTER (WHERE seq <> rowid + 1) FROM {table}",
    )[0]
    if rows != staged.line_count:
        raise Restage(refused=False)
    clean = not (rejected or explicit)
    typed = typed_keys and clean and not texts
    entry = "k" if typed else "coalesce(e, k::VARCHAR)"
    raws = ", ".join(f"rej ->> '{c}' AS {c}" for c in ("chk", "ts_raw", "seq_raw", "op_raw"))
    # (phase 1 saw no record number: a record that passes gives its seq or none; a rejected
    # one keeps the text it gives)
    seq = "CASE WHEN chk IS NULL THEN coalesce(seq, record) WHEN seq_raw IS NULL THEN record " \
        "ELSE seq END"  # fmt: skip
    # Columns that hold only NULLs are dropped (a NULL costs memory as a value does).
    drop = []
    if clean:
        drop.append("rej")
        raws = ", ".join(f"NULL::VARCHAR AS {c}" for c in ("chk", "ts_raw", "seq_raw", "op_raw"))
        seq = "coalesce(seq, record)"
    if not texts:
        drop.append("e")
        entry = "k" if typed else "k::VARCHAR"
    if clean and not given:
        drop.append("seq")
        seq = "record"
    for column in drop:
        _run(con, f"ALTER TABLE {table} DROP COLUMN {column}")
    _run(
        con,
        f"CREATE TEMP VIEW {p1} AS SELECT record, {entry} AS entry, ts, {seq} AS seq, "
        "op::VARCHAR AS op, "
        f"has_before, chk, FALSE AS split, ts_raw, seq_raw, op_raw{extra}, "
        f"{entry} AS unit_value, {entry} AS b_entry, {entry} AS b_unit, {entry} AS a_unit "
        f"FROM (SELECT rowid + 1 AS record, *, {raws} FROM {table})",
    )
    if rejected:
        _checked(con, staged, p1, table)
    return typed


def _checked(con: duckdb.DuckDBPyConnection, staged: Staged, p1: str, table: str) -> None:
    """Give the lines ``null`` of ``p1`` their verdict (``bad_json:record``); raise
    :class:`Restage` for a blank line read as a row or a record rejected for its row before
    or after (see the module docstring)."""
    of_rows = _fetch(con, f"SELECT count(*) FROM {p1} WHERE chk IN "
                          "('bad_json:before', 'bad_json:after')")[0][0]  # fmt: skip
    if of_rows:
        raise Restage(refused=False)
    # A row of NULLs has no op (so it is rejected) and nothing else: its line is looked at.
    empty = (
        f"SELECT record FROM {p1} WHERE chk IS NOT NULL AND entry IS NULL AND op_raw IS NULL "
        "AND ts_raw IS NULL AND seq_raw IS NULL AND NOT has_before AND after IS NULL"
    )
    if not _fetch(con, f"SELECT count(*) FROM ({empty})")[0][0]:
        return
    assert staged.lazy is not None
    ensure_raw(con, staged.lazy, empty)
    texts = f"SELECT record, trim(line, ' ' || chr(9)) AS t FROM {staged.lazy.table} " \
        f"WHERE record IN ({empty})"  # fmt: skip
    if _fetch(con, f"SELECT count(*) FILTER (WHERE t = '') FROM ({texts})")[0][0]:
        raise Restage(refused=False)
    null = "{'chk': 'bad_json:record', 'ts_raw': NULL, 'seq_raw': NULL, 'op_raw': NULL}"
    _run(con, f"UPDATE {table} SET rej = to_json({null})::VARCHAR WHERE rowid + 1 IN "
              f"(SELECT record FROM ({texts}) WHERE t = 'null')")  # fmt: skip
