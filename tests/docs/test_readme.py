"""The README's quickstart runs: every block marked ``<!-- tested -->`` (bash through bash, python
through this interpreter), in order, in one empty folder, with ``dpcr`` on the PATH."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- tested -->\n```(bash|python)\n(.*?)\n```", re.S)


def blocks() -> list[tuple[str, str]]:
    return BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))


def test_readme_keeps_make_demo_and_make_test_first() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert lines[3].startswith("make demo") and lines[4].startswith("make test")


def test_readme_quickstart_blocks_run(tmp_path: Path) -> None:
    found = blocks()
    assert [lang for lang, _ in found] == ["bash", "bash", "python"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "COLUMNS": "120"}
    outputs = []
    for lang, code in found:
        argv = ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else [
            sys.executable, "-c", code]
        run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)
        if run.returncode != 0:
            pytest.fail(f"README {lang} block failed ({run.returncode}):\n{code}\n{run.stderr}")
        outputs.append(run.stdout)
    quick, rehearsal, python = outputs
    assert "Guarantee" in quick and quick.count("\n") > 10
    assert "query,key,interval" in quick  # head of out/public/releases.csv
    assert (tmp_path / "out" / "public" / "report.html").exists()
    assert {"report.html", "releases.csv"} <= set(rehearsal.split())
    assert python.splitlines()[0].startswith("2.0 ")
    assert len(python.splitlines()) == 1 + 4  # the guarantee, then 4 weeks of "active"
