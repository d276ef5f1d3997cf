"""A year of daily release steps: what each step costs as the history grows.

The job is product.py's (keep each entry's first 3 mutations; daily count and clamped sum;
ε = 1; ``plan = "disjoint"`` unless ``--plan``) over throughput.py's generated changelog of N
mutations, shifted one year back, as JSON lines in time order. The file starts empty; step d
(1 .. 365) appends day d's mutations (about N/365) and releases with ``--until`` the end of
day d, so each step closes one interval. Two ways to run the year:

  session   one process holds a ``ContinualRelease.session()`` (as ``dpcr follow`` does) and
            runs the 365 steps; each step's CPU (``time.process_time``: every thread of the
            process) and wall, and the process's whole CPU (interpreter, imports, first
            calibration included) from ``wait4``
  process   each step a whole ``dpcr run`` process (cron); only the sampled days
            (``--days``, default 1-5, 180-185, 360-365) are timed, the days between them are
            caught up in one session process (the state and store are those ``dpcr run``
            leaves: the session writes the same files)

and the references, each a whole process, CPU = user + sys of the child (``wait4``):

  full          ``dpcr run`` over the whole year's file from an empty folder
  nothing new   ``dpcr run`` again after the last step (no new record, no interval closed)
  python        ``python -c pass``; ``import dpcr.cli``; ``import numpy, duckdb``: the
                interpreter and the imports (the last is the floor of any step that reads data)
  floor         ``dpcr run`` closing one interval of a small release with no new record (the
                interpreter, imports, calibration, the store and the state opened and closed,
                one commit); median of 5 such steps

Goals (issue 31): session total ≤ 2 full runs' CPU; a late process step ≤ an early one + 20 %;
the process floor ≤ 0.5 s CPU; nothing new ≤ 0.5 s wall (all on a calm machine: report the load
average, which is printed).

Usage: python benchmarks/daily.py [--n 1e6] [--modes session,process] [--days 1-5,180-185,...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from product import CONFIG, USER_ENV, YEAR_US
from throughput import DAY_US, DAYS, START_US, K, generate

#: The first day of the shifted year, in µs (2025-01-01T00:00:00Z).
DAY0 = START_US - YEAR_US

#: One session process: runs steps ``first .. last``, appending each day's bytes before its
#: step, and prints one JSON line per step (CPU and wall of ``session.run``).
SESSION = """
import json, sys, time
from dpcr.config import load_config
cfg, whole, grow, first, last, offsets = sys.argv[1:7]
offsets = json.loads(offsets)
release = load_config(cfg)
day0, day = {day0}, {day}
with open(whole, 'rb') as src, release.session() as session:
    for d in range(int(first), int(last) + 1):
        src.seek(offsets[d - 1])
        with open(grow, 'ab') as out:
            out.write(src.read(offsets[d] - offsets[d - 1]))
        c0, w0 = time.process_time(), time.perf_counter()
        session.run(until=day0 + d * day)
        print(json.dumps({{'day': d, 'cpu': time.process_time() - c0,
                           'wall': time.perf_counter() - w0}}), flush=True)
