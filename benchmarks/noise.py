"""Throughput of dpcr's exact samplers against numpy's float samplers and OpenDP's exact ones.

    .venv/bin/python benchmarks/noise.py [--size 1000000] [--repeats 5] [--opendp-size 100000]

Prints samples per second (best of ``--repeats``, one thread, tables built before timing) for:
dpcr with the secure OS generator and with the seeded simulation generator; numpy's float Laplace /
normal (``Generator.laplace`` / ``Generator.normal``, PCG64: neither exact nor secure); and
OpenDP's exact integer samplers (``make_laplace`` / ``make_gaussian`` on integer vectors, behind
``enable_features("contrib")``) when ``opendp`` is importable (``pip install 'dpcr[bench]'``).
Ratios are dpcr-secure / other. The first line is the raw speed of ``os.urandom``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dpcr.noise import discrete_gaussian, discrete_laplace, secure_randomness, simulation_randomness

LAPLACE_SCALES = [Fraction(1, 2), Fraction(10), Fraction(12_345_678, 2**20), Fraction(10**4)]
GAUSSIAN_SIGMA2 = [Fraction(1, 2), Fraction(100), Fraction(10**4), Fraction(10**8)]


def rate(fn: Callable[[], object], size: int, repeats: int) -> float:
    fn()  # warm-up: builds and caches tables
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return size / best


def opendp_samplers() -> tuple[Callable[[float, int], Callable[[], object]], ...] | None:
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")

    def laplace(scale: float, n: int) -> Callable[[], object]:
        space = dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int)
        meas = dp.m.make_laplace(*space, scale=scale)
        data = [0] * n
        return lambda: meas(data)

    def gaussian(sigma: float, n: int) -> Callable[[], object]:
        space = dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int)
        meas = dp.m.make_gaussian(*space, scale=sigma)
        data = [0] * n
        return lambda: meas(data)

    return laplace, gaussian


def fmt(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x / 1e6:.2f}" if x >= 1e5 else f"{x / 1e6:.3f}"


def ratio(a: float, b: float | None) -> str:
    return "—" if b is None else f"{a / b:.2f}×" if a < 10 * b else f"{a / b:.0f}×"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--opendp-size", type=int, default=100_000)
    args = parser.parse_args()
    n, reps = args.size, args.repeats
    secure, sim = secure_randomness(), simulation_randomness(1)
    np_rng = np.random.default_rng(1)
    other = opendp_samplers()

    urandom = rate(lambda: os.urandom(8 * n), n, reps)
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"numpy {np.__version__}; os.urandom: {urandom * 8 / 1e6:.0f} MB/s "
        f"= {urandom / 1e6:.1f} M words/s"
    )
    print()
    print(
        "| distribution | parameter | dpcr secure | dpcr simulation | numpy float "
        "| OpenDP exact | secure / numpy | secure / OpenDP |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rows: list[tuple[str, str, float, float, float, float | None]] = []
    for scale in LAPLACE_SCALES:
        s = float(scale)
        ours = rate(lambda: discrete_laplace(scale, n, secure), n, reps)  # noqa: B023
        ours_sim = rate(lambda: discrete_laplace(scale, n, sim), n, reps)  # noqa: B023
        flt = rate(lambda: np_rng.laplace(0.0, s, n), n, reps)  # noqa: B023
        odp = None
        if other is not None:
            odp = rate(other[0](s, args.opendp_size), args.opendp_size, 1)
        rows.append(("discrete Laplace", f"scale = {scale}", ours, ours_sim, flt, odp))
    for sigma2 in GAUSSIAN_SIGMA2:
        sd = math.sqrt(sigma2)
        ours = rate(lambda: discrete_gaussian(sigma2, n, secure), n, reps)  # noqa: B023
        ours_sim = rate(lambda: discrete_gaussian(sigma2, n, sim), n, reps)  # noqa: B023
        flt = rate(lambda: np_rng.normal(0.0, sd, n), n, reps)  # noqa: B023
        odp = None
        if other is not None:
            odp = rate(other[1](sd, args.opendp_size), args.opendp_size, 1)
        rows.append(("discrete Gaussian", f"sigma2 = {sigma2}", ours, ours_sim, flt, odp))
    for name, param, ours, ours_sim, flt, odp in rows:
        print(
            f"| {name} | {param} | {fmt(ours)} | {fmt(ours_sim)} | {fmt(flt)} | {fmt(odp)} "
            f"| {ratio(ours, flt)} | {ratio(ours, odp)} |"
        )
    print()
    print(
        "Samples per second in millions (M/s). numpy float: Generator.laplace for the Laplace "
        "rows, Generator.normal for the Gaussian rows."
    )


if __name__ == "__main__":
    main()
