"""Messages for rejected records and the quarantine file (see :func:`dpcr.changelog.load`)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import duckdb

from dpcr._fs import ensure_dir, write_atomic
from dpcr.changelog._raw_lines import ensure_raw
from dpcr.changelog._set_aside import SET_ASIDE_REASONS, quarantine_members
from dpcr.changelog._sources import (
    CsvSource,
    DebeziumSource,
    JsonlSource,
    SourceConfig,
    SqliteSource,
    Wal2jsonSource,
)
from dpcr.changelog._stage_rows import Staged
from dpcr.timeutil import format_timestamp


def _fetch(
    con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None
) -> list[tuple[Any, ...]]:
    return con.execute(sql, params).fetchall()


_BAD_FIELDS: tuple[str, ...] = ("record", "part", "reason", "fkey", "op", "unit", "entry")
_BAD_FIELDS += ("ts", "seq", "other", "value")
# The bad records with the text of a bad before/after row (from the rows table: the text of a
# row that is not an object, else the object, minified).
BAD_SELECT = (
    "SELECT b.record, b.part, b.reason, b.fkey, b.op, b.unit, b.entry, b.ts, b.seq, b.other, "
    "CASE b.fkey WHEN 'before' THEN coalesce(r.before_text, r.before::VARCHAR) "
    "WHEN 'after' THEN coalesce(r.after_text, r.after::VARCHAR) "
    "ELSE b.value END AS value FROM {bad} b LEFT JOIN {rows} r USING (record)"
)


def row_dict(row: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(_BAD_FIELDS, row, strict=True))


def raw_of(
    con: duckdb.DuckDBPyConnection, staged: Staged, record: int, reason: str = ""
) -> str | None:
    """The value a message shows for a whole record: its text (a set-aside record: what
    :func:`~dpcr.changelog._set_aside.quarantine_members` gives)."""
    ensure_raw(con, staged.lazy, f"SELECT {int(record)} AS record")
    rows = _fetch(con, f"SELECT raw::VARCHAR FROM ({staged.raw_sql}) WHERE record = ?", [record])
    if not rows or rows[0][0] is None:
        return None
    return record_value(str(rows[0][0]), reason)


def record_value(raw: str, reason: str) -> str:
    """The value shown for a record rejected as a whole whose raw text (JSON) is ``raw``."""
    if reason in SET_ASIDE_REASONS:
        return quarantine_members(raw)[0]
    loaded = json.loads(raw)
    return loaded if isinstance(loaded, str) else raw


def field_label(fkey: str, staged: Staged, unit_column: str | None) -> str:
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


def _repeated_key(text: object) -> str | None:
    """The first key that a JSON object in ``text`` gives twice (at its top level), if any."""
    if not isinstance(text, str) or not text.lstrip().startswith("{"):
        return None
    found: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not found:
                found.append(key)
            seen.add(key)
        return dict(items)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except ValueError:
        return None
    return found[0] if found else None


def message(
    row: Mapping[str, Any], staged: Staged, source: SourceConfig, unit_column: str | None
) -> str:
    """What is wrong with the record and how to fix it (the source and record are prefixed)."""
    reason, fkey, op = row["reason"], row["fkey"], row["op"]
    field = field_label(fkey, staged, unit_column)
    value, entry, other = _show(row["value"]), row["entry"], row["other"]
    seq_field = staged.labels["seq"]
    twice = _repeated_key(row["value"]) if reason == "bad_json" else None
    if twice is not None:
        what = "the record" if fkey == "record" else f"field {field!r}"
        return (
            f"{what} gives the key {twice!r} more than once: {value}; write each key once "
            "(producers differ on which copy counts, so dpcr does not guess)"
        )
    if reason in SET_ASIDE_REASONS:
        return _set_aside_message(reason, row["value"], source)
    if reason == "bad_json" and fkey == "record":
        lines = JsonlSource | DebeziumSource | Wal2jsonSource
        what = "line" if isinstance(source, lines) else "record"
        return f"not a JSON object: {value}; write each {what} as one JSON object"
    if reason == "bad_json" and fkey == "after" and op != "delete" and _is_object(row["value"]):
        return (
            f"field {field!r} holds a bare NaN or infinity where a number is read, which is "
            f"not JSON: {value}; write null for a missing number, or a finite one"
        )
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
    if reason == "unknown_op" and isinstance(source, DebeziumSource | Wal2jsonSource) and str(
        row["value"] or ""
    ).strip().lower() == "t":
        return (
            f"field {field!r} is {value}: a TRUNCATE names no rows, so it cannot be charged to "
            "entries and dpcr refuses it; start a new changelog (and release) after a truncate "
            "(docs/cdc.md), or write the deletes it stands for"
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
    if reason == "missing_unit" and fkey == "before":
        return (
            f"field {field!r} is missing, but with the privacy unit column {unit_column!r} "
            f"{'a delete' if op == 'delete' else 'an update'} is charged to the unit in its row "
            "before the change, and dpcr never guesses it "
            "from other records (they may belong to another unit); make the source send the "
            "row before with every update and delete (PostgreSQL/Debezium: ALTER TABLE ... "
            "REPLICA IDENTITY FULL; canonical files: fill in before)"
        )
    if reason == "missing_unit":
        if unit_column is not None:
            where = {"delete": "before", "insert": "after"}.get(op, "before or after")
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
    subject = _subject(row, staged, unit_column)
    # The halves of a split update are two units' mutations, judged each on its own: one
    # unit's history never decides another unit's mutation (docs/privacy.md, section 8).
    half = "; the record's other half is judged on its own" if row["part"] else ""
    if reason == "duplicate":
        return (
            f"{subject} repeats {seq_field} {row['seq']} of record {other}; the first is "
            f"kept: remove the repeated record, or give it its own {seq_field}{half}"
        )
    when = _when(row["ts"])
    where = "" if row["unit"] == entry else f" in unit {row['unit']!r}"
    if reason == "double_insert":
        return (
            f"{subject} at {when}, but the entry is already live{where} (inserted at "
            f"record {other}); use an update, or delete it first{half}"
        )
    history = (
        f"it was deleted at record {other}"
        if other is not None
        else "it is not inserted before this time"
    )
    return (
        f"{subject} at {when}, but the entry is not live{where} ({history}); insert it "
        f"first, or check the record's time and sequence number{half}"
    )


def _is_object(value: object) -> bool:
    """``value`` is the text of a JSON object (an update's or insert's row after that is an
    object is refused only for a bare NaN or infinity token in a column read as a number)."""
    return isinstance(value, str) and value.startswith("{")


def _set_aside_message(reason: str, value: object, source: SourceConfig) -> str:
    what = "row" if isinstance(source, CsvSource) else "line"
    if reason == "too_long":
        limit = getattr(source, "max_record_bytes", 0)
        return (
            f"the {what} is {value} long, more than [source] max_record_bytes = {limit}; it is "
            "not read (nor held in memory): split the record, or raise the limit"
        )
    if reason == "bad_encoding" and isinstance(source, SqliteSource):
        return (
            f"a text value of the log's row is not UTF-8 ({value}); dpcr reads text as UTF-8: "
            "have the application write UTF-8 text (or the value as a BLOB, which the triggers "
            "log as hex)"
        )
    if reason == "bad_encoding":
        return (
            f"the {what} is not UTF-8 text ({value}); dpcr reads text sources as UTF-8: "
            "convert the file (for example `iconv -f latin1 -t utf-8 old > new`) or have the "
            "exporter write UTF-8"
        )
    header = getattr(source, "delimiter", ",")
    return (
        f"not a well-formed CSV row: {_show(value)}; every row needs the same columns as the "
        f"header (delimiter {header!r}), and fields with the delimiter or quotes must be quoted"
    )


def _subject(row: Mapping[str, Any], staged: Staged, unit_column: str | None) -> str:
    """The mutation a phase 2/3 message is about: ``insert of entry 'e'`` (with its unit when
    the unit is not the entry), or one half of an update split in two: one that moves the entry
    between units, or (the entry being the unit) changes the row's key."""
    entry, unit, part = row["entry"], row["unit"], row["part"]
    by_entry = unit_column is None and not staged.unit_field
    if part == 1 and by_entry:
        return f"the delete half of an update changing the key of entry {entry!r}"
    if part == 2 and by_entry:
        return f"the insert half of an update changing the key of a row to entry {entry!r}"
    if part == 1:
        return f"update of entry {entry!r} moving it out of unit {unit!r} (a delete there)"
    if part == 2:
        return f"update of entry {entry!r} moving it into unit {unit!r} (an insert there)"
    if by_entry:
        return f"{row['op']} of entry {entry!r}"
    return f"{row['op']} of entry {entry!r} of unit {unit!r}"


