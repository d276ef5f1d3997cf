"""``plan = "factorization"`` vs ``plan = "tree"`` through the pipeline's own calibration.

Run: .venv/bin/python benchmarks/factorization_plan.py
One count query (per-interval sensitivity 1), Gaussian, epsilon = 1, delta = 1e-6, horizon T base
intervals. Both plans are calibrated exactly as ``dpcr plan`` does (sigma^2 rounded up to the
parameter grid, the integer C' of scale 2^20 with its exact multi-participation sensitivity; the
tree with branching 2, fixed height ceil(log2 T) so every node gets 1/(h n) of the budget,
Honaker estimator). Figures: the max over running
counts 1..T of the exact std of the released running count; ratio = factorization / tree
(variance ratio = ratio^2).
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import numpy as np

from dpcr.config import load_config
from dpcr.estimators.tree import honaker_variances
from dpcr.estimators.tree import prefix_variances as tree_prefix_variances
from dpcr.factorization_pipeline import noise_var, prefix_variances
from dpcr.factorization_pipeline import plan as plan_factorization
from dpcr.mechanisms import noise_variance
from dpcr.node_pipeline import plan as plan_nodes

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
    config = load_config(path)
    if "factorization" in release:
        s = plan_factorization(config)
        ev = s.events[0]["n"]
        coeffs = config.plan.coefficients()  # type: ignore[union-attr]
        return math.sqrt(float(prefix_variances(coeffs, noise_var(ev), s.horizon).max()))  # type: ignore[arg-type]
    s = plan_nodes(config)
    var = [noise_variance(s.events[layer]["n"]) for layer in range(s.accounted_layers)]  # type: ignore[arg-type]
    T = s.horizon
    v = tree_prefix_variances(np.arange(1, T + 1), honaker_variances(var, c=2), c=2)
    return math.sqrt(float(v.max()))


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
