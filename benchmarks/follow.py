"""``dpcr follow`` on a live PostgreSQL under pgbench: keeping up, draining a backlog, crashes.

A private server (scripts/pg-server, 127.0.0.1) gets ``pgbench -i -s SCALE``;
``pgbench_accounts`` is made ``REPLICA IDENTITY FULL`` and followed (its snapshot is the first
changelog records). The release: at most 3 mutations per account, a count and a clamped sum of
``abalance`` per ``--period``, ε = 1, heartbeat clock with 1 s allowed lateness, simulation
noise. Each tpcb-like transaction updates one account: one mutation of the followed table.

  keep-up   pgbench at full speed (``-c 2 -j 2``, no rate limit) for ``--seconds`` while the
            follower runs: pgbench's TPS, the lag of each release (from the moment the clock
            closed the interval to the commit) and how far behind the server's WAL the
            follower's acknowledged position was at the end of the load.
  backlog   the follower stopped, pgbench builds a backlog; then the follower starts and the
            time until every change is in the file (mutations/s) and until the release covers
            it.
  crashes   ``--kills N`` SIGKILLs at random moments during a rate-limited pgbench load (the
            follower restarted each time); the store must then hold exactly what one ``dpcr
            run`` over the same file releases with the same seed.
  trickle   ``--trickle S`` seconds of pgbench at ``--rate`` TPS while a new follower (a new
            slot: the table's snapshot, then the changes) releases every second; per source
            tree ``--src`` (alternated, ``--repeat`` times) the follower's CPU (user + sys of
            the whole process, capture included, from /proc) over the load per released
            interval, the median step (``step_s``), its peak RSS, with the load average and
            the CPU of ``import numpy, duckdb`` in the same minute.

Usage: python benchmarks/follow.py [--seconds 30] [--backlog-seconds 20] [--kills 50]
       python benchmarks/follow.py --seconds 0 --kills 0 --trickle 30 --rate 100 \\
           --src A/src --src B/src [--repeat 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SLOT = "bench_follow"


def _server(workdir: Path) -> str:
    out = subprocess.run([str(ROOT / "scripts" / "pg-server"), "start", str(workdir)],
                         check=True, capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip().splitlines()[-1]


def _config(workdir: Path, period: str) -> Path:
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
    path = workdir / "follow.toml"
    path.write_text(f"""
