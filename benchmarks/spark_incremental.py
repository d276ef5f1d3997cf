"""A daily step on Spark against a full Spark run (docs/spark.md, "Incremental steps").

The data: ``benchmarks/throughput.py``'s ``generate`` (N mutations over 365 days, N/5 entries,
inserts, updates and 10% deletes) as one Parquet part file of a folder, ``ts`` in epoch
microseconds and ``before``/``after`` as ``STRUCT(value DOUBLE)``; then a day is appended as a
second part file: N/1000 mutations (0.1 %) dated in day 366, half of them updates of existing
entries, half inserts of new ones.

The job (as ``benchmarks/spark.py``): privacy unit = entry, at most 3 mutations per entry,
per-day count and clamped sum of ``value`` over 366 days, the request the release loop makes
for day 366 (its first interval is day 366, ``t_last`` the end of day 365). Three phases, each
a process of its own, timed from outside (CPU = user + sys of the process and of every process
it waited for: Spark's JVM is stopped and waited for before the process exits):

* ``full``: ``SparkEngine.aggregate`` over history and new day: what every run costs without
  a state (reads and bounds the whole log);
* ``first``: ``aggregate_step`` over the history alone with no state: a first run that writes
  the state (run once, to make it);
* ``step``: ``aggregate_step`` over history and new day continuing that state (a copy of it for
  each run): reads the new part file, the state of the units it touches, writes the next
  version.

``full`` and ``step`` alternate (``--runs`` each); the result of every step is checked against
the full run's (load report, bounding report, totals). The load average is printed with each
figure.

Usage: python benchmarks/spark_incremental.py [--rows 1e6] [--runs 3] [--dir /tmp/dpcr-sparkinc]
       [--master local[2]] [--driver-memory 3g] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark import write_part
from throughput import DAY_US, DAYS, START_US, generate

CHUNK = 10_000_000


def write_history(rows: int, folder: Path) -> int:
    """``rows`` mutations as ``folder/part-0000.parquet``; returns the number of entries."""
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    done, chunk, entries = 0, 0, 0
    while done < rows:
        n = min(CHUNK, rows - done)
        d = generate(n, seed=chunk)
        entry = d["entry"] + chunk * CHUNK  # ids of one chunk are below n / 5
        entries = max(entries, int(entry.max()) + 1)
        write_part(
            con,
            {"entry": entry, "ts": d["ts"], "op": d["op"], "old": d["old"], "new": d["new"]},
            folder / f"part-0000-{chunk:04d}.parquet",
        )
        done += n
        chunk += 1
    parts = sorted(folder.glob("part-0000-*.parquet"))
    con.execute(
        f"COPY (SELECT * FROM read_parquet({[str(p) for p in parts]})) TO "
        f"'{folder / 'part-0000.parquet'}' (FORMAT parquet, ROW_GROUP_SIZE 1000000)"
    )
    for p in parts:
        p.unlink()
    return entries


def write_day(rows: int, entries: int, path: Path) -> None:
    """Day 366: ``rows`` mutations in time order, half updates of random existing entries
    (some of them deleted: those are quarantined, as they would be), half inserts of new
    entries."""
    rng = np.random.default_rng(366)
    updates = rows // 2
    ids = np.concatenate([rng.integers(0, entries, updates), entries + np.arange(rows - updates)])
    op = np.concatenate([np.ones(updates, np.int8), np.zeros(rows - updates, np.int8)])
    order = rng.permutation(rows)
    ts = np.sort(rng.integers(START_US + DAYS * DAY_US, START_US + (DAYS + 1) * DAY_US, rows))
    new = np.round(rng.uniform(0.0, 100.0, rows), 2)
    old = np.where(op == 1, np.round(rng.uniform(0.0, 100.0, rows), 2), np.nan)
    con = duckdb.connect()
    write_part(
        con, {"entry": ids[order], "ts": ts, "op": op[order], "old": old[order], "new": new}, path
    )


def request(folder: Path, days: int) -> Any:
    from dpcr.bounding.constraints import AtMostK
    from dpcr.changelog import ParquetSource
    from dpcr.engines.base import AggregateRequest
    from dpcr.queries import Count, Sum

    end = START_US + DAY_US * days
    previous = days - 1
    return AggregateRequest(
        source=ParquetSource(path=folder, epoch_unit="us"),
        queries=(Count(name="n"), Sum(name="value", column="value", lower=0, upper=100)),
        constraint=AtMostK(k=3),
        release_times=[START_US + DAY_US * (i + 1) for i in range(days)],
        first_interval=days,
        clock=end,
        on_error="quarantine",
        quarantine_path=folder.parent / f"quarantine-{os.getpid()}.jsonl",
        exclude_late=None if previous < DAYS else (0, START_US + DAY_US * previous),
    )


def phase(name: str, work: Path, master: str, memory: str) -> None:
    """One phase, in this process (see the module docstring); prints a JSON line."""
    from dataclasses import replace

    from pyspark import SparkContext

    from dpcr.engines.base import EngineStateRef, StoreHead
    from dpcr.engines.spark import SparkEngine

    engine = SparkEngine(master=master, conf={"spark.driver.memory": memory})
    log = work / "log"
    out: dict[str, Any] = {"phase": name}
    try:
        if name == "first":  # the history alone: part-0001 is set aside while it runs
            (log / "part-0001.parquet").rename(work / "day.parquet")
            try:
                req = request(log, DAYS)
                ref = EngineStateRef(
                    folder=work / "state",
                    store=StoreHead(),
                    fingerprint="b",
                    settle_at=START_US + DAY_US * DAYS,
                )
                result, pending = engine.aggregate_step(req, ref)
                head = StoreHead(records=result.load.records, t_last=ref.settle_at, token="1")
                pending.commit(head)
                (work / "store.json").write_text(json.dumps([head.records, head.t_last]))
            finally:
                (work / "day.parquet").rename(log / "part-0001.parquet")
        elif name == "step":
            records, t_last = json.loads((work / "store.json").read_text())
            state = work / f"state-{os.getpid()}"
            shutil.copytree(work / "state", state)
            try:
                req = request(log, DAYS + 1)
                req = replace(req, exclude_late=(records, t_last))
                ref = EngineStateRef(
                    folder=state,
                    store=StoreHead(records=records, t_last=t_last, token="1"),
                    fingerprint="b",
                    settle_at=START_US + DAY_US * (DAYS + 1),
                )
                out["continued"] = engine.continues(req, ref)
                result, _pending = engine.aggregate_step(req, ref)
            finally:
                shutil.rmtree(state, ignore_errors=True)
        else:
            records, t_last = json.loads((work / "store.json").read_text())
            req = replace(request(log, DAYS + 1), exclude_late=(records, t_last))
            result = engine.aggregate(req)
        out["records"] = result.load.records
        out["valid"] = result.load.valid
        out["report"] = repr(result.aggregates.report)
        out["load_report"] = repr(replace(result.load, quarantine_path=None))
        out["totals"] = {k: v.tolist() for k, v in result.aggregates.values.items()}
    finally:
        gateway = SparkContext._gateway
        engine.stop()
        if gateway is not None:  # end Spark's JVM and wait for it: its CPU is counted
            proc = gateway.proc
            gateway.shutdown()
            proc.stdin.close()
            proc.wait()
    print(json.dumps(out), flush=True)


def timed(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """Run one phase as a child process; its wall and CPU seconds (its own and its waited
    children's), the load average, and what it printed."""
    cmd = [
        sys.executable,
        __file__,
        "--phase",
        name,
        "--dir",
        str(args.dir),
        "--master",
        args.master,
        "--driver-memory",
        args.driver_memory,
    ]
    start = time.perf_counter()
    err_path = args.dir / f"phase-{name}.err"  # Spark's log: kept to explain a failure
    with err_path.open("w") as err:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        out = child.stdout.read() if child.stdout is not None else ""
        _pid, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        lines = err_path.read_text(errors="replace").splitlines()
        tail = "\n".join(lines[-15:])
        raise SystemExit(f"phase {name} failed ({child.returncode}); {err_path} ends:\n{tail}")
    printed = json.loads(out.strip().splitlines()[-1])
    return {
        "phase": name,
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "load": os.getloadavg()[0],
        **printed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/dpcr-sparkinc"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="3g")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase is not None:
        phase(args.phase, args.dir, args.master, args.driver_memory)
        return
    rows = int(args.rows)
    args.dir = args.dir / f"n{rows}"
    log = args.dir / "log"
    if not (log / "part-0001.parquet").exists():
        shutil.rmtree(args.dir, ignore_errors=True)
        log.mkdir(parents=True)
        t = time.perf_counter()
        entries = write_history(rows, log)
        write_day(max(1, rows // 1000), entries, log / "part-0001.parquet")
        print(f"wrote {rows} + {max(1, rows // 1000)} rows in {time.perf_counter() - t:.0f} s")
    if not (args.dir / "store.json").exists():
        first = timed(args, "first")
        print(
            f"first run (history, writes the state): wall {first['wall']:.1f} s, "
            f"cpu {first['cpu']:.1f} s, load {first['load']:.1f}",
            flush=True,
        )
    figures: dict[str, list[dict[str, Any]]] = {"full": [], "step": []}
    for _ in range(args.runs):
        for name in ("full", "step"):
            r = timed(args, name)
            figures[name].append(r)
            print(
                f"{name}: wall {r['wall']:.1f} s, cpu {r['cpu']:.1f} s, load {r['load']:.1f}",
                flush=True,
            )
    for full, step in zip(figures["full"], figures["step"], strict=True):
        same = all(full[k] == step[k] for k in ("load_report", "report", "totals"))
        if not same or not step.get("continued"):
            raise SystemExit("the step's result differs from the full run's")
    med = {
        k: {m: float(np.median([r[m] for r in v])) for m in ("wall", "cpu")}
        for k, v in figures.items()
    }
    print(
        f"N = {rows}, +{max(1, rows // 1000)} rows (median of {args.runs}): "
        f"full wall {med['full']['wall']:.1f} s cpu {med['full']['cpu']:.1f} s; "
        f"step wall {med['step']['wall']:.1f} s cpu {med['step']['cpu']:.1f} s; "
        f"step/full wall {med['step']['wall'] / med['full']['wall']:.1%}, "
        f"cpu {med['step']['cpu'] / med['full']['cpu']:.1%}"
    )
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
