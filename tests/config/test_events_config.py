"""``kind = "events"`` in the TOML: the same values as the Python API, one-line refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpcr.config import parse_config
from dpcr.errors import ConfigError
from dpcr.queries import Events


def config(**query: Any) -> dict[str, Any]:
    return {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0},
        "constraint": {"at_most_k": 2},
        "release": {"plan": "disjoint", "start": "2025-01-01", "period": "7d"},
        "query": [{"name": "q", "kind": "events", **query}],
    }


@pytest.mark.parametrize(("table", "expected"), [
    ({"op": "insert"}, Events(name="q", op="insert")),
    ({"op": "delete", "where": {"plan": ["pro", "enterprise"]}},
     Events(name="q", op="delete", where={"plan": ("pro", "enterprise")})),
    ({"op": "update", "before": {"status": "active"}, "where": {"status": "cancelled"}},
     Events(name="q", op="update", before={"status": "active"}, where={"status": "cancelled"})),
])  # fmt: skip
def test_event_queries_parse_to_the_python_values(
    tmp_path: Path, table: dict[str, Any], expected: Events
) -> None:
    assert parse_config(config(**table), base_dir=tmp_path).queries == (expected,)


@pytest.mark.parametrize(("table", "message"), [
    ({}, "missing the key 'op'"),
    ({"op": "upsert"}, "op must be one of"),
    ({"op": "insert", "before": {"s": "a"}}, "move the filter to where"),
    ({"op": "update", "column": "s"}, "column"),
    ({"op": "update", "before": "active"}, "before"),
])  # fmt: skip
def test_bad_event_queries_are_refused_in_one_line(
    tmp_path: Path, table: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse_config(config(**table), base_dir=tmp_path)
    assert "\n" not in str(err.value)
