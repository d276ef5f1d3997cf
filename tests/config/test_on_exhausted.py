"""``[constraint] on_exhausted`` and ``kind = "exhausted"``: parsed, validated, fingerprinted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpcr.config import parse_config
from dpcr.errors import ConfigError
from dpcr.queries import Exhausted


def raw(constraint: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0},
        "constraint": constraint,
        "release": {"start": "2025-01-01", "period": "1d"},
        "query": [{"name": "n", "kind": "count"}, {"name": "ex", "kind": "exhausted"}],
        **extra,
    }


def test_retire_is_parsed_and_changes_the_fingerprint_only_when_set(tmp_path: Path) -> None:
    freeze = parse_config(raw({"at_most_k": 3}), base_dir=tmp_path)
    explicit = parse_config(raw({"at_most_k": 3, "on_exhausted": "freeze"}), base_dir=tmp_path)
    retire = parse_config(raw({"at_most_k": 3, "on_exhausted": "retire"}), base_dir=tmp_path)
    assert (freeze.on_exhausted, retire.on_exhausted) == ("freeze", "retire")
    assert freeze.fingerprint() == explicit.fingerprint() != retire.fingerprint()
    assert isinstance(freeze.queries[1], Exhausted)
    # same guarantee and noise for both policies (docs/privacy.md, section 10)
    assert freeze.explain().epsilon == retire.explain().epsilon
    machine = {"on_exhausted": "retire", "state_machine": {
        "column": "s", "initial": ["a"], "transitions": ["a -> b"], "terminal": ["b"]}}
    assert parse_config(raw(machine), base_dir=tmp_path).constraint.k == 3


@pytest.mark.parametrize(
    ("constraint", "extra", "message"),
    [
        ({"at_most_k": 3, "on_exhausted": "delete"}, {}, "on_exhausted must be 'freeze'"),
        ({"state_machine": {"column": "s", "initial": ["a"], "transitions": ["a -> b"],
                            "terminal": ["b"], "on_exhausted": "retire"}}, {},
         "belongs to [constraint]"),
        ({"at_most_k": 3, "on_exhausted": "retire"}, {"engine": {"name": "spark"}},
         "DuckDB engine only"),
        ({"at_most_k": 3}, {"engine": {"name": "spark"}}, "DuckDB engine only"),
    ],
)
def test_bad_settings_name_the_key_and_the_fix(
    tmp_path: Path, constraint: dict[str, Any], extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config(raw(constraint, **extra), base_dir=tmp_path)


def test_an_exhausted_query_takes_no_where() -> None:
    with pytest.raises(ConfigError, match="remove where"):
        Exhausted(name="ex", where={"s": "a"})
