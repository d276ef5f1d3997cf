"""``dpcr plan`` and ``dpcr run`` with a state-machine constraint (inside a hybrid)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from dpcr.cli import main
from e2e.helpers import mutations, write_config, write_jsonl

RIDES = textwrap.dedent(
    """
    column = "kind"
    [constraint.classes.multi.state_machine]
    column = "rides"
    buckets = { "0" = 0, "1" = 1, "2" = 2, "3+" = 3 }
    initial = ["0"]
    transitions = ["0 -> 1 -> 2 -> 3+"]
    terminal = ["0", "1", "2", "3+"]
    allowance = { "3+" = 1 }
    [constraint.classes.monthly]
    time_bounded = "3d"
    """
)


def test_plan_shows_derived_k_and_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(write_config(tmp_path, constraint=RIDES))
    assert main(["plan", cfg, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # insert into 0, 1, 2, 3+ (+1 within), delete: k = 4 + 1 + 1
    dropped = plan["state_machines"]["multi"].pop("dropped")
    assert plan["state_machines"] == {
        "multi": {"k": 6, "path": "insert → 0 → 1 → 2 → 3+ (+1 within) → delete"}
    }
    # data-free: inserts only into 0; no skipped or backward steps; stays only in 3+ (1)
    assert "(insert) -> 1" in dropped["transitions"] and "0 -> 2" in dropped["transitions"]
    assert "2 -> 1" in dropped["transitions"] and "0 -> 1" not in dropped["transitions"]
    assert dropped["allowances"] == {"0": 0, "1": 0, "2": 0, "3+": 1}
    assert {k: c["releases"] for k, c in plan["per_class"].items()} == {"multi": 6, "monthly": 4}
    assert main(["plan", cfg]) == 0
    out = capsys.readouterr().out
    assert "k = 6" in out and "3+ (+1 within)" in out


def test_run_drops_by_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = mutations(n_entries=40)
    write_jsonl(tmp_path / "log.jsonl", log)
    strict = RIDES.replace('allowance = { "3+" = 1 }', 'allowance = { "3+" = 0 }')
    cfg = str(write_config(tmp_path, constraint=strict))
    assert main(["run", cfg, "--json"]) == 0
    b = json.loads(capsys.readouterr().out)["diagnostics"]["bounding"]
    # multi tickets ride 0, 1, 2, 3; a 4th ride stays in 3+ (allowance 0): it and the rest of the
    # ticket's history are dropped
    cut: set[str] = set()
    expected = 0
    for m in log:
        kind = (m["after"] or m["before"])["kind"]
        if kind == "multi" and (m["entry"] in cut or (m["after"] or {}).get("rides") == 4):
            cut.add(m["entry"])
            expected += 1
    # (mutations after the last closed interval are not bounded yet, hence <=)
    assert 0 < b["dropped"]["state_allowance"] <= expected
    assert set(b["dropped"]) <= {"state_allowance", "time_bounded"}
    assert b["kept"] + sum(b["dropped"].values()) == b["mutations"]
