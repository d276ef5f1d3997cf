"""Local DP for evolving entries: MSE at t = 63 of every protocol vs the paper's flat protocol.

Same synthetic population per cell for every method (insert, up to 2 changes, delete; some late
inserts, some deletions; 4 mutations per entry), equal per-entry epsilon. Also times each
simulation (10^5 x 64 must be <= 2 s) and checks the planner's pick is within 1.2x of the best
measured protocol. Usage: python benchmarks/local_dp.py [--reps R]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dpcr.local import all_protocols, simulate, synthetic_population, true_histogram
from dpcr.local._planner import plan_protocols
from dpcr.noise import simulation_randomness

T = 64
K = 4  # insert + 2 changes + delete


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    print(
        "| n | |R| | ε | paper flat MSE | best (measured) | ratio | planner pick | pick/best "
        "| slowest sim |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    seed = 0
    for n in (10**4, 10**5):
        for d in (4, 16):
            states = synthetic_population(entries=n, domain=d, horizon=T, seed=n + d)
            truth = true_histogram(states, T - 1, d)
            for eps in (2.0, 8.0):
                mse: dict[str, float] = {}
                slowest = 0.0
                for p in all_protocols(domain=d, horizon=T, mutations=K, epsilon=eps):
                    errs = []
                    for _ in range(args.reps):
                        seed += 1
                        t0 = time.perf_counter()
                        est = simulate(p, states, rng=simulation_randomness(seed)).estimate(T - 1)
                        slowest = max(slowest, time.perf_counter() - t0)
                        errs.append(float(np.mean((est.histogram - truth) ** 2)))
                    mse[p.name] = float(np.mean(errs))
                ref = mse["mutation/flat/grr"]
                best = min(mse, key=mse.__getitem__)
                pick = plan_protocols(domain=d, horizon=T, mutations=K, epsilon=eps, population=n)[
                    0
                ].protocol.name
                print(
                    f"| {n:.0e} | {d} | {eps:g} | {ref:.3g} | {best} | {mse[best] / ref:.2e} "
                    f"| {pick} | {mse[pick] / mse[best]:.2f} | {slowest:.2f} s |",
                    flush=True,
                )
                for name in sorted(mse, key=mse.__getitem__):
                    print(f"<!-- {n} {d} {eps} {name} {mse[name] / ref:.3e} -->")


if __name__ == "__main__":
    main()
