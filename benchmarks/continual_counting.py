"""Continual counting: exact error tables (units of sigma_1 at equal zCDP rho) and speed.

Run: .venv/bin/python benchmarks/continual_counting.py [--quick]
Every figure in the tables is an exact variance (no Monte Carlo): max over running counts
1..T of the std of the released running count, divided by sigma_1 = 1/sqrt(2 rho).
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from dpcr.bounding.constraints import AtMostK, TimeBounded
from dpcr.estimators.factorization import BLTStream, blt_prefix, sqrt_prefix
from dpcr.estimators.tree import TreeStream, prefix_from_nodes
from dpcr.plans.factorization import PRESET_BLT, lower_bound
from dpcr.plans.planner import plan_prefix, plan_window


def k1_table(exps: list[int]) -> None:
    print("## k = 1: max std / sigma_1")
    print(
        "| T | binary tree | tree + Honaker | sqrt Toeplitz | row-rescaled sqrt | BLT (4 buf) "
        "| lower bound | sqrt/LB | rescaled/LB | BLT/LB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for e in exps:
        T = 2**e
        p = plan_prefix(AtMostK(k=1), horizon=T, base=1, blt=PRESET_BLT.get(T), branchings=(2,))
        by = {c.name: c.max_std for c in p.candidates}
        lb = lower_bound(T)
        blt = by.get("BLT (4 buffers)", float("nan"))
        print(
            f"| 2^{e} | {by['tree c=2']:.2f} | {by['tree c=2 + Honaker']:.2f} | "
            f"{by['sqrt Toeplitz']:.2f} | {by['sqrt (row-rescaled)']:.2f} | {blt:.2f} | "
            f"{lb:.2f} | {by['sqrt Toeplitz'] / lb:.3f} | {by['sqrt (row-rescaled)'] / lb:.3f} | "
            f"{blt / lb:.3f} |"
        )


def multi_tables(exps: list[int]) -> None:
    for label, con in (
        ("k = 2", AtMostK(k=2)),
        ("k = 4", AtMostK(k=4)),
        ("B = 4W", TimeBounded(bound=4)),
    ):
        print(f"\n## {label}: max std / sigma_1 (planner's choice marked *)")
        print(
            "| T | binary tree | best tree + Honaker | sqrt Toeplitz (exact sens) "
            "| row-rescaled (CS bound) | BLT (exact sens) | planner picks |"
        )
        print("|---|---|---|---|---|---|---|")
        for e in exps:
            T = 2**e
            p = plan_prefix(con, horizon=T, base=1, blt=PRESET_BLT.get(T))
            by = {c.name: c.max_std for c in p.candidates}
            hon = min(
                (c for c in p.candidates if "Honaker" in c.name), key=lambda c: c.max_variance
            )
            print(
                f"| 2^{e} | {by['tree c=2']:.2f} | {hon.max_std:.2f} ({hon.name}) | "
                f"{by['sqrt Toeplitz']:.2f} | {by['sqrt (row-rescaled)']:.2f} | "
                f"{by.get('BLT (4 buffers)', float('nan')):.2f} | "
                f"{p.best.name} {p.best.max_std:.2f} |"
            )


def window_table() -> None:
    print("\n## window 256, period 1, T = 2^16: max std / sigma_1")
    for label, con in (("k = 1", AtMostK(k=1)), ("B = 4W", TimeBounded(bound=4))):
        p = plan_window(
            con, window=256, period=1, horizon=2**16, blt=PRESET_BLT[2**16], branchings=(2, 4)
        )
        best = {c.name: c.max_std for c in p.candidates}
        print(
            f"- {label}: "
            + ", ".join(f"{n} {v:.2f}" for n, v in sorted(best.items(), key=lambda kv: kv[1])[:6])
        )


def speed(n: int) -> None:
    print("\n## speed (noise pre-drawn)")
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, size=n).astype(np.float64)
    z = rng.standard_normal(n)
    blt = PRESET_BLT[2**20]
    t = time.perf_counter()
    blt_prefix(x, z, blt)
    print(f"- BLT batch, {n:.0e} running counts: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    sqrt_prefix(x, z)
    print(f"- sqrt Toeplitz batch (FFT), {n:.0e} running counts: {time.perf_counter() - t:.2f} s")
    h = math.ceil(math.log2(n))
    levels = [x[: n >> lv] + z[: n >> lv] for lv in range(h)]
    t = time.perf_counter()
    prefix_from_nodes(levels, c=2, n=n)
    print(f"- binary tree batch (h={h}), {n:.0e} running counts: {time.perf_counter() - t:.2f} s")
    for keys in (1, 1000):
        st = BLTStream(blt, keys=keys)
        xs = rng.standard_normal((2000, keys))
        zs = rng.standard_normal((2000, keys))
        t = time.perf_counter()
        for i in range(2000):
            st.update(xs[i], zs[i])
            st.get()
        per = (time.perf_counter() - t) / 2000 / keys * 1e6
        print(f"- BLT stream step, {keys} keys: {per:.3f} µs per key")
        ts = TreeStream(c=2, height=20, keys=keys, node_var=[1.0] * 20)
        t = time.perf_counter()
        for _i in range(2000):
            layers = ts.closing_layers()
            ts.update(zs[:layers] if layers <= 2000 else zs[:1])
            ts.get()
        per = (time.perf_counter() - t) / 2000 / keys * 1e6
        print(f"- tree (Honaker) stream step, {keys} keys: {per:.3f} µs per key")


def main() -> None:
    quick = "--quick" in sys.argv
    exps = [10, 12, 16] if quick else [10, 12, 14, 16, 18, 20]
    t0 = time.perf_counter()
    k1_table(exps)
    multi_tables([10, 16] if quick else [10, 16, 20])
    window_table()
    speed(10**6 if quick else 10**7)
    print(f"\n(total {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
