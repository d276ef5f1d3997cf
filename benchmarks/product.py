"""The product path as users run it: whole processes from a file on disk to released values.

The job is throughput.py's (keep each entry's first 3 mutations; per day the count of kept
mutations and the sum of their value changes; ε = 1 per entry, half each), over the same
generated changelog, shifted one year back so that every day has closed by the public clock.
Every tool runs as its own process, one after another; wall time is spawn to exit (interpreter
start, imports, reading the file, computing, noise, writing), peak memory the child's maximum
resident set size (``wait4``).

Tools:
  dpcr-parquet  ``dpcr run`` on a Parquet changelog (before/after as STRUCT(value DOUBLE)),
                validation, bounding (at_most_k = 3), daily count and sum (0..100), store,
                outputs; exact discrete Laplace from the OS's secure source
  dpcr-jsonl    the same from the changelog as JSON lines
  opendp        OpenDP's Polars context on the flat Parquet file (scan_parquet), one query
                with truncate_per_group(3, keep="first"), dp.len and dp.sum, scales 6 / 600
  duckdb-sql    DuckDB SQL written by hand on the flat file (row_number() <= 3, group by day)
                plus numpy's float Laplace: no validation, insecure noise, the cost floor
  numpy         the flat file read with DuckDB into numpy, stable argsort, bincount, float
                Laplace

Usage: python benchmarks/product.py [--n 1e6 1e7] [--tools dpcr-parquet,opendp,...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import DAY_US, DAYS, START_US, K, generate

YEAR_US = 365 * DAY_US  # 2026 -> 2025: every day closed by the clock
TOOLS = ("dpcr-parquet", "dpcr-jsonl", "opendp", "duckdb-sql", "numpy")

CONFIG = """\
[source]
format = "{fmt}"
path = "{path}"
epoch_unit = "us"

[privacy]
unit = "entry"
epsilon = 1.0
mechanism = "laplace"

[constraint]
at_most_k = {k}

[release]
plan = "disjoint"
start = "2025-01-01T00:00:00Z"
period = "1d"
end = "2026-01-01T00:00:00Z"

[[query]]
name = "count"
kind = "count"

[[query]]
name = "value"
kind = "sum"
column = "value"
lower = 0
upper = 100

