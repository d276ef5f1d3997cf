"""Which releases a session's steps may run from memory (:mod:`dpcr.engines.duckdb_memory`).

:func:`accepts` takes a release whose source is JSON lines with the default field names and no
unit field, wal2json (what ``dpcr follow`` on PostgreSQL writes) with one key column, or
Debezium (what ``dpcr follow`` over Kafka writes) with one key column and no
``decimal_scales``; each
unit one entry, ``at_most_k``, ``on_exhausted = "freeze"``, and count and sum queries without
``where`` (a sum over a top-level column). Which new lines a step then reads from memory is the
parse's to say (:func:`dpcr.engines.memory_batch.read_batch`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from dpcr.engines import _debezium, _wal2json

if TYPE_CHECKING:
    from dpcr.engines.base import AggregateRequest

__all__ = ["accepts", "explicit", "read_changes"]

_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def explicit(request: AggregateRequest) -> bool:
    """Whether the source's records carry sequence numbers of their own (wal2json's and
    Debezium's LSNs): the state of such a release keeps table ``keys``, a JSON-lines state
    none. (A Debezium state without them, of envelopes without LSNs, steps in SQL.)"""
    from dpcr.changelog import DebeziumSource, Wal2jsonSource

    return type(request.source) in (Wal2jsonSource, DebeziumSource)


def read_changes(data: bytes, source: Any, columns: tuple[str, ...]) -> _wal2json.Changes | None:
    """The records of ``data`` (complete lines) of an :func:`explicit` source, summed
    ``columns``, as :mod:`dpcr.engines._wal2json` or :mod:`dpcr.engines._debezium` reads them
    (None: a line neither takes)."""
    from dpcr.changelog import DebeziumSource

    if type(source) is DebeziumSource:
        return _debezium.read(data, key=source.key_columns[0], columns=columns)
    return _wal2json.read(data, key=source.key_columns[0], table=source.table, columns=columns)


def _source_ok(source: object) -> bool:
    from dpcr.changelog import DebeziumSource, JsonlSource, Wal2jsonSource

    if type(source) is Wal2jsonSource:
        return len(source.key_columns) == 1
    if type(source) is DebeziumSource:
        return len(source.key_columns) == 1 and not source.decimal_scales
    if type(source) is not JsonlSource or source.unit is not None:
        return False
    names = source.field_names()
    return all(names[k] == k for k in ("entry", "ts", "op", "before", "after"))


def accepts(request: AggregateRequest) -> bool:
    """Whether a session's steps of this release can run from memory (module docstring)."""
    from dpcr.bounding.constraints import AtMostK
    from dpcr.queries import Count, Sum

    if not (
        _source_ok(request.source) and request.unit_is_entry and not request.retire
        and type(request.constraint) is AtMostK
    ):  # fmt: skip
        return False
    for q in request.queries:
        if type(q) is Count and not q.where:
            continue
        if type(q) is Sum and not q.where and _COLUMN.match(q.column):
            continue
        return False
    return True
