"""The JSON decoding the memory steps share: a record the fast path cannot prove it reads as
DuckDB's JSON reader does (a repeated key, NaN or Infinity) is refused, and the step runs in
SQL."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["DECODER", "Refused", "no_constant"]


class Refused(Exception):
    """A new record the fast path does not take: the step runs in SQL."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise Refused("repeated key")
    return out


def no_constant(name: str) -> Any:
    """Refuse ``name`` (NaN, Infinity: no JSON)."""
    raise Refused(name)


#: Objects with a repeated key and the non-JSON constants refused.
DECODER = json.JSONDecoder(object_pairs_hook=_unique, parse_constant=no_constant)