[output]
dir = "{out}"
on_error = "quarantine"
"""

PEER = {
    "opendp": """
        import opendp.prelude as dp, polars as pl
        dp.enable_features("contrib")
        lf = pl.scan_parquet(PATH).with_columns(
            day=((pl.col("ts") - START) // DAY).cast(pl.Int32),
            change=(pl.col("new").fill_null(0.0) - pl.col("old").fill_null(0.0))
            .clip(-100, 100).round(0).cast(pl.Int64))
        n = pl.scan_parquet(PATH).select(pl.len()).collect().item()
        ctx = dp.Context.compositor(
            data=lf, privacy_unit=dp.unit_of(contributions=1, identifier=pl.col("entry")),
            privacy_loss=dp.loss_of(epsilon=1.0), split_evenly_over=1,
            margins=[dp.polars.Margin(by=["day"], max_length=n)])
        keys = pl.LazyFrame({"day": pl.Series(range(DAYS), dtype=pl.Int32)})
        out = (ctx.query().truncate_per_group(K, keep="first").group_by("day")
               .agg(dp.len(scale=6.0),
                    pl.col("change").fill_null(0).dp.sum((-100, 100), scale=600.0))
               .with_keys(keys).release().collect())
        print(out.height)
    """,
    "duckdb-sql": """
        import duckdb, numpy as np
        t = duckdb.sql(f'''
            SELECT (ts - {START}) // {DAY} AS day, count(*) AS n,
                   sum(round(greatest(-100, least(100, coalesce(new, 0) - coalesce(old, 0)))))
                       AS s
            FROM (SELECT *, row_number() OVER (PARTITION BY entry ORDER BY ts) AS r
                  FROM read_parquet('{PATH}'))
            WHERE r <= {K} GROUP BY day ORDER BY day''').fetchnumpy()
        rng = np.random.default_rng()
        noisy = t["n"] + rng.laplace(0, 6, len(t["n"])), t["s"] + rng.laplace(0, 600, len(t["s"]))
        print(len(noisy[0]))
    """,
    "numpy": """
        import duckdb, numpy as np
        d = duckdb.sql(f"SELECT entry, ts, old, new FROM read_parquet('{PATH}')").fetchnumpy()
        d = {k: np.asarray(v) for k, v in d.items()}
        order = np.argsort(d["entry"], kind="stable")
        g = d["entry"][order]
        starts = np.ones(g.size, dtype=bool); starts[1:] = g[1:] != g[:-1]
        pos = np.flatnonzero(starts)
        rank = np.arange(g.size) - np.repeat(pos, np.diff(np.append(pos, g.size)))
        rows = order[rank < K]
        day = (d["ts"][rows] - START) // DAY
        new, old = d["new"][rows].astype(float), d["old"][rows].astype(float)
        ch = np.nan_to_num(new) - np.nan_to_num(old)
        counts = np.bincount(day, minlength=DAYS)
        sums = np.bincount(day, weights=np.rint(np.clip(ch, -100, 100)), minlength=DAYS)
        rng = np.random.default_rng()
        print(len(counts + rng.laplace(0, 6, DAYS)), len(sums))
    """,
}


def write_files(n: int, seed: int, workdir: Path) -> dict[str, Path]:
    import duckdb

    d = generate(n, seed)
    con = duckdb.connect()
    con.register(
        "d",
        {"entry": d["entry"], "ts": d["ts"] - YEAR_US, "op": d["op"], "old": d["old"],
         "new": d["new"]},
    )  # fmt: skip
    flat = (
        "SELECT entry, ts, op::INTEGER AS op, CASE WHEN isnan(old) THEN NULL ELSE old END AS "
        "old, CASE WHEN isnan(new) THEN NULL ELSE new END AS new FROM d"
    )
    changelog = f"""SELECT entry, ts,
        CASE op WHEN 0 THEN 'insert' WHEN 1 THEN 'update' ELSE 'delete' END AS op,
        CASE WHEN op = 0 THEN NULL ELSE {{'value': old}} END AS before,
        CASE WHEN op = 2 THEN NULL ELSE {{'value': new}} END AS after FROM ({flat})"""
    paths = {
        "flat": workdir / "flat.parquet",
        "parquet": workdir / "changelog.parquet",
        "jsonl": workdir / "changelog.jsonl",
    }
    con.execute(f"COPY ({flat}) TO '{paths['flat']}' (FORMAT parquet)")
    con.execute(f"COPY ({changelog}) TO '{paths['parquet']}' (FORMAT parquet)")
    con.execute(f"COPY ({changelog}) TO '{paths['jsonl']}' (FORMAT json)")
    con.close()
    return paths


def command(tool: str, paths: dict[str, Path], workdir: Path, run: int) -> list[str]:
    if tool.startswith("dpcr-"):
        fmt = tool.removeprefix("dpcr-")
        out = workdir / f"out-{tool}-{run}"
        cfg = workdir / f"{tool}-{run}.toml"
        cfg.write_text(CONFIG.format(fmt=fmt, path=paths[fmt], k=K, out=out))
        dpcr = Path(sys.executable).with_name("dpcr")
        return [str(dpcr), "run", str(cfg), "--until", "2026-01-01", "--quiet", "--no-report"]
    prelude = f"PATH = {str(paths['flat'])!r}; START = {START_US - YEAR_US}; DAY = {DAY_US}; " \
        f"DAYS = {DAYS}; K = {K}\n"  # fmt: skip
    return [sys.executable, "-c", prelude + textwrap.dedent(PEER[tool])]


def run_once(cmd: list[str], timeout: float) -> tuple[float, float, str]:
    """(wall s, peak MiB, error or '') of one process."""
    errfile = tempfile.TemporaryFile()  # noqa: SIM115 (closed below, after the wait)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errfile)
    deadline = started + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            return math_nan(), math_nan(), f"timeout after {timeout:g} s"
        time.sleep(0.005)
    wall = time.perf_counter() - started
    errfile.seek(0)
    err = errfile.read().decode(errors="replace").strip()
    errfile.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        return wall, usage.ru_maxrss / 1024, f"exit {code}: {(err.splitlines() or [''])[-1]}"
    return wall, usage.ru_maxrss / 1024, ""


def math_nan() -> float:
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", nargs="+", type=float, default=[1e6, 1e7])
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    tools = [t for t in args.tools.split(",") if t]
    bad = sorted(set(tools) - set(TOOLS))
    if bad:
        parser.error(f"unknown tools {bad}; choose from {TOOLS}")
    print(f"# product path: {os.cpu_count()} cores, median of {args.repeat}", flush=True)
    rows = []
    for n in (int(x) for x in args.n):
        with tempfile.TemporaryDirectory(prefix="dpcr-product-") as tmp:
            workdir = Path(tmp)
            paths = write_files(n, args.seed, workdir)
            sizes = ", ".join(f"{k} {p.stat().st_size / 2**20:,.0f} MiB" for k, p in paths.items())
            print(f"# N = {n:,}: {sizes}", flush=True)
            walls: dict[str, float] = {}
            for tool in tools:
                runs = [run_once(command(tool, paths, workdir, i), args.timeout)
                        for i in range(args.repeat)]  # fmt: skip
                errors = [e for _, _, e in runs if e]
                if errors:
                    print(f"#   {tool}: {errors[0]}", flush=True)
                    rows.append((tool, f"{n:.0e}", "—", "—", "—", errors[0]))
                    continue
                wall = statistics.median(w for w, _, _ in runs)
                peak = max(p for _, p, _ in runs)
                walls[tool] = wall
                spread = f"{min(w for w, _, _ in runs):.2f}–{max(w for w, _, _ in runs):.2f}"
                row = (tool, f"{n:.0e}".replace("e+0", "e"), f"{wall:.2f} ({spread})",
                       f"{n / wall / 1e6:.2f} M", f"{peak:,.0f}", "")  # fmt: skip
                print("#   " + " | ".join(row), flush=True)
                rows.append(row)
            if "opendp" in walls:
                for tool in ("dpcr-parquet", "dpcr-jsonl"):
                    if tool in walls:
                        print(f"#   {tool} / opendp mutations/s: "
                              f"{walls['opendp'] / walls[tool]:.2f}×", flush=True)  # fmt: skip
    header = ("tool", "N", "wall s, median (range)", "mutations/s", "peak MiB", "error")
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    _ = np  # numpy is imported for the generator's arrays


if __name__ == "__main__":
    main()
