"""``[constraint.state_machine]`` in the config, and the examples in docs/config.md."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from dpcr.bounding.constraints import AtMostK, Hybrid
from dpcr.bounding.state_machine import StateMachine
from dpcr.config import parse_config
from dpcr.errors import ConfigError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def base(constraint: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0},
        "constraint": constraint,
        "release": {"start": "2025-01-01", "period": "1d"},
        "query": [{"name": "n", "kind": "count"}],
    }


def doc_examples() -> list[dict[str, Any]]:
    text = DOCS.read_text()
    section = text.split("### State machines", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```toml\n(.*?)```", section, flags=re.S)
    return [tomllib.loads(b)["constraint"] for b in blocks]


def test_docs_examples_parse_with_the_stated_k(tmp_path: Path) -> None:
    examples = doc_examples()
    ks = [parse_config(base(c), base_dir=tmp_path).constraint for c in examples]
    assert all(isinstance(m, StateMachine) for m in ks)
    assert [m.k for m in ks] == [7, 10, 9]  # type: ignore[attr-defined]
    ticket = ks[0]
    assert isinstance(ticket, StateMachine) and ticket.state_of("used_2") == "used2"


def test_state_machine_in_a_hybrid_class(tmp_path: Path) -> None:
    machine = doc_examples()[0]["state_machine"]
    cfg = parse_config(
        base(
            {
                "column": "kind",
                "classes": {"ticket": {"state_machine": machine}, "pass": {"at_most_k": 3}},
                "default": {"time_bounded": "1d"},
            }
        ),
        base_dir=tmp_path,
    )
    assert isinstance(cfg.constraint, Hybrid)
    assert isinstance(cfg.constraint.classes["ticket"], StateMachine)
    assert cfg.constraint.classes["pass"] == AtMostK(k=3)


def test_fingerprint_changes_with_the_machine(tmp_path: Path) -> None:
    c = doc_examples()[1]
    a = parse_config(base(c), base_dir=tmp_path)
    c["state_machine"]["allowance"] = {"active": 7}
    b = parse_config(base(c), base_dir=tmp_path)
    assert a.fingerprint() != b.fingerprint()


@pytest.mark.parametrize(
    ("machine", "message"),
    [
        ({"initial": ["a"], "terminal": ["a"]}, "missing the key 'column'"),
        ({"column": "s", "terminal": ["a"]}, "missing the key 'initial'"),
        ({"column": "s", "initial": "a"}, "initial must be list"),
        ({"column": "s", "initial": [1]}, "list of state names"),
        ({"column": "s", "initial": ["a"], "colour": 1}, "unknown key"),
        ({"column": "s", "initial": ["a"], "values": {"x": 1}}, "state names"),
        ({"column": "s", "initial": ["a"], "transitions": ["a -> b -> a"]}, "allowance"),
    ],
)
def test_bad_machines_name_the_key_and_fix(
    tmp_path: Path, machine: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(base({"state_machine": machine}), base_dir=tmp_path)


def test_only_one_kind_of_constraint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exactly one of"):
        parse_config(
            base({"at_most_k": 3, "state_machine": {"column": "s", "initial": ["a"]}}),
            base_dir=tmp_path,
        )
