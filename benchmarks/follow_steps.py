"""The steps of ``dpcr follow`` on a wal2json or Debezium changelog, replayed offline: CPU per
step.

``dpcr follow`` runs one step of a long-running session (``release.session()``) each time the
clock closes an interval, over the lines the capture appended to the changelog since the last.
This replays that without a server: a snapshot of ``--n`` rows (as ``dpcr capture postgres
--create-slot`` writes it), then ``--steps`` intervals of one second, each gaining ``--rate``
updates, inserts and deletes in transactions of 1-4 changes (wal2json format-version 2 lines
as the capture writes them: begin and commit lines, an LSN and a commit time per change; with
``--format debezium`` the same changes as Debezium envelopes as ``dpcr follow`` over Kafka
writes them: under ``payload`` with ``dpcr_kafka``, a tombstone after each delete), at
most 3 mutations per entry, a count and a sum. Each mode runs in a process of its own:
``memory`` (the session's steps from memory where they are taken) and ``sql`` (every step the
SQL step). It prints per mode the steps taken from memory, the CPU (user + sys of the whole
process, all threads) of the first step and the median of the others, the process's total CPU
and wall, and its peak RSS, with the load average and the CPU of ``import numpy, duckdb``
in the same minute.

``--lead``: each step's lines run that many transactions (Debezium: changes) into the next
second, as a live capture writes them: the state keeps them pending.

Usage: python benchmarks/follow_steps.py [--n 100000] [--steps 120] [--rate 200] [--repeat 2]
       [--format wal2json|debezium] [--modes memory,sql] [--lead 0]
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z (s)

CHILD = """
import json, resource, sys, time
import dpcr
import dpcr.engines.duckdb_incremental as inc
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
work, mode, offsets, t0 = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
source = (dpcr.sources.Debezium(path=f"{work}/log.jsonl", key="id") if sys.argv[5] == "debezium"
          else dpcr.sources.Wal2json(path=f"{work}/log.jsonl", key="id", table="public.t"))
if mode == "sql":
    inc.accepts = lambda request: False
import dpcr.engines.duckdb_memory as memory
taken = []
real = memory.HeldState.step
def step(self, *a, **k):
    got = real(self, *a, **k)
    taken.append(got is not None)
    return got
memory.HeldState.step = step
release = dpcr.ContinualRelease(
    source=source,
    constraint=dpcr.AtMostK(k=3),
    plan=dpcr.DisjointRelease(start=format_timestamp(t0 * 10**6), period="1s"),
    queries=[dpcr.Count(name="rows"), dpcr.Sum(name="v", column="v", lower=0, upper=100)],
    budget=dpcr.Budget(epsilon=1.0), output_dir=f"{work}/out-{mode}", on_error="quarantine")
cpu = []
with open(f"{work}/whole.jsonl", "rb") as src, open(f"{work}/log.jsonl", "wb") as out:
    session = release.session()
    with session:
        for s in range(1, len(offsets)):
            src.seek(offsets[s - 1] if s > 1 else 0)
            out.write(src.read(offsets[s] - (offsets[s - 1] if s > 1 else 0)))
            out.flush()
            c0 = time.process_time()
            session.run(until=format_timestamp((t0 + s) * 10**6), rng=simulation_randomness(1))
            cpu.append(time.process_time() - c0)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"cpu": cpu, "taken": sum(taken), "rss_mb": rss / 1024}))
