"""The analysis tools against their goals (issue 8), one table.

    .venv/bin/python benchmarks/analysis.py [--runs 1000000] [--repeats 3]

* exact region and full profile of a random 64×64 mechanism (all 4032 ordered pairs, rationals
  over 2^20), best of ``--repeats``; goal ≤ 1 s;
* coupled-worlds brute force of the exact count over a window of n = 8 Bernoulli(1/2) rows,
  c = 1/4, t = 6 (2^18 streams); goal ≤ 10 s;
* audit of a discrete-Laplace count claimed ε = 1 with ``--runs`` runs per side; goal: lower
  bound ≥ 0.8 with 10^6 runs;
* the same audit of a broken count (noise 2× too small, still claiming ε = 1); goal: flagged;
* Theorem 4 against the exact composed stream: n = 4, c = 1/2, p = 1/2, the count reported
  truthfully half the time and uniform on 0..4 otherwise, t = 1..5.

Simulation randomness (seeded) for the audits, as every audit uses.
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from fractions import Fraction

import numpy as np

from dpcr.analysis.audit import audit_laplace
from dpcr.analysis.cw import brute_force_stream, single_step
from dpcr.analysis.regions import FiniteMechanism, privacy_profile, region_polygon
from dpcr.noise import simulation_randomness


def _mechanism_64() -> FiniteMechanism:
    rng = np.random.default_rng(1)
    denom = 2**20
    rows = []
    for _ in range(64):
        cuts = np.sort(rng.integers(0, denom + 1, 63))
        parts = np.diff(np.concatenate(([0], cuts, [denom])))
        rows.append([Fraction(int(v), denom) for v in parts])
    return FiniteMechanism.from_rows(rows, symmetric=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=float, default=1e6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = int(args.runs)
    print(f"# python {platform.python_version()}, numpy {np.__version__}")
    print("| goal | measured | result | goal met |")
    print("|---|---|---|---|")

    mech = _mechanism_64()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        prof = privacy_profile(mech)
        tangents = prof.tangents()
        polygon = region_polygon(prof)
        times.append(time.perf_counter() - start)
    print(f"| 64×64 exact region + profile ≤ 1 s | {min(times):.3f} s (best of {args.repeats}) "
          f"| {len(tangents)} tangent pairs, {len(polygon)} region vertices, "
          f"δ(0) = {float(prof.delta_at_slope(Fraction(1))):.4f} | {min(times) <= 1} |")

    start = time.perf_counter()
    exact, _ = brute_force_stream(n=8, block=2, p=Fraction(1, 2), kernel=np.eye(9), t=6)
    cw_s = time.perf_counter() - start
    print(f"| CW brute force n = 8, c = 1/4, t = 6 ≤ 10 s | {cw_s:.2f} s | exact count: "
          f"ε_6 = {exact.epsilon:.4f} (ln 2), δ_6 = {exact.delta:.4f} (1/4) | {cw_s <= 10} |")

    start = time.perf_counter()
    ok = audit_laplace(epsilon=1.0, runs=runs, rng=simulation_randomness(1))
    ok_s = time.perf_counter() - start
    print(f"| Laplace count ε = 1, {runs:,} runs: lower bound ≥ 0.8 | {ok_s:.2f} s | "
          f"ε ≥ {ok.epsilon_lower:.4f} (95 %), test {ok.direction} at {ok.threshold:g} | "
          f"{ok.epsilon_lower >= 0.8 and not ok.violated} |")

    start = time.perf_counter()
    broken = audit_laplace(epsilon=1.0, runs=runs, rng=simulation_randomness(2),
                           noise_factor=0.5)
    br_s = time.perf_counter() - start
    print(f"| 2×-broken Laplace (true ε = 2) flagged | {br_s:.2f} s | ε ≥ "
          f"{broken.epsilon_lower:.4f} > 1: flagged = {broken.violated} | {broken.violated} |")

    print()
    print("Theorem 4 (ε_t ≤ ε_max + (t − 1)γ, δ_t ≤ t·δ_max) against the exact composed stream, "
          "n = 4, c = 1/2, p = 1/2, count kept w.p. 1/2 else uniform on 0..4:")
    print()
    kernel = 0.5 * np.eye(5) + 0.5 / 5
    bound = single_step(n=4, block=2, p=Fraction(1, 2), kernel=kernel)
    print(f"ε_max = {bound.epsilon_max:.4f}, δ_max = {bound.delta_max:.4f}, "
          f"γ = {bound.gamma:.4f}")
    print()
    print("| t | exact ε_t | bound ε_t | bound / exact | exact δ_t | bound δ_t | "
          "exact δ at bound ε | s |")
    print("|---|---|---|---|---|---|---|---|")
    for t in range(1, 6):
        eps_b, delta_b = bound.theorem4(t)
        start = time.perf_counter()
        ex, (d_at,) = brute_force_stream(n=4, block=2, p=Fraction(1, 2), kernel=kernel, t=t,
                                         epsilons=[eps_b])
        secs = time.perf_counter() - start
        ratio = eps_b / ex.epsilon if ex.epsilon > 0 else math.inf
        print(f"| {t} | {ex.epsilon:.3f} | {eps_b:.3f} | {ratio:.2f} | {ex.delta:.3g} | "
              f"{delta_b:.3f} | {d_at:.3g} | {secs:.2f} |")


if __name__ == "__main__":
    main()
