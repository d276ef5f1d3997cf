"""Whole ``dpcr`` processes timed by label, as the benchmarks that run it as a user would share
them: each run's CPU (user + sys), wall and peak memory (:func:`product.measure`, ``wait4``),
the medians per label, and beside them the machine's state in the same minute (its load and
the CPU of a process that imports numpy and DuckDB: the machine's speed varies, so a figure is
read against this floor)."""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from product import Run, measure


class Timings:
    """The runs of each label, in the order they ran."""

    def __init__(self) -> None:
        self.runs: dict[str, list[Run]] = {}

    def run(self, label: str, cmd: list[str], *, env: dict[str, str] | None = None,
            timeout: float = 3600) -> Run:  # fmt: skip
        """Run ``cmd`` (a whole process, environment ``env``) and keep its figures under
        ``label``; exits naming the label when it fails."""
        got = measure(cmd, timeout, env=env)
        if got.error:
            raise SystemExit(f"{label}: {got.error}")
        self.runs.setdefault(label, []).append(got)
        return got

    def median(self, label: str, figure: str) -> float:
        """The median of ``figure`` ("cpu", "wall" or "peak") over the runs of ``label``."""
        return statistics.median(getattr(r, figure) for r in self.runs[label])


def machine(env: dict[str, str] | None = None) -> str:
    """The machine now: its load average (1 min) and the CPU of ``import numpy, duckdb``."""
    floor = measure([sys.executable, "-c", "import numpy, duckdb"], 60, env=env)
    return f"load {os.getloadavg()[0]:.1f}; import numpy, duckdb {floor.cpu:.2f} s CPU"
