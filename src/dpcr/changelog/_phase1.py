"""Phase 1 of a load, as SQL: each staged record checked on its own (op, entry, timestamp,
sequence number, unit, JSON rows, bare non-finite numbers) into one row per record with its
reason (NULL when valid), and the parts a unit change splits an update into."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import duckdb

from dpcr._sql import json_path
from dpcr.changelog._resume import _run
from dpcr.changelog._sql import seq_expr, ts_expr
from dpcr.changelog._stage_rows import Staged

_OPS = {
    "insert": "insert", "i": "insert", "c": "insert", "r": "insert",
    "update": "update", "u": "update",
    "delete": "delete", "d": "delete",
}  # fmt: skip


def _op_sql(col: str, *, code: bool = False) -> str:
    """SQL of the operation the text ``col`` spells (NULL: none); ``code``: as its code (0
    insert, 1 update, 2 delete: :data:`OP_CODES`), a UTINYINT, instead of its name."""
    out = OP_CODES if code else {op: f"'{op}'" for op in OP_CODES}
    whens = " ".join(f"WHEN '{k}' THEN {out[v]}" for k, v in _OPS.items())
    # (the spellings as written most often first, without a copy of the text)
    sql = (
        f"CASE {col} WHEN 'insert' THEN {out['insert']} WHEN 'update' THEN {out['update']} "
        f"WHEN 'delete' THEN {out['delete']} ELSE CASE lower(trim({col})) {whens} END END"
    )
    return f"({sql})::UTINYINT" if code else sql


#: The code of each operation (:data:`dpcr.bounding.sql.OP_CODE`'s).
OP_CODES = {"insert": "0", "update": "1", "delete": "2"}


def op_name(code: str) -> str:
    """SQL of the operation's name from its code ``code`` (:data:`OP_CODES`; NULL: none)."""
    return "CASE " + code + "".join(f" WHEN {c} THEN '{op}'" for op, c in OP_CODES.items()) + " END"


def _empty(col: str) -> str:
    return f"coalesce(trim({col}), '') = ''"


def blank_entry(entry: str) -> str:
    """SQL: the text ``entry`` (a column name) is blank, ``trim(entry) = ''``, without
    trimming most entries: one that begins with a printable ASCII character other than the
    space keeps that character when trimmed."""
    return f"(left({entry}, 1) NOT BETWEEN '!' AND '~' AND trim({entry}) = '')"


_BLANK_ENTRY = blank_entry("entry")


def number_columns(numbers: Iterable[str]) -> dict[str, str]:
    """The columns of phase 1 (``typed_numbers``) that hold the numbers of the row after:
    per column of ``numbers``, the name of its DOUBLE column."""
    return {column: f"_num{k}" for k, column in enumerate(dict.fromkeys(numbers))}


def nonfinite_sql(numbers: Iterable[str], *, parsed: bool = False) -> str:
    """SQL: the row ``after`` holds, in one of the columns ``numbers``, a bare NaN or infinity
    token (``NaN``, ``-Infinity``, ``inf``, in any case), which is not JSON but which DuckDB's
    parser reads as that number. Exact, and cheap: only a value that reads as a number that is
    not finite has its text looked at (``1e999``, valid JSON, also reads as infinite). FALSE
    when ``numbers`` is empty. ``parsed``: the rows have each value read as a number
    (``_x{k}``, see :func:`phase1_sql`), which the test reads instead of parsing the row
    again; a value such as ``"5"`` or ``true`` reads as a number there and not here, but
    either is finite or no number, so the verdict is the same."""
    checks = []
    for k, column in enumerate(dict.fromkeys(numbers)):
        x = f"json_value(after, {json_path(column)})"
        number = f"_x{k}" if parsed else f"TRY_CAST({x} AS DOUBLE)"
        # (a CASE, so that only the values that are not finite numbers have their text read)
        checks.append(
            f"CASE WHEN coalesce(isfinite({number}), TRUE) THEN FALSE "
            f"ELSE lower(ltrim({x}::VARCHAR, '-')) IN ('nan', 'inf', 'infinity') END"
        )
    return " OR ".join(f"({c})" for c in checks) if checks else "FALSE"


