"""One example of every query kind (:data:`dpcr.queries.QUERY_KINDS`) and every derived kind
(:data:`dpcr.queries.DERIVED_KINDS`), as ``[[query]]`` tables over the columns of the engine
tests' changelogs (``v`` a number, ``k`` a key): the contract suite runs every kind through
these, and a new kind is refused by the suite until it has one."""

from __future__ import annotations

from typing import Any

from dpcr.queries import DERIVED_KINDS, QUERY_KINDS
from dpcr.tomltable import TomlTable

#: kind -> the keys of its [[query]] table besides name and kind (``where`` included)
EXAMPLES: dict[str, dict[str, Any]] = {
    "count": {"where": {"k": ["a", "b"]}},
    "exhausted": {},
    "sum": {"column": "v", "lower": -4, "upper": 10, "grid": 0.5},
    "sum_squares": {"column": "v", "lower": -4, "upper": 10, "grid": 0.5},
    "histogram": {"column": "k", "keys": ["a", "b", "c"]},
    "events": {"op": "update", "before": {"k": "a"}},
}
#: the same for derived kinds, over the queries of :data:`EXAMPLES` (named by their kind)
DERIVED_EXAMPLES: dict[str, dict[str, Any]] = {
    "mean": {"count": "count_n", "sum": "sum"},
    "variance": {"count": "count_n", "sum": "sum", "sum_squares": "sum_squares"},
}


def example(kind: str, name: str | None = None) -> Any:
    """The example query of ``kind`` (named ``name``, default the kind), read from TOML."""
    table = TomlTable({"name": name or kind, "kind": kind, **EXAMPLES[kind]}, "query")
    name, kind = table.pop("name"), table.pop("kind")
    query = QUERY_KINDS[kind].from_toml(table, name=name, where=table.pop("where", {}))
    table.done()
    return query


def derived_example(kind: str) -> Any:
    table = TomlTable({"name": f"{kind}_d", "kind": kind, **DERIVED_EXAMPLES[kind]}, "query")
    name, kind = table.pop("name"), table.pop("kind")
    derived = DERIVED_KINDS[kind].from_toml(table, name=name)
    table.done()
    return derived
