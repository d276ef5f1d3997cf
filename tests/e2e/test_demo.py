"""The bundled demo: the generator at a small scale, then the bundled config through the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dpcr.cli import main

from .helpers import releases_per_class

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "transit"


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("transit")
    subprocess.run(
        [sys.executable, str(DEMO / "generate.py"), "--out", str(work / "data"),
         "--scale", "0.02", "--quiet", "--serial"],
        check=True,
    )
    config = (DEMO / "dpcr.toml").read_text(encoding="utf-8")
    (work / "dpcr.toml").write_text(config.replace('dir = "../../out"', 'dir = "out"'))
    return work


def test_demo_config_runs_and_reruns_identically(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(demo_dir / "dpcr.toml")
    assert main(["plan", cfg, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # the demo leaves the plan to auto: the 8-ary tree of height 2 (docs/choosing-a-plan.md); a
    # unit touches its leaves (12, or ceil(31/7) + 1 = 6 in a run) and their parents
    assert plan["plan"] == "tree" and plan["max_releases_per_unit"] == 18
    assert releases_per_class(plan) == {"multi": 18, "monthly": 8}
    assert plan["epsilon"] <= 2.0

    assert main(["run", cfg, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    summary = first["summary"]
    assert summary["released_intervals"] == 52  # weekly over 2025, closed by the wall clock
    diagnostics = first["diagnostics"]
    assert diagnostics["changelog"]["quarantined"] == {}
    assert "bounding" not in summary and "changelog" not in summary  # operator-only
    dropped = diagnostics["bounding"]["dropped"]
    assert dropped.get("at_most_k", 0) > 0 and dropped.get("time_bounded", 0) > 0
    assert {r["query"] for r in first["rows"]} == {
        "active_tickets", "tickets_by_zone", "active_fares"
    }

    assert main(["run", cfg]) == 0
    printed = capsys.readouterr().out
    assert "0 new this run" in printed and "Guarantee" in printed
    assert main(["run", cfg, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == first["rows"]


def test_malformed_demo_records_are_quarantined_with_counts(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = demo_dir / "bad"
    work.mkdir()
    shutil.copy(demo_dir / "data" / "malformed.jsonl", work / "malformed.jsonl")
    config = (demo_dir / "dpcr.toml").read_text()
    config = config.replace('format = "sqlite"', 'format = "jsonl"')
    config = config.replace('path = "data/transit.sqlite"\ntable = "dpcr_changelog"',
                            'path = "malformed.jsonl"')
    (work / "dpcr.toml").write_text(config)
    assert main(["run", str(work / "dpcr.toml"), "--json", "--until", "2026-01-01"]) == 0
    changelog = json.loads(capsys.readouterr().out)["diagnostics"]["changelog"]
    quarantined = changelog["quarantined"]
    assert sum(quarantined.values()) > 0
    assert changelog["records"] == changelog["valid"] + sum(
        quarantined.values()
    ) + changelog["tombstones"]
    lines = (work / "out" / "operator" / "quarantine.jsonl").read_text().splitlines()
    assert len(lines) == sum(quarantined.values())