def phase1_sql(
    staged: Staged,
    unit_column: str | None,
    *,
    key_moves: bool = False,
    carry: str = "",
    numbers: tuple[str, ...] = (),
    typed_numbers: bool = False,
) -> str:
    """Per-record checks over the rows table, keeping only the narrow columns.

    ``chk`` is ``reason:field`` of the first failed check, else NULL. ``unit_value`` is the
    record's unit (for an update under a unit column: the one shown when it is missing);
    ``split`` marks an update that moves the entry between units of the unit column, or (with
    ``key_moves``: the rows table has ``before_entry``) changes the row's key: the delete half
    is charged to ``b_entry``/``b_unit``, the insert half to ``entry``/``a_unit``.
    ``carry``: more columns of the rows table to pass through (``", before, after"``).
    ``numbers``: the columns of the row after read as numbers; a row given as JSON text that
    holds a bare NaN or infinity token in one of them is not JSON (``bad_json``, field after:
    :func:`nonfinite_sql`). Typed rows (Parquet structs) hold floats, whose NaN is a value.
    ``typed_numbers`` (rows given as JSON text): each of ``numbers`` is also carried as a
    finite DOUBLE (NULL: missing, not a number, NaN or infinite; the value a sum reads,
    :func:`dpcr.bounding.sql.finite_number_sql`) in the column :func:`number_columns` names,
    parsed from the row once for that and for the test above.

    Rows not numbered yet (``record`` NULL: ``Staged.unnumbered``) get a ``seq`` NULL where
    they give none (and pass the check of the sequence number).
    """
    rows = staged.table
    ts = "ts_us" if staged.ts_typed else ts_expr("ts_raw", staged.ts_factor)
    b_entry = "coalesce(before_entry, entry)" if key_moves else "entry"
    b_unit, a_unit = b_entry, "entry"
    if unit_column is not None:
        unit = (
            "CASE op WHEN 'insert' THEN after_unit WHEN 'delete' THEN before_unit "
            f"ELSE CASE WHEN {_empty('before_unit')} THEN before_unit ELSE after_unit END END"
        )
        # With a unit column the unit comes from the record's own rows: an update or delete
        # without its before row cannot be attributed without looking at other records.
        unit_missing = (
            f"CASE WHEN op <> 'insert' AND NOT before_given THEN 'missing_unit:before' "
            f"WHEN {_empty('unit_value')} THEN 'missing_unit:unit' "
            f"WHEN op = 'update' AND {_empty('after_unit')} THEN 'missing_unit:unit' END"
        )
        b_unit, a_unit = "before_unit", "after_unit"
    elif staged.unit_field:
        b_unit = a_unit = "unit"
        unit = "unit"
        unit_missing = f"CASE WHEN {_empty('unit_value')} THEN 'missing_unit:unit' END"
    else:
        unit = "entry"
        unit_missing = "NULL"
    split = "op = 'update' AND (b_unit <> a_unit OR b_entry <> entry)"
    # (typed rows: the given flags, without converting the rows to JSON)
    has_before = "before_given" if staged.given_is_object else "before IS NOT NULL"
    no_after = "NOT after_given" if staged.given_is_object else "after IS NULL"
    # Records set aside when the source was read (too long, not UTF-8, a malformed CSV row).
    pre = "\n            WHEN pre_chk IS NOT NULL THEN pre_chk" if staged.pre_checked else ""
    # A number that is not JSON, in a column a statistic reads.
    tokens = ""
    parsed = typed_numbers and bool(numbers) and not staged.given_is_object
    if numbers and not staged.given_is_object:
        bare = nonfinite_sql(numbers, parsed=parsed)
        tokens = f"\n            WHEN op <> 'delete' AND {bare} THEN 'bad_json:after'"
    xs = nums = ""
    if parsed:
        names = number_columns(numbers)
        xs = "".join(f", TRY_CAST(json_extract(after, {json_path(c)}) AS DOUBLE) AS _x{k}"
                     for k, c in enumerate(names))  # fmt: skip
        nums = "".join(f", CASE WHEN isfinite(_x{k}) THEN _x{k} END AS {name}"
                       for k, name in enumerate(names.values()))  # fmt: skip
    return f"""
        SELECT *, chk IS NULL AND coalesce({split}, FALSE) AS split FROM (
        SELECT record, entry, ts, seq, op, unit_value, before_unit, after_unit,
               {b_entry} AS b_entry, {b_unit} AS b_unit, {a_unit} AS a_unit,
               {has_before} AS has_before, ts_raw, seq_raw, op_raw{carry}{nums}, CASE{pre}
            WHEN tombstone THEN 'tombstone:record'
            WHEN malformed THEN 'bad_json:record'
            WHEN op IS NULL THEN 'unknown_op:op'
            WHEN op <> 'delete' AND {no_after} THEN 'bad_json:after'
            WHEN op = 'insert' AND before_given THEN 'bad_json:before'
            WHEN op <> 'insert' AND before_given AND NOT ({has_before}) THEN 'bad_json:before'
            WHEN op = 'delete' AND after_given THEN 'bad_json:after'{tokens}
            WHEN entry IS NULL OR {_BLANK_ENTRY} THEN 'missing_entry:entry'
            WHEN ts IS NULL THEN 'bad_timestamp:ts'
            WHEN seq IS NULL AND seq_raw IS NOT NULL THEN 'bad_seq:seq'
            ELSE {unit_missing}
        END AS chk
        FROM (
            SELECT *, {unit} AS unit_value
            FROM (
                SELECT *, {ts} AS ts, {seq_expr("seq_raw")} AS seq,
                       {_op_sql("op_raw")} AS op{xs}
                FROM {rows}
            )
        ))
    """


