"""The new lines of a session's step read into a :class:`~dpcr.engines.duckdb_held.Batch`
(:mod:`dpcr.engines.duckdb_memory`): JSON lines in the plain form that step takes (compact
lines by array operations, others decoded once), wal2json and Debezium lines through their
readers; anything the SQL loader could read otherwise is refused (None), and the step then
runs in SQL."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.engines import _lines
from dpcr.engines._strict_json import DECODER as _DECODER
from dpcr.engines._strict_json import Refused as _Refused
from dpcr.engines._strict_json import no_constant as _constant
from dpcr.engines.duckdb_held import Batch
from dpcr.engines.memory_sources import explicit, read_changes

if TYPE_CHECKING:
    from dpcr.engines.base import AggregateRequest

__all__ = ["parse", "read_batch"]

#: Entry texts taken as written: printable ASCII without blanks at either end.
_ENTRY = re.compile(r"[!-~](?:[ -~]*[!-~])?\Z")
#: Integers beyond this are read by DuckDB's JSON parser in ways the fast path does not follow.
_EXACT = 2**53


_PLAIN = json.JSONDecoder(parse_constant=_constant)
#: A closing quote with blanks before a colon (a key the count of :func:`_unrepeated` misses).
_SPACED = re.compile(rb'"[ \t]+:')


def _unrepeated(records: list[Any], data: bytes) -> bool:
    """Whether no object of ``records`` (decoded from ``data``) repeats a key, told without
    decoding again: each key of an object ends in the bytes ``":`` when no blank precedes its
    colon, and so does a string holding ``":`` or opening with ``:``; the bytes hold as many as
    the records' objects and their ``before`` and ``after`` objects have keys only when no key
    is repeated (and no string holds one, and no object is nested deeper). False: decode with
    :data:`_DECODER`, which tells."""
    if _SPACED.search(data) or set(map(type, records)) - {dict}:
        return False
    pairs = sum(map(len, records))
    for name in ("before", "after"):
        pairs += sum(len(v) for v in map(dict.get, records, repeat(name)) if type(v) is dict)
    return data.count(b'":') == pairs


#: An escaped surrogate (which Python reads and DuckDB's parser may not).
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse(data: bytes, request: AggregateRequest, factor: int) -> Batch:
    """The records of ``data`` (complete lines), or :class:`_Refused`."""
    if not data.endswith(b"\n") or b"\r" in data or _SURROGATE.search(data):
        raise _Refused("line ends")
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    lengths = np.diff(ends, prepend=-1) - 1  # (each line's, without its line end)
    limit = request.source.max_record_bytes  # type: ignore[union-attr]
    if lengths.min() < 1 or lengths.max() > limit:
        raise _Refused("blank or long line")
    read = _lines.read(data, _summed(request))
    if read is not None:  # (integer entries: their ids)
        return _batch(read.entries, read.ts, read.op, read.values.__getitem__, request, factor,
                      texts=True)  # fmt: skip
    compact = _compact(data, request, factor, len(ends))
    if compact is not None:
        return compact
    try:
        text = data.decode("utf-8")
        array = "[" + text[:-1].replace("\n", ",") + "]"
        records = _PLAIN.decode(array)
        if not _unrepeated(records, data):
            records = _DECODER.decode(array)  # (which refuses a repeated key)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # (json: ValueError)
        raise _Refused("not JSON") from exc
    if len(records) != len(ends):
        raise _Refused("not one value per line")
    return _columns(records, request, factor)


def read_batch(data: bytes, request: AggregateRequest) -> Batch | None:
    """The records of ``data`` (complete lines) as :func:`parse` reads them, or None when one
    is not plain (the step runs in SQL)."""
    from dpcr.changelog import EPOCH_FACTORS

    factor = EPOCH_FACTORS[request.source.epoch_unit]  # type: ignore[union-attr]
    empty = np.zeros(0, dtype=np.int64)
    try:
        if not data:  # (nothing new)
            return _batch([], empty, empty.astype(np.int8), lambda c: empty.astype(float),
                          request, 1, texts=True)  # fmt: skip
        return _changes(data, request) if explicit(request) else parse(data, request, factor)
    except _Refused:
        return None


def _changes(data: bytes, request: AggregateRequest) -> Batch:
    """:func:`parse` of wal2json or Debezium lines (:mod:`dpcr.engines._wal2json`,
    :mod:`dpcr.engines._debezium`)."""
    source: Any = request.source
    if not data.endswith(b"\n") or b"\r" in data or _SURROGATE.search(data):
        raise _Refused("line ends")
    lengths = np.diff(np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10), prepend=-1)
    if lengths.min() < 2 or lengths.max() > source.max_record_bytes + 1:
        raise _Refused("blank or long line")
    got = read_changes(data, source, _summed(request))
    if got is None:
        raise _Refused("wal2json or Debezium")
    batch = _batch(got.entries, got.ts, got.op, got.values.__getitem__, request, 1, texts=True)
    return dataclasses.replace(batch, seq=got.seq, line=got.line, records=got.records,
                               tombstones=got.tombstones, lines=got.lines,
                               has_before=got.has_before)  # fmt: skip


#: A JSON number (its text: an integer, or a float with a fraction or an exponent).
_NUM = rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"


def _lines_pattern(columns: tuple[str, ...], blank: bytes) -> re.Pattern[bytes]:
    """A line of the form most changelogs take: ``entry`` (an integer, or printable ASCII text
    without a quote or backslash), ``ts`` (an integer), ``op``, and ``before`` and ``after``
    as the op allows them (an insert: no before or null, an after; an update: a before or
    null or none, an after; a delete: a before or null or none, no after or null), in this
    order, each object holding exactly ``columns`` in this order, each a number or null;
    ``blank``: what may stand between tokens (a pattern). Groups: entry (an integer's text, a
    text's), ts, ``insert``, ``delete``, then the after's numbers (empty: null or none)."""
    w = blank

    def obj(capture: bool) -> bytes:
        value = (rb"(?:(" if capture else rb"(?:(?:") + _NUM + rb")|null)"
        pairs = (rb"," + w).join(b'"' + re.escape(c.encode()) + b'"' + w + b":" + w + value + w
                                 for c in columns)  # fmt: skip
        return rb"\{" + w + pairs + rb"\}"

    def field(name: bytes, value: bytes) -> bytes:
        return b"," + w + b'"' + name + b'"' + w + b":" + w + value + w

    return re.compile(
        rb"^" + w + rb"\{" + w + rb'"entry"' + w + b":" + w
        + rb'(?:(-?(?:0|[1-9][0-9]*))|"([ !#-\[\]-~]+)")' + w
        + field(b"ts", rb"(-?(?:0|[1-9][0-9]*))")
        + field(b"op", rb'"(?:(?P<insert>insert)|update|(?P<delete>delete))"')
        + rb"(?(insert)(?:" + field(b"before", b"null") + rb")?|(?:"
        + field(b"before", rb"(?:null|" + obj(False) + rb")") + rb")?)"
        + rb"(?(delete)(?:" + field(b"after", b"null") + rb")?|"
        + field(b"after", obj(True)) + rb")"
        + rb"\}" + w + rb"\n",
        re.MULTILINE,
    )  # fmt: skip


def _summed(request: AggregateRequest) -> tuple[str, ...]:
    """The summed columns, each once, in the order of the queries."""
    from dpcr.queries import Sum

    return tuple(dict.fromkeys(q.column for q in request.queries if isinstance(q, Sum)))


#: Per summed columns: the line pattern without blanks between tokens, and with any.
_PATTERNS: dict[tuple[str, ...], tuple[re.Pattern[bytes], re.Pattern[bytes]]] = {}


def _compact(data: bytes, request: AggregateRequest, factor: int, lines: int) -> Batch | None:
    """:func:`parse`'s batch when every line has the form of :func:`_lines_pattern` (read
    without building a dict per line: the values JSON gives), else None (a line of another
    form, or whose op takes no such before or after: :func:`_columns` refuses that)."""
    columns = _summed(request)
    if not columns:
        return None
    patterns = _PATTERNS.get(columns)
    if patterns is None:
        patterns = _PATTERNS[columns] = (_lines_pattern(columns, b""),
                                         _lines_pattern(columns, rb"[ \t]*"))  # fmt: skip
    pattern = patterns[0] if patterns[0].match(data) else patterns[1]
    rows = pattern.findall(data)
    if len(rows) != lines:  # (each match is one whole line: from its start to its end)
        return None
    number, text, ts, inserts, deletes, *values = zip(*rows, strict=True)
    op = (1 + np.fromiter(map(bool, deletes), dtype=np.int8, count=lines)
          - np.fromiter(map(bool, inserts), dtype=np.int8, count=lines))  # fmt: skip
    plain = not any(text) and b"-0" not in number and max(map(len, number)) <= 15
    entries = list(map(bytes.decode, number)) if plain else [  # (integers as written)
        t.decode() if t else int(n) for n, t in zip(number, text, strict=True)
    ]  # fmt: skip
    columns_of = dict(zip(columns, values, strict=True))
    return _batch(entries, list(map(int, ts)), op, lambda c: _floats(columns_of[c]),
                  request, factor, texts=plain)  # fmt: skip


def _floats(texts: Sequence[bytes]) -> np.ndarray:
    """The numbers ``texts`` (JSON's: empty for null or missing) as floats, NaN for none; an
    integer beyond what a float holds exactly is refused (as :func:`_batch` refuses it)."""
    for t in [t for t in texts if len(t) > 15]:
        if t.lstrip(b"-").isdigit() and not -_EXACT <= int(t) <= _EXACT:
            raise _Refused("value")
    return np.array(list(map(float, [t or b"nan" for t in texts])), dtype=np.float64)


def _columns(records: list[Any], request: AggregateRequest, factor: int) -> Batch:
    """:func:`parse`'s batch from the decoded records (a pass per field)."""
    if set(map(type, records)) - {dict} or not set().union(*records) <= _FIELDS:
        raise _Refused("fields")
    try:
        raw_entries = list(map(itemgetter("entry"), records))
        raw_ts = list(map(itemgetter("ts"), records))
        op = np.array(list(map(_CODES.__getitem__, map(itemgetter("op"), records))),
                      dtype=np.int8)  # fmt: skip
    except (KeyError, TypeError) as exc:  # (a missing field, an op that is not one)
        raise _Refused("fields") from exc
    befores = list(map(dict.get, records, repeat("before")))
    afters = list(map(dict.get, records, repeat("after")))
    # a before only with an update or a delete; an after with an insert or an update only
    before_ok = np.array([b is None or type(b) is dict for b in befores]) & (
        (op != 0) | np.array([b is None for b in befores])
    )  # fmt: skip
    after_dict = np.array([type(a) is dict for a in afters])
    after_none = np.array([a is None for a in afters])
    if not np.all(before_ok & np.where(op < 2, after_dict, after_none)):
        raise _Refused("rows")

    def floats_of(column: str) -> np.ndarray:
        values = [a.get(column) if a is not None else None for a in afters]
        if not {type(v) for v in values} <= _NUMBERS or any(
            type(v) is int and not -_EXACT <= v <= _EXACT for v in values
        ):  # fmt: skip
            raise _Refused("value")
        return np.array([math.nan if v is None else v for v in values], dtype=np.float64)

    return _batch(raw_entries, raw_ts, op, floats_of, request, factor)


def _batch(
    raw_entries: list[Any] | np.ndarray, raw_ts: list[Any] | np.ndarray, op: np.ndarray,
    floats_of: Callable[[str], np.ndarray], request: AggregateRequest, factor: int, *,
    texts: bool = False,
) -> Batch:
    """The batch of records with the entries (``texts``: already as text, or integers as an
    array), ts and op codes given (as JSON gives them, or as an array) and
    ``floats_of(column)``: each record's value of a summed column (NaN: null or missing), or
    :class:`_Refused`."""
    from dpcr.queries import Sum
    from dpcr.timeutil import MAX_US, MIN_US

    entries = raw_entries if texts or isinstance(raw_entries, np.ndarray) else \
        _entries(raw_entries)
    lo, hi = -(-MIN_US // factor), MAX_US // factor
    ts = _integers(raw_ts, lo, hi)
    if ts is None:
        raise _Refused("ts")
    ts *= factor
    queries = request.queries
    gone = op == 2
    f = np.zeros((len(queries), len(op)), dtype=np.int64)
    nn = np.zeros((len(queries), len(op)), dtype=bool)
    for i, q in enumerate(queries):
        if not isinstance(q, Sum):
            f[i] = ~gone
            continue
        x = floats_of(q.column)
        if np.isinf(x).any():
            raise _Refused("value")
        missing = np.isnan(x)  # (JSON has no NaN: parse_constant refuses it)
        nn[i] = missing & ~gone
        y = np.minimum(np.maximum(x, float(q.lower)), float(q.upper)) / float(q.grid)
        whole = np.trunc(y)  # (half away from zero, as DuckDB's round)
        rounded = whole + (y - whole >= 0.5) - (whole - y >= 0.5)
        f[i] = np.where(missing, 0, rounded).astype(np.int64)
    return Batch(entries, ts, op, f, nn)


def _integers(values: list[Any] | np.ndarray, lo: int, hi: int) -> np.ndarray | None:
    """``values`` as int64 when all are JSON integers (or an int64 array) in ``lo .. hi``,
    else None."""
    if isinstance(values, np.ndarray):
        out = values.astype(np.int64)
    elif {type(v) for v in values} != {int}:
        return None
    else:
        try:
            out = np.array(values, dtype=np.int64)
        except OverflowError:
            return None
    return out if not len(out) or (out.min() >= lo and out.max() <= hi) else None


def _entries(raw: list[Any]) -> list[str]:
    """The entries as text (an integer as written), or :class:`_Refused`."""
    kinds = {type(e) for e in raw}
    if kinds == {int}:
        if _integers(raw, -_EXACT, _EXACT) is None:
            raise _Refused("entry")
        return list(map(str, raw))
    if not all((type(e) is int and -_EXACT <= e <= _EXACT)
               or (type(e) is str and _ENTRY.match(e)) for e in raw):  # fmt: skip
        raise _Refused("entry")
    return [e if type(e) is str else str(e) for e in raw]


_CODES = {"insert": 0, "update": 1, "delete": 2}
_NUMBERS = frozenset((int, float, type(None)))
_FIELDS = frozenset(("entry", "ts", "op", "before", "after"))
