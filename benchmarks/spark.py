"""The Spark engine against the DuckDB engine on one Parquet changelog (docs/spark.md).

The data: ``benchmarks/throughput.py``'s ``generate`` (N mutations over 365 days, N/5 entries,
inserts, updates and 10% deletes), written to Parquet by DuckDB ``COPY ... (FORMAT parquet)``
with ``ts`` in epoch microseconds, ``op`` as text and ``before``/``after`` as
``STRUCT(value DOUBLE)``. Above 10^7 rows the file is written in chunks of 10^7 (each chunk a
changelog of its own entries, seeded by its number), so no more than one chunk is ever held in
Python memory.

The job: the engine protocol's ``aggregate`` with privacy unit = entry, at most 3 mutations per
entry, per-day count and clamped sum of ``value`` over the 365 days: load and validate every
record, bound, aggregate. Times are wall clock, the Spark session already started (its start is
shown on its own). Peak memory is the largest resident memory, sampled every 0.2 s, of the whole
process tree (this Python process, Spark's JVM and its Python workers).

Usage: python benchmarks/spark.py [--rows 1e7] [--engines duckdb,spark] [--dir /tmp/dpcr-bench]
       [--duckdb-memory 8GB] [--keep]  (the Parquet file is deleted afterwards unless --keep)
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import DAY_US, DAYS, START_US, generate

CHUNK = 10_000_000



def write_part(con: Any, arrays: dict[str, np.ndarray], path: Path) -> None:
    """One Parquet part file of the changelog from generated columns (entry, ts, op as 0/1/2
    for insert/update/delete, old, new): ``before``/``after`` as ``STRUCT(value DOUBLE)``."""
    con.register("chunk", arrays)
    con.execute(
        f"""COPY (
            SELECT CAST(entry AS VARCHAR) AS entry, ts,
                   CASE op WHEN 0 THEN 'insert' WHEN 1 THEN 'update' ELSE 'delete' END AS op,
                   CASE WHEN old IS NULL OR isnan(old) THEN NULL
                        ELSE struct_pack(value := old) END::STRUCT(value DOUBLE) AS before,
                   CASE WHEN new IS NULL OR isnan(new) THEN NULL
                        ELSE struct_pack(value := new) END::STRUCT(value DOUBLE) AS after
            FROM chunk
        ) TO '{path}' (FORMAT parquet)"""
    )
    con.unregister("chunk")

def write_parquet(rows: int, path: Path) -> None:
    """``rows`` mutations to ``path`` (chunks of 10^7 with disjoint entry ids)."""
    parts = path.with_suffix(".parts")
    parts.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    done, chunk = 0, 0
    while done < rows:
        n = min(CHUNK, rows - done)
        d = generate(n, seed=chunk)
        entry = d["entry"] + chunk * CHUNK  # ids of one chunk are below n / 5
        arrays = {"entry": entry, "ts": d["ts"], "op": d["op"], "old": d["old"], "new": d["new"]}
        write_part(con, arrays, parts / f"part-{chunk:04d}.parquet")
        del d, arrays, entry
        done += n
        chunk += 1
    con.execute(
        f"COPY (SELECT * FROM read_parquet('{parts}/part-*.parquet')) TO '{path}' "
        "(FORMAT parquet, ROW_GROUP_SIZE 1000000)"
    )
    con.close()
    for p in parts.iterdir():
        p.unlink()
    parts.rmdir()


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


class Peak:
    """The largest resident memory of this process tree while the block runs."""

    def __enter__(self) -> Peak:
        self.peak = _tree_rss(os.getpid())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, _tree_rss(os.getpid()))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def request(path: Path) -> Any:
    from dpcr.bounding.constraints import AtMostK
    from dpcr.changelog import ParquetSource
    from dpcr.engines.base import AggregateRequest
    from dpcr.queries import Count, Sum

    return AggregateRequest(
        source=ParquetSource(path=path, epoch_unit="us"),
        queries=(Count(name="n"), Sum(name="value", column="value", lower=0, upper=100)),
        constraint=AtMostK(k=3),
        release_times=[START_US + DAY_US * (i + 1) for i in range(DAYS)],
        first_interval=1,
        clock=START_US + DAY_US * DAYS,
        on_error="quarantine",
        quarantine_path=path.with_suffix(".quarantine.jsonl"),
    )


def run(
    engine_name: str, path: Path, master: str, memory: str, duckdb_memory: str | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"engine": engine_name}
    if engine_name == "duckdb":
        from dpcr.engines.duckdb import DuckDBEngine

        con = None
        if duckdb_memory is not None:  # DuckDB's default limit is 80% of the machine's memory
            con = duckdb.connect()
            con.execute(f"SET memory_limit = '{duckdb_memory}'")
            con.execute(f"SET temp_directory = '{path.parent / 'duckdb.tmp'}'")
        engine: Any = DuckDBEngine(con)
    else:
        from dpcr.engines.spark import SparkEngine

        engine = SparkEngine(master=master, conf={"spark.driver.memory": memory})
        t = time.perf_counter()
        engine.session()
        out["session_s"] = time.perf_counter() - t
    try:
        with Peak() as peak:
            t = time.perf_counter()
            result = engine.aggregate(request(path))
            out["seconds"] = time.perf_counter() - t
        out["peak_gib"] = peak.peak / 2**30
        out["valid"] = result.load.valid
        out["kept"] = result.aggregates.report.kept
        out["totals"] = {k: v.sum(axis=0).tolist() for k, v in result.aggregates.values.items()}
    except Exception as exc:  # record what happens (e.g. out of memory), do not hide it
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    finally:
        if engine_name == "spark":
            engine.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--engines", default="duckdb,spark")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/dpcr-bench"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="3g")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--duckdb-memory", default=None, help="DuckDB memory_limit, e.g. 8GB")
    args = parser.parse_args()
    rows = int(args.rows)
    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / f"changelog-{rows}.parquet"
    if not path.exists():
        t = time.perf_counter()
        write_parquet(rows, path)
        print(f"wrote {path} ({path.stat().st_size / 2**30:.2f} GiB) in "
              f"{time.perf_counter() - t:.0f} s", flush=True)  # fmt: skip
    results = []
    try:
        for name in args.engines.split(","):
            results.append(run(name, path, args.master, args.driver_memory, args.duckdb_memory))
            print(results[-1], flush=True)
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
            path.with_suffix(".quarantine.jsonl").unlink(missing_ok=True)
    print(f"\n{rows:.0e} mutations, {platform.machine()}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d')}")  # fmt: skip
    print("| engine | session start | aggregate | peak memory | valid | kept |")
    print("|---|---|---|---|---|---|")
    for r in results:
        start = f"{r['session_s']:.1f} s" if "session_s" in r else "-"
        if "error" in r:
            print(f"| {r['engine']} | {start} | failed: {r['error']} | | | |")
            continue
        print(f"| {r['engine']} | {start} | {r['seconds']:.1f} s | {r['peak_gib']:.1f} GiB | "
              f"{r['valid']} | {r['kept']} |")  # fmt: skip
    totals = [r["totals"] for r in results if "totals" in r]
    if len(totals) > 1:
        print("identical totals:", all(t == totals[0] for t in totals))
    _ = np  # numpy is the generator's


if __name__ == "__main__":
    main()
