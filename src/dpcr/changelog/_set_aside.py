"""Records a text source's fast readers refuse, set aside whole so that the rest is read.

DuckDB's readers refuse a whole file for one record that is not UTF-8, one longer than their
line size (DuckDB's own, or the source's ``max_record_bytes`` when that is smaller) or, for CSV,
one row whose fields do not match the header. Only then (a valid file costs nothing more) the
file is scanned here, in bounded memory, and copied to a private file (mode 0600, in the
caller's scratch folder: a release gives its owner-only ``operator/scratch``; a caller that
gives none, the system's temporary folder) in which each
record that is longer than ``max_record_bytes``, not UTF-8 or (CSV) malformed is replaced by one
*marker*: ``__dpcr_set_aside_<nonce>:<code>:<payload>`` (a line of the line
formats; for CSV the first field of a row with the header's number of fields, the others
empty). The nonce is random per scan, so no record can pass for a marker. Everything else --
line ends included -- is copied byte for byte, so the copy has the same records, numbered the
same, and the usual staging reads it. :func:`apply_marks` then gives each marked record its
reason (checked before every other check of phase 1) and its raw text for the quarantine file:

============ ====== ===================================================================
reason       code   raw (in the quarantine line)
============ ====== ===================================================================
too_long     ``L``  ``raw``: its first :data:`PREFIX_BYTES` bytes as text, ``raw_bytes``: its
                    length, ``raw_sha256``: the SHA-256 of its bytes (never held whole)
bad_encoding ``E``  ``raw``: the record as text with each byte that is not UTF-8 as ``\\xNN``,
                    ``raw_base64``: its bytes exactly
bad_csv      ``C``  ``raw``: the row as written
============ ====== ===================================================================

A record's length is its bytes without its line end (for CSV, a row's lines and the line ends
inside its quoted fields). The line formats' records are split at CR and LF, as DuckDB's line
reader splits them; a CSV row ends at a line end outside quotes (RFC 4180, quotes doubled
inside quoted fields). Checked in that order: a record too long is not decoded.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from dpcr._sql import lit

# (a run that loads nothing reports the reasons of this module without an engine)
if TYPE_CHECKING:
    import duckdb

__all__ = [
    "PREFIX_BYTES",
    "SET_ASIDE_REASONS",
    "SetAside",
    "apply_marks",
    "quarantine_members",
    "scan_csv",
    "scan_lines",
]

#: Bytes of a too-long record kept in the quarantine file.
PREFIX_BYTES = 1024
#: The reasons of records set aside when reading, in the order they are checked.
SET_ASIDE_REASONS = ("too_long", "bad_encoding", "bad_csv")
_CODES = {"L": "too_long", "E": "bad_encoding", "C": "bad_csv"}
_MARK = "__dpcr_set_aside_"
_CHUNK = 1 << 22
_BREAK = re.compile(rb"[\r\n]")


@dataclass(frozen=True, slots=True)
class SetAside:
    """What a scan found: a copy of the source (``path``, private, deleted by its reader) whose
    set-aside records are ``count`` markers beginning with ``mark`` (no copy, ``path`` None,
    when there are none); ``longest``: the longest line (for CSV: row) of the copy or the
    source, in bytes; for CSV, ``rows``: its rows (header and blank lines aside), which DuckDB
    must read as many of."""

    path: Path | None
    mark: str
    count: int
    longest: int
    rows: int = -1


class _Found(Exception):
    """A scan that only looks (no copy) met a record to set aside."""


class _Long:
    """A record longer than the limit, seen piece by piece: its length, digest and prefix."""

    def __init__(self) -> None:
        self.length = 0
        self.sha = hashlib.sha256()
        self.prefix = b""

    def update(self, piece: bytes) -> None:
        if len(self.prefix) < PREFIX_BYTES:
            self.prefix += piece[: PREFIX_BYTES - len(self.prefix)]
        self.length += len(piece)
        self.sha.update(piece)

    def payload(self) -> bytes:
        head = f"{self.length}:{self.sha.hexdigest()}:".encode()
        return b"L:" + head + base64.b64encode(self.prefix)


def _encoding_payload(record: bytes) -> bytes | None:
    """``E:<base64>`` when ``record`` is not UTF-8, else None."""
    try:
        record.decode("utf-8")
    except UnicodeDecodeError:
        return b"E:" + base64.b64encode(record)
    return None


class _Copy:
    """The copy being written: bytes as read, or a marker in place of a record."""

    def __init__(self, out: BinaryIO | None, mark: str) -> None:
        self.out = out  # None: only look (the first record to set aside ends the scan)
        self.mark = mark.encode() + b":"
        self.count = 0
        self.rows = -1
        self.longest = 0

    def write(self, data: bytes, longest: int) -> None:
        if self.out is not None:
            self.out.write(data)
        self.longest = max(self.longest, longest)

    def marker(self, payload: bytes, tail: bytes = b"", *, quote: bool = False) -> None:
        if self.out is None:
            raise _Found
        head = (b'"' if quote else b"") + self.mark + payload
        self.write(head + tail, len(head) + len(tail.rstrip(b"\r\n")))
        self.count += 1


def _longest(data: bytes) -> int:
    """The longest run of ``data`` (which ends with a line break) without CR or LF."""
    arr = np.frombuffer(data, dtype=np.uint8)
    breaks = np.flatnonzero((arr == 0x0A) | (arr == 0x0D))
    return int(np.diff(breaks, prepend=-1).max()) - 1


class _Lines:
    """The line formats' scan: records are the runs between CR and LF bytes."""

    def __init__(self, copy: _Copy, limit: int) -> None:
        self.copy, self.limit = copy, limit
        self.carry = b""  # the record being read (no break seen yet), at most ``limit`` bytes
        self.long: _Long | None = None  # the record being read, when it is too long

    def feed(self, block: bytes) -> None:
        if self.long is not None:
            m = _BREAK.search(block)
            if m is None:
                self.long.update(block)
                return
            self.long.update(block[: m.start()])
            self.copy.marker(self.long.payload())
            self.long, block = None, block[m.start() :]
        data = self.carry + block if self.carry else block
        self.carry = b""
        last = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if last < 0:
            self._partial(data)
            return
        done, rest = data[: last + 1], data[last + 1 :]
        longest = _longest(done)
        if longest <= self.limit and _utf8(done):
            self.copy.write(done, longest)  # (most blocks: nothing to set aside)
        else:
            for m in re.finditer(rb"([^\r\n]*)([\r\n])", done):
                self._record(m.group(1), m.group(2))
        self._partial(rest)

    def _partial(self, data: bytes) -> None:
        if len(data) > self.limit:
            self.long = _Long()
            self.long.update(data)
        else:
            self.carry = data

    def _record(self, record: bytes, end: bytes) -> None:
        if len(record) > self.limit:
            long = _Long()
            long.update(record)
            self.copy.marker(long.payload(), end)
        elif (payload := _encoding_payload(record)) is not None:
            self.copy.marker(payload, end)
        else:
            self.copy.write(record + end, len(record))

    def close(self) -> None:
        if self.long is not None:
            self.copy.marker(self.long.payload())
        elif self.carry:
            self._record(self.carry, b"")


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _pass(path: Path, copy: _Copy, csv: tuple[bytes, int] | None, limit: int) -> None:
    with open(path, "rb") as f:
        if csv is not None:
            _Csv(copy, limit, *csv).run(f)
            return
        lines = _Lines(copy, limit)
        while block := f.read(_CHUNK):
            lines.feed(block)
        lines.close()


