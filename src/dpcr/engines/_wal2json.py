"""wal2json lines (``format-version 2``, what ``dpcr follow`` and ``dpcr capture postgres``
write) read for a session's step from memory (:mod:`dpcr.engines.duckdb_memory`).

:func:`read` takes a chunk of complete lines and gives its records as the wal2json stage
(:mod:`dpcr.changelog._stage_wal2json`) and the loader read them, or None when one line is not
of the narrow form read here (the step then runs in SQL, which reads it as before):

* every line a JSON object (its first byte ``{``) with no repeated key, no NaN or infinity;
* ``action`` ``B``, ``C`` or ``M`` (a tombstone record, whatever its table), or ``I``, ``U``,
  ``D``; ``T`` and any other action are refused;
* with ``Wal2jsonSource.table``, a change whose ``schema`` and ``table`` (texts) name another
  table is not a record (its line keeps its number); one that names it, or any change without
  ``table``, is a record;
* a change's ``timestamp`` is ``YYYY-MM-DD HH:MM:SS[.ffffff]±HH[:MM]`` (what PostgreSQL
  writes, its zone's offset at most 14:59) and its ``lsn`` ``X/X`` (1-8 hex digits each, no
  blank): its sequence number ``hi * 2^32 + lo``;
* ``columns`` (the row after: an insert's and an update's, never a delete's) and ``identity``
  (the row before: an update's or a delete's, never an insert's; an update may have none) are
  arrays of objects, each with a text ``name`` (none repeated) and a ``value`` (missing:
  null);
* the key column (one) holds an integer of at most 2^53 in magnitude or printable ASCII text
  without blanks at either end: the entry (from ``columns``, a delete's from ``identity``),
  and an update's ``identity``, when it holds the key, holds the same (no key move);
* each summed column of the row after is a JSON number (finite, an integer at most 2^53 in
  magnitude), null or missing.

Anything else -- a line that is not an object, a truncate, a time zone by name, a missing LSN,
an entry of another type, a key moved by an update, a value given as text -- answers None.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpcr.engines._strict_json import DECODER as _DECODER
from dpcr.engines._strict_json import Refused as _Refused

__all__ = ["Changes", "Gathered", "entry_text", "last_time", "read", "summed"]

#: Entry texts taken as written: printable ASCII without blanks at either end.
_ENTRY = re.compile(r"[!-~](?:[ -~]*[!-~])?\Z")
_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
                   r"([+-])(\d\d)(?::(\d\d))?\Z")
_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})\Z")
_EXACT = 2**53
_OPS = {"I": 0, "U": 1, "D": 2}
_TOMBSTONES = frozenset(("B", "C", "M"))
#: An integer -0 outside a string (read as 0 by Python, written "-0" by DuckDB).
_MINUS_ZERO = re.compile(rb"-0[,}\]\s]")




@dataclass(frozen=True, slots=True)
class Changes:
    """The records of a chunk: per change (a record that is a mutation) its entry text, ts
    (µs), sequence number, op code (0 insert, 1 update, 2 delete), line number in the chunk
    (from 1) and per summed column the value after (NaN: null or missing); the records
    (changes and tombstones), the tombstones and the lines of the chunk; per change whether
    it gave the row before (``identity`` not null: the loader's ``has_before``; None from a
    reader that does not say it)."""

    entries: list[str]
    ts: np.ndarray
    seq: np.ndarray
    op: np.ndarray
    line: np.ndarray
    values: dict[str, np.ndarray]
    records: int
    tombstones: int
    lines: int
    has_before: np.ndarray | None


def _micros(text: Any, cache: dict[str, int]) -> int:
    if type(text) is not str:
        raise _Refused("timestamp")
    got = cache.get(text)
    if got is not None:
        return got
    m = _TIME.match(text)
    if m is None:
        raise _Refused("timestamp")
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    if not (y >= 1 and 1 <= mo <= 12 and 1 <= d <= calendar.monthrange(y, mo)[1] and h < 24
            and mi < 60 and s < 60):  # fmt: skip
        raise _Refused("timestamp")
    zone_h, zone_m = int(m.group(9)), int(m.group(10) or 0)
    if zone_h > 14 or zone_m > 59:  # (a time no zone has: a bad_timestamp)
        raise _Refused("timestamp")
    days = (calendar.timegm((y, mo, d, 0, 0, 0, 0, 0, 0))) // 86_400
    offset = (zone_h * 60 + zone_m) * (1 if m.group(8) == "+" else -1)
    seconds = ((days * 24 + h) * 60 + mi - offset) * 60 + s
    got = cache[text] = seconds * 1_000_000 + int((m.group(7) or "0").ljust(6, "0"))
    return got


def _row(value: Any) -> dict[str, Any]:
    """An array of ``{"name", "value"}`` objects as the row it stands for."""
    if type(value) is not list:
        raise _Refused("row")
    row: dict[str, Any] = {}
    for c in value:
        if type(c) is not dict or type(c.get("name")) is not str or c["name"] in row:
            raise _Refused("row")
        row[c["name"]] = c.get("value")
    return row


def entry_text(value: Any) -> str:
    """An entry as the loader writes it: an integer of at most 2^53 in magnitude, or printable
    ASCII text without blanks at either end; anything else is refused."""
    if type(value) is int and -_EXACT <= value <= _EXACT:
        return str(value)
    if type(value) is str and _ENTRY.match(value):
        return value
    raise _Refused("entry")


def _change(m: dict[str, Any], op: int, key: str) -> tuple[str, dict[str, Any] | None]:
    """The entry and the row after of a change message."""
    after = m.get("columns")
    before = m.get("identity")
    if (after is None) != (op == 2) or (before is not None and op == 0):
        raise _Refused("rows")
    row = _row(after) if after is not None else None
    old = _row(before) if before is not None else None
    if row is not None:
        entry = entry_text(row.get(key))
        if old is not None and old.get(key) is not None and entry_text(old[key]) != entry:
            raise _Refused("key moved")
        return entry, row
    assert old is not None
    return entry_text(old.get(key)), None


#: The commit time of a line (wal2json writes it before the LSN and the rows).
_STAMP = re.compile(rb'"timestamp":\s*"([^"\\]{1,64})"')


def last_time(data: bytes) -> int:
    """The commit time (µs) of the last line of ``data`` (complete lines), or the earliest
    time when it names none that :func:`read` takes."""
    m = _STAMP.search(data, max(0, data.rfind(b"\n", 0, len(data) - 1)))
    try:
        return _micros(m[1].decode(), {}) if m is not None else -(2**63)
    except (_Refused, UnicodeDecodeError):
        return -(2**63)


def read(data: bytes, *, key: str, table: str | None, columns: tuple[str, ...]) -> Changes | None:
    """The records of ``data`` (complete lines, none blank or longer than the source takes,
    UTF-8 checked by the caller's decode) when every line has the form of the module
    docstring, else None."""
    if _MINUS_ZERO.search(data) or not data.startswith(b"{") or b"\n\n" in data:
        return None
    try:
        text = data.decode("utf-8")
        lines = text[:-1].split("\n")
        if any(not line.startswith("{") for line in lines):
            return None
        messages = _DECODER.decode("[" + ",".join(lines) + "]")
        return _changes(messages, key=key, table=table, columns=columns)
    except (_Refused, UnicodeDecodeError, ValueError, RecursionError):
        return None


def _changes(messages: list[Any], *, key: str, table: str | None,
             columns: tuple[str, ...]) -> Changes:  # fmt: skip
    schema, name = table.split(".", 1) if table is not None else (None, None)
    got = Gathered(columns, befores=True)
    tombstones = records = 0
    times: dict[str, int] = {}
    for number, m in enumerate(messages, start=1):
        if type(m) is not dict:
            raise _Refused("not an object")
        action = m.get("action")
        if type(action) is str and action in _TOMBSTONES:
            tombstones += 1
            records += 1
            continue
        code = _OPS.get(action) if type(action) is str else None
        if code is None:
            raise _Refused("action")
        if table is not None:
            s, t = m.get("schema"), m.get("table")
            if type(s) is not str or type(t) is not str:
                raise _Refused("table")
            if (s, t) != (schema, name):
                continue
        records += 1
        lsn = _LSN.match(m["lsn"]) if type(m.get("lsn")) is str else None
        if lsn is None:
            raise _Refused("lsn")
        entry, row = _change(m, code, key)
        seq = int(lsn.group(1), 16) * 2**32 + int(lsn.group(2), 16)
        if seq >= 2**63:
            raise _Refused("lsn")
        got.add(entry, _micros(m.get("timestamp"), times), seq, code, number, row,
                before=m.get("identity") is not None)
    return got.changes(records, tombstones, len(messages))


def summed(value: Any) -> float:
    """A summed column's value after a change: a JSON number (finite, an integer at most
    2^53 in magnitude), NaN for null or missing; anything else is refused."""
    if value is None:
        return np.nan
    if type(value) not in (int, float) or (type(value) is int
                                           and not -_EXACT <= value <= _EXACT):  # fmt: skip
        raise _Refused("value")
    return value  # type: ignore[no-any-return]


@dataclass(slots=True)
class Gathered:
    """Per change of a chunk, as it is read: its entry, ts (µs), sequence number, op code,
    line number, the values of the summed ``columns`` of its row after and, when
    :attr:`befores`, whether it gave a row before."""

    columns: tuple[str, ...]
    #: Whether each change says if it gave a row before (:attr:`Changes.has_before`).
    befores: bool = False
    entries: list[str] = field(default_factory=list)
    ts: list[int] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)
    op: list[int] = field(default_factory=list)
    line: list[int] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)
    before: list[bool] = field(default_factory=list)

    def add(self, entry: str, ts: int, seq: int, op: int, line: int,
            row: dict[str, Any] | None, before: bool = False) -> None:  # fmt: skip
        """One change more (``row``: its row after, None for a delete; ``before``: whether it
        gave a row before, kept when :attr:`befores`)."""
        self.entries.append(entry)
        self.ts.append(ts)
        self.seq.append(seq)
        self.op.append(op)
        self.line.append(line)
        if self.befores:
            self.before.append(before)
        for c in self.columns:
            self.values.setdefault(c, []).append(summed(row.get(c) if row is not None else None))

    def changes(self, records: int, tombstones: int, lines: int) -> Changes:
        """The chunk's :class:`Changes`."""
        return Changes(
            self.entries, np.array(self.ts, dtype=np.int64), np.array(self.seq, dtype=np.int64),
            np.array(self.op, dtype=np.int8), np.array(self.line, dtype=np.int64),
            {c: np.array(self.values.get(c, []), dtype=np.float64) for c in self.columns},
            records, tombstones, lines,
            np.array(self.before, dtype=bool) if self.befores else None,
        )  # fmt: skip
