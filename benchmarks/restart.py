"""The first step after a killed session: what the next process pays for the steps the session
settled from memory and never wrote.

daily.py's job (product.py's release over throughput.py's changelog of N mutations, one year
back, JSON lines in time order). A session steps days 1 .. ``--killed`` (each appending its
day's lines) and is killed (``os._exit``: nothing closed) with the steps since its last batch
write (``WRITE_STEPS``) in memory only. Its files are kept; then, ``--repeat`` times, they are
put back and a whole ``dpcr run`` process closes the next day: the step that finds the state
behind the store. Its CPU (user + sys, ``wait4``) and wall are printed per source tree given
(``--src``, alternated, each run a fresh copy of the killed session's files), with the load
average and the CPU of ``import numpy, duckdb`` in the same minute.

Usage: python benchmarks/restart.py [--n 1e6] [--killed 200] [--repeat 3] --src A/src --src B/src
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import daily
from daily import DAY0, ENV, append, config, dpcr_run, timed, write_year
from runs import Timings, machine
from throughput import DAY_US

#: The session, killed after its last step (its held steps not written).
KILLED = """
import json, os, sys
from dpcr.config import load_config
cfg, whole, grow, last, offsets = sys.argv[1:6]
offsets = json.loads(offsets)
release = load_config(cfg)
session = release.session()
with open(whole, 'rb') as src:
    for d in range(1, int(last) + 1):
        src.seek(offsets[d - 1])
        with open(grow, 'ab') as out:
            out.write(src.read(offsets[d] - offsets[d - 1]))
        session.run(until={day0} + d * {day})
held = session.held._held
print(len(held.pending) if held is not None else -1, flush=True)
os._exit(0)
"""


def _version(work: Path) -> int:
    """The state's seed version after the step (a rebuild starts it again)."""
    import duckdb

    path = next(work.glob("out-restart/**/state.duckdb"), None) or next(
        work.glob("**/state.duckdb"))  # fmt: skip
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{path}' AS s (READ_ONLY)")
        row = con.execute("SELECT value FROM s.counters WHERE name = 'version'").fetchone()
    finally:
        con.close()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=float, default=1e6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--killed", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--src", action="append", required=True,
                        help="a source tree (its src folder); give two to alternate")
    args = parser.parse_args()
    srcs = [str(Path(s).resolve()) for s in args.src]
    with tempfile.TemporaryDirectory(prefix="dpcr-restart-") as tmp:
        work = Path(tmp)
        whole, offsets = write_year(int(args.n), args.seed, work)
        grow = work / "grow.jsonl"
        grow.write_bytes(b"")
        cfg = config(work, "restart", grow, "disjoint")
        ENV["PYTHONPATH"] = srcs[0]
        code = KILLED.format(day0=DAY0, day=DAY_US)
        _, _, out = timed([sys.executable, "-c", code, str(cfg), str(whole), str(grow),
                           str(args.killed), daily.json.dumps(offsets)],
                          stdout=daily.subprocess.PIPE)  # fmt: skip
        print(f"N = {int(args.n):,}: killed after day {args.killed} with "
              f"{out.strip()} steps not written; {grow.stat().st_size / 1e6:.1f} MB")
        kept = work / "kept"
        kept.mkdir()
        shutil.copy2(grow, kept / grow.name)
        shutil.copytree(work / "out-restart", kept / "out-restart", symlinks=True)
        timings = Timings()
        for rep in range(args.repeat):
            for src in srcs:
                shutil.rmtree(work / "out-restart")
                shutil.copytree(kept / "out-restart", work / "out-restart", symlinks=True)
                shutil.copy2(kept / grow.name, grow)
                append(whole, grow, offsets, args.killed + 1)
                ENV["PYTHONPATH"] = src
                run = timings.run(src, dpcr_run(cfg, DAY0 + (args.killed + 1) * DAY_US), env=ENV)
                print(f"round {rep + 1} {src}: {run.cpu:.2f} s CPU, {run.wall:.2f} s wall, state "
                      f"version {_version(work)} ({machine(ENV)})", flush=True)
        for src in timings.runs:
            print(f"{src}: median {timings.median(src, 'cpu'):.2f} s CPU, "
                  f"{timings.median(src, 'wall'):.2f} s wall")


if __name__ == "__main__":
    main()