"""


def _line(rng: random.Random, action: str, entry: int, lsn: int, ts: str,
          before: int | None, after: int | None) -> str:  # fmt: skip
    if DEBEZIUM[0]:
        return _envelope(action, entry, lsn, ts, before, after)
    msg: dict[str, object] = {"action": action, "xid": 0, "timestamp": ts,
                              "lsn": f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}",
                              "schema": "public", "table": "t"}  # fmt: skip
    if after is not None:
        msg["columns"] = [{"name": "id", "value": entry}, {"name": "v", "value": after}]
    if before is not None:
        msg["identity"] = [{"name": "id", "value": entry}, {"name": "v", "value": before}]
    return json.dumps(msg, separators=(",", ":"))


#: Whether :func:`write` writes Debezium envelopes (``--format debezium``).
DEBEZIUM = [False]


def _envelope(action: str, entry: int, lsn: int, ts: str, before: int | None,
              after: int | None) -> str:  # fmt: skip
    """The change as a Debezium envelope line (a begin or commit: no line; a delete: and its
    tombstone)."""
    if action in ("B", "C"):
        return ""
    ms = calendar.timegm(time.strptime(ts[:19], "%Y-%m-%d %H:%M:%S")) * 1000
    ms += int(ts[20:23]) + 1 if ts[19:20] == "." else 0  # (in (second, second + 1 s])
    source = {"version": "2.7.0.Final", "connector": "postgresql", "name": "db", "ts_ms": ms,
              "snapshot": "false", "db": "app", "schema": "public", "table": "t",
              "txId": 700, "lsn": lsn}  # fmt: skip
    env = {"before": None if before is None else {"id": entry, "v": before},
           "after": None if after is None else {"id": entry, "v": after},
           "source": source, "op": {"I": "c", "U": "u", "D": "d"}[action], "ts_ms": ms + 5}
    where = {"topic": "db.public.t", "partition": 0, "offset": lsn}
    line = json.dumps({"payload": env, "dpcr_kafka": where}, separators=(",", ":"))
    if action == "D":
        line += "\n" + json.dumps({"payload": None, "dpcr_kafka": where}, separators=(",", ":"))
    return line


def write(path: Path, n: int, steps: int, rate: int, seed: int = 7) -> list[int]:
    """The changelog (snapshot, then ``steps`` seconds of changes); the byte offset where each
    second's lines end (offsets[0]: the snapshot's end)."""
    rng = random.Random(seed)
    stamp = "2026-01-01 00:00:00+00"
    live = {e: rng.randint(0, 100) for e in range(1, n + 1)}
    lsn = 1 << 24
    offsets = []
    with path.open("w") as f:
        for e, v in live.items():
            if DEBEZIUM[0]:
                f.write(_envelope("I", e, lsn - 1, stamp, None, v).replace('"op":"c"', '"op":"r"')
                        + "\n")  # fmt: skip
                continue
            f.write(json.dumps({"action": "I", "lsn": f"0/{lsn - 1:X}", "timestamp": stamp,
                                "schema": "public", "table": "t", "snapshot": True,
                                "columns": [{"name": "id", "value": e},
                                            {"name": "v", "value": v}]}) + "\n")  # fmt: skip
        offsets.append(f.tell())
        serial = n
        for s in range(steps):
            done = 0
            while done < rate:
                us = 1 + (done * 999_000 // rate + rng.randrange(50)) % 999_000
                ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T0 + s)) + f".{us:06d}+00"
                lines = [_line(rng, "B", 0, lsn, ts, None, None)]
                for _ in range(rng.randint(1, 4)):
                    lsn += rng.randint(40, 400)
                    roll = rng.random()
                    if roll < 0.2:
                        serial += 1
                        live[serial] = rng.randint(0, 100)
                        lines.append(_line(rng, "I", serial, lsn, ts, None, live[serial]))
                    elif roll < 0.25 and live:
                        e = rng.choice(list(live)) if len(live) < 1000 else rng.randint(1, serial)
                        if e in live:
                            lines.append(_line(rng, "D", e, lsn, ts, live.pop(e), None))
                    else:
                        e = rng.randint(1, serial)
                        if e in live:
                            old, live[e] = live[e], rng.randint(0, 100)
                            lines.append(_line(rng, "U", e, lsn, ts, old, live[e]))
                    done += 1
                lsn += 64
                lines.append(_line(rng, "C", 0, lsn, ts, None, None))
                f.write("".join(x + "\n" for x in lines if x).replace('"xid":0,', ""))
            offsets.append(f.tell())
    return offsets


def leading(whole: Path, offsets: list[int], lead: int) -> list[int]:
    """Each step's end moved ``lead`` transactions (wal2json: commit lines; Debezium:
    changes) into the next second, as a live capture has written them when the step runs
    (the last step's: the file's end)."""
    if not lead:
        return offsets
    data = whole.read_bytes()
    mark = b'"lsn":' if DEBEZIUM[0] else b'"action":"C"'
    out = [offsets[0]]
    for s in range(1, len(offsets) - 1):
        at = offsets[s]
        for _ in range(lead):
            got = data.find(mark, at, offsets[s + 1])
            if got < 0:
                break
            at = data.index(b"\n", got) + 1
        out.append(at)
    out.append(offsets[-1])
    return out


def _imports_cpu() -> float:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import numpy, duckdb"], check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--format", choices=("wal2json", "debezium"), default="wal2json")
    parser.add_argument("--modes", default="memory,sql")
    parser.add_argument("--lead", type=int, default=0,
                        help="changes of the next second present at each step (pending)")
    parser.add_argument("--src", action="append", default=None,
                        help="source tree(s) to run (default: this one)")  # fmt: skip
    args = parser.parse_args()
    srcs = args.src or [str(Path(__file__).resolve().parents[1] / "src")]
    DEBEZIUM[0] = args.format == "debezium"
    with tempfile.TemporaryDirectory() as tmp:
        whole = Path(tmp) / "whole.jsonl"
        offsets = leading(whole, write(whole, args.n, args.steps, args.rate), args.lead)
        lines = sum(1 for _ in whole.open())
        print(f"{args.format} n={args.n} steps={args.steps} rate={args.rate}/s lines={lines}"
              f" load={os.getloadavg()[0]:.1f} import numpy,duckdb={_imports_cpu():.2f}s CPU")
        for r in range(args.repeat):
            for src in srcs:
                for mode in args.modes.split(","):
                    work = Path(tmp) / f"run-{r}-{mode}-{srcs.index(src)}"
                    work.mkdir()
                    os.symlink(whole, work / "whole.jsonl")
                    env = dict(os.environ, PYTHONPATH=src)
                    r0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
                    out = subprocess.run([sys.executable, "-c", CHILD, str(work), mode,
                                          json.dumps(offsets), str(T0), args.format], env=env,
                                         check=True,
                                         capture_output=True, text=True).stdout  # fmt: skip
                    r1, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - w0
                    got = json.loads(out.strip().splitlines()[-1])
                    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
                    later = got["cpu"][1:]
                    print(f"{mode:6s} src={srcs.index(src)} from memory {got['taken']}/"
                          f"{len(got['cpu'])} first {got['cpu'][0]:.2f}s step median "
                          f"{1000 * statistics.median(later):.1f} ms CPU (p90 "
                          f"{1000 * sorted(later)[int(0.9 * len(later))]:.1f}) process "
                          f"{cpu:.2f}s CPU {wall:.2f}s wall peak {got['rss_mb']:.0f} MB "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"import numpy,duckdb={_imports_cpu():.2f}s CPU load={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
