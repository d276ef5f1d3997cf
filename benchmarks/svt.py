"""Throughput of the sparse vector: 10^6 queries through AboveThreshold and Sparse.

    .venv/bin/python benchmarks/svt.py [--size 1000000] [--repeats 5]

Secure randomness (the OS generator, as in a release). Each case builds a fresh instance and
answers ``--size`` integer queries in one ``release`` call (query noise drawn in one batch, one
threshold draw per ⊤). Reported: best and median wall time of ``--repeats`` runs, queries per
second, and the ⊤ count. Goal (issue 7): 10^6 queries in ≤ 1 s.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np

from dpcr.noise import secure_randomness
from dpcr.svt import SparseVector, above_threshold, numeric_sparse, sparse


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=float, default=1e6)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = int(args.size)
    rng = secure_randomness()
    values = np.random.default_rng(0).integers(0, 100, n)
    cases: list[tuple[str, Callable[[], SparseVector]]] = [
        ("AboveThreshold, no ⊤", lambda: above_threshold(threshold=10**6, epsilon=1)),
        ("Sparse c=10, ε=1", lambda: sparse(threshold=95, cutoff=10, epsilon=1)),
        ("Sparse c=1000, ε=1, T=130", lambda: sparse(threshold=130, cutoff=1000, epsilon=1)),
        ("Sparse c=1000, ε=1", lambda: sparse(threshold=80, cutoff=1000, epsilon=1)),
        (
            "Sparse c=1000, ε=1, δ=1e-6",
            lambda: sparse(threshold=80, cutoff=1000, epsilon=1, delta=1e-6),
        ),
        ("Sparse c=10^5 (⊤-heavy)", lambda: sparse(threshold=50, cutoff=10**5, epsilon=10**4)),
        ("NumericSparse c=1000", lambda: numeric_sparse(threshold=80, cutoff=1000, epsilon=1)),
    ]
    print(f"# {n:,} queries, secure randomness, python {platform.python_version()}")
    print("| case | best s | median s | queries/s | ⊤ | answered |")
    print("|---|---|---|---|---|---|")
    for name, make in cases:
        times = []
        for _ in range(args.repeats):
            svt = make()
            start = time.perf_counter()
            out = svt.release(values, rng=rng)
            times.append(time.perf_counter() - start)
        best = min(times)
        tops = int((out.answers == 1).sum())
        print(
            f"| {name} | {best:.3f} | {statistics.median(times):.3f} | {n / best / 1e6:.1f} M "
            f"| {tops} | {svt.state.answered:,} |"
        )


if __name__ == "__main__":
    main()