# Mutations of the records that passed phase 1: ``part`` 0 is a whole record, 1 and 2 the halves
# of an update that moves its entry between units (1: the delete charged to the old unit, first;
# 2: the insert charged to the new unit).
_PARTS_SQL = """
    SELECT record, 0 AS part, unit_value AS unit, entry, ts, seq, op, has_before{a0}
    FROM {p1} WHERE chk IS NULL AND NOT split
    UNION ALL
    SELECT record, 1 AS part, b_unit AS unit, b_entry AS entry, ts, seq, 'delete' AS op, TRUE{a1}
    FROM {p1} WHERE split
    UNION ALL
    SELECT record, 2 AS part, a_unit AS unit, entry, ts, seq, 'insert' AS op, FALSE{a0}
    FROM {p1} WHERE split
"""


def parts_sql(p1: str, split: int, *, after: bool = False, numbers: tuple[str, ...] = ()) -> str:
    """:data:`_PARTS_SQL` over ``p1``; without ``split`` updates only its first branch (the
    others would read ``p1`` twice more to find nothing). ``after``: with column ``after``
    (``p1`` carries it; NULL for the delete half of a split update), and the DOUBLE columns
    ``numbers`` likewise."""
    a0, a1 = (", after", ", NULL::JSON AS after") if after else ("", "")
    a0 += "".join(f", {n}" for n in numbers)
    a1 += "".join(f", NULL::DOUBLE AS {n}" for n in numbers)
    sql = _PARTS_SQL.format(p1=p1, a0=a0, a1=a1)
    return sql if split else sql[: sql.index("UNION ALL")]


# The columns of phase 1 that the later phases read.
_P1_COLUMNS = (
    "record, entry, ts, seq, op, unit_value, b_entry, b_unit, a_unit, has_before, chk, split, "
    "CASE WHEN chk IS NOT NULL THEN ts_raw END AS ts_raw, "
    "CASE WHEN chk IS NOT NULL THEN seq_raw END AS seq_raw, "
    "CASE WHEN chk IS NOT NULL THEN op_raw END AS op_raw"
)

BAD_COLUMNS = (
    "record BIGINT, part INTEGER, reason VARCHAR, fkey VARCHAR, op VARCHAR, unit VARCHAR, "
    "entry VARCHAR, ts BIGINT, seq BIGINT, other BIGINT, value VARCHAR"
)


def create_p1(
    con: duckdb.DuckDBPyConnection,
    p1: str,
    p1_sql: str,
    temps: list[str],
    *,
    by_entry: bool,
    extra: str = "",
) -> None:
    """``p1``: the columns of phase 1 that later phases read (:data:`_P1_COLUMNS`, and
    ``extra``: ``", after"``) from ``p1_sql``. ``by_entry``: every unit and key column is the
    entry (no unit, no key moves): a table holds it once and ``p1`` is a view that gives it the
    other names (the table, ``{p1}_t``, is appended to ``temps``)."""
    if not by_entry:
        _run(con, f"CREATE TEMP TABLE {p1} AS SELECT {_P1_COLUMNS}{extra} FROM ({p1_sql})")
        return
    narrow = _P1_COLUMNS.replace("unit_value, b_entry, b_unit, a_unit, ", "") + extra
    temps.append(f"{p1}_t")
    _run(con, f"CREATE TEMP TABLE {p1}_t AS SELECT {narrow} FROM ({p1_sql})")
    _run(con, f"CREATE TEMP VIEW {p1} AS SELECT *, entry AS unit_value, entry AS b_entry, "
              f"entry AS b_unit, entry AS a_unit FROM {p1}_t")  # fmt: skip


def drop_p1(con: duckdb.DuckDBPyConnection, p1: str) -> None:
    """Drop what :func:`create_p1` made (the table, or the view and its table)."""
    drop_any(con, p1)
    drop_any(con, f"{p1}_t")


def bad_insert(bad: str, select: str) -> str:
    """Append rows of ``select`` to table ``bad``. ``select`` has the columns record, part, chk,
    op, unit, entry, ts, seq, other and the raw texts op_raw, ts_raw, seq_raw, unit_value."""
    return (
        f"INSERT INTO {bad} SELECT record, part, split_part(chk, ':', 1), "
        "split_part(chk, ':', 2), op, unit, entry, ts, seq, other, "
        "CASE split_part(chk, ':', 2) WHEN 'op' THEN op_raw "
        "WHEN 'entry' THEN entry WHEN 'ts' THEN ts_raw WHEN 'seq' THEN seq_raw "
        f"WHEN 'unit' THEN unit_value END FROM ({select})"
    )


def drop_any(con: duckdb.DuckDBPyConnection, *names: str) -> None:
    """Drop each view or table of ``names`` that exists (errors of a broken connection, which
    has nothing left to drop, are ignored)."""
    for name in names:
        for kind in ("VIEW", "TABLE"):
            with contextlib.suppress(duckdb.Error):
                _run(con, f"DROP {kind} IF EXISTS {name}")
