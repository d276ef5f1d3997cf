"""Local DP for evolving entries: exact and measured MSE at t = 63 of every protocol.

Same synthetic population per cell for every method (insert, up to 2 changes, delete; some late
inserts, some deletions; 4 mutations per entry), equal per-entry epsilon. Every estimator is
unbiased, so each protocol's MSE on the benchmark population is computed exactly
(:func:`dpcr.local.exact_mse`: the erratum-8 variance plus, for random-level / random-period
schedules, the exact sampling term); the planner (which reads only the shape) is judged against
the exact best. Measured MSEs: ``--reps`` runs of every protocol and ``--top-reps`` runs of the
three protocols with the lowest exact MSE (and the planner's pick), each with a 95% confidence
interval over runs (normal approximation: the per-run MSE is a mean over bins of squared errors;
its mean over >= 5 runs is reported with a t quantile). Also times each simulation (10^5 x 64
must be <= 2 s). Usage: python benchmarks/local_dp.py [--reps R] [--top-reps R]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from dpcr.local import (
    LocalProtocol,
    all_protocols,
    exact_mse,
    simulate,
    synthetic_population,
    true_histogram,
)
from dpcr.local._planner import plan_protocols
from dpcr.noise import simulation_randomness

T = 64
K = 4  # insert + 2 changes + delete
# two-sided 97.5% quantiles of Student's t with df = R - 1 (R >= 2); the normal one beyond 30
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 14: 2.145, 19: 2.093, 29: 2.045}  # fmt: skip


def _t975(df: int) -> float:
    if df > 29:
        return 1.96
    return _T975[max(k for k in _T975 if k <= df)]  # conservative for a df between table keys


class _Runs:
    """Per-run MSEs (mean over bins of squared errors at t = 63) of one protocol."""

    def __init__(self) -> None:
        self.errs: list[float] = []
        self.slowest = 0.0

    def run(self, p: LocalProtocol, states: np.ndarray, truth: np.ndarray, seed: int) -> None:
        t0 = time.perf_counter()
        est = simulate(p, states, rng=simulation_randomness(seed)).estimate(T - 1)
        self.slowest = max(self.slowest, time.perf_counter() - t0)
        self.errs.append(float(np.mean((est.histogram - truth) ** 2)))

    @property
    def mean(self) -> float:
        return float(np.mean(self.errs))

    @property
    def rel_se(self) -> float:
        """Standard error of the mean, relative to the mean."""
        return float(np.std(self.errs, ddof=1) / math.sqrt(len(self.errs)) / self.mean)

    def ci(self) -> tuple[float, float]:
        h = _t975(len(self.errs) - 1) * self.rel_se * self.mean
        return self.mean - h, self.mean + h


def _ratio_ci(a: _Runs, b: _Runs) -> tuple[float, float, float]:
    """a/b with a 95% interval (delta method on the log; independent runs)."""
    r = a.mean / b.mean
    if a is b:
        return 1.0, 1.0, 1.0
    se = math.sqrt(a.rel_se**2 + b.rel_se**2)
    return r, r * math.exp(-1.96 * se), r * math.exp(1.96 * se)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5, help="runs of every protocol")
    ap.add_argument("--top-reps", type=int, default=100, help="runs of the 3 best (exact) + pick")
    args = ap.parse_args()
    if args.reps < 2 or args.top_reps < args.reps:
        ap.error("need --reps >= 2 and --top-reps >= --reps")
    head = (
        "| n | |R| | ε | paper flat MSE (exact) | exact best | best/flat | planner pick "
        "| pick/best (exact) | pick measured/exact (95% CI) | measured best | "
        "pick/measured best (95% CI) | slowest sim |"
    )
    print(head)
    print("|---" * 12 + "|")
    detail: list[str] = []
    seed = 0
    for n in (10**4, 10**5):
        for d in (4, 16):
            states = synthetic_population(entries=n, domain=d, horizon=T, seed=n + d)
            truth = true_histogram(states, T - 1, d)
            for eps in (2.0, 8.0):
                protos = {
                    p.name: p for p in all_protocols(domain=d, horizon=T, mutations=K, epsilon=eps)
                }
                exact = {k: float(exact_mse(p, states, T - 1).mean()) for k, p in protos.items()}
                pick = plan_protocols(domain=d, horizon=T, mutations=K, epsilon=eps, population=n)[
                    0
                ].protocol.name
                ranked = sorted(exact, key=exact.__getitem__)
                top = set(ranked[:3]) | {pick}
                runs = {k: _Runs() for k in protos}
                for k, p in protos.items():
                    for _ in range(args.top_reps if k in top else args.reps):
                        seed += 1
                        runs[k].run(p, states, truth, seed)
                ref = exact["mutation/flat/grr"]
                best = ranked[0]
                mbest = min(top, key=lambda k: runs[k].mean)
                lo, hi = runs[pick].ci()
                r, rlo, rhi = _ratio_ci(runs[pick], runs[mbest])
                slowest = max(x.slowest for x in runs.values())
                print(
                    f"| {n:.0e} | {d} | {eps:g} | {ref:.3g} | {best} | {exact[best] / ref:.2e} "
                    f"| {pick} | {exact[pick] / exact[best]:.3f} "
                    f"| {runs[pick].mean / exact[pick]:.3f} ({lo / exact[pick]:.2f}–"
                    f"{hi / exact[pick]:.2f}) | {mbest} | {r:.3f} ({rlo:.2f}–{rhi:.2f}) "
                    f"| {slowest:.2f} s |",
                    flush=True,
                )
                for k in ranked:
                    lo, hi = runs[k].ci()
                    detail.append(
                        f"| {n:.0e} | {d} | {eps:g} | {k} | {exact[k]:.4g} | {exact[k] / ref:.3e} "
                        f"| {len(runs[k].errs)} | {runs[k].mean:.4g} "
                        f"| {lo / exact[k]:.2f}–{hi / exact[k]:.2f} |"
                    )
    print()
    print(
        "| n | |R| | ε | protocol | exact MSE | exact/flat | runs | measured MSE "
        "| measured/exact 95% CI |"
    )
    print("|---" * 9 + "|")
    print("\n".join(detail))


if __name__ == "__main__":
    main()