def _scan(
    path: Path, csv: tuple[bytes, int] | None, limit: int, directory: Path | None
) -> SetAside:
    """Look for records to set aside in ``path``; when there are some, copy it with markers in
    their place, in ``directory`` (None: the system's temporary folder). (Two passes then, the
    first stopping at the first such record: a file that a reader refused for another reason
    -- a line longer than its default -- is not copied.)"""
    mark = _MARK + secrets.token_hex(16)
    look = _Copy(None, mark)
    try:
        _pass(path, look, csv, limit)
        return SetAside(None, mark, 0, look.longest, look.rows)
    except _Found:
        pass
    fd, name = tempfile.mkstemp(prefix="dpcr-set-aside-", suffix=path.suffix, dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            copy = _Copy(out, mark)
            _pass(path, copy, csv, limit)
    except BaseException:
        os.unlink(name)
        raise
    return SetAside(Path(name), mark, copy.count, copy.longest, copy.rows)


def scan_lines(path: Path, limit: int, *, directory: Path | None = None) -> SetAside:
    """Set aside the records of the line file ``path`` (JSON lines, Debezium, wal2json) longer
    than ``limit`` bytes or not UTF-8 (see :class:`SetAside`; the copy goes to ``directory``,
    None: the system's temporary folder)."""
    return _scan(path, None, limit, directory)


def scan_csv(
    path: Path, *, delimiter: str, fields: int, limit: int, directory: Path | None = None
) -> SetAside:
    """Set aside the rows of the CSV file ``path`` (its first row the header of ``fields``
    names) longer than ``limit`` bytes, not UTF-8, or not ``fields`` well-formed fields (see
    :class:`SetAside`; the copy goes to ``directory``, None: the system's temporary folder)."""
    return _scan(path, (delimiter.encode(), fields), limit, directory)


class _Csv:
    """The CSV scan: a row is assembled from lines while a quoted field is open (an odd number
    of quotes so far); lines are read in pieces of at most ``limit + 2`` bytes, so a row longer
    than the limit is never held. The first row (the header) is copied as it is, and its line
    end is the file's (LF or CR LF), as DuckDB's reader takes it: a row ending otherwise, or
    with a CR outside quotes, is malformed (the reader refuses it), and the copy ends marker
    and blank lines with the file's line end."""

    def __init__(self, copy: _Copy, limit: int, delimiter: bytes, fields: int) -> None:
        self.copy, self.limit, self.delim, self.fields = copy, limit, delimiter, fields
        self.filler = delimiter * (fields - 1)  # the marker row's empty fields
        self.newline = b"\n"

    def run(self, f: BinaryIO) -> None:
        self.copy.rows = 0
        row: list[bytes] = []  # the row's pieces so far (while it is short enough)
        size = quotes = 0
        long: _Long | None = None
        first = True
        for piece in iter(lambda: f.readline(self.limit + 2), b""):
            quotes += piece.count(b'"')
            body, end = piece, b""
            if piece.endswith(b"\n") and quotes % 2 == 0:
                body = piece.rstrip(b"\r\n")
                end = piece[len(body) :]
            size += len(body)
            if long is None and size > self.limit:
                long = _Long()
                for p in row:
                    long.update(p)
                row = []
            if long is not None:
                long.update(body)
            else:
                row.append(body)
            if end:
                self._row(b"".join(row), long, end, first)
                row, size, quotes, long, first = [], 0, 0, None, False
        if row or long is not None:
            self._row(b"".join(row), long, b"", first)

    def _row(self, body: bytes, long: _Long | None, end: bytes, first: bool) -> None:
        if long is None and first:  # the header
            self.newline = b"\r\n" if end == b"\r\n" else b"\n"
            self.copy.write(body + end, len(body))
            return
        newline = self.newline if end else b""
        if long is None and not body:  # a blank line (not a row)
            self.copy.write(newline, 0)
            return
        self.copy.rows += 1
        payload = long.payload() if long is not None else _encoding_payload(body)
        if payload is None and (end != newline or not self._well_formed(body)):
            payload = b"C:" + base64.b64encode(body + end[: -len(newline) or None])
        if payload is None:
            self.copy.write(body + end, len(body))
        else:
            self.copy.marker(payload, b'"' + self.filler + newline, quote=True)

    def _well_formed(self, body: bytes) -> bool:
        """The row has the header's number of fields, no CR stands outside quotes, and each
        quoted field (one that begins with a quote; a quote elsewhere is text, as DuckDB reads
        it) ends with a quote that is followed by blanks and then a delimiter or the row's
        end; quotes are doubled inside it."""
        delim = self.delim
        if b'"' not in body:
            return body.count(delim) + 1 == self.fields and b"\r" not in body
        i, n, count = 0, len(body), 1
        while True:
            if body.startswith(b'"', i):  # a quoted field
                k = i + 1
                while (k := body.find(b'"', k)) >= 0 and body.startswith(b'"', k + 1):
                    k += 2  # (a doubled quote)
                if k < 0:
                    return False  # a quote left open
                i = k + 1
                while body.startswith(b" ", i):
                    i += 1
                if i == n:
                    break
                if not body.startswith(delim, i):
                    return False
            else:
                k = body.find(delim, i)
                if b"\r" in body[i : n if k < 0 else k]:
                    return False
                if k < 0:
                    break
                i = k
            i += len(delim)
            count += 1
        return count == self.fields


def _marker_raw(code: str, payload: str) -> str:
    """The raw object of a marker's payload (see the module docstring): ``value`` (what the
    message shows) and the quarantine line's raw members."""
    if code == "L":
        length, sha, prefix = payload.split(":", 2)
        text = base64.b64decode(prefix).decode("utf-8", "backslashreplace")
        value = f"{int(length)} bytes"
        members = {"raw": text, "raw_bytes": int(length), "raw_sha256": sha}
    else:
        data = base64.b64decode(payload)
        value = text = data.decode("utf-8", "backslashreplace")
        members = {"raw": text}
        if code == "E":
            members["raw_base64"] = payload
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                value = f"byte 0x{data[exc.start]:02x} at byte {exc.start + 1}"
    return json.dumps({"value": value, **members}, ensure_ascii=False)


def apply_marks(
    con: duckdb.DuckDBPyConnection, rows: str, raw_sql: str, marks: str, mark: str, table: str
) -> str:
    """Give the marked records of the rows table ``rows`` their reason and raw text; return
    the raw SQL (``raw_sql``, a relation of (record, raw)) with the marked records' raw
    objects (:func:`quarantine_members`). ``marks``: SQL of (record, text) of the rows that
    may hold a marker (a line, or a CSV row's first field).

    Creates table ``table`` (record, chk, raw), and column ``pre_chk`` of ``rows``: the reason
    of a marked record for phase 1 (``reason:record``), else NULL."""
    found = con.execute(
        f"SELECT record, text FROM ({marks}) WHERE contains(text, {lit(mark)})"
    ).fetchall()
    values = []
    start = len(mark) + 1
    for record, text in found:
        body = str(text).strip()
        code, _, payload = body[start:].partition(":")
        if body.startswith(mark + ":") and code in _CODES:
            values.append((int(record), f"{_CODES[code]}:record", _marker_raw(code, payload)))
    con.execute(f"CREATE TEMP TABLE {table} (record BIGINT, chk VARCHAR, raw VARCHAR)")
    if values:
        con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", values)
    con.execute(f"ALTER TABLE {rows} ADD COLUMN pre_chk VARCHAR")
    con.execute(f"UPDATE {rows} SET pre_chk = m.chk FROM {table} m WHERE {rows}.record = m.record")
    return (
        f"SELECT s.record, coalesce(m.raw::JSON, s.raw) AS raw FROM ({raw_sql}) s "
        f"LEFT JOIN {table} m USING (record)"
    )


def quarantine_members(raw: str) -> tuple[str, str]:
    """(value, the members of the quarantine line after ``message``) of a set-aside record
    whose raw text (from ``Staged.raw_sql``) is ``raw``."""
    obj = json.loads(raw)
    value = str(obj.pop("value"))
    return value, json.dumps(obj, ensure_ascii=False)[1:-1]