"""


def write_year(n: int, seed: int, workdir: Path) -> tuple[Path, list[int]]:
    """The whole year as JSON lines in time order, and the byte offset at which each day
    starts (``offsets[d]``: the end of day d, d = 0 .. 365)."""
    import duckdb

    d = generate(n, seed)
    con = duckdb.connect()
    con.register("d", {"entry": d["entry"], "ts": d["ts"] - YEAR_US, "op": d["op"],
                       "old": d["old"], "new": d["new"]})  # fmt: skip
    flat = (
        "SELECT entry, ts, op::INTEGER AS op, CASE WHEN isnan(old) THEN NULL ELSE old END AS "
        "old, CASE WHEN isnan(new) THEN NULL ELSE new END AS new FROM d"
    )
    changelog = f"""SELECT entry, ts,
        CASE op WHEN 0 THEN 'insert' WHEN 1 THEN 'update' ELSE 'delete' END AS op,
        CASE WHEN op = 0 THEN NULL ELSE {{'value': old}} END AS before,
        CASE WHEN op = 2 THEN NULL ELSE {{'value': new}} END AS after FROM ({flat})"""
    whole = workdir / "whole.jsonl"
    con.execute(f"COPY ({changelog} ORDER BY ts, entry) TO '{whole}' (FORMAT json)")
    con.close()
    ts = np.sort(d["ts"] - YEAR_US)
    per_day = np.bincount((ts - DAY0) // DAY_US, minlength=DAYS)[:DAYS]
    ends = np.flatnonzero(np.frombuffer(whole.read_bytes(), dtype=np.uint8) == 0x0A) + 1
    rows = np.concatenate([[0], np.cumsum(per_day)])
    offsets = [0] + [int(ends[r - 1]) if r else 0 for r in rows[1:]]
    return whole, offsets


def config(workdir: Path, name: str, path: Path, plan: str) -> Path:
    cfg = workdir / f"{name}.toml"
    text = CONFIG.format(fmt="jsonl", path=path, k=K, out=workdir / f"out-{name}")
    cfg.write_text(text.replace('plan = "disjoint"', f'plan = "{plan}"'))
    return cfg


def timed(cmd: list[str], *, stdout: int | None = subprocess.DEVNULL) -> tuple[float, float, str]:
    """(CPU s = user + sys, wall s, stdout) of one process (the growth of this process's
    children's times: one child at a time); exits on a failure."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, env=ENV)
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        tail = (err.decode(errors="replace").strip().splitlines() or [""])[-1]
        raise SystemExit(f"{' '.join(cmd[:3])}: exit {proc.returncode}: {tail}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return cpu, wall, (out or b"").decode()


#: The children's environment: as a user's, which caches compiled modules (``__pycache__``).
ENV = USER_ENV


def dpcr_run(cfg: Path, until_us: int) -> list[str]:
    from dpcr.timeutil import format_timestamp

    exe = Path(sys.executable).with_name("dpcr")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "dpcr.cli"]
    return [*cmd, "run", str(cfg), "--until", format_timestamp(until_us), "--quiet", "--no-report"]


def session(cfg: Path, whole: Path, grow: Path, first: int, last: int,
            offsets: list[int]) -> tuple[float, float, list[dict[str, float]]]:  # fmt: skip
    code = SESSION.format(day0=DAY0, day=DAY_US)
    args = [str(cfg), str(whole), str(grow), str(first), str(last), json.dumps(offsets)]
    cpu, wall, out = timed([sys.executable, "-c", code, *args], stdout=subprocess.PIPE)
    return cpu, wall, [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def parse_days(text: str) -> list[int]:
    days: set[int] = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        days.update(range(int(a), int(b or a) + 1))
    return sorted(d for d in days if 1 <= d <= DAYS)


def append(whole: Path, grow: Path, offsets: list[int], day: int) -> None:
    with whole.open("rb") as src, grow.open("ab") as out:
        src.seek(offsets[day - 1])
        out.write(src.read(offsets[day] - offsets[day - 1]))


def process_mode(work: Path, whole: Path, offsets: list[int], days: list[int],
                 plan: str) -> dict[int, tuple[float, float]]:  # fmt: skip
    grow = work / "grow-process.jsonl"
    grow.write_bytes(b"")
    cfg = config(work, "process", grow, plan)
    out: dict[int, tuple[float, float]] = {}
    done = 0
    for day in days:
        if day - 1 > done:  # catch up in one session process
            session(cfg, whole, grow, done + 1, day - 1, offsets)
        append(whole, grow, offsets, day)
        cpu, wall, _ = timed(dpcr_run(cfg, DAY0 + day * DAY_US))
        out[day] = (cpu, wall)
        done = day
    cpu, wall, _ = timed(dpcr_run(cfg, DAY0 + done * DAY_US))
    out[0] = (cpu, wall)  # nothing new
    return out


def floor(work: Path, plan: str) -> tuple[float, float]:
    """(CPU, wall) medians of ``dpcr run`` steps closing one interval each of a release whose
    file holds 10 records of day 1 and gains nothing after."""
    log = work / "floor.jsonl"
    log.write_text("".join(
        json.dumps({"entry": i, "ts": DAY0 + 3_600_000_000 * (1 + i), "op": "insert",
                    "after": {"value": i}}) + "\n"
        for i in range(10)
    ))  # fmt: skip
    cfg = config(work, "floor", log, plan)
    timed(dpcr_run(cfg, DAY0 + DAY_US))
    runs = [timed(dpcr_run(cfg, DAY0 + (1 + d) * DAY_US))[:2] for d in range(1, 6)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=float, default=1e6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plan", default="disjoint")
    parser.add_argument("--modes", default="session,process")
    parser.add_argument("--days", default="1-5,180-185,360-365", help="the days timed as processes")
    parser.add_argument("--full-repeat", type=int, default=2)
    args = parser.parse_args()
    modes = set(args.modes.split(","))
    import dpcr

    print(f"dpcr from {Path(dpcr.__file__).parent}")
    load = os.getloadavg()
    print(f"N = {int(args.n):,}, plan {args.plan}, load average at start "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="dpcr-daily-") as tmp:
        work = Path(tmp)
        whole, offsets = write_year(int(args.n), args.seed, work)
        print(f"{whole.stat().st_size / 1e6:.0f} MB, a day ≈ "
              f"{statistics.median(np.diff(offsets)) / 1e3:.0f} kB")  # fmt: skip
        rows: list[tuple[str, float, float]] = []
        for cmd, label in (
            ([sys.executable, "-c", "pass"], "python -c pass"),
            ([sys.executable, "-c", "import numpy, duckdb"], "import numpy, duckdb"),
            ([sys.executable, "-c", "import dpcr.cli"], "import dpcr.cli"),
        ):
            runs = [timed(cmd)[:2] for _ in range(5)]
            rows.append((label, min(r[0] for r in runs), min(r[1] for r in runs)))
        rows.append(("floor: a step with no new record (median)", *floor(work, args.plan)))
        fulls = []
        for rep in range(args.full_repeat):
            cfg = config(work, f"full{rep}", whole, args.plan)
            fulls.append(timed(dpcr_run(cfg, DAY0 + DAYS * DAY_US))[:2])
        full_cpu = statistics.median(f[0] for f in fulls) if fulls else float("nan")
        if fulls:  # (--full-repeat 0: no reference run, no ratio)
            rows.append(("full run (median)", full_cpu, statistics.median(f[1] for f in fulls)))
        if "session" in modes:
            grow = work / "grow-session.jsonl"
            grow.write_bytes(b"")
            cfg = config(work, "session", grow, args.plan)
            cpu, wall, steps = session(cfg, whole, grow, 1, DAYS, offsets)
            step_cpu = sum(s["cpu"] for s in steps)
            rows.append(("session: process total", cpu, wall))
            rows.append(("session: 365 steps", step_cpu, sum(s["wall"] for s in steps)))
            for a, b in ((1, 5), (180, 185), (360, 365)):
                sel = [s for s in steps if a <= s["day"] <= b]
                rows.append((f"session: step, days {a}-{b} (median)",
                             statistics.median(s["cpu"] for s in sel),
                             statistics.median(s["wall"] for s in sel)))  # fmt: skip
            shutil.rmtree(work / "out-session", ignore_errors=True)
        if "process" in modes:
            days = parse_days(args.days)
            out = process_mode(work, whole, offsets, days, args.plan)
            for day in days:
                rows.append((f"process: day {day}", *out[day]))
            rows.append(("process: nothing new", *out[0]))
            early = [out[d][0] for d in days if 2 <= d <= 5]
            late = [out[d][0] for d in days if d >= 360]
            if early and late:
                ratio = statistics.median(late) / statistics.median(early)
                rows.append(("process: late/early CPU (days 360+ / 2-5)", ratio, float("nan")))
    print(f"{'measure':<46} {'CPU s':>8} {'wall s':>8}")
    for label, cpu, wall in rows:
        print(f"{label:<46} {cpu:>8.3f} {wall:>8.3f}")
    if "session" in modes and args.full_repeat:
        total = cpu_of(rows, "session: process total")
        all_steps = cpu_of(rows, "session: 365 steps")
        print(f"session total / full-run CPU: {total / full_cpu:.2f}; "
              f"365 steps / full-run CPU: {all_steps / full_cpu:.2f}")
    load = os.getloadavg()
    print(f"load average at end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def cpu_of(rows: list[tuple[str, float, float]], label: str) -> float:
    return next(cpu for name, cpu, _wall in rows if name == label)


if __name__ == "__main__":
    main()
