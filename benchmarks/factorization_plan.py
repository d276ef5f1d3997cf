"""``plan = "factorization"`` vs ``plan = "tree"`` through the release core's own calibration.

Run: .venv/bin/python benchmarks/factorization_plan.py
One count query (per-interval sensitivity 1), Gaussian, epsilon = 1, delta = 1e-6, horizon T base
intervals. Both plans are calibrated exactly as ``dpcr plan`` does (sigma^2 rounded up to the
parameter grid, the integer C' of scale 2^20 with its exact multi-participation sensitivity; the
tree with branching 2, fixed height ceil(log2 T) so every node gets 1/(h n) of the budget,
Honaker estimator). Figures: the max over running counts 1..T of the exact std of the released
running count (``PlanReport.predicted``, the plan's own estimator); ratio = factorization / tree
(variance ratio = ratio^2).
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import numpy as np

from dpcr.config import load_config

CONFIG = """
[source]
format = "jsonl"
path = "log.jsonl"
[privacy]
epsilon = 1.0
delta = 1e-6
mechanism = "gaussian"
[constraint]
{constraint}
[release]
start = "2025-01-01T00:00:00Z"
period = "1d"
{release}
[[query]]
name = "n"
kind = "count"
"""


def max_std(tmp: Path, constraint: str, release: str) -> float:
    path = tmp / "c.toml"
    path.write_text(CONFIG.format(constraint=constraint, release=release), encoding="utf-8")
    return load_config(path).explain().predicted["n"].running_std


def main() -> None:
    cases = [
        ("k = 1", "at_most_k = 1"),
        ("k = 4", "at_most_k = 4"),
        ("B = 4W", 'time_bounded = "4d"'),
    ]
    Ts = [256, 1024] if "--quick" in sys.argv else [256, 1024, 4096]
    print(
        "| constraint | T | factorization (sqrt, exact integer) | tree c=2 + Honaker "
        "| std ratio | variance ratio |"
    )
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for label, con in cases:
            for T in Ts:
                end = f'end = "{np.datetime64("2025-01-01") + np.timedelta64(T, "D")}T00:00:00Z"'
                f = max_std(tmp, con, f'plan = "factorization"\nhorizon = {T}')
                h = max(1, math.ceil(math.log2(T)))  # fixed height: uniform node shares
                t = max_std(tmp, con, f'plan = "tree"\nheight = {h}\n{end}')
                print(f"| {label} | {T} | {f:.3f} | {t:.3f} | {f / t:.3f} | {(f / t) ** 2:.3f} |")


if __name__ == "__main__":
    main()