def bad_rows(
    con: duckdb.DuckDBPyConnection, staged: Staged, bad: str, *, raws: str | None = None
) -> Iterator[tuple[dict[str, Any], str]]:
    """Every rejected mutation of table ``bad`` (tombstones aside) in (record, part) order, with
    the text of its raw record from ``raws`` (a relation of (record, raw); default the staged
    source's)."""
    # (none: the source, which may be a file read again, is not read for them)
    if not _fetch(con, f"SELECT EXISTS (SELECT 1 FROM {bad} WHERE reason <> 'tombstone')")[0][0]:
        return
    if raws is None:
        ensure_raw(con, staged.lazy, f"SELECT record FROM {bad}")
        raws = f"SELECT record, raw::VARCHAR AS raw FROM ({staged.raw_sql})"
    # Temporary tables belong to this connection, so read with it (not a cursor) to the end.
    result = con.execute(
        f"SELECT q.*, r.raw::VARCHAR FROM ({BAD_SELECT.format(bad=bad, rows=staged.table)}) q "
        f"JOIN ({raws}) r USING (record) WHERE q.reason <> 'tombstone' "
        "ORDER BY q.record, q.part"
    )
    while rows := result.fetchmany(10_000):
        for row in rows:
            yield row_dict(row[:-1]), str(row[-1])


