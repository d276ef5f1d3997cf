"""Open keys: the memory of reading the waiting keys' stored values for selection.

A store (a simulation) holding the values of ``--keys`` waiting keys of one open histogram at
``--nodes`` nodes, written by one commit; the peak traced memory (tracemalloc) and CPU of
reading them all at once (``Store.open_values``) and a block of key ids at a time
(``Store.open_value_blocks``, what a run's selection reads), each ``--repeat`` times.

Usage: python benchmarks/open_reads.py [--keys 4e5] [--nodes 20] [--repeat 2] [--dir DIR]
       [--only all|blocks]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=float, default=4e5)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--only", choices=("all", "blocks"), default=None)
    args = ap.parse_args()

    from dpcr.store import OpenBlock, OpenKey, SourceState, Store

    n, width = int(args.keys), args.nodes
    path = Path(args.dir or tempfile.mkdtemp(prefix="dpcr-openreads-")) / f"s-{n}-{width}.sqlite"
    nodes = [(0, i) for i in range(1, width + 1)]
    keys = tuple(f"key{i:08d}" for i in range(n))
    if not path.exists():
        with Store(path, fingerprint="f", mode="simulation") as st:
            st.commit_release(
                values=[], events=[], source=SourceState(records=1, interval=width), summary={},
                started=0.0, open_keys=[OpenKey(query="q", key=k, appeared=1) for k in keys],
                open_blocks=[OpenBlock(
                    query="q", keys=keys, nodes=tuple(nodes),
                    ranges=tuple((None, i) for _, i in nodes),
                    values=np.arange(n * width, dtype=np.int64).reshape(width, n),
                )],
            )  # fmt: skip
    waiting = sorted(keys)
    with Store(path, fingerprint="f", mode="simulation") as st:
        for name in [args.only] if args.only else ["all", "blocks"]:
            for _ in range(args.repeat):
                tracemalloc.start()
                t0 = time.process_time()
                if name == "all":
                    _values, held = st.open_values("q", waiting, nodes)
                    count = int(held.sum())
                    del _values, held
                else:
                    count = sum(int(h.sum()) for _p, _v, h in
                                st.open_value_blocks("q", waiting, nodes))  # fmt: skip
                cpu = time.process_time() - t0
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                print(f"| {name} | {count:,} values | peak traced {peak / 2**20:.1f} MiB | CPU "
                      f"{cpu:.2f} s |", flush=True)


if __name__ == "__main__":
    main()
