"""Draining a PostgreSQL backlog with ``dpcr.cdc.postgres.capture`` (issue 16).

A backlog is built while no capture runs; then the capture drains it into the changelog file.
The run, on a private PostgreSQL 15 with wal2json started by ``scripts/pg-server`` in a
temporary directory (stopped at the end, also on error):

1. ``pgbench -i -s SCALE``; ``pgbench_accounts`` gets ``REPLICA IDENTITY FULL``.
2. ``create_slot`` once per repeat (slots ``drain_0``, ``drain_1``, ...): each writes the
   snapshot of the 100,000 x SCALE accounts into its own file (the "snapshot" row, rows/s).
3. The backlog: ``pgbench -n`` with its built-in tpcb-like script, TRANSACTIONS transactions
   over CLIENTS clients. Each transaction updates one ``pgbench_accounts`` row (one mutation of
   the followed table: 3 messages with its begin and commit) and tellers, branches and history,
   which ``add-tables`` filters out. A logical message after it marks its end.
4. Per repeat, with the capture's wal2json options (``dpcr.cdc.postgres.OPTIONS``):
   - ``peek``: ``pg_logical_slot_peek_changes`` counted in SQL: the server's decoding and
     wal2json output alone, nothing sent (peeking leaves the slot as it was);
   - ``pg_recvlogical`` streaming to ``/dev/null`` (a client written in C) and a psycopg2
     client that reads every message and drops it: what the server streams to clients that do
     nothing with the messages (the server's cost per message depends on how the client reads:
     one that takes each message as it arrives costs it more than one that reads in chunks);
   - ``capture`` (``idle_exit=1.0``) into the slot's file, over TCP and over the server's Unix
     socket (alternating which goes first).
   These clients read copies of the last drain slot (``pg_copy_logical_replication_slot``,
   made before it is consumed), so all start at the same point.

A capture's time runs from the call to the end of the last batch that wrote to the file (its
``on_batch``), so the idle wait is left out; its start is included: connecting and reading the
end of the file back to the last commit or snapshot row, which the "start s" column times on
its own (``_resume_point``) and "after the start" leaves out. Mutations are the ``I``/``U``/``D``
lines the capture wrote (checked against TRANSACTIONS), MB/s the bytes it appended (begin and
commit markers included) or the client read. CPU is user + system seconds: of this Python
process during the capture or the read (psycopg2 included), of the ``pg_recvlogical`` process,
and of the server (every process of the postmaster, plus those that exited meanwhile). Figures
are medians over the repeats; the load average (1 min) is read after each measurement, and the
table shows the median of those readings.

Usage: python benchmarks/cdc_drain.py [--scale 10] [--transactions 300000] [--clients 4]
    [--repeats 3] [--batch-messages N] [--batch-seconds S] [--capture-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TABLE = "public.pgbench_accounts"
TICK = os.sysconf("SC_CLK_TCK")
MARK = b"dpcr_bench_end"  # the prefix of a logical message written after the backlog


def _bin(name: str) -> str:
    for d in ("/usr/lib/postgresql/15/bin", "/usr/bin"):
        if Path(d, name).exists():
            return str(Path(d, name))
    sys.exit(f"{name} not found (apt-get install postgresql-15)")


@contextmanager
def server(workdir: Path) -> Iterator[str]:
    """A private PostgreSQL with wal2json; its DSN. Stopped on exit, also on error."""
    script = str(ROOT / "scripts" / "pg-server")
    workdir.chmod(0o755)
    run = subprocess.run([script, "start", str(workdir)], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"scripts/pg-server start failed: {run.stderr.strip()}")
    try:
        yield run.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([script, "stop", str(workdir)], capture_output=True, check=False)


def _datadir(workdir: Path) -> Path:
    """Where scripts/pg-server put the data (its parent holds the server's Unix socket)."""
    mark = workdir / "datadir"
    return Path(mark.read_text().strip()) if mark.exists() else workdir / "data"


def _postmaster(workdir: Path) -> int:
    return int((_datadir(workdir) / "postmaster.pid").read_text().split()[0])


def _postmaster_dir(workdir: Path) -> Path:
    return _datadir(workdir).parent


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the server so far: its live processes and those the postmaster reaped."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid, ppid = int(entry), int(fields[1])
        if pid == postmaster:
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        elif ppid == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def load1() -> float:
    return os.getloadavg()[0]


@dataclass
class Figures:
    """One row of the table: a list of values per column, one per repeat."""

    name: str
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, **kw: float) -> None:
        for k, v in kw.items():
            self.values.setdefault(k, []).append(v)

    def med(self, k: str) -> float | None:
        v = self.values.get(k)
        return statistics.median(v) if v else None