[source]
format = "wal2json"
path = "changes.jsonl"
key = "aid"
table = "public.pgbench_accounts"
[privacy]
epsilon = 1.0
[constraint]
at_most_k = 3
[release]
start = "{start}"
period = "{period}"
[[query]]
name = "accounts"
kind = "count"
[[query]]
name = "balance"
kind = "sum"
column = "abalance"
lower = -10000
upper = 10000
[follow]
capture = "postgres"
slot = "{SLOT}"
clock = "source"
allowed_lateness = "1s"
heartbeat = "250ms"
[output]
dir = "out"
""")
    return path


def _follow(config: Path, log: Path, dsn: str, *extra: str,
            src: str | None = None) -> subprocess.Popen[bytes]:  # fmt: skip
    env = dict(os.environ, DPCR_PG_DSN=dsn, PYTHONPATH=src or str(ROOT / "src"))
    command = [sys.executable, "-m", "dpcr.cli", "follow", str(config), "--simulate", "5",
               "--log-format", "json", "--health-every", "0.5", *extra]  # fmt: skip
    with log.open("ab") as f:
        return subprocess.Popen(command, env=env, stderr=f, stdout=subprocess.DEVNULL)


def _events(log: Path, event: str) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event:
            out.append(record)
    return out


def _sql(dsn: str, query: str) -> Any:
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(query)
            return cur.fetchone() if cur.description else None
    finally:
        conn.close()


def _behind(dsn: str) -> int:
    """Bytes of WAL the slot has not had acknowledged."""
    row = _sql(dsn, "SELECT pg_current_wal_lsn() - confirmed_flush_lsn FROM pg_replication_slots "
                    f"WHERE slot_name = '{SLOT}'")  # fmt: skip
    return int(row[0])


def _changes(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for line in f if b'"action":"U"' in line or (b'"action":"I"' in line
                   and b'"snapshot"' not in line))  # fmt: skip


def _wait_released(log: Path, proc: subprocess.Popen[bytes], after: float, limit: float) -> float:
    """Seconds until a release covers time ``after`` (epoch s)."""
    from dpcr.timeutil import parse_timestamp

    t0 = time.time()
    while time.time() - t0 < limit:
        for e in _events(log, "released"):
            if parse_timestamp(e["through"]) / 1e6 >= after:
                return time.time() - t0
        if proc.poll() is not None:
            tail = log.read_text()[-800:]
            raise RuntimeError(f"the follower exited with {proc.returncode}: {tail}")
        time.sleep(0.1)
    raise RuntimeError(f"no release covered {after} within {limit} s")


def keep_up(pgbench: str, dsn: str, workdir: Path, seconds: int) -> dict[str, Any]:
    config = _config(workdir, "2s")
    log = workdir / "keepup.log"
    proc = _follow(config, log, dsn, "--create-slot")
    _wait_released(log, proc, time.time() - 1, 120)
    run = subprocess.run([pgbench, "-n", "-c", "2", "-j", "2", "-T", str(seconds), dsn],
                         capture_output=True, text=True, check=True)  # fmt: skip
    behind = _behind(dsn)
    end = time.time()
    catch_up = _wait_released(log, proc, end, 120)
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    tps = next(float(x.split("=")[1].split()[0]) for x in run.stdout.splitlines()
               if x.startswith("tps"))  # fmt: skip
    lags = [e["lag_s"] for e in _events(log, "released")[1:]]
    steps = [e["step_s"] for e in _events(log, "released")[1:]]
    clocks = [e["clock_s"] for e in _events(log, "released")[1:]]
    return {"tps": tps, "releases": len(lags), "lag_median": statistics.median(lags),
            "lag_max": max(lags), "step_median": statistics.median(steps),
            "step_max": max(steps), "clock_median": statistics.median(clocks),
            "clock_max": max(clocks), "lag_p90": statistics.quantiles(lags, n=10)[-1],
            "wal_behind_bytes": behind, "covered_after_s": catch_up}  # fmt: skip


def backlog(pgbench: str, dsn: str, workdir: Path, seconds: int) -> dict[str, Any]:
    config = workdir / "follow.toml"
    log = workdir / "backlog.log"
    before = _changes(workdir / "changes.jsonl")
    subprocess.run([pgbench, "-n", "-c", "2", "-j", "2", "-T", str(seconds), dsn],
                   capture_output=True, check=True)  # fmt: skip
    end = time.time()
    t0 = time.monotonic()
    proc = _follow(config, log, dsn)
    while _behind(dsn) > 0 and proc.poll() is None:
        time.sleep(0.05)
    drained = time.monotonic() - t0
    covered = _wait_released(log, proc, end, 300) + (time.monotonic() - t0 - drained)
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    n = _changes(workdir / "changes.jsonl") - before
    return {"mutations": n, "drain_s": drained, "mutations_per_s": n / drained,
            "released_after_s": covered}


def crashes(pgbench: str, dsn: str, workdir: Path, kills: int, seed: int) -> dict[str, Any]:
    from dpcr.config import load_config
    from dpcr.noise import simulation_randomness
    from dpcr.release._loop import stored_result

    crash_dir = workdir / "crash"
    crash_dir.mkdir()
    _sql(dsn, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
              f"WHERE slot_name = '{SLOT}'")  # fmt: skip
    config = _config(crash_dir, "1s")
    log = crash_dir / "crash.log"
    proc = _follow(config, log, dsn, "--create-slot")
    time.sleep(4)
    load = subprocess.Popen([pgbench, "-n", "-c", "2", "-j", "1", "-R", "300",
                             "-T", str(int(2 + 1.6 * kills)), dsn],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    rng = random.Random(seed)
    done = 0
    try:
        while done < kills and load.poll() is None:
            time.sleep(0.5 + rng.random() * 1.5)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            done += 1
            proc = _follow(config, log, dsn)
        load.wait(600)
        _wait_released(log, proc, time.time() + 2, 300)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    finally:
        load.kill()
        proc.kill()
    release = load_config(config)
    follower = stored_result(release, simulation=True)
    n = int(follower.summary["released_intervals"])
    reference = dataclasses.replace(release, output_dir=crash_dir / "ref",
                                    store=crash_dir / "ref" / "store.sqlite")  # fmt: skip
    once = reference.run(until=release.plan.schedule().release_time(n),
                         rng=simulation_randomness(5))  # fmt: skip
    lines = [json.loads(x) for x in (crash_dir / "changes.jsonl").read_text().splitlines()]
    changes = [(m["action"], m["lsn"]) for m in lines if m["action"] in "IUD"
               and not m.get("snapshot")]  # fmt: skip
    return {"kills": done, "intervals": n, "exit": code, "rows_equal": once.rows == follower.rows,
            "changes": len(changes), "duplicates": len(changes) - len(set(changes))}


def _cpu(pid: int) -> float:
    """User + sys CPU seconds of process ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _imports_cpu() -> float:
    import resource

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import numpy, duckdb"], check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def trickle(pgbench: str, dsn: str, workdir: Path, seconds: int, rate: float,
            src: str) -> dict[str, Any]:  # fmt: skip
    """One follower of tree ``src`` over ``seconds`` of pgbench at ``rate`` TPS."""
    _sql(dsn, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
              f"WHERE slot_name = '{SLOT}'")  # fmt: skip
    workdir.mkdir()
    config = _config(workdir, "1s")
    log = workdir / "trickle.log"
    proc = _follow(config, log, dsn, "--create-slot", src=src)
    try:
        _wait_released(log, proc, time.time() + 2, 300)
        before, first = _cpu(proc.pid), len(_events(log, "released"))
        subprocess.run([pgbench, "-n", "-c", "2", "-j", "1", "-R", str(rate), "-T",
                        str(seconds), dsn], capture_output=True, check=True)  # fmt: skip
        cpu, peak = _cpu(proc.pid) - before, _peak_mb(proc.pid)
        events = _events(log, "released")[first:]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    intervals = sum(e["new_intervals"] for e in events)
    return {"cpu": cpu, "intervals": intervals, "cpu_per_interval": cpu / max(intervals, 1),
            "step_median": statistics.median(e["step_s"] for e in events), "peak_mb": peak}


