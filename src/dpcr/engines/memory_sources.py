"""Which releases a session's steps may run from memory (:mod:`dpcr.engines.duckdb_memory`).

:func:`accepts` takes a release whose source is JSON lines with the default field names and no
unit field, or wal2json (what ``dpcr follow`` on PostgreSQL writes) with one key column; each
unit one entry, ``at_most_k``, ``on_exhausted = "freeze"``, and count and sum queries without
``where`` (a sum over a top-level column). Which new lines a step then reads from memory is the
parse's to say (:func:`dpcr.engines.duckdb_memory.read_batch`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpcr.engines.base import AggregateRequest

__all__ = ["accepts", "explicit"]

_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def explicit(request: AggregateRequest) -> bool:
    """Whether the source's records carry sequence numbers of their own (wal2json's LSNs):
    the state of such a release keeps table ``keys``, a JSON-lines state none."""
    from dpcr.changelog import Wal2jsonSource

    return type(request.source) is Wal2jsonSource


def _source_ok(source: object) -> bool:
    from dpcr.changelog import JsonlSource, Wal2jsonSource

    if type(source) is Wal2jsonSource:
        return len(source.key_columns) == 1
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
