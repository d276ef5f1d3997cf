"""The fixed cost of a first run: ``dpcr run`` over a changelog of ONE record, per plan kind.

A year of releases (daily: 365 reporting intervals; hourly: 8,760) of two queries, a count and
a clamped sum, at ε = 1 (Gaussian cases: δ = 1e-6) under at most 3 mutations per entry. The
changelog holds a single insert, so the data step costs next to nothing and what remains is the
fixed cost: interpreter and imports, calibration and planning, drawing and storing the nodes,
the 95 % intervals of every published row, the outputs and the report.

Every case is a whole ``dpcr run`` process in a fresh folder (first run: no store, no cached
intervals). A run releases at most ``MAX_RUN_INTERVALS`` reporting intervals; a longer year is
released by further runs (as a cron job or ``dpcr follow`` would), and the table sums their CPU
and wall time (``runs`` says how many) and takes the largest peak resident set. CPU is user +
sys of the child (``wait4``), the stable measure on a shared machine; wall is spawn to exit.

Cases: ``auto`` (the planner's choice, Laplace and Gaussian), ``disjoint``, trees of fanout 2
(plain and Honaker), 4, 8 and 16 (Honaker), an open-ended tree, a Gaussian tree, sliding
windows (7 days or 24 hours, Laplace and Gaussian), and the square-root, row-rescaled and BLT
factorizations (Gaussian). The open-ended cases (no ``end``) are released to the same day. The
row-rescaled square root has a proven sensitivity for one interval per unit or for runs only:
its case is B-time-bounded (2 days) instead.

Usage: python benchmarks/first_run.py [--grid daily hourly] [--cases auto,tree8,...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECORD = (
    '{"entry":"1","ts":"2025-01-02T07:57:37Z","op":"insert","before":null,"after":{"fare":14.0}}\n'
)
START, END = "2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z"
LAPLACE = 'epsilon = 1.0\nmechanism = "laplace"\n'
GAUSSIAN = 'epsilon = 1.0\ndelta = 1e-6\nmechanism = "gaussian"\n'

#: name -> (privacy table, release lines; {window} is the grid's window, {end} its end line)
CASES: dict[str, tuple[str, str]] = {
    "auto": (LAPLACE, "{end}"),
    "auto-gauss": (GAUSSIAN, "{end}"),
    "disjoint": (LAPLACE, 'plan = "disjoint"\n{end}'),
    "disjoint-gauss": (GAUSSIAN, 'plan = "disjoint"\n{end}'),
    "tree2-plain": (LAPLACE, 'plan = "tree"\nbranching = 2\nestimator = "plain"\n{end}'),
    "tree2": (LAPLACE, 'plan = "tree"\nbranching = 2\n{end}'),
    "tree4": (LAPLACE, 'plan = "tree"\nbranching = 4\n{end}'),
    "tree8": (LAPLACE, 'plan = "tree"\nbranching = 8\n{end}'),
    "tree16": (LAPLACE, 'plan = "tree"\nbranching = 16\n{end}'),
    "tree8-open": (LAPLACE, 'plan = "tree"\nbranching = 8\n'),
    "tree8-gauss": (GAUSSIAN, 'plan = "tree"\nbranching = 8\n{end}'),
    "window": (LAPLACE, 'plan = "window"\nwindow = "{window}"\n{end}'),
    "window-gauss": (GAUSSIAN, 'plan = "window"\nwindow = "{window}"\n{end}'),
    "sqrt": (GAUSSIAN, 'plan = "factorization"\nfactorization = "sqrt"\n{end}'),
    "rescaled": (GAUSSIAN, 'plan = "factorization"\nfactorization = "rescaled"\n{end}'),
    "blt": (GAUSSIAN, 'plan = "factorization"\nfactorization = "blt"\n'),
}
#: cases under another constraint than at most 3 mutations per entry
CONSTRAINTS = {"rescaled": 'time_bounded = "2d"'}
#: grid -> (period, window of the window plans, reporting intervals in the year)
GRIDS = {"daily": ("1d", "7d", 365), "hourly": ("1h", "24h", 8760)}


def write_case(folder: Path, case: str, grid: str) -> Path:
    """The changelog and ``dpcr.toml`` of one case in ``folder``; returns the config's path."""
    privacy, release = CASES[case]
    period, window, _ = GRIDS[grid]
    release = release.format(window=window, end=f'end = "{END}"\n')
    (folder / "log.jsonl").write_text(RECORD)
    config = folder / "dpcr.toml"
    config.write_text(
        '[source]\nformat = "jsonl"\npath = "log.jsonl"\n\n'
        f"[privacy]\n{privacy}\n"
        f"[constraint]\n{CONSTRAINTS.get(case, 'at_most_k = 3')}\n\n"
        f'[release]\nstart = "{START}"\nperiod = "{period}"\n{release}\n'
        '[[query]]\nname = "active"\nkind = "count"\n\n'
        '[[query]]\nname = "fares"\nkind = "sum"\ncolumn = "fare"\nlower = 0\nupper = 100\n\n'
        '[output]\ndir = "out"\n'
    )
    return config


