"""A user's script that passes times and durations as strings, as the docs do, type-checks under
mypy --strict: the constructors' types say what they accept (the fields hold µs)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import dpcr

release = dpcr.ContinualRelease(
    source=dpcr.sources.Jsonl(path="log.jsonl"),
    constraint=dpcr.Hybrid(column="kind", classes={"multi": dpcr.AtMostK(k=12),
                                                   "monthly": dpcr.TimeBounded(bound="31d")}),
    plan=dpcr.TreeRelease(start="2025-01-01", period="7d", end="2025-12-31"),
    queries=[dpcr.Count(name="active"), dpcr.Histogram(name="z", column="zone", keys=["A"])],
    budget=dpcr.Budget(epsilon=2.0),
    weights=[1, 2],
)
plans = [
    dpcr.AutoPlan(start="2025-01-01", period="1d", end="2026-01-01"),
    dpcr.SlidingWindowRelease(start="2025-01-01", window="28d", period="7d"),
    dpcr.DisjointRelease(start="2025-01-01", period="7d"),
    dpcr.FactorizationRelease(start="2025-01-01", period="7d", horizon=52),
]
start: int = dpcr.TreeRelease(start="2025-01-01", period="7d").start  # µs once built
"""


@pytest.mark.slow
def test_a_script_with_string_times_type_checks(tmp_path: Path) -> None:
    if shutil.which("mypy", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("mypy is not installed beside this interpreter")
    script = tmp_path / "user.py"
    script.write_text(SCRIPT, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental",
         "--cache-dir", str(tmp_path / "cache"), str(script)],
        capture_output=True, text=True, env={"MYPYPATH": str(ROOT / "src"), "PATH": ""},
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
