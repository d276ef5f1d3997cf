"""Open keys (issue 35): a weekly year of a histogram over keys nobody declared.

The workload: ``--n`` mutations of entries whose ``country`` is drawn from a Zipf law (exponent
``--zipf``) over ``--keys`` distinct values; each entry is inserted at a uniform time of 2025,
then with probability 0.3 moves to another key, and with probability 0.2 is deleted (at most 3
mutations: ``at_most_k = 3``). Measured:

  recall     a simulation (seeded noise) of the release with ``open = true``: of the (key, week)
             pairs whose true running count exceeds the threshold ``dpcr plan`` states, the share
             whose key is published that week (the true counts: the release's own exact values)
  std        the published per-key std of the open release over that of the same release with
             the keys declared (the 100 most frequent), from ``dpcr plan``
  cpu        ``dpcr run`` processes (CPU = user + sys, wall, peak RSS): the open release over
             every candidate key vs the same release with 100 declared keys, interleaved

Usage: python benchmarks/open_keys.py [--n 1e7] [--keys 1e5] [--repeat 2] [--only recall,std,cpu]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from product import measure

YEAR_START_US = 1_735_689_600 * 10**6  # 2025-01-01T00:00:00Z
YEAR_US = 365 * 86_400 * 10**6
DAY_US = 86_400 * 10**6


def generate(n: int, keys: int, zipf: float, seed: int, path: Path) -> Path:
    """The changelog of about ``n`` mutations as Parquet (entry, ts, op, before, after)."""
    import duckdb

    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    entries = max(1, int(n / 1.5))
    weights = 1.0 / np.arange(1, keys + 1) ** zipf
    weights /= weights.sum()
    first = rng.choice(keys, size=entries, p=weights)
    moved = rng.random(entries) < 0.3
    second = np.where(moved, rng.choice(keys, size=entries, p=weights), first)
    deleted = rng.random(entries) < 0.2
    t0 = YEAR_START_US + rng.integers(0, YEAR_US - 2 * DAY_US, size=entries)
    end = YEAR_START_US + YEAR_US
    t1 = np.minimum(t0 + rng.integers(DAY_US, 60 * DAY_US, size=entries), end - DAY_US)
    t2 = np.minimum(t1 + rng.integers(DAY_US, 60 * DAY_US, size=entries), end - 1)
    ids = np.arange(entries)
    cols = {
        "entry": np.concatenate([ids, ids[moved], ids[deleted]]),
        "ts": np.concatenate([t0, t1[moved], t2[deleted]]),
        "op": np.concatenate([np.zeros(entries, np.int8), np.ones(int(moved.sum()), np.int8),
                              np.full(int(deleted.sum()), 2, np.int8)]),
        "old": np.concatenate([np.full(entries, -1), first[moved], second[deleted]]),
        "new": np.concatenate([first, second[moved], np.full(int(deleted.sum()), -1)]),
    }  # fmt: skip
    con = duckdb.connect()
    con.register("d", cols)
    part = path.with_name(path.name + ".part")
    con.execute(f"""COPY (SELECT entry, ts,
        CASE op WHEN 0 THEN 'insert' WHEN 1 THEN 'update' ELSE 'delete' END AS op,
        CASE WHEN old < 0 THEN NULL ELSE {{'country': 'k' || old}} END AS before,
        CASE WHEN new < 0 THEN NULL ELSE {{'country': 'k' || new}} END AS after
        FROM d ORDER BY ts, entry) TO '{part}' (FORMAT parquet)""")
    con.close()
    part.rename(path)
    return path


def config(data: Path, out: Path, *, declared: list[str] | None, plan: str) -> Path:
    """The release's TOML: weekly through 2025, ε = 1, δ = 1e-6, at most 3 mutations."""
    keys = (
        "open = true"
        if declared is None
        else "keys = [" + ", ".join(f'"{k}"' for k in declared) + "]"
    )
    text = f"""[source]
format = "parquet"
path = "{data}"
epoch_unit = "us"

[privacy]
epsilon = 1.0
delta = 1e-6

[constraint]
at_most_k = 3

[release]
plan = "{plan}"
start = "2025-01-01T00:00:00Z"
period = "7d"
end = "2025-12-31T00:00:00Z"

[[query]]
name = "country"
kind = "histogram"
column = "country"
{keys}

[output]
dir = "{out}"
"""
    path = out.with_suffix(".toml")
    path.write_text(text, encoding="utf-8")
    return path


def top_keys(data: Path, count: int) -> list[str]:
    import duckdb

    rows = duckdb.sql(
        f"SELECT after.country AS k, count(*) AS n FROM '{data}' WHERE after IS NOT NULL "
        f"GROUP BY k ORDER BY n DESC, k LIMIT {count}"
    ).fetchall()
    return [str(r[0]) for r in rows]