def quarantine_line(
    row: dict[str, Any], raw: str, staged: Staged, source: SourceConfig, unit_column: str | None
) -> str:
    """The quarantine file's line for one rejected mutation ``row`` (see :data:`BAD_SELECT`)
    whose source record reads ``raw`` (JSON): record, reason, field, value, message, raw (a
    set-aside record: its raw members, :mod:`dpcr.changelog._set_aside`)."""
    members = ""
    if row["reason"] in SET_ASIDE_REASONS:
        row["value"], members = quarantine_members(raw)
    elif row["fkey"] == "record":
        row["value"] = record_value(raw, str(row["reason"]))
    half = {1: {"half": "delete"}, 2: {"half": "insert"}}.get(int(row["part"] or 0), {})
    head = json.dumps(
        {
            "record": row["record"],
            **half,
            "reason": row["reason"],
            "field": field_label(row["fkey"], staged, unit_column),
            "value": row["value"],
            "message": message(row, staged, source, unit_column),
        },
        ensure_ascii=False,
    )
    if members:
        return head[:-1] + ", " + members + "}\n"
    return head[:-1] + ', "raw": ' + _strict(raw) + "}\n"


def _refuse(token: str) -> object:
    raise ValueError(token)


def _strict(raw: str) -> str:
    """``raw`` when it is JSON, else its text as a JSON string, so that the quarantine file
    stays JSON lines: a tabular record's raw object embeds its JSON columns, which can hold a
    bare NaN or infinity token (a Parquet float NaN is written so too). (A line's raw is a
    JSON string already.)"""
    if raw.startswith("{"):
        try:
            json.loads(raw, parse_constant=_refuse)
        except ValueError:
            return json.dumps(raw, ensure_ascii=False)
    return raw


def write_quarantine(
    con: duckdb.DuckDBPyConnection,
    staged: Staged,
    bad: str,
    path: Path,
    source: SourceConfig,
    unit_column: str | None,
) -> None:
    """One JSON object per rejected record: record, reason, field, value, message, raw. The
    file holds raw records: created owner-only (0600, a folder it needs 0700), never through a
    symbolic link (:mod:`dpcr._fs`)."""
    ensure_dir(path.parent, 0o700, follow=True)

    def lines(out: TextIO) -> None:
        for row, raw in bad_rows(con, staged, bad):
            out.write(quarantine_line(row, raw, staged, source, unit_column))

    write_atomic(path, lines, mode=0o600)
