"""What consistency post-processing does to error, bias and interval coverage.

    PYTHONPATH=src .venv/bin/python benchmarks/consistency.py [--runs 400] [--seed 1]

A histogram of 8 keys with small running counts (several keys near 0, one near 60) and its total
count, released daily for 30 days by the disjoint plan and the binary tree (Honaker), discrete
Laplace noise of scale 8 per node (keys and total independent, as two queries are). Per mode:
the root mean square error and the mean error (bias) of the published running values against
the truth over all keys and days, the largest per-key bias (mean error of one key over runs and
days), the share of negative published values, and the coverage of the published 95 %
intervals (the estimator's interval, widened to contain the published value and cut at 0 with
nonnegative, as dpcr publishes them). The noise, estimator, intervals and projection are dpcr's
own (plan.exact / plan.estimate / row_intervals / consistent_series).
"""

from __future__ import annotations

import argparse
import math
import platform
from fractions import Fraction

import numpy as np

import dpcr
from dpcr.accounting.events import DiscreteLaplaceEvent
from dpcr.mechanisms import noise_variance
from dpcr.noise import discrete_laplace, simulation_randomness
from dpcr.release._consistency import consistent_series
from dpcr.release._uncertainty import row_intervals

DAYS, KEYS = 30, 8
SCALE = Fraction(8)
MODES: dict[str, tuple[str, ...]] = {
    "none": (),
    "nonnegative": ("nonnegative",),
    "sum_to_total": ("sum_to_total",),
    "nonnegative + sum_to_total": ("nonnegative", "sum_to_total"),
}


def truth_changes(rng: np.random.Generator) -> np.ndarray:
    """Per day and key the change of the live count; key k drifts to about 2 k² / 3."""
    target = np.array([0, 1, 2, 3, 6, 12, 25, 60])
    changes = np.zeros((DAYS, KEYS), dtype=np.int64)
    level = np.zeros(KEYS, dtype=np.int64)
    for d in range(DAYS):
        want = np.minimum(target, (target * (d + 1)) // 10)
        step = want - level + rng.integers(-1, 2, size=KEYS) * (level > 0)
        step = np.maximum(step, -level)
        changes[d] = step
        level += step
    return changes


def run(plan: object, runs: int, seed: int) -> list[tuple[str, float, float, float, float, float]]:
    rng = simulation_randomness(seed)
    base = truth_changes(np.random.default_rng(seed))
    truth = np.cumsum(base, axis=0).astype(np.float64)
    nodes = plan.due(0, DAYS)  # type: ignore[attr-defined]
    event = DiscreteLaplaceEvent(scale=SCALE, sensitivity=Fraction(1))
    events = {nd: event for nd in nodes}
    var = {nd: noise_variance(event) for nd in nodes}
    exact_k = plan.exact(base, 1, nodes)  # type: ignore[attr-defined]
    exact_t = plan.exact(base.sum(axis=1, keepdims=True), 1, nodes)  # type: ignore[attr-defined]
    _, e_iv = row_intervals(plan, nodes, events, var, DAYS)
    half = np.array([iv.half_width for iv in e_iv])[:, None]
    stats: dict[str, list[np.ndarray]] = {m: [] for m in MODES}
    for _ in range(runs):
        noisy_k = exact_k + discrete_laplace(SCALE, exact_k.size, rng).reshape(exact_k.shape)
        noisy_t = exact_t + discrete_laplace(SCALE, exact_t.size, rng).reshape(exact_t.shape)
        est_k = plan.estimate({nd: noisy_k[j] for j, nd in enumerate(nodes)}, var,  # type: ignore[attr-defined]
                              DAYS).estimate
        est_t = plan.estimate({nd: noisy_t[j] for j, nd in enumerate(nodes)}, var,  # type: ignore[attr-defined]
                              DAYS).estimate
        total_pub = consistent_series(est_t, modes=("nonnegative",), total=None)[:, 0]
        for name, modes in MODES.items():
            total = total_pub if "sum_to_total" in modes else None
            pub = consistent_series(est_k, modes=modes, total=total) if modes else est_k
            lo = np.minimum(est_k - half, pub)
            hi = np.maximum(est_k + half, pub)
            if "nonnegative" in modes:
                lo, hi = np.maximum(lo, 0), np.maximum(hi, 0)
            stats[name].append(np.stack([pub - truth, (pub < 0), (lo <= truth) & (truth <= hi)]))
    out = []
    for name in MODES:
        s = np.array(stats[name])  # runs x 3 x days x keys
        err = s[:, 0]
        per_key = err.mean(axis=(0, 1))
        out.append((name, math.sqrt(float((err**2).mean())), float(err.mean()),
                    float(np.abs(per_key).max()), float(s[:, 1].mean()), float(s[:, 2].mean())))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(f"# {platform.machine()}, {args.runs} runs, {DAYS} days x {KEYS} keys, "
          f"discrete Laplace scale {SCALE} per node")
    plans = {
        "disjoint": dpcr.DisjointRelease(start="2025-01-01", period="1d"),
        "tree (Honaker)": dpcr.TreeRelease(start="2025-01-01", period="1d", end="2025-02-01"),
    }
    print("| plan | consistency | RMSE | mean error | worst key's bias | negative | "
          "95 % interval coverage |")
    print("|---|---|---|---|---|---|---|")
    for pname, plan in plans.items():
        for name, rmse, bias, worst, neg, cov in run(plan, args.runs, args.seed):
            print(f"| {pname} | {name} | {rmse:.2f} | {bias:+.2f} | {worst:.2f} | "
                  f"{100 * neg:.1f} % | {100 * cov:.2f} % |")


if __name__ == "__main__":
    main()
