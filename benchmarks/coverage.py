"""Coverage of the published 95 % intervals on the bundled demos, over many simulation runs.

Run: .venv/bin/python benchmarks/coverage.py [--runs 200] [CONFIG ...]

Each run is a whole release through the real path (``ContinualRelease.run`` with a seeded
simulation source, a fresh output folder, every interval of the horizon), with the demo's own
plan (``plan = "auto"`` unless the config names one). The truth is the noise-free release of the
same data (:func:`dpcr.report.truth.exact_series`: the same bounding, aggregation and estimator
with the noise off). A *cell* is one published column (the change or the running estimate) of
one statistic and key at one interval; over the runs, the number of runs whose interval covers
the truth is Binomial(runs, p) with p >= 0.95 (the intervals' proven coverage). The check: every
cell's count is at least the binomial quantile at 1e-6 / cells (Bonferroni), so a correct
release fails it with probability at most 1e-6. The pooled rate over all cells is printed too
(cells of one run share noise, so it has no simple tolerance; it is a summary).

Defaults: the transit and subscriptions demos (``make demo`` generates their data).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from scipy.stats import binom

from dpcr.config import load_config
from dpcr.noise import simulation_randomness
from dpcr.report.truth import exact_series

ROOT = Path(__file__).resolve().parents[1]
DEMOS = [ROOT / "examples" / "transit" / "dpcr.toml",
         ROOT / "examples" / "subscriptions" / "dpcr.toml"]
FALSE_FAILURE = 1e-6
NOMINAL = 0.95


def coverage(config: Path, runs: int, seed: int) -> dict[str, object]:
    """Covered counts per cell of ``runs`` simulations of ``config``."""
    base = load_config(config)
    end = getattr(base.plan, "end", None)
    covered: Counter[tuple[str, str, int, str]] = Counter()
    truth: dict[tuple[str, str], list[float]] = {}
    plan_name = ""
    started = time.perf_counter()
    for i in range(runs):
        out = Path(tempfile.mkdtemp(prefix="dpcr-coverage-"))
        try:
            release = dataclasses.replace(base, output_dir=out, store=None)
            result = release.run(until=end, rng=simulation_randomness(seed + i))
            if not truth:
                truth = exact_series(release)
                plan_name = str(result.summary.get("plan", {}).get("description", ""))
                plan_name = plan_name.split(",")[0] + (
                    f", {m[0]}" if (m := re.findall(r"branching \d+", plan_name)) else "")
            for r in result.rows:
                t = truth[(r.query, r.key)]
                k = r.interval - 1
                # change: the running value's step over the interval (from 0 at the first)
                change = t[k] - (t[k - 1] if k else 0.0)
                covered[(r.query, r.key, r.interval, "change")] += (
                    r.change_lo <= change <= r.change_hi
                )
                covered[(r.query, r.key, r.interval, "estimate")] += (
                    r.estimate_lo <= t[k] <= r.estimate_hi
                )
        finally:
            shutil.rmtree(out, ignore_errors=True)
        if (i + 1) % 20 == 0:
            print(f"  {config.parent.name}: {i + 1}/{runs} runs, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
    cells = len(covered)
    low = int(binom.ppf(FALSE_FAILURE / cells, runs, NOMINAL))
    worst = min(covered.items(), key=lambda kv: kv[1])
    pooled = {col: sum(v for k, v in covered.items() if k[3] == col)
              / (runs * sum(1 for k in covered if k[3] == col))
              for col in ("change", "estimate")}
    return {"config": config.parent.name, "plan": plan_name, "runs": runs, "cells": cells,
            "pooled": pooled, "worst": worst, "low": low, "ok": worst[1] >= low,
            "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", type=Path, default=DEMOS)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20261125)
    args = parser.parse_args()
    print("| demo | plan | runs | cells | pooled coverage: change / estimate | "
          "lowest cell (runs covered) | bound at 1e-6 | result | time |")
    print("|---|---|---|---|---|---|---|---|---|")
    failed = False
    for config in args.configs:
        r = coverage(config.resolve(), args.runs, args.seed)
        (query, key, interval, col), n = r["worst"]  # type: ignore[misc]
        pooled = r["pooled"]
        assert isinstance(pooled, dict)
        print(f"| {r['config']} | {r['plan']} | {r['runs']} | {r['cells']} | "
              f"{pooled['change']:.2%} / {pooled['estimate']:.2%} | "
              f"{n} ({query}{'/' + key if key else ''}, interval {interval}, {col}) | "
              f"{r['low']} | {'pass' if r['ok'] else 'FAIL'} | {r['seconds']:.0f} s |")
        failed |= not r["ok"]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
