"""Debezium change events (one envelope per line, bare or under ``payload``: what Debezium's
JSON converter sends and ``dpcr follow`` over Kafka writes) read for a session's step from
memory (:mod:`dpcr.engines.duckdb_memory`).

:func:`read` takes a chunk of complete lines and gives its records as the Debezium stage
(:mod:`dpcr.changelog._stage_debezium`) and the loader read them, or None when one line is not
of the narrow form read here (the step then runs in SQL, which reads it as before):

* every line a JSON object (its first byte ``{``) with no repeated key, no NaN or infinity,
  or the line ``null``;
* a tombstone: the line ``null``, or an object whose ``payload`` is null and that has none of
  the envelope's fields (``op``, ``before``, ``after``, ``source``, ``ts_ms``) at its top level;
* else the envelope: ``payload`` when the line has one (an object), else the line itself; a
  ``schema`` beside a ``payload`` names no ``org.apache.kafka.connect.data.Decimal`` column
  of ``before`` or ``after`` (its ``fields`` and theirs, when given, are arrays);
* ``op`` ``c`` or ``r`` (an insert), ``u`` or ``d``; any other op is refused;
* ``source`` an object whose ``ts_ms`` (the change's time) is an integer within the times
  dpcr takes and whose ``lsn`` (PostgreSQL's) is an integer in ``0 .. 2^63 - 1``: its
  sequence number; an envelope without them (a MySQL binlog position, an envelope ``ts_ms``
  alone) is refused;
* ``after`` (an insert's and an update's, never a delete's: null or missing there) and
  ``before`` (an update's or a delete's, never an insert's; an update's may be null) are
  objects whose values are scalars (no object or array: a decimal ``{"scale", "value"}``, which
  the stage decodes, is refused, and so is a row of the keys ``scale`` and ``value`` alone);
* the key column (one) holds an integer of at most 2^53 in magnitude or printable ASCII text
  without blanks at either end: the entry (from ``after``, a delete's from ``before``), and an
  update's ``before``, when it holds the key, holds the same (no key move);
* each summed column of ``after`` is a JSON number (finite, an integer at most 2^53 in
  magnitude), null or missing.

The release's source has no ``decimal_scales`` (:func:`dpcr.engines.memory_sources.accepts`).
"""

from __future__ import annotations

from typing import Any

from dpcr.engines._strict_json import DECODER as _DECODER
from dpcr.engines._strict_json import Refused as _Refused
from dpcr.engines._wal2json import _MINUS_ZERO, Changes, Gathered, entry_text
from dpcr.timeutil import MAX_US, MIN_US

__all__ = ["read"]

_OPS = {"c": 0, "r": 0, "u": 1, "d": 2}
_ENVELOPE = ("op", "before", "after", "source", "ts_ms")
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_SCALARS = frozenset((str, int, float, bool, type(None)))
#: The change times (ms) the loader takes (``ts_expr`` with a factor of 1000).
_TS_LO, _TS_HI = -(-MIN_US // 1000), MAX_US // 1000
_SEQ_HI = 2**63


def read(data: bytes, *, key: str, columns: tuple[str, ...]) -> Changes | None:
    """The records of ``data`` (complete lines, none blank or longer than the source takes,
    UTF-8 checked by the caller's decode) when every line has the form of the module
    docstring, else None."""
    if _MINUS_ZERO.search(data) or b"\n\n" in data:
        return None
    try:
        lines = data.decode("utf-8")[:-1].split("\n")
        if any(not line.startswith("{") and line != "null" for line in lines):
            return None
        messages = _DECODER.decode("[" + ",".join(lines) + "]")
        return _changes(messages, key=key, columns=columns)
    except (_Refused, UnicodeDecodeError, ValueError, RecursionError):
        return None


def _envelope(m: Any) -> dict[str, Any] | None:
    """The envelope of a line's value, None for a tombstone."""
    if m is None:
        return None
    if type(m) is not dict:
        raise _Refused("not an object")
    if "payload" not in m:
        return m
    payload = m["payload"]
    if payload is None:
        if any(k in m for k in _ENVELOPE):
            raise _Refused("a null payload beside envelope fields")
        return None
    if type(payload) is not dict:
        raise _Refused("payload")
    if _decimals(m.get("schema")):
        raise _Refused("decimal column")
    return payload


def _decimals(schema: Any) -> bool:
    """Whether an envelope schema names a Decimal column of ``before`` or ``after`` (as
    :func:`dpcr.changelog._stage_debezium._decimal_columns` reads it, whatever its scale)."""
    if type(schema) is not dict:
        return False
    parts = schema.get("fields") or []
    if type(parts) is not list:
        raise _Refused("schema")
    for part in parts:
        if type(part) is not dict or part.get("field") not in ("before", "after"):
            continue
        fields = part.get("fields") or []
        if type(fields) is not list:
            raise _Refused("schema")
        if any(type(c) is dict and c.get("name") == _DECIMAL for c in fields):
            return True
    return False


def _row(value: Any) -> dict[str, Any] | None:
    """A row (an object of scalars), or None (null or missing)."""
    if value is None:
        return None
    if type(value) is not dict or not set(map(type, value.values())) <= _SCALARS \
            or value.keys() == {"scale", "value"}:  # fmt: skip  (a row the stage decodes)
        raise _Refused("row")
    return value


def _change(env: dict[str, Any], key: str) -> tuple[int, str, dict[str, Any] | None, bool]:
    """The op code, entry and row after of an envelope, and whether it gave a row before
    (the loader's ``has_before``: ``before`` an object)."""
    op = env.get("op")
    code = _OPS.get(op) if type(op) is str else None
    if code is None:
        raise _Refused("op")
    after, before = _row(env.get("after")), _row(env.get("before"))
    # (an insert has no row before, a delete one; an update may have one)
    if (after is None) != (code == 2) or (before is not None and code == 0) \
            or (before is None and code == 2):  # fmt: skip
        raise _Refused("rows")
    if after is not None:
        entry = entry_text(after.get(key))
        if before is not None and before.get(key) is not None \
                and entry_text(before[key]) != entry:  # fmt: skip
            raise _Refused("key moved")
        return code, entry, after, before is not None
    return code, entry_text(before.get(key)), None, True  # type: ignore[union-attr]


def _integer(value: Any, lo: int, hi: int) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise _Refused("integer")
    return value


def _changes(messages: list[Any], *, key: str, columns: tuple[str, ...]) -> Changes:
    got = Gathered(columns, befores=True)
    tombstones = 0
    for number, m in enumerate(messages, start=1):
        env = _envelope(m)
        if env is None:
            tombstones += 1
            continue
        code, entry, row, before = _change(env, key)
        source = env.get("source")
        if type(source) is not dict:
            raise _Refused("source")
        got.add(entry, _integer(source.get("ts_ms"), _TS_LO, _TS_HI) * 1000,
                _integer(source.get("lsn"), 0, _SEQ_HI - 1), code, number, row, before)
    return got.changes(len(messages), tombstones, len(messages))