def _sql(dsn: str, statement: str, *params: Any) -> Any:
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchone() if cur.description else None
    finally:
        conn.close()


def _options(table: str) -> dict[str, str]:
    from dpcr.cdc import postgres

    return dict(postgres.OPTIONS, **{"add-tables": table})


def measure_peek(
    dsn: str, slot: str, end: str, fig: Figures, mutations: int, postmaster: int
) -> None:
    opts = [x for kv in _options(TABLE).items() for x in kv]
    holders = ", ".join(["%s"] * len(opts))
    cpu0 = server_cpu(postmaster)
    t0 = time.perf_counter()
    (count,) = _sql(
        dsn,
        f"SELECT count(*) FROM pg_logical_slot_peek_changes(%s, %s, NULL, {holders})",
        slot, end, *opts,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    server = server_cpu(postmaster) - cpu0
    fig.add(wall=wall, rate=mutations / wall, messages=count, server=server, load=load1())


def measure_recvlogical(
    dsn: str, slot: str, end: str, fig: Figures, mutations: int, postmaster: int
) -> None:
    command = [_bin("pg_recvlogical"), "-d", dsn, "-S", slot, "--start", "--no-loop",
               "-f", "/dev/null", "-E", end]  # fmt: skip
    for k, v in _options(TABLE).items():
        command += ["-o", f"{k}={v}"]
    cpu0, child0 = server_cpu(postmaster), children_cpu()
    t0 = time.perf_counter()
    subprocess.run(command, check=True)
    wall = time.perf_counter() - t0
    time.sleep(0.3)  # let the postmaster reap the walsender
    fig.add(wall=wall, rate=mutations / wall, client=children_cpu() - child0,
            server=server_cpu(postmaster) - cpu0, load=load1())  # fmt: skip


def _count_mutations(path: Path, start: int) -> tuple[int, int]:
    """(I/U/D lines, bytes) appended to ``path`` after byte ``start``."""
    with path.open("rb") as f:
        f.seek(start)
        data = f.read()
    n = sum(data.count(b'\n{"action":"' + a + b'"') for a in (b"I", b"U", b"D"))
    n += any(data.startswith(b'{"action":"' + a + b'"') for a in (b"I", b"U", b"D"))
    return n, len(data)


def measure_capture(
    dsn: str, slot: str, out: Path, fig: Figures, postmaster: int, batch: dict[str, Any]
) -> int:
    from dpcr.cdc import postgres

    start = out.stat().st_size
    t0 = time.perf_counter()
    postgres._resume_point(out)  # what the capture reads first: the end of the file
    resume = time.perf_counter() - t0
    last_write = [0.0]
    written = [0]

    def on_batch(stats: postgres.CaptureStats) -> None:
        if stats.written != written[0]:
            written[0] = stats.written
            last_write[0] = time.perf_counter()

    cpu0, scpu0 = self_cpu(), server_cpu(postmaster)
    t0 = time.perf_counter()
    postgres.capture(dsn, slot=slot, table=TABLE, out=out, on_batch=on_batch,
                     batching=postgres.Batching(idle_exit=1.0, **batch))  # fmt: skip
    cpu = self_cpu() - cpu0
    time.sleep(0.3)
    scpu = server_cpu(postmaster) - scpu0
    wall = last_write[0] - t0
    mutations, size = _count_mutations(out, start)
    fig.add(wall=wall, rate=mutations / wall, mbs=size / wall / 1e6, client=cpu, server=scpu,
            resume=resume, loop=mutations / (wall - resume), load=load1())  # fmt: skip
    return mutations


def measure_read_only(dsn: str, slot: str, fig: Figures, mutations: int, postmaster: int) -> None:
    """psycopg2 reading the slot and dropping every message: the floor of any psycopg2
    capture (no parsing, no file)."""
    import psycopg2.extras

    conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        cur = conn.cursor()
        cpu0, scpu0 = self_cpu(), server_cpu(postmaster)
        t0 = time.perf_counter()
        cur.start_replication(slot_name=slot, decode=False, options=_options(TABLE))
        size = 0
        while True:
            msg = cur.read_message()
            if msg is None:
                select.select([cur], [], [], 1.0)
                continue
            data = msg.payload
            size += len(data)
            if data[11:12] == b"M" and MARK in data:  # the marker after the backlog
                break
        wall = time.perf_counter() - t0
        cpu = self_cpu() - cpu0
    finally:
        conn.close()
    time.sleep(0.3)
    fig.add(wall=wall, rate=mutations / wall, mbs=size / wall / 1e6, client=cpu,
            server=server_cpu(postmaster) - scpu0, load=load1())  # fmt: skip


def _fmt(v: float | None, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=int, default=10, help="pgbench scale (100,000 accounts each)")
    p.add_argument("--transactions", type=int, default=300_000, help="backlog transactions")
    p.add_argument("--clients", type=int, default=4, help="pgbench clients building it")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-messages", type=int, default=None, help="capture's batch_messages")
    p.add_argument("--batch-seconds", type=float, default=None, help="capture's batch_seconds")
    p.add_argument("--capture-only", action="store_true", help="skip the ceiling measurements")
    args = p.parse_args(argv)
    from dpcr.cdc import postgres

    batch: dict[str, Any] = {}
    if args.batch_messages is not None:
        batch["batch_messages"] = args.batch_messages
    if args.batch_seconds is not None:
        batch["batch_seconds"] = args.batch_seconds
    per_client = max(1, args.transactions // args.clients)
    transactions = per_client * args.clients
    repeats = range(args.repeats)
    snap = Figures("snapshot (create_slot), rows/s")
    build = Figures("backlog (pgbench tpcb-like), transactions/s")
    peek = Figures("server decoding alone (peek in SQL)")
    recv = Figures("pg_recvlogical to /dev/null (TCP)")
    floor = Figures("psycopg2 read only (TCP)")
    cap = Figures("**dpcr capture (TCP)**")
    unix = Figures("dpcr capture (Unix socket)")
    with tempfile.TemporaryDirectory(prefix="dpcr-drain-") as tmp:
        tmpdir = Path(tmp)
        (tmpdir / "pg").mkdir()
        with server(tmpdir / "pg") as dsn:
            postmaster = _postmaster(tmpdir / "pg")
            pgbench = _bin("pgbench")
            t0 = time.perf_counter()
            subprocess.run([pgbench, "-i", "-q", "-s", str(args.scale), dsn], check=True,
                           capture_output=True)  # fmt: skip
            init = time.perf_counter() - t0
            _sql(dsn, f"ALTER TABLE {TABLE} REPLICA IDENTITY FULL")
            outs = []
            for r in repeats:
                out = tmpdir / f"drain_{r}.wal2json.jsonl"
                t0 = time.perf_counter()
                rows = postgres.create_slot(dsn, slot=f"drain_{r}", table=TABLE, key=("aid",),
                                            out=out)  # fmt: skip
                wall = time.perf_counter() - t0
                snap.add(wall=wall, rate=rows / wall, mbs=out.stat().st_size / wall / 1e6,
                         load=load1())  # fmt: skip
                outs.append(out)
            t0 = time.perf_counter()
            jobs = str(min(args.clients, 2))
            subprocess.run([pgbench, "-n", "-c", str(args.clients), "-j", jobs, "-t",
                            str(per_client), dsn], check=True, capture_output=True)  # fmt: skip
            wall = time.perf_counter() - t0
            build.add(wall=wall, rate=transactions / wall, load=load1())
            # A marker just after the backlog: where pg_recvlogical and the read-only client stop.
            (end,) = _sql(dsn, "SELECT pg_logical_emit_message(false, %s, '')::text", MARK.decode())
            _sql(dsn, "CHECKPOINT")
            sock = f"host={_postmaster_dir(tmpdir / 'pg')}"
            unix_dsn = dsn.replace("host=127.0.0.1", sock)
            # drain_<last> is consumed last: the other clients read copies of it (made before
            # it is consumed, so they start where it starts), and the peeks read it.
            last = f"drain_{args.repeats - 1}"
            for r in repeats:
                unix_out = tmpdir / f"unix_{r}.wal2json.jsonl"
                shutil.copyfile(outs[-1], unix_out)
                for name in ("ceiling", "read", "unix"):
                    _sql(dsn, "SELECT pg_copy_logical_replication_slot(%s, %s)", last,
                         f"{name}_{r}")  # fmt: skip
                if not args.capture_only:
                    measure_peek(dsn, last, end, peek, transactions, postmaster)
                    measure_recvlogical(dsn, f"ceiling_{r}", end, recv, transactions, postmaster)
                    measure_read_only(dsn, f"read_{r}", floor, transactions, postmaster)
                captures = [(cap, f"drain_{r}", outs[r], dsn),
                            (unix, f"unix_{r}", unix_out, unix_dsn)]  # fmt: skip
                for fig, slot, path, d in captures[:: 1 if r % 2 == 0 else -1]:
                    n = measure_capture(d, slot, path, fig, postmaster, batch)
                    if n != transactions:
                        print(f"warning: {slot} wrote {n} mutations, expected {transactions}",
                              file=sys.stderr)  # fmt: skip
                for name in ("ceiling", "read", "unix"):
                    _sql(dsn, "SELECT pg_drop_replication_slot(%s)", f"{name}_{r}")
                print(f"repeat {r}: " + ", ".join(
                    f"{f.name} {f.values['rate'][-1]:,.0f}/s"
                    for f in (peek, recv, floor, cap, unix) if f.values
                ), file=sys.stderr)  # fmt: skip
    print(f"pgbench scale {args.scale} ({args.scale * 100_000:,} accounts, init {init:.1f} s); "
          f"backlog {transactions:,} transactions over {args.clients} clients; "
          f"{args.repeats} repeats, medians; capture {batch or 'defaults'}")  # fmt: skip
    print()
    print("| step | s | mutations/s | MB/s | client CPU s | server CPU s | start s "
          "| mutations/s after the start | load 1 min |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for fig in (snap, build, peek, recv, floor, cap, unix):
        if fig.values:
            print(f"| {fig.name} | {_fmt(fig.med('wall'), '.2f')} "
                  f"| {_fmt(fig.med('rate'), ',.0f')} | {_fmt(fig.med('mbs'), '.1f')} "
                  f"| {_fmt(fig.med('client'), '.2f')} | {_fmt(fig.med('server'), '.2f')} "
                  f"| {_fmt(fig.med('resume'), '.2f')} | {_fmt(fig.med('loop'), ',.0f')} "
                  f"| {_fmt(fig.med('load'), '.2f')} |")  # fmt: skip


if __name__ == "__main__":
    main()
