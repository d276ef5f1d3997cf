"""Lines of the most common compact form read with array operations on their bytes.

A session's step from memory (:mod:`dpcr.engines.duckdb_memory`) reads lines of the common
form with one pattern per line; this reads the narrower form that tools writing JSON lines
without blanks produce (DuckDB's ``COPY .. (FORMAT json)``, ``json.dumps(.., separators=(",",
":"))``) without a Python object per line or per field:

    {"entry":E,"ts":T,"op":"insert"[,"before":null],"after":{"c1":V,..}}
    {"entry":E,"ts":T,"op":"update"[,"before":(null|{"c1":V,..})],"after":{"c1":V,..}}
    {"entry":E,"ts":T,"op":"delete"[,"before":(null|{"c1":V,..})][,"after":null]}

with the summed columns ``c1, ..`` in this order, E and T integers without a fraction or an
exponent (E at most 15 characters and not ``-0``; T at most 18 digits), each V null or a number
without an exponent of at most 15 digits. Every line of this form is one that the pattern of
:func:`dpcr.engines.memory_batch._lines_pattern` takes, and it gives the same values: a
number of at most 15 digits and ``d`` of them after the point is its digits' integer divided by
``10**d``, both exact in a float, so the division rounds as reading the text does. Any other
line (a blank, a text entry, an exponent, a field in another order) makes :func:`read` answer
None, and the step reads the chunk the way it did.

How it reads: the number after each colon (a ``-`` or a digit up to the next ``,`` or ``}``)
is a span; the line with each span replaced by ``#`` is its skeleton, which must be one of the
form's (:func:`_skeletons`); the spans are checked against the number grammar and converted
together.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np

__all__ = ["Lines", "read"]

#: Digits at most in a summed value (so that its digits' integer is exact in a float) and in
#: an entry (as the common form's pattern takes an entry as its text), and in a ts.
_VALUE_DIGITS = 15
_ENTRY_CHARS = 15
_TS_DIGITS = 18
#: More characters than a span of the form has (a ts's minus and its digits).
_WIDTH = _TS_DIGITS + 2

_COLON, _COMMA, _CLOSE, _MINUS, _DOT, _HASH, _NL = map(ord, ':,}-.#\n')
#: The characters of a number's text (a span's).
_NUMBER = b"0123456789.-"
_POW10 = 10 ** np.arange(19, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Lines:
    """The lines read: entries (integers), ts (as written, not yet scaled), op codes (0
    insert, 1 update, 2 delete) and per summed column the after's values (NaN: null)."""

    entries: np.ndarray
    ts: np.ndarray
    op: np.ndarray
    values: dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class _Kinds:
    """The skeletons of a form (by skeleton: its index) and per index its op code, its
    spans and the span of each column's after value (-1: null)."""

    index: dict[bytes, int]
    op: np.ndarray
    spans: np.ndarray
    after: np.ndarray  # (kinds, columns)
    #: by skeleton without its marks (None when a column's name holds a character of
    #: :data:`_NUMBER`, which removing the numbers' characters would remove from it too)
    bare: dict[bytes, int] | None


_KINDS: dict[tuple[str, ...], _Kinds] = {}


def _skeletons(columns: tuple[str, ...]) -> _Kinds:
    """Every skeleton of the form for ``columns`` (module docstring)."""
    kinds = _KINDS.get(columns)
    if kinds is not None:
        return kinds
    objects = []
    for values in product(("#", "null"), repeat=len(columns)):
        text = "{" + ",".join(f'"{c}":{v}' for c, v in zip(columns, values, strict=True)) + "}"
        objects.append((text, values))
    befores = [("", 0), (',"before":null', 0)]
    befores_any = befores + [(',"before":' + t, v.count("#")) for t, v in objects]
    index: dict[bytes, int] = {}
    ops: list[int] = []
    spans: list[int] = []
    after: list[list[int]] = []
    for op, name in enumerate(("insert", "update", "delete")):
        heads = befores if op == 0 else befores_any
        if op < 2:
            tails = [(',"after":' + t, v) for t, v in objects]
        else:
            tails = [("", ("null",) * len(columns)), (',"after":null', ("null",) * len(columns))]
        for (before, before_spans), (tail, values) in product(heads, tails):
            line = f'{{"entry":#,"ts":#,"op":"{name}"{before}{tail}}}'
            at, positions = 2 + before_spans, []
            for v in values:
                positions.append(at if v == "#" else -1)
                at += v == "#"
            index[line.encode()] = len(ops)
            ops.append(op)
            spans.append(at)
            after.append(positions)
    bare = {line.replace(b"#", b""): k for line, k in index.items()}
    plain = not any(set(c.encode()) & set(_NUMBER) for c in columns) and len(bare) == len(index)
    kinds = _KINDS[columns] = _Kinds(
        index, np.array(ops, dtype=np.int8), np.array(spans, dtype=np.int64),
        np.array(after, dtype=np.int64).reshape(len(ops), len(columns)),
        bare if plain else None,
    )  # fmt: skip
    return kinds