def plan_json(cfg: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "dpcr.cli", "plan", str(cfg), "--json"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(out.stdout)


def exact_running(data: Path, weeks: int) -> dict[str, np.ndarray]:
    """Per key, the true running count of live rows after each week (every generated history
    keeps all its mutations: at most 3), from the data directly."""
    import duckdb

    week = 7 * DAY_US
    rows = duckdb.sql(f"""
        WITH moves AS (
            SELECT after.country AS k, ts, 1 AS d FROM '{data}' WHERE after IS NOT NULL
            UNION ALL
            SELECT before.country AS k, ts, -1 AS d FROM '{data}' WHERE before IS NOT NULL)
        SELECT k, (ts - {YEAR_START_US}) // {week} AS w, sum(d)::BIGINT FROM moves
        WHERE ts < {YEAR_START_US + weeks * week} GROUP BY k, w""").fetchall()
    out: dict[str, np.ndarray] = {}
    for k, w, d in rows:
        out.setdefault(str(k), np.zeros(weeks, dtype=np.int64))[int(w)] += int(d)
    return {k: np.cumsum(v) for k, v in out.items()}


def recall(cfg: Path, data: Path, seed: int) -> dict[str, Any]:
    subprocess.run([sys.executable, "-m", "dpcr.cli", "run", str(cfg), "--simulate", str(seed),
                    "--no-report", "--until", "2026-01-01"], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    threshold = plan_json(cfg)["selection"]["country"]["threshold"]
    out = Path(str(cfg.with_suffix("")))
    published: set[tuple[str, int]] = set()
    with open(out / "simulation" / "releases.csv", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["query"] == "country":
                published.add((row["key"], int(row["interval"])))
    truth = exact_running(data, int(plan_json(cfg)["releases"]))
    above = [(k, t + 1) for k, run in truth.items() for t in np.flatnonzero(run > threshold)]
    hit = sum((k, t) in published for k, t in above)
    keys_above = {k for k, _ in above}
    return {"threshold": threshold, "pairs_above": len(above), "recall": hit / max(1, len(above)),
            "keys_above": len(keys_above), "candidates": len(truth),
            "keys_published": len({k for k, _ in published})}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, default=1e7)
    ap.add_argument("--keys", type=float, default=1e5)
    ap.add_argument("--cpu-keys", type=float, default=1e6, help="candidate keys of the cpu rounds")
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--plan", default="tree")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="recall,std,cpu")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="dpcr-openkeys-"))
    work.mkdir(parents=True, exist_ok=True)
    n, keys = int(args.n), int(args.keys)
    only = set(args.only.split(","))
    data = generate(n, keys, args.zipf, args.seed, work / f"zipf-{n}-{keys}.parquet")
    if "recall" in only or "std" in only:
        open_cfg = config(data, work / "open", declared=None, plan=args.plan)
        if "recall" in only:
            r = recall(open_cfg, data, args.seed)
            print(
                f"| recall, {n:.0e} mutations, {keys:.0e} keys, Zipf {args.zipf}, weekly, "
                f"{args.plan} | {r['recall']:.4f} of {r['pairs_above']:,} (key, week) pairs "
                f"above τ = {r['threshold']:.1f} ({r['keys_above']:,} keys; "
                f"{r['keys_published']:,} published of {r['candidates']:,} candidates) |"
            )
        if "std" in only:
            declared = config(data, work / "declared", declared=top_keys(data, 100), plan=args.plan)
            a, b = plan_json(open_cfg), plan_json(declared)
            sa = a["predicted"]["country"]["running_std"]
            sb = b["predicted"]["country"]["running_std"]
            print(f"| per-key running std, open / declared | {sa:.4g} / {sb:.4g} = {sa / sb:.3f} |")
    if "cpu" in only:
        cpu_keys = int(args.cpu_keys)
        wide = generate(n, cpu_keys, args.zipf, args.seed, work / f"zipf-{n}-{cpu_keys}.parquet")
        runs: dict[str, list[Any]] = {"open": [], "declared": []}
        declared_keys = top_keys(wide, 100)
        for i in range(args.repeat):
            for name in runs:
                out = work / f"cpu-{name}-{i}"
                shutil.rmtree(out, ignore_errors=True)  # (a store left by an earlier call: a rerun)
                cfg = config(wide, out, declared=None if name == "open" else declared_keys,
                             plan=args.plan)  # fmt: skip
                cmd = [sys.executable, "-m", "dpcr.cli", "run", str(cfg), "--no-report",
                       "--until", "2026-01-01"]  # fmt: skip
                runs[name].append(measure(cmd, timeout=3600))
        for name, rs in runs.items():
            failed = [r.error for r in rs if r.error]
            if failed:
                print(f"| {name} | failed: {failed[0]} |")
                continue
            print(
                f"| {name}, {n:.0e} mutations, {cpu_keys:.0e} candidate keys | CPU "
                f"{statistics.median(r.cpu for r in rs):.2f} s, wall "
                f"{statistics.median(r.wall for r in rs):.2f} s, peak "
                f"{max(r.peak for r in rs):.0f} MiB |"
            )
        if all(not r.error for rs in runs.values() for r in rs):
            ratio = statistics.median(r.cpu for r in runs["open"]) / statistics.median(
                r.cpu for r in runs["declared"]
            )
            print(
                f"| CPU open / declared | {ratio:.2f} (goal ≤ 1.5) "
                f"| load {os.getloadavg()[0]:.1f} |"
            )


if __name__ == "__main__":
    main()
