"""``[constraint] inserts / deletes / updates``: per-op limits, parsed and validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpcr.bounding.constraints import Hybrid
from dpcr.bounding.state_machine import OpLimits
from dpcr.config import parse_config
from dpcr.errors import ConfigError


def raw(constraint: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0},
        "constraint": constraint,
        "release": {"start": "2025-01-01", "period": "1d", "plan": "disjoint"},
        "query": [{"name": "n", "kind": "count"},
                  {"name": "a", "kind": "count", "where": {"s": "a"}}],
    }  # fmt: skip


def test_limits_are_parsed_and_charge_the_count_for_its_insert_and_delete(
    tmp_path: Path,
) -> None:
    s = parse_config(raw({"at_most_k": 4, "inserts": 1, "deletes": 1}), base_dir=tmp_path)
    assert s.constraint == OpLimits(limit=4, deletes=1)
    plain = parse_config(raw({"at_most_k": 4}), base_dir=tmp_path)
    assert s.fingerprint() != plain.fingerprint()
    report = s.explain()
    assert {n: q.releases for n, q in report.per_query.items()} == {"n": 2, "a": 4}
    assert {n: q.releases for n, q in plain.explain().per_query.items()} == {"n": 4, "a": 4}
    never = parse_config(raw({"at_most_k": 4, "inserts": 1, "deletes": 0, "updates": 2}),
                         base_dir=tmp_path)  # fmt: skip
    assert never.constraint.k == 3  # insert + 2 updates
    assert {n: q.releases for n, q in never.explain().per_query.items()} == {"n": 1, "a": 3}


def test_hybrid_classes_take_limits(tmp_path: Path) -> None:
    s = parse_config(raw({"column": "kind", "classes": {
        "x": {"at_most_k": 3, "inserts": 1, "deletes": 0}, "y": {"at_most_k": 2}}}),
        base_dir=tmp_path)  # fmt: skip
    assert isinstance(s.constraint, Hybrid)
    assert s.constraint.classes["x"] == OpLimits(limit=3, deletes=0)
    per_query = s.explain().per_query["n"]
    assert dict(per_query.per_class) == {"x": (1,), "y": (2,)}


@pytest.mark.parametrize(("constraint", "message"), [
    ({"at_most_k": 4, "inserts": 2}, "inserts must be 1"),
    ({"at_most_k": 4, "inserts": 1, "deletes": 2}, "deletes must be 0 or 1"),
    ({"at_most_k": 4, "inserts": 1, "updates": -1}, "updates must be an integer >= 0"),
    ({"at_most_k": 4, "deletes": 1}, "start with inserts = 1"),
    ({"time_bounded": "3d", "inserts": 1}, "add at_most_k"),
])  # fmt: skip
def test_bad_limits_are_refused_with_one_line(
    tmp_path: Path, constraint: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse_config(raw(constraint), base_dir=tmp_path)
    assert "\n" not in str(err.value)


def test_immutable_columns_are_parsed_and_charge_their_statistics(tmp_path: Path) -> None:
    r = raw({"at_most_k": 4, "inserts": 1, "deletes": 1, "immutable": ["s"]})
    s = parse_config(r, base_dir=tmp_path)
    assert s.constraint == OpLimits(limit=4, deletes=1, immutable=("s",))
    # both counts read only s (or nothing): inserts and deletes
    assert {n: q.releases for n, q in s.explain().per_query.items()} == {"n": 2, "a": 2}
    with pytest.raises(ConfigError, match="start with inserts = 1"):
        parse_config(raw({"at_most_k": 4, "immutable": ["s"]}), base_dir=tmp_path)
    with pytest.raises(ConfigError, match="immutable must be"):
        parse_config(raw({"at_most_k": 4, "inserts": 1, "immutable": [1]}), base_dir=tmp_path)
