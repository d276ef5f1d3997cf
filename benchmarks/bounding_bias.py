# ruff: noqa: E501
"""Bounding bias: freeze vs retire (issue 15) on the transit demo and the subscription workload.

For each workload, the exact (noise-free) year-end running value of every query under its own
constraint with ``on_exhausted = "freeze"`` and ``"retire"``, against the true value (the same
aggregation with no bounding at all), and the exhausted statistic (units whose mutations are being
dropped) with the noise std its query would get at the workload's budget and plan. Noise is
zero-mean, so these exact differences are the bias a reader of the published values sees.

Run: .venv/bin/python benchmarks/bounding_bias.py [--skip-transit]
(generates examples/*/data once; the transit demo has 10^6 mutations: about a minute.)
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np

from dpcr.bounding.constraints import AtMostK
from dpcr.changelog import load
from dpcr.config import load_config
from dpcr.engines.duckdb import aggregate
from dpcr.queries import Exhausted

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = {"subscriptions": ROOT / "examples" / "subscriptions",
             "transit": ROOT / "examples" / "transit"}


def year_end(folder: Path) -> None:
    subprocess.run([sys.executable, str(folder / "generate.py"), "--if-missing"], check=True)
    settings = load_config(folder / "dpcr.toml")
    if folder.name == "transit":  # its SQLite changelog; the canonical JSONL is the same data
        from dpcr import sources

        settings = replace(settings, source=sources.Jsonl(path=folder / "data" / "changelog.jsonl"))
    grid = settings.plan.base_grid()
    end = settings.plan.schedule().release_time(52)
    times = [grid.release_time(j) for j in range(1, 10**6) if grid.release_time(j) <= end]
    con = duckdb.connect()
    t0 = time.perf_counter()
    load(settings.source, con, table="changelog")
    queries = [*settings.queries, Exhausted(name="exhausted")]
    results = {}
    for label, constraint, retire in (("truth (no bounding)", AtMostK(k=10**6), False),
                                      ("freeze", settings.constraint, False),
                                      ("retire", settings.constraint, True)):
        agg = aggregate(con, table="changelog", queries=queries, constraint=constraint,
                        release_times=times, first_interval=1, unit_is_entry=True, retire=retire)
        results[label] = ({q: agg.values[q].sum(axis=0) for q in agg.values}, agg.report)
    with_exhausted = replace(settings, queries=tuple(queries), weights=None)
    predicted = with_exhausted.explain().predicted
    truth = results["truth (no bounding)"][0]
    print(f"\n## {folder.name}: {len(times)} intervals, constraint {settings.constraint.describe()}"
          f" ({time.perf_counter() - t0:.0f} s)")
    rep = results["freeze"][1]
    print(f"mutations {rep.mutations:,}, dropped {sum(rep.dropped.values()):,} {rep.dropped}; "
          f"retired (live entries removed) {results['retire'][1].retired:,}")
    print("| statistic | truth | freeze | bias | retire | bias | noise std (plan, + exhausted query) |")
    print("|---|---|---|---|---|---|---|")
    for q in settings.queries:
        for k, key in enumerate(q.keys):
            name = q.name + (f"[{key}]" if key else "")
            scale = float(q.unit_scale)
            t = float(truth[q.name][k]) * scale
            f = float(results["freeze"][0][q.name][k]) * scale
            r = float(results["retire"][0][q.name][k]) * scale
            print(f"| {name} | {t:,.0f} | {f:,.0f} | {100 * (f - t) / t:+.1f} % | {r:,.0f} | "
                  f"{100 * (r - t) / t:+.1f} % | ±{predicted[q.name].running_std:,.0f} |")
    for label in ("freeze", "retire"):
        v = int(results[label][0]["exhausted"][0])
        print(f"| exhausted units, {label} (exact) | 0 | {v:,} | | | | ±{predicted['exhausted'].running_std:,.0f} |")
    np.testing.assert_equal(int(truth["exhausted"][0]), 0)  # nothing drops without bounding


if __name__ == "__main__":
    print("bounding bias, year-end running values (exact; noise is zero-mean and shown apart)")
    for name, folder in WORKLOADS.items():
        if name == "transit" and "--skip-transit" in sys.argv:
            continue
        year_end(folder)
