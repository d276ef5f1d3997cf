"""Load a source into the canonical changelog table, validating every record in DuckDB SQL.

Validation runs in three phases; a record rejected by one phase takes no part in the next:

1. **Per record** (no context needed), in this order: ``bad_json`` (the record is not a JSON
   object), ``unknown_op``, ``bad_json`` again for the rows (``after`` not an object for an
   insert/update; ``before`` given for an insert; ``before`` not an object for an update/delete;
   ``after`` given for a delete), ``missing_entry``, ``bad_timestamp``, ``bad_seq``,
   ``missing_unit``. Debezium tombstones are set aside here (counted, not errors).
2. **Duplicates**: among the records that passed phase 1, a record with the same entry and
   sequence number as a record with a lower record number is a ``duplicate`` (the first is kept).
3. **Liveness**, in (ts, seq, record) order per entry: an insert of a live entry is a
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

Updates and deletes without a ``before`` row (some CDC sources omit it) get the ``after`` of the
entry's previous valid mutation, so every valid update/delete in the output has its ``before``.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import duckdb

from dpcr._sql import ident
from dpcr.changelog._sources import (
    CsvSource,
    DebeziumSource,
    JsonlSource,
    ParquetSource,
    SourceConfig,
    SqliteSource,
    check_field_name,
    check_identifier,
    describe,
)
from dpcr.changelog._sql import seq_expr, ts_expr
from dpcr.changelog._stage import Staged, stage
from dpcr.errors import ChangelogError, ConfigError, DpcrError
from dpcr.timeutil import format_timestamp

#: Machine-readable codes of the reasons a record is rejected, in the order they are checked
#: (``bad_json`` for the record itself comes first, for its before/after rows after the op).
REASONS: tuple[str, ...] = (
    "bad_json",
    "unknown_op",
    "missing_entry",
    "bad_timestamp",
    "bad_seq",
    "missing_unit",
    "duplicate",
    "update_before_insert",
    "delete_before_insert",
    "double_insert",
)

_OPS = {
    "insert": "insert", "i": "insert", "c": "insert", "r": "insert",
    "update": "update", "u": "update",
    "delete": "delete", "d": "delete",
}  # fmt: skip

OnError = Literal["raise", "quarantine"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadReport:
    """What :func:`load` read: ``records == valid + sum(quarantined.values()) + tombstones``.

    ``quarantined`` maps each reason code (see :data:`REASONS`) to its number of records; it is
    empty when every record is valid. ``tombstones`` counts skipped Debezium tombstones.
    """

    source: str
    records: int
    valid: int
    quarantined: Mapping[str, int]
    quarantine_path: Path | None
    tombstones: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "quarantined", MappingProxyType(dict(self.quarantined)))

    @property
    def invalid(self) -> int:
        return sum(self.quarantined.values())


def _run(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> None:
    con.execute(sql, params).fetchall()


def _fetch(
    con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None
) -> list[tuple[Any, ...]]:
    return con.execute(sql, params).fetchall()


def _op_sql(col: str) -> str:
    whens = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in _OPS.items())
    return f"CASE lower(trim({col})) {whens} END"


def _phase1_sql(staged: Staged, unit_column: str | None) -> str:
    """Per-record checks over the rows table, keeping only the narrow columns.

    ``chk`` is ``reason:field`` of the first failed check, else NULL.
    """
    rows = staged.table
    if unit_column is not None:
        unit = "CASE WHEN op = 'delete' THEN before_unit ELSE after_unit END"
        # A delete without a before row takes its unit from the reconstructed before row, whose
        # unit was already checked as the after row of the entry's previous valid mutation.
        unit_missing = (
            "CASE WHEN op = 'delete' THEN before_given AND coalesce(trim(unit_value), '') = '' "
            "ELSE coalesce(trim(unit_value), '') = '' END"
        )
    elif staged.unit_field:
        unit = "unit"
        unit_missing = "coalesce(trim(unit_value), '') = ''"
    else:
        unit = "entry"
        unit_missing = "FALSE"
    return f"""
        SELECT record, entry, ts, seq, op, unit_value, before IS NOT NULL AS has_before,
               after_unit, ts_raw, seq_raw, op_raw, CASE
            WHEN tombstone THEN 'tombstone:record'
            WHEN malformed THEN 'bad_json:record'
            WHEN op IS NULL THEN 'unknown_op:op'
            WHEN op <> 'delete' AND after IS NULL THEN 'bad_json:after'
            WHEN op = 'insert' AND before_given THEN 'bad_json:before'
            WHEN op <> 'insert' AND before_given AND before IS NULL THEN 'bad_json:before'
            WHEN op = 'delete' AND after_given THEN 'bad_json:after'
            WHEN entry IS NULL OR trim(entry) = '' THEN 'missing_entry:entry'
            WHEN ts IS NULL THEN 'bad_timestamp:ts'
            WHEN seq IS NULL THEN 'bad_seq:seq'
            WHEN {unit_missing} THEN 'missing_unit:unit'
        END AS chk
        FROM (
            SELECT *, {unit} AS unit_value
            FROM (
                SELECT *, {ts_expr("ts_raw", staged.ts_factor)} AS ts, {seq_expr("seq_raw")} AS seq,
                       {_op_sql("op_raw")} AS op
                FROM {rows}
            )
        )
    """


def _bad_insert(bad: str, select: str) -> str:
    """Append rows of ``select`` (narrow columns plus ``chk`` and ``other``) to table ``bad``."""
    return (
        f"INSERT INTO {bad} SELECT record, split_part(chk, ':', 1), split_part(chk, ':', 2), "
        f"op, entry, ts, seq, other, CASE split_part(chk, ':', 2) WHEN 'op' THEN op_raw "
        "WHEN 'entry' THEN entry WHEN 'ts' THEN ts_raw WHEN 'seq' THEN seq_raw "
        f"WHEN 'unit' THEN unit_value END FROM ({select})"
    )


def _check_options(
    source: SourceConfig,
    table: str,
    on_error: str,
    quarantine_path: Path | None,
    unit_column: str | None,
) -> None:
    if not isinstance(source, JsonlSource | CsvSource | ParquetSource | DebeziumSource
                      | SqliteSource):  # fmt: skip
        raise ConfigError(
            f"source must be a source configuration (JsonlSource, CsvSource, ParquetSource, "
            f"DebeziumSource or SqliteSource; see dpcr.changelog.from_config), got {source!r}"
        )
    check_identifier(table, key="table")
    if on_error not in ("raise", "quarantine"):
        raise ConfigError(f"on_error must be 'raise' or 'quarantine', got {on_error!r}")
    if on_error == "quarantine" and quarantine_path is None:
        raise ConfigError(
            "on_error = 'quarantine' needs a quarantine_path: the JSONL file that receives "
            "every rejected record"
        )
    if unit_column is not None:
        check_field_name(unit_column, key="unit column")
        if isinstance(source, JsonlSource | CsvSource | ParquetSource) and source.unit:
            raise ConfigError(
                f"the privacy unit is given twice: by the record field {source.unit!r} "
                f"([source] unit) and by the row column {unit_column!r}; keep one"
            )


def load(
    source: SourceConfig,
    con: duckdb.DuckDBPyConnection,
    *,
    table: str = "changelog",
    on_error: OnError = "raise",
    quarantine_path: Path | None = None,
    unit_column: str | None = None,
) -> LoadReport:
    """Read ``source``, validate it, and create (or replace) table ``table`` in ``con``.

    The table holds only the valid mutations, in (ts, seq, record) order, with columns
    ``record BIGINT, unit VARCHAR, entry VARCHAR, ts BIGINT, seq BIGINT, op VARCHAR,
    before JSON, after JSON`` (see ``docs/changelog.md``). ``unit`` is the value of
    ``unit_column`` in the row (after; before for deletes), or the source's unit field, or the
    entry id.

    ``on_error="raise"`` raises :class:`~dpcr.errors.ChangelogError` for the invalid record with
    the lowest record number (the table is then left untouched); ``"quarantine"`` writes every
    invalid record to ``quarantine_path`` (JSON Lines, rewritten on every call) and counts it.
    """
    quarantine_path = Path(quarantine_path) if quarantine_path is not None else None
    _check_options(source, table, on_error, quarantine_path, unit_column)
    name = describe(source)
    prefix = f"_dpcr_{uuid.uuid4().hex[:12]}"
    staged: Staged | None = None
    temps: list[str] = []
    try:
        staged = stage(source, con, prefix, unit_column, temps)
        p1, dups, good, live, bad, valid = (
            f"{prefix}_{n}" for n in ("p1", "dups", "good", "live", "bad", "valid")
        )
        temps += [p1, dups, good, live, bad, valid]
        _run(con, f"CREATE TEMP TABLE {p1} AS {_phase1_sql(staged, unit_column)}")
        _run(
            con,
            f"CREATE TEMP TABLE {bad} (record BIGINT, reason VARCHAR, fkey VARCHAR, op VARCHAR, "
            "entry VARCHAR, ts BIGINT, seq BIGINT, other BIGINT, value VARCHAR)",
        )
        _run(
            con,
            _bad_insert(bad, f"SELECT *, NULL::BIGINT AS other FROM {p1} WHERE chk IS NOT NULL"),
        )
        # Phase 2: duplicates (same entry and seq as a lower record number). Duplicated keys
        # are found by hashing, so a clean changelog costs one aggregation and no sort.
        _run(
            con,
            f"CREATE TEMP TABLE {dups} AS SELECT record, first FROM {p1} JOIN ("
            f"SELECT entry, seq, min(record) AS first FROM {p1} WHERE chk IS NULL "
            "GROUP BY entry, seq HAVING count(*) > 1) USING (entry, seq) "
            "WHERE chk IS NULL AND record <> first",
        )
        _run(
            con,
            _bad_insert(
                bad,
                f"SELECT p.* EXCLUDE (chk), 'duplicate:seq' AS chk, d.first AS other FROM {p1} p "
                f"JOIN {dups} d USING (record)",
            ),
        )
        _run(
            con,
            f"CREATE TEMP TABLE {good} AS SELECT record, entry, ts, seq, op, unit_value, "
            f"has_before, after_unit FROM {p1} WHERE chk IS NULL "
            f"AND record NOT IN (SELECT record FROM {dups})",
        )
        _run(con, f"DROP TABLE {p1}")
        # Phase 3: liveness before each mutation (see the module docstring for why this equals
        # the sequential rule), with the record of the insert/delete that decided it.
        _run(
            con,
            f"""
            CREATE TEMP TABLE {live} AS
            SELECT * EXCLUDE (prev), CASE
                    WHEN op = 'insert' AND coalesce(prev.live, FALSE) THEN 'double_insert:op'
                    WHEN op = 'update' AND NOT coalesce(prev.live, FALSE)
                        THEN 'update_before_insert:op'
                    WHEN op = 'delete' AND NOT coalesce(prev.live, FALSE)
                        THEN 'delete_before_insert:op'
                END AS chk, prev.record AS other
            FROM (
                SELECT *, last_value(CASE WHEN op <> 'update'
                    THEN {{'live': op = 'insert', 'record': record}} END IGNORE NULLS) OVER (
                        PARTITION BY entry ORDER BY ts, seq, record
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
                FROM {good}
            )
            """,
        )
        _run(con, f"DROP TABLE {good}")
        _run(
            con,
            _bad_insert(
                bad,
                f"SELECT *, op AS op_raw, NULL AS ts_raw, NULL AS seq_raw FROM {live} "
                "WHERE chk IS NOT NULL",
            ),
        )
        _run(
            con,
            f"CREATE TEMP TABLE {valid} AS SELECT record, unit_value, entry, ts, seq, op, "
            f"has_before, after_unit FROM {live} WHERE chk IS NULL",
        )
        _run(con, f"DROP TABLE {live}")

        counts = dict(_fetch(con, f"SELECT reason, count(*) FROM {bad} GROUP BY reason"))
        tombstones = int(counts.pop("tombstone", 0))
        # Every record is accounted for exactly once (a guard against bugs, not bad data).
        total = int(_fetch(con, f"SELECT count(*) FROM {staged.table}")[0][0])
        valid_count = int(_fetch(con, f"SELECT count(*) FROM {valid}")[0][0])
        if set(counts) - set(REASONS) or total != valid_count + sum(counts.values()) + tombstones:
            raise DpcrError(
                f"{name}: internal error: {total} records but {valid_count} valid, {counts} "
                f"invalid and {tombstones} tombstones; please report this with the input"
            )
        if on_error == "raise" and counts:
            first_bad = _fetch(
                con,
                f"{_BAD_SELECT.format(bad=bad, rows=staged.table)} "
                "WHERE b.reason <> 'tombstone' ORDER BY b.record LIMIT 1",
            )
            row = _row_dict(first_bad[0])
            if row["fkey"] == "record":
                row["value"] = _raw_of(con, staged, int(row["record"]))
            raise ChangelogError(
                f"{name}: record {row['record']}: {_message(row, staged, source, unit_column)}",
                record=int(row["record"]),
                field=_field_label(row["fkey"], staged, unit_column),
                reason=str(row["reason"]),
            )

        _create_output(con, table, valid, staged.table, unit_column)
        quarantined = {r: int(counts[r]) for r in REASONS if r in counts}
        if on_error == "quarantine" and quarantine_path is not None:
            _write_quarantine(con, staged, bad, quarantine_path, source, unit_column)
        return LoadReport(
            source=name,
            records=valid_count + sum(quarantined.values()) + tombstones,
            valid=valid_count,
            quarantined=quarantined,
            quarantine_path=quarantine_path if on_error == "quarantine" else None,
            tombstones=tombstones,
        )
    finally:
        for t in temps:
            with contextlib.suppress(duckdb.Error):  # a broken connection has nothing to drop
                _run(con, f"DROP TABLE IF EXISTS {t}")


def _create_output(
    con: duckdb.DuckDBPyConnection,
    table: str,
    valid: str,
    rows: str,
    unit_column: str | None,
) -> None:
    """The canonical table: the valid mutations with their rows, in (ts, seq, record) order.

    Updates and deletes given without a before row get the after row of the entry's previous
    valid mutation (and, for deletes, its unit); the window runs only when some need it.
    """
    missing = _fetch(con, f"SELECT count(*) FROM {valid} WHERE op <> 'insert' AND NOT has_before")[
        0
    ][0]
    unit = "unit_value"
    before = "CASE WHEN op = 'insert' THEN NULL ELSE before END"
    joined = f"{valid} JOIN (SELECT record, before, after FROM {rows}) USING (record)"
    source = joined
    if missing:
        before = "CASE WHEN op = 'insert' THEN NULL ELSE coalesce(before, prev_after) END"
        if unit_column is not None:
            unit = "coalesce(unit_value, prev_unit)"
        source = (
            "(SELECT *, lag(after) OVER w AS prev_after, lag(after_unit) OVER w AS prev_unit "
            f"FROM {joined} WINDOW w AS (PARTITION BY entry ORDER BY ts, seq, record))"
        )
    _run(
        con,
        f"""
        CREATE OR REPLACE TABLE {ident(table)} AS
        SELECT record::BIGINT AS record, ({unit})::VARCHAR AS unit, entry::VARCHAR AS entry,
               ts::BIGINT AS ts, seq::BIGINT AS seq, op::VARCHAR AS op,
               ({before})::JSON AS before, after::JSON AS after
        FROM {source}
        ORDER BY ts, seq, record
        """,
    )


_BAD_FIELDS = ("record", "reason", "fkey", "op", "entry", "ts", "seq", "other", "value")
# The bad records with the text of a bad before/after row (from the rows table).
_BAD_SELECT = (
    "SELECT b.record, b.reason, b.fkey, b.op, b.entry, b.ts, b.seq, b.other, "
    "CASE b.fkey WHEN 'before' THEN r.before_text WHEN 'after' THEN r.after_text "
    "ELSE b.value END AS value FROM {bad} b LEFT JOIN {rows} r USING (record)"
)


def _row_dict(row: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(_BAD_FIELDS, row, strict=True))


def _raw_of(con: duckdb.DuckDBPyConnection, staged: Staged, record: int) -> str | None:
    rows = _fetch(con, f"SELECT raw::VARCHAR FROM ({staged.raw_sql}) WHERE record = ?", [record])
    if not rows or rows[0][0] is None:
        return None
    raw = json.loads(rows[0][0])
    return raw if isinstance(raw, str) else json.dumps(raw)


def _field_label(fkey: str, staged: Staged, unit_column: str | None) -> str:
    if fkey == "unit" and unit_column is not None:
        return unit_column
    return staged.labels.get(fkey, fkey)


def _show(value: object) -> str:
    if value is None:
        return "missing"
    text = str(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return repr(text)


def _when(ts: object) -> str:
    return format_timestamp(int(ts)) if isinstance(ts, int) else str(ts)


def _message(
    row: Mapping[str, Any], staged: Staged, source: SourceConfig, unit_column: str | None
) -> str:
    """What is wrong with the record and how to fix it (the source and record are prefixed)."""
    reason, fkey, op = row["reason"], row["fkey"], row["op"]
    field = _field_label(fkey, staged, unit_column)
    value, entry, other = _show(row["value"]), row["entry"], row["other"]
    seq_field = staged.labels["seq"]
    if reason == "bad_json" and fkey == "record":
        what = "line" if isinstance(source, JsonlSource | DebeziumSource) else "record"
        return f"not a JSON object: {value}; write each {what} as one JSON object"
    if reason == "bad_json" and fkey == "after" and op == "delete":
        return f"field {field!r} is {value}, but a delete has no row after; set it to null"
    if reason == "bad_json" and fkey == "after":
        return (
            f"field {field!r} is {value}, but an {op} needs the row after the change as a "
            "JSON object"
        )
    if reason == "bad_json" and op == "insert":
        return (
            f"field {field!r} is {value}, but an insert has no row before; set it to null "
            "(or use op 'update')"
        )
    if reason == "bad_json":
        return (
            f"field {field!r} is {value}, not a JSON object; give the row before the change as "
            "an object, or null"
        )
    if reason == "unknown_op":
        return (
            f"field {field!r} is {value}, not an operation; use insert, update or delete "
            "(also accepted: i, c, r, u, d)"
        )
    if reason == "missing_entry":
        return (
            f"field {field!r} is missing or empty; every mutation needs the id of the entry "
            "(row) it changes"
        )
    if reason == "missing_unit":
        if unit_column is not None:
            where = "before" if op == "delete" else "after"
            return (
                f"the privacy unit column {unit_column!r} is missing or empty in the row "
                f"{where}; fill it in, or choose another unit column"
            )
        return f"field {field!r} (the privacy unit) is missing or empty; fill it in"
    if reason == "bad_timestamp":
        if isinstance(source, DebeziumSource):
            hint = "a source.ts_ms (or ts_ms) field in epoch milliseconds"
        elif isinstance(source, SqliteSource):
            hint = "ISO 8601 text such as '2025-01-06T08:30:00.000Z'"
        else:
            hint = (
                "ISO 8601 such as '2025-01-06T08:30:00Z', or an epoch number in "
                + {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}[source.epoch_unit]
            )
        return f"field {field!r} is {value}, not a time; use {hint}"
    if reason == "bad_seq":
        return (
            f"field {field!r} is {value}, not an integer; use an integer sequence number, or "
            "leave it out to break ties by record number"
        )
    if reason == "duplicate":
        return (
            f"entry {entry!r} repeats {seq_field} {row['seq']} of record {other}; the first is "
            f"kept: remove the repeated record, or give it its own {seq_field}"
        )
    when = _when(row["ts"])
    if reason == "double_insert":
        return (
            f"insert of entry {entry!r} at {when}, but the entry is already live (inserted at "
            f"record {other}); use an update, or delete it first"
        )
    history = (
        f"it was deleted at record {other}"
        if other is not None
        else "it is not inserted before this time"
    )
    return (
        f"{op} of entry {entry!r} at {when}, but the entry is not live ({history}); insert it "
        "first, or check the record's time and sequence number"
    )


def _bad_rows(
    con: duckdb.DuckDBPyConnection, staged: Staged, bad: str
) -> Iterator[tuple[dict[str, Any], str]]:
    # Temporary tables belong to this connection, so read with it (not a cursor) to the end.
    result = con.execute(
        f"SELECT q.*, r.raw::VARCHAR FROM ({_BAD_SELECT.format(bad=bad, rows=staged.table)}) q "
        f"JOIN ({staged.raw_sql}) r USING (record) WHERE q.reason <> 'tombstone' "
        "ORDER BY q.record"
    )
    while rows := result.fetchmany(10_000):
        for row in rows:
            yield _row_dict(row[:-1]), str(row[-1])


def _write_quarantine(
    con: duckdb.DuckDBPyConnection,
    staged: Staged,
    bad: str,
    path: Path,
    source: SourceConfig,
    unit_column: str | None,
) -> None:
    """One JSON object per rejected record: record, reason, field, value, message, raw."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for row, raw in _bad_rows(con, staged, bad):
            if row["fkey"] == "record":
                loaded = json.loads(raw)
                row["value"] = loaded if isinstance(loaded, str) else raw
            head = json.dumps(
                {
                    "record": row["record"],
                    "reason": row["reason"],
                    "field": _field_label(row["fkey"], staged, unit_column),
                    "value": row["value"],
                    "message": _message(row, staged, source, unit_column),
                },
                ensure_ascii=False,
            )
            out.write(head[:-1] + ', "raw": ' + raw + "}\n")
    tmp.replace(path)
