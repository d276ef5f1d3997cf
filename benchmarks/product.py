"""The product path as users run it: whole processes from a file on disk to released values.

The job is dpcr's release of the generated changelog of throughput.py (shifted one year back,
so that every day has closed by the public clock): privacy unit = entry, keep each entry's
first 3 mutations in time order (at_most_k = 3), and per day two statistics of the kept
mutations, ε = 1 per entry, half each:

  count   the change in the number of live rows: +1 per kept insert, -1 per kept delete
  value   the change in the sum of the live rows' values, each value clamped to [0, 100] and
          rounded to an integer: f(after) - f(before) per kept mutation, f(no row) = 0

Day d (0-based) covers (start + d days, start + (d + 1) days], the first day also everything
before it: dpcr's intervals (t_{i-1}, t_i]. Every tool computes exactly these statistics; the
check (on by default, ``--no-check`` skips it) runs each peer once with its noise switched off
and asserts that its values equal dpcr's exact values (the same load, bounding and aggregation
as ``dpcr run``, noise off: :func:`dpcr.release.exact_release`). The noise is Laplace with
scales 6 and 600 (L1 sensitivity 3 and 300 at ε = 1/2 each), as dpcr calibrates the job.

Tools:
  dpcr-parquet  ``dpcr run`` on a Parquet changelog (before/after as STRUCT(value DOUBLE)):
                position, validation, bounding, daily count and sum, store, outputs; exact
                discrete Laplace from the OS's secure source
  dpcr-jsonl    the same from the changelog as JSON lines
  dpcr-parquet-seq, dpcr-jsonl-seq
                the same with a ``seq`` column (a log sequence number, rising with the rows'
                time, as a CDC source gives; 10 × row + 7, not the record number): phase 2
                (duplicates) has work to do
  opendp        OpenDP's Polars context on the flat Parquet file (entry, ts, op, old, new;
                scan_parquet): truncate_per_group(3, keep="first"), two dp.sum of the per-row
                changes with the 365 days as public keys, scales 6 / 600
  duckdb-sql    the same job in DuckDB SQL written by hand on the flat file (row_number() <= 3,
                group by day) plus numpy's float Laplace: no validation, insecure noise
  numpy         the flat file read with DuckDB into numpy, stable argsort, bincount, float
                Laplace

Measures: every tool is a separate process; the tools run in turn in each round (rounds
interleave the tools, so a change in the machine's load hits all of them alike). CPU is the
child's user + sys time (``wait4``), the stable measure on a shared machine; wall is spawn to
exit; peak is the child's maximum resident set size. The table gives medians over the rounds
(min–max), and each tool's CPU over duckdb-sql's, the median of the per-round ratios. The
load average (1 min) is printed before each round.

Usage: python benchmarks/product.py [--n 1e6 1e7] [--tools dpcr-parquet,opendp,...]
       [--repeat 3] [--workdir DIR (keeps the generated files for the next call)] [--no-check]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import DAY_US, DAYS, START_US, K, generate

YEAR_US = 365 * DAY_US  # 2026 -> 2025: every day closed by the clock
START = START_US - YEAR_US
TOOLS = ("dpcr-parquet", "dpcr-jsonl", "dpcr-parquet-seq", "dpcr-jsonl-seq", "opendp",
         "duckdb-sql", "numpy")
PEERS = ("opendp", "duckdb-sql", "numpy")
COUNT_SCALE, SUM_SCALE = 6.0, 600.0  # K / (ε / 2), K * 100 / (ε / 2)

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

# Each peer prints nothing but, with EXACT (noise off), the exact daily values as JSON:
# {"count": [...], "value": [...]}. Per kept mutation: c = [new row] - [old row] and
# v = f(new) - f(old) with f(x) = round(clamp(x, 0, 100)) (half away from zero, as DuckDB's
# round; values are >= 0 after the clamp, so floor(x + 0.5)), f(no row) = 0.
PEER = {
    "opendp": """
        import json, opendp.prelude as dp, polars as pl
        dp.enable_features("contrib")
        def f(col):
            return (pl.col(col).clip(0, 100) + 0.5).floor().cast(pl.Int64).fill_null(0)
        lf = pl.scan_parquet(PATH).with_columns(
            day=((pl.max_horizontal(pl.col("ts"), START + DAY) - START - 1) // DAY)
            .cast(pl.Int32),
            c=(pl.col("new").is_not_null().cast(pl.Int64)
               - pl.col("old").is_not_null().cast(pl.Int64)),
            v=f("new") - f("old"))
        n = pl.scan_parquet(PATH).select(pl.len()).collect().item()
        # noise off: a scale no draw leaves (a discrete Laplace of scale 1e-9 is 0 but with
        # probability about 2·exp(-1e9)), and the budget that scale needs
        cs, ss, eps = (1e-9, 1e-7, 1e12) if EXACT else (COUNT_SCALE, SUM_SCALE, 1.0)
        ctx = dp.Context.compositor(
            data=lf, privacy_unit=dp.unit_of(contributions=1, identifier=pl.col("entry")),
            privacy_loss=dp.loss_of(epsilon=eps), split_evenly_over=1,
            margins=[dp.polars.Margin(by=["day"], max_length=n)])
        keys = pl.LazyFrame({"day": pl.Series(range(DAYS), dtype=pl.Int32)})
        out = (ctx.query().truncate_per_group(K, keep="first").group_by("day")
               .agg(pl.col("c").dp.sum((-1, 1), scale=cs),
                    pl.col("v").dp.sum((-100, 100), scale=ss))
               .with_keys(keys).release().collect().sort("day"))
        if EXACT:
            print(json.dumps({"count": out["c"].to_list(), "value": out["v"].to_list()}))
    """,
    "duckdb-sql": """
        import json, duckdb, numpy as np
        def f(col):
            return f"coalesce(round(least(greatest({col}, 0), 100)), 0)"
        t = duckdb.sql(f'''
            SELECT day, sum(c)::BIGINT AS c, sum(v)::BIGINT AS v FROM (
                SELECT (greatest(ts, {START + DAY}) - {START} - 1) // {DAY} AS day,
                       (new IS NOT NULL)::INTEGER - (old IS NOT NULL)::INTEGER AS c,
                       {f("new")} - {f("old")} AS v,
                       row_number() OVER (PARTITION BY entry ORDER BY ts, file_row_number)
                           AS r
                FROM read_parquet('{PATH}', file_row_number = true))
            WHERE r <= {K} GROUP BY day ORDER BY day''').fetchnumpy()
        c, v = np.zeros(DAYS, np.int64), np.zeros(DAYS, np.int64)
        c[t["day"]], v[t["day"]] = t["c"], t["v"]
        if EXACT:
            print(json.dumps({"count": c.tolist(), "value": v.tolist()}))
        else:
            rng = np.random.default_rng()
            noisy = c + rng.laplace(0, COUNT_SCALE, DAYS), v + rng.laplace(0, SUM_SCALE, DAYS)
    """,
    "numpy": """
        import json, duckdb, numpy as np
        d = duckdb.sql(f"SELECT entry, ts, coalesce(old, 'nan'::DOUBLE) AS old, "
                       f"coalesce(new, 'nan'::DOUBLE) AS new FROM read_parquet('{PATH}')"
                       ).fetchnumpy()
        d = {k: np.asarray(v) for k, v in d.items()}
        order = np.argsort(d["entry"], kind="stable")  # the file is in time order
        g = d["entry"][order]
        starts = np.ones(g.size, dtype=bool); starts[1:] = g[1:] != g[:-1]
        pos = np.flatnonzero(starts)
        rank = np.arange(g.size) - np.repeat(pos, np.diff(np.append(pos, g.size)))
        rows = order[rank < K]
        day = (np.maximum(d["ts"][rows], START + DAY) - START - 1) // DAY
        new, old = d["new"][rows], d["old"][rows]
        def f(x):
            return np.where(np.isnan(x), 0.0, np.floor(np.clip(x, 0, 100) + 0.5))
        c = np.bincount(day, weights=(~np.isnan(new)).astype(float) - (~np.isnan(old)),
                        minlength=DAYS)
        v = np.bincount(day, weights=f(new) - f(old), minlength=DAYS)
        c, v = np.rint(c).astype(np.int64), np.rint(v).astype(np.int64)
        if EXACT:
            print(json.dumps({"count": c.tolist(), "value": v.tolist()}))
        else:
            rng = np.random.default_rng()
            noisy = c + rng.laplace(0, COUNT_SCALE, DAYS), v + rng.laplace(0, SUM_SCALE, DAYS)
    """,
}


def write_files(n: int, seed: int, workdir: Path) -> dict[str, Path]:
    """The generated changelog as the flat file the peers read, and as dpcr's Parquet and JSON
    lines (files already in ``workdir`` for the same ``n`` and ``seed`` are reused)."""
    import duckdb

    tag = f"{n}-{seed}"
    paths = {
        "flat": workdir / f"flat-{tag}.parquet",
        "parquet": workdir / f"changelog-{tag}.parquet",
        "jsonl": workdir / f"changelog-{tag}.jsonl",
    }
    if all(p.exists() for p in paths.values()):
        return paths
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
    for name, sql, fmt in (("flat", flat, "parquet"), ("parquet", changelog, "parquet"),
                           ("jsonl", changelog, "json")):  # fmt: skip
        part = paths[name].with_name(paths[name].name + ".part")
        con.execute(f"COPY ({sql}) TO '{part}' (FORMAT {fmt})")
        part.rename(paths[name])
    con.close()
    return paths


def seq_files(paths: dict[str, Path]) -> dict[str, Path]:
    """``paths`` with the changelog as Parquet and JSON lines with a ``seq`` column
    (``parquet-seq``, ``jsonl-seq``; made from the Parquet changelog unless they exist)."""
    import duckdb

    out = dict(paths)
    for fmt in ("parquet", "jsonl"):
        path = paths[fmt].with_name(paths[fmt].name.replace("changelog-", "changelog-seq-"))
        out[f"{fmt}-seq"] = path
        if path.exists():
            continue
        part = path.with_name(path.name + ".part")
        con = duckdb.connect()
        con.execute(
            f"COPY (SELECT entry, ts, file_row_number * 10 + 7 AS seq, op, before, after FROM "
            f"read_parquet('{paths['parquet']}', file_row_number = true) ORDER BY "
            f"file_row_number) TO '{part}' (FORMAT {'json' if fmt == 'jsonl' else 'parquet'})"
        )
        con.close()
        part.rename(path)
    return out


def config_path(tool: str, paths: dict[str, Path], workdir: Path, run: int) -> Path:
    name = tool.removeprefix("dpcr-")
    out = workdir / f"out-{tool}-{run}"
    cfg = workdir / f"{tool}-{run}.toml"
    cfg.write_text(CONFIG.format(fmt=name.removesuffix("-seq"), path=paths[name], k=K, out=out))
    return cfg


def command(
    tool: str, paths: dict[str, Path], workdir: Path, run: int, *, exact: bool = False
) -> list[str]:
    if tool.startswith("dpcr-"):
        cfg = config_path(tool, paths, workdir, run)
        return [sys.executable, "-m", "dpcr.cli", "run", str(cfg), "--until", "2026-01-01",
                "--quiet", "--no-report"]  # fmt: skip
    prelude = (
        f"PATH = {str(paths['flat'])!r}; START = {START}; DAY = {DAY_US}; DAYS = {DAYS}; "
        f"K = {K}; COUNT_SCALE = {COUNT_SCALE}; SUM_SCALE = {SUM_SCALE}; EXACT = {exact}\n"
    )
    return [sys.executable, "-c", prelude + textwrap.dedent(PEER[tool])]


@dataclass(frozen=True, slots=True)
class Run:
    """One finished process: wall and CPU (user + sys) seconds, peak resident MiB, and an
    error ('' when it exited 0)."""

    wall: float
    cpu: float
    peak: float
    error: str = ""


#: A child's environment when none is given: this one's, but caching compiled modules
#: (``__pycache__``) as a user's Python does -- with ``PYTHONDONTWRITEBYTECODE`` set, every
#: process would compile dpcr's source again (≈ 0.25 s CPU), which no installed copy does.
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def measure(cmd: list[str], timeout: float, stdout: int | None = subprocess.DEVNULL,
            env: dict[str, str] | None = None) -> Run:  # fmt: skip
    """Run ``cmd`` as a child process (environment ``env``: :data:`USER_ENV` when None) and
    account for it with ``wait4``."""
    errfile = tempfile.TemporaryFile()  # noqa: SIM115 (closed below, after the wait)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=errfile,
                            env=USER_ENV if env is None else env)  # fmt: skip
    deadline = started + timeout
    peak = 0
    while True:
        peak = max(peak, _high_water(proc.pid))
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            proc.wait()
            errfile.close()
            nan = float("nan")
            return Run(nan, nan, nan, f"timeout after {timeout:g} s")
        time.sleep(0.005)
    wall = time.perf_counter() - started
    errfile.seek(0)
    err = errfile.read().decode(errors="replace").strip()
    errfile.close()
    code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    failure = f"exit {code}: {(err.splitlines() or [''])[-1]}" if code != 0 else ""
    # ru_maxrss of a child counts the resident memory of this process when the child was
    # started (the child's memory before exec is this process's): with the generated data held
    # here, that is more than the child ever uses. /proc's high-water mark is the child's own.
    return Run(wall, cpu, (peak or usage.ru_maxrss) / 1024, failure)


def _high_water(pid: int) -> int:
    """The peak resident set of process ``pid`` since its exec, in KiB (0 where /proc does not
    tell)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def run_once(cmd: list[str], timeout: float) -> tuple[float, float, str]:
    """(wall s, peak MiB, error or '') of one process."""
    run = measure(cmd, timeout)
    return run.wall, run.peak, run.error


def dpcr_exact(config: Path) -> dict[str, list[int]]:
    """dpcr's exact daily values (noise off) of the release ``config`` describes: the load,
    bounding, aggregation and linear map of ``dpcr run``, without noise (as a simulation's
    report computes them)."""
    import duckdb

    from dpcr.config import load_config
    from dpcr.release import exact_release, load_changelog, private_output
    from dpcr.store import SourceState

    settings = load_config(config, until="2026-01-01")
    con = duckdb.connect()
    try:
        with private_output(settings) as aside:  # (a Parquet file read as `dpcr run` reads it)
            load_changelog(aside, con, SourceState(), materialize=False)
        exact = exact_release(settings, con, table="changelog", reporting=DAYS)
    finally:
        con.close()
    return {name: [int(x) for x in values[:, 0]] for name, values in exact.items()}


def peer_exact(tool: str, paths: dict[str, Path], workdir: Path, timeout: float) -> dict:
    """The peer's daily values with its noise switched off."""
    proc = subprocess.run(command(tool, paths, workdir, 0, exact=True), capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"{tool} (noise off) failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_peers(
    tools: list[str], paths: dict[str, Path], workdir: Path, timeout: float
) -> dict[str, list[int]]:
    """Assert that every peer among ``tools``, noise off, gives dpcr's exact values."""
    exact = dpcr_exact(config_path("dpcr-parquet", paths, workdir, 0))
    for tool in tools:
        if tool not in PEERS:
            continue
        got = peer_exact(tool, paths, workdir, timeout)
        for name in ("count", "value"):
            want = np.asarray(exact[name])
            have = np.asarray(got[name])
            if have.shape != want.shape or not np.array_equal(have, want):
                diff = np.flatnonzero(have != want) if have.shape == want.shape else []
                raise AssertionError(
                    f"{tool} does not compute dpcr's {name!r}: {len(diff)} of {DAYS} days "
                    f"differ (first: day {diff[0] if len(diff) else '?'})"
                )
    return exact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", nargs="+", type=float, default=[1e6, 1e7])
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--repeat", type=int, default=3, help="rounds (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the generated files here and reuse them")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the check of the peers against dpcr's exact values")
    args = parser.parse_args()
    tools = [t for t in args.tools.split(",") if t]
    bad = sorted(set(tools) - set(TOOLS))
    if bad:
        parser.error(f"unknown tools {bad}; choose from {TOOLS}")
    print(f"# product path: {os.cpu_count()} cores, {args.repeat} rounds, tools interleaved",
          flush=True)  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for n in (int(x) for x in args.n):
        with tempfile.TemporaryDirectory(prefix="dpcr-product-") as tmp:
            workdir = Path(tmp)
            files = args.workdir if args.workdir is not None else workdir
            files.mkdir(parents=True, exist_ok=True)
            paths = write_files(n, args.seed, files)
            if any(t.endswith("-seq") for t in tools):
                paths = seq_files(paths)
            sizes = ", ".join(f"{k} {p.stat().st_size / 2**20:,.0f} MiB" for k, p in paths.items())
            print(f"# N = {n:,}: {sizes}", flush=True)
            if not args.no_check:
                check_peers(tools, paths, workdir, args.timeout)
                print("# check: every peer, noise off, gives dpcr's exact values", flush=True)
            rows += rounds(n, tools, paths, workdir, args)
    header = ("tool", "N", "CPU s, median (range)", "wall s, median (range)", "peak MiB",
              "CPU / duckdb-sql", "error")  # fmt: skip
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def rounds(
    n: int, tools: list[str], paths: dict[str, Path], workdir: Path, args: argparse.Namespace
) -> list[tuple[str, ...]]:
    """Every tool once per round, in turn; a table row per tool."""
    runs: dict[str, list[Run]] = {t: [] for t in tools}
    for r in range(args.repeat):
        load = os.getloadavg()[0]
        line = []
        for tool in tools:
            run = measure(command(tool, paths, workdir, r), args.timeout)
            runs[tool].append(run)
            line.append(f"{tool} {run.cpu:.2f}/{run.wall:.2f}" + (f" {run.error}" if run.error
                                                                 else ""))  # fmt: skip
        print(f"#   round {r + 1} (load {load:.2f}), CPU/wall s: " + ", ".join(line), flush=True)
    out = []
    label = f"{n:.0e}".replace("e+0", "e")
    ref = runs.get("duckdb-sql", [])
    for tool in tools:
        good = [x for x in runs[tool] if not x.error]
        if len(good) < len(runs[tool]):
            error = next(x.error for x in runs[tool] if x.error)
            out.append((tool, label, "—", "—", "—", "—", error))
            continue

        def spread(values: list[float]) -> str:
            return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"

        ratio = "—"
        if ref and all(not x.error for x in ref):
            pairs = zip(good, ref, strict=True)
            ratio = f"{statistics.median(a.cpu / b.cpu for a, b in pairs):.2f}×"
        out.append((tool, label, spread([x.cpu for x in good]), spread([x.wall for x in good]),
                    f"{max(x.peak for x in good):,.0f}", ratio, ""))  # fmt: skip
    return out


if __name__ == "__main__":
    main()
