"""Open keys (issue 35): what the store costs per incremental run.

A weekly release (tree plan, ε = 1, δ = 1e-6, at most 3 mutations) of a histogram whose keys
are not declared, over ``--n`` mutations whose key is uniform over ``--keys`` values (most keys
appear in the first weeks), run once per week for ``--runs`` weeks in one process (the Python
API, a real release: secure noise). After the runs named by ``--at``: the store's size (file and
write-ahead log), the CPU (user + sys of the process) of that run's commit and of the whole run,
and the CPU of opening the store in a process that did not close it (the check of its heads:
the content head, and the newest link of the candidates head's chain).

``--reopen K`` runs nothing: it opens the store an earlier call left in ``--dir`` K times, each
as a process that did not close it would, and prints the CPU of each open and the median (an
A/B of the open cost runs it with each version's ``src`` on copies of one store).

Usage: python benchmarks/open_store.py [--n 3e5] [--keys 1e5] [--runs 50] [--at 10,50]
       python benchmarks/open_store.py --dir DIR [--n ...] [--keys ...] --reopen 5
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from open_keys import config, generate


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, default=3e5)
    ap.add_argument("--keys", type=float, default=1e5)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--at", default="10,50")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--reopen", type=int, default=0)
    args = ap.parse_args()

    import dpcr.store._store as store_module
    from dpcr.config import load_config
    from dpcr.store import Store
    from dpcr.store._heads import VERIFIED

    work = Path(args.dir or tempfile.mkdtemp(prefix="dpcr-openstore-"))
    work.mkdir(parents=True, exist_ok=True)
    n, keys = int(args.n), int(args.keys)
    data = generate(n, keys, 0.0, args.seed, work / f"uniform-{n}-{keys}.parquet")
    cfg = config(data, work / "open", declared=None, plan="tree")
    release = load_config(cfg)
    if args.reopen:
        _reopen(release, args.reopen)
        return
    commit_cpu = [0.0]
    original = store_module.Store.commit_release

    def timed(self: Any, **kwargs: Any) -> None:
        t0 = _cpu()
        try:
            original(self, **kwargs)
        finally:
            commit_cpu[0] += _cpu() - t0

    store_module.Store.commit_release = timed  # type: ignore[method-assign]
    at = {int(a) for a in args.at.split(",")}
    week = 7 * 86_400 * 10**6
    start = 1_735_689_600 * 10**6
    for r in range(1, args.runs + 1):
        commit_cpu[0] = 0.0
        t0, w0 = _cpu(), time.perf_counter()
        release.run(until=start + r * week)
        run_cpu, run_wall = _cpu() - t0, time.perf_counter() - w0
        if r not in at:
            continue
        path = release.store_path
        size = sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal"))
                   if p.exists())  # fmt: skip
        VERIFIED.clear()  # (as a process that did not close the store opens it)
        t1 = _cpu()
        with Store(path, fingerprint=release.fingerprint(), mode="release") as st:
            candidates = sum(len(k) for k in st.open_keys().values())
        open_cpu = _cpu() - t1
        print(
            f"| after run {r} | store {size / 2**20:.1f} MiB | commit CPU {commit_cpu[0]:.2f} s"
            f" | run CPU {run_cpu:.2f} s, wall {run_wall:.2f} s | open (full check) CPU "
            f"{open_cpu:.2f} s | {candidates:,} candidate keys | load "
            f"{os.getloadavg()[0]:.1f} |",
            flush=True,
        )


def _reopen(release: Any, times: int) -> None:
    """Open the store ``times`` times, each as a process that did not close it would."""
    import statistics

    from dpcr.store import Store
    from dpcr.store._heads import VERIFIED

    path = release.store_path
    if not path.exists():
        raise SystemExit(f"no store at {path}: run the benchmark with this --dir first")
    cpu = []
    for _ in range(times):
        VERIFIED.clear()
        t0 = _cpu()
        with Store(path, fingerprint=release.fingerprint(), mode="release"):
            pass
        cpu.append(_cpu() - t0)
    print(f"open CPU {' '.join(f'{c:.3f}' for c in cpu)} s | median {statistics.median(cpu):.3f}"
          f" s | load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