def run_process(config: Path, timeout: float) -> tuple[float, float, float, str]:
    """(CPU s, wall s, peak MiB, error or '') of one ``dpcr run`` process."""
    cmd = [sys.executable, "-c", "import sys; from dpcr.cli import main; sys.exit(main())",
           "run", str(config), "--until", END, "--quiet"]  # fmt: skip
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=config.parent)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - started > timeout:
                proc.kill()
                proc.wait()
                return float("nan"), timeout, float("nan"), f"timeout after {timeout:g} s"
            time.sleep(0.005)
        wall = time.perf_counter() - started
        err.seek(0)
        text = err.read().decode(errors="replace").strip()
    cpu = usage.ru_utime + usage.ru_stime
    code = os.waitstatus_to_exitcode(status)
    error = f"exit {code}: {(text.splitlines() or [''])[-1]}" if code else ""
    return cpu, wall, usage.ru_maxrss / 1024, error


def released(config: Path) -> int:
    summary = config.parent / "out" / "public" / "summary.json"
    return int(json.loads(summary.read_text())["released_intervals"])


def first_year(case: str, grid: str, timeout: float) -> tuple[int, int, float, float, float, str]:
    """(intervals released, runs, CPU s, wall s, peak MiB, error) of releasing the whole year
    from a fresh folder."""
    with tempfile.TemporaryDirectory(prefix="dpcr-first-run-") as tmp:
        config = write_case(Path(tmp), case, grid)
        cpu = wall = peak = 0.0
        runs, done = 0, 0
        while done < GRIDS[grid][2]:
            c, w, p, error = run_process(config, timeout)
            runs += 1
            cpu, wall, peak = cpu + c, wall + w, max(peak, p)
            if error:
                return done, runs, cpu, wall, peak, error
            before, done = done, released(config)
            if done == before:
                return done, runs, cpu, wall, peak, "a run released nothing new"
        return done, runs, cpu, wall, peak, ""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--grid", nargs="+", choices=list(GRIDS), default=["daily"])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (median)")
    parser.add_argument("--timeout", type=float, default=600.0, help="per process, s")
    args = parser.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    bad = sorted(set(cases) - set(CASES))
    if bad:
        parser.error(f"unknown cases {bad}; choose from {list(CASES)}")
    print(f"load average {os.getloadavg()[0]:.2f}; medians of {args.repeat} runs")
    print(f"{'grid':7} {'plan':15} {'intervals':>9} {'runs':>4} {'CPU s':>7} {'wall s':>7} "
          f"{'peak MB':>8}")  # fmt: skip
    for grid in args.grid:
        for case in cases:
            rows = [first_year(case, grid, args.timeout) for _ in range(args.repeat)]
            errors = [r[5] for r in rows if r[5]]
            n, runs = rows[-1][0], rows[-1][1]
            cpu, wall, peak = (statistics.median(r[i] for r in rows) for i in (2, 3, 4))
            line = (f"{grid:7} {case:15} {n:>9} {runs:>4} {cpu:>7.2f} {wall:>7.2f} "
                    f"{peak:>8.0f}")  # fmt: skip
            print(line + (f"  {errors[0]}" if errors else ""), flush=True)


if __name__ == "__main__":
    main()