def _integers(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The integers written by the digits ``buf[lo:hi]`` of each span (at most 18); ``rows``:
    :func:`_rows` of ``buf``."""
    if not len(lo):
        return np.zeros(0, dtype=np.int64)
    wide = hi - lo
    width = max(int(wide.max()), 1)
    # (each span's last ``width`` characters as digits: those before its first made 0 when
    # not all are as wide, as a ts's are)
    digits = rows[hi + (_WIDTH - width), :width] - np.uint8(48)
    if int(wide.min()) != width:
        digits *= np.arange(width) >= (width - wide)[:, None]
    out = np.zeros(len(lo), dtype=np.int64)
    for column in digits.T:
        out *= 10
        out += column
    return out


def _inner(lead: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The positions of the characters of each span after its lead (up to its end)."""
    cut = end - lead - 1
    total = int(cut.sum())
    inner: np.ndarray = np.repeat(lead + 1 - (np.cumsum(cut) - cut), cut) + np.arange(total)
    return inner


def _skeleton(
    data: bytes, buf: np.ndarray, kinds: _Kinds, lead: np.ndarray, end: np.ndarray
) -> list[int] | None:
    """The kind of each line: its skeleton's index (each span one ``#``), None when a line
    has none. Every span is a lead and the digits or points after it: when no other
    character of ``data`` is one of a number's, removing them all is removing the spans,
    and the line without its spans is its skeleton without its marks."""
    bare = data.translate(None, _NUMBER) if kinds.bare is not None else b""
    if kinds.bare is not None and len(data) - len(bare) == int((end - lead).sum()):
        lines = bare[:-1].split(b"\n")
        index = kinds.bare
    else:
        marked = buf.copy()
        marked[lead] = _HASH
        keep = np.ones(len(buf), dtype=bool)
        keep[_inner(lead, end)] = False
        lines = marked[keep].tobytes()[:-1].split(b"\n")
        index = kinds.index
    found = list(map(index.get, lines))
    return None if None in found else found  # type: ignore[return-value]


def _rows(buf: np.ndarray) -> np.ndarray:
    """The :data:`_WIDTH` bytes from each position of ``buf`` with :data:`_WIDTH` zeros
    before and after it (row ``p + _WIDTH`` starts at ``buf[p]``): a read-only view, so that
    a span's characters are gathered as one row, without an index per byte."""
    padded = np.zeros(len(buf) + 2 * _WIDTH, dtype=np.uint8)
    padded[_WIDTH:-_WIDTH] = buf
    rows = np.ndarray((len(buf) + _WIDTH + 1, _WIDTH), np.uint8, padded, 0, (1, 1))
    rows.flags.writeable = False
    return rows


def _spans(rows: np.ndarray, lead: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """The end of each span (its first comma or closing brace after its lead), how many
    points it holds and where its point is (its end when it has none); None when a span has
    a character other than a digit or a point between its lead and its end, or is longer
    than any number of the form (:data:`_WIDTH`). ``rows``: :func:`_rows` of the bytes."""
    after = rows[lead + (_WIDTH + 1), : _WIDTH - 1]  # (each span's characters after its lead)
    point = after == _DOT
    other = (after - 48 > 9) & ~point  # (unsigned: a byte below "0" wraps past "9")
    length = other.argmax(axis=1) + 1  # (up to its first character not a number's)
    stop = after[np.arange(len(lead)), length - 1]
    if ((stop != _COMMA) & (stop != _CLOSE)).any():  # (none in the row: argmax 0, a digit)
        return None
    point &= (length - 1).astype(np.uint8)[:, None] > np.arange(_WIDTH - 1, dtype=np.uint8)
    end = lead + length
    points = point.view(np.uint8) @ np.ones(_WIDTH - 1, dtype=np.uint8)  # (at most 19)
    return end, points, np.where(points == 1, lead + 1 + point.argmax(axis=1), end)


#: Bytes of lines read together at most (but for a longer line): each line is read alone, so
#: reading lines in pieces gives what reading them at once gives, and the arrays of a piece
#: (tens of bytes a byte of it) stay in the processor's caches and in memory the process
#: already has (10^7 +1 % step, 11 MB of lines: 115 -> 88 ms).
CHUNK = 1 << 19


def read(data: bytes, columns: tuple[str, ...]) -> Lines | None:
    """The lines of ``data`` (complete lines, none blank) when every one has the form of the
    module docstring, else None. Read :data:`CHUNK` bytes of lines at a time."""
    if len(data) <= CHUNK or not data.endswith(b"\n"):
        return _read(data, columns)
    parts: list[Lines] = []
    start = 0
    while start < len(data):
        stop = data.rfind(b"\n", start, start + CHUNK) + 1
        if stop <= start:  # (a line longer than a piece: the piece is that line)
            stop = data.index(b"\n", start) + 1
        part = _read(data[start:stop], columns)
        if part is None:
            return None
        parts.append(part)
        start = stop
    return Lines(np.concatenate([p.entries for p in parts]),
                 np.concatenate([p.ts for p in parts]), np.concatenate([p.op for p in parts]),
                 {c: np.concatenate([p.values[c] for p in parts]) for c in columns})  # fmt: skip


def _read(data: bytes, columns: tuple[str, ...]) -> Lines | None:
    """:func:`read` of lines read at once."""
    if not columns or len(columns) > 4 or b"#" in data:
        return None
    kinds = _skeletons(columns)
    buf = np.frombuffer(data, dtype=np.uint8)
    colon = np.flatnonzero(buf == _COLON) + 1
    after = buf[np.minimum(colon, len(buf) - 1)]
    lead = colon[((after >= 48) & (after <= 57)) | (after == _MINUS)]
    if not len(lead):
        return None
    # a span ends at the first comma or closing brace after its lead; between them only
    # digits and points
    rows = _rows(buf)
    spans = _spans(rows, lead)
    if spans is None:
        return None
    end, points, point = spans
    if len(lead) > 1 and (lead[1:] <= end[:-1]).any():  # (spans that overlap)
        return None
    found = _skeleton(data, buf, kinds, lead, end)
    if found is None:
        return None
    kind = np.array(found, dtype=np.int64)
    counts = kinds.spans[kind]
    first_span = np.cumsum(counts) - counts
    if int(counts.sum()) != len(lead):
        return None
    # the number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?, a digit first and after a point
    # (a lead is a digit or a minus; the characters after it digits or points)
    minus = buf[lead] == _MINUS
    first = lead + minus
    if (first >= end).any() or (buf[first] == _DOT).any():
        return None
    zero = buf[first] == 48
    if (zero & (first + 1 < end) & (buf[np.minimum(first + 1, len(buf) - 1)] != _DOT)).any():
        return None
    if (points > 1).any() or ((buf[end - 1] == _DOT) & (points == 1)).any():
        return None
    # entries and ts: integers; values: at most 15 digits
    entry, ts = first_span, first_span + 1
    digits = end - first - points
    if points[entry].any() or points[ts].any() or (end[entry] - lead[entry] > _ENTRY_CHARS).any() \
            or (digits[ts] > _TS_DIGITS).any():  # fmt: skip
        return None
    if (minus[entry] & zero[entry]).any():  # (-0: not an integer's text)
        return None
    values_at = np.ones(len(lead), dtype=bool)
    values_at[entry] = values_at[ts] = False
    if (digits[values_at] > _VALUE_DIGITS).any():
        return None
    sign = np.where(minus, -1, 1)
    entries = sign[entry] * _integers(rows, first[entry], end[entry])
    stamps = sign[ts] * _integers(rows, first[ts], end[ts])
    out: dict[str, np.ndarray] = {}
    for j, column in enumerate(columns):
        span = kinds.after[kind, j]
        has = span >= 0
        s = first_span[has] + span[has]
        whole = _integers(rows, first[s], np.minimum(point[s], end[s]))
        frac_lo = np.minimum(point[s] + 1, end[s])
        scale = end[s] - frac_lo
        mantissa = whole * _POW10[scale] + _integers(rows, frac_lo, end[s])
        x = np.full(len(kind), np.nan)
        # (-0.0 for -0: as the text reads)
        x[has] = np.where(minus[s], -1.0, 1.0) * (mantissa / _POW10[scale].astype(float))
        out[column] = x
    return Lines(entries, stamps, kinds.op[kind], out)
