"""The first step after a killed ``dpcr follow`` over a live wal2json capture: what the next
process pays for the steps the session settled from memory and never wrote.

follow_steps.py's changelog (a snapshot of ``--n`` rows, then ``--steps`` one-second intervals
of ``--rate`` changes), but appended as a live capture writes it: each step's lines run
``--lead`` transactions into the next second, which the state keeps pending. ``prepare DIR``
writes it, runs a session of steps 1 .. ``--killed`` (from memory after the first) and kills
it (``os._exit``: nothing closed) with the steps since its last batch write in memory only,
and keeps its files in ``DIR/kept``. ``step DIR`` (the command to time: a whole process) puts a
fresh copy of them in a folder of its own, appends the next step's lines and runs that step in
a new session (which finds the state behind the store: it replays the lost steps or rebuilds
the state from the whole file), and prints which, and the step's CPU.

Usage: python benchmarks/follow_restart.py prepare DIR [--n 100000] [--steps 120] [--rate 200]
           [--lead 20] [--killed 100]
       python benchmarks/follow_restart.py step DIR
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import follow_steps
from follow_steps import T0

RELEASE = """
import dpcr
from dpcr.timeutil import format_timestamp


def release(work):
    return dpcr.ContinualRelease(
        source=dpcr.sources.Wal2json(path=f"{work}/log.jsonl", key="id", table="public.t"),
        constraint=dpcr.AtMostK(k=3),
        plan=dpcr.DisjointRelease(start=format_timestamp(T0 * 10**6), period="1s"),
        queries=[dpcr.Count(name="rows"), dpcr.Sum(name="v", column="v", lower=0, upper=100)],
        budget=dpcr.Budget(epsilon=1.0), output_dir=f"{work}/out", on_error="quarantine")
""".replace("T0", str(T0))

KILLED = RELEASE + """
import json, os, sys
from dpcr.noise import simulation_randomness
work, killed = sys.argv[1], int(sys.argv[2])
offsets = json.loads(open(f"{work}/../offsets.json").read())
session = release(work).session()
with open(f"{work}/../whole.jsonl", "rb") as src, open(f"{work}/log.jsonl", "wb") as out:
    for s in range(1, killed + 1):
        src.seek(offsets[s - 1] if s > 1 else 0)
        out.write(src.read(offsets[s] - (offsets[s - 1] if s > 1 else 0)))
        out.flush()
        session.run(until=format_timestamp((T0 + s) * 10**6), rng=simulation_randomness(1))
held = session.held._held
print(len(held.pending) if held is not None else -1, flush=True)
os._exit(0)
""".replace("T0", str(T0))


def prepare(folder: Path, args: argparse.Namespace) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    whole = folder / "whole.jsonl"
    offsets = follow_steps.leading(whole, follow_steps.write(whole, args.n, args.steps,
                                                             args.rate), args.lead)  # fmt: skip
    (folder / "offsets.json").write_text(json.dumps(offsets))
    kept = folder / "kept"
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir()
    out = subprocess.run([sys.executable, "-c", KILLED, str(kept), str(args.killed)],
                         check=True, capture_output=True, text=True).stdout  # fmt: skip
    (folder / "killed.json").write_text(json.dumps({"killed": args.killed}))
    size = (kept / "log.jsonl").stat().st_size
    print(f"n={args.n} steps={args.steps} rate={args.rate} lead={args.lead}: killed after step "
          f"{args.killed} with {out.strip()} steps not written; {size / 1e6:.1f} of "
          f"{whole.stat().st_size / 1e6:.1f} MB")


def step(folder: Path) -> None:
    import dpcr.engines.duckdb_replay as replayed
    from dpcr.noise import simulation_randomness
    from dpcr.timeutil import format_timestamp

    killed = json.loads((folder / "killed.json").read_text())["killed"]
    offsets = json.loads((folder / "offsets.json").read_text())
    work = folder / f"run-{os.getpid()}"
    shutil.copytree(folder / "kept", work, symlinks=True)
    try:
        with (folder / "whole.jsonl").open("rb") as src, (work / "log.jsonl").open("ab") as out:
            src.seek(offsets[killed])
            out.write(src.read(offsets[killed + 1] - offsets[killed]))
        calls: list[bool] = []
        real = replayed.replay

        def spy(*a: object, **k: object) -> object:
            got = real(*a, **k)  # type: ignore[arg-type]
            calls.append(got is not None)
            return got

        replayed.replay = spy  # type: ignore[assignment]
        namespace: dict[str, object] = {}
        exec(RELEASE, namespace)
        release = namespace["release"](work)  # type: ignore[operator]
        c0 = time.process_time()
        with release.session() as session:
            session.run(until=format_timestamp((T0 + killed + 1) * 10**6),
                        rng=simulation_randomness(1))  # fmt: skip
        print(f"{'replayed' if any(calls) else 'rebuilt'} step "
              f"{time.process_time() - c0:.2f}s CPU")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("prepare", "step"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--lead", type=int, default=20)
    parser.add_argument("--killed", type=int, default=100)
    args = parser.parse_args()
    if args.what == "prepare":
        prepare(args.folder, args)
    else:
        step(args.folder)


if __name__ == "__main__":
    main()