def trickles(pgbench: str, dsn: str, workdir: Path, args: argparse.Namespace) -> None:
    srcs = args.src or [str(ROOT / "src")]
    print(f"trickle {args.trickle} s at {args.rate} TPS, scale {args.scale}: load "
          f"{os.getloadavg()[0]:.1f}, import numpy, duckdb {_imports_cpu():.2f} s CPU")
    for r in range(args.repeat):
        for i, src in enumerate(srcs):
            t = trickle(pgbench, dsn, workdir / f"trickle-{r}-{i}", args.trickle, args.rate, src)
            print(f"src {i} ({src}): {t['cpu']:.2f} s CPU over {t['intervals']} intervals = "
                  f"{1000 * t['cpu_per_interval']:.1f} ms CPU an interval (capture included); "
                  f"step median {1000 * t['step_median']:.0f} ms wall; peak {t['peak_mb']:.0f} MB;"
                  f" load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    print(f"load {os.getloadavg()[0]:.1f}, import numpy, duckdb {_imports_cpu():.2f} s CPU")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--backlog-seconds", type=int, default=20)
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trickle", type=int, default=0)
    ap.add_argument("--rate", type=float, default=100)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--src", action="append", default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import shutil

    pgbench = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
    with tempfile.TemporaryDirectory(prefix="dpcr-follow-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)
        dsn = _server(workdir / "pg")
        try:
            subprocess.run([pgbench, "-i", "-q", "-s", str(args.scale), dsn], check=True,
                           capture_output=True)  # fmt: skip
            _sql(dsn, "ALTER TABLE pgbench_accounts REPLICA IDENTITY FULL")
            rows: list[tuple[str, str]] = []
            if args.trickle:
                trickles(pgbench, dsn, workdir, args)
            if args.seconds:
                k = keep_up(pgbench, dsn, workdir, args.seconds)
                rows += [("keep-up: pgbench TPS (mutations/s of the followed table)",
                          f"{k['tps']:,.0f}"),
                         ("keep-up: releases during the load", str(k["releases"])),
                         ("keep-up: release lag median / 90th percentile / max (s)",
                          f"{k['lag_median']:.2f} / {k['lag_p90']:.2f} / {k['lag_max']:.2f}"),
                         ("keep-up: release step median / max (s)",
                          f"{k['step_median']:.2f} / {k['step_max']:.2f}"),
                         ("keep-up: close seen by the source clock after, median / max (s)",
                          f"{k['clock_median']:.2f} / {k['clock_max']:.2f}"),
                         ("keep-up: WAL not acknowledged at the end of the load (bytes)",
                          f"{k['wal_behind_bytes']:,}"),
                         ("keep-up: end of load covered by a release after (s)",
                          f"{k['covered_after_s']:.2f}")]  # fmt: skip
            if args.seconds and args.backlog_seconds:
                b = backlog(pgbench, dsn, workdir, args.backlog_seconds)
                rows += [("backlog: mutations", f"{b['mutations']:,}"),
                         ("backlog: drained in (s)", f"{b['drain_s']:.2f}"),
                         ("backlog: mutations/s", f"{b['mutations_per_s']:,.0f}"),
                         ("backlog: released through its end after (s)",
                          f"{b['released_after_s']:.2f}")]  # fmt: skip
            if args.kills:
                c = crashes(pgbench, dsn, workdir, args.kills, args.seed)
                rows += [("crashes: SIGKILLs / intervals released", f"{c['kills']} / "
                          f"{c['intervals']}"),
                         ("crashes: rows equal to one uninterrupted run", str(c["rows_equal"])),
                         ("crashes: changes in the file / duplicates",
                          f"{c['changes']:,} / {c['duplicates']}"),
                         ("crashes: exit code of the last follower", str(c["exit"]))]  # fmt: skip
        finally:
            subprocess.run([str(ROOT / "scripts" / "pg-server"), "stop", str(workdir / "pg")],
                           capture_output=True, check=False)  # fmt: skip
    if not rows:
        return
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  value")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
