"""``dpcr suggest`` at 10^6 mutations: the transit demo and a SaaS-like subscription log.

* ``transit``: the demo (``examples/transit``: a SQLite changelog of about 1.06 million
  mutations, a hybrid constraint of at-most-12 and 31-day classes, three statistics);
* ``saas``: ``examples/subscriptions/generate.py --scale 4.6`` (about 1.09 million mutations:
  inserts, plan and seat changes, pauses, cancellations and deletes) under ``at_most_k = 4``
  with the issue's three statistics (all rows, active per plan, active seats).

Each case is a whole ``dpcr suggest`` process (DP figures at the default ε = 0.1, and
``--exact``). CPU is user + sys of the child (``wait4``), the stable measure on a shared
machine; wall is spawn to exit. The goal: each within 10 s.

Usage: python benchmarks/suggest.py [--data DIR] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAAS = """[source]
format = "jsonl"
path = "{data}/saas/changelog.jsonl"
epoch_unit = "s"
[privacy]
epsilon = 1.0
[constraint]
at_most_k = 4
[release]
start = "2025-01-01T00:00:00Z"
period = "7d"
end = "2025-12-31T00:00:00Z"
[[query]]
name = "signups"
kind = "count"
[[query]]
name = "active_by_plan"
kind = "histogram"
column = "plan"
keys = ["basic", "pro", "team"]
where = {{ status = ["active"] }}
[[query]]
name = "mrr"
kind = "sum"
column = "seats"
lower = 0
upper = 50
where = {{ status = ["active"] }}
[output]
dir = "{data}/out-saas"
"""


def _prepare(data: Path) -> dict[str, Path]:
    py = sys.executable
    subprocess.run([py, str(ROOT / "examples/transit/generate.py"), "--if-missing", "--quiet",
                    "--out", str(data / "transit")], check=True)  # fmt: skip
    subprocess.run([py, str(ROOT / "examples/subscriptions/generate.py"), "--if-missing",
                    "--scale", "4.6", "--out", str(data / "saas")], check=True)  # fmt: skip
    transit = (ROOT / "examples/transit/dpcr.toml").read_text(encoding="utf-8")
    transit = transit.replace('"data/transit.sqlite"', f'"{data}/transit/transit.sqlite"')
    transit = transit.replace('"../../out"', f'"{data}/out-transit"')
    configs = {"transit": data / "transit.toml", "saas": data / "saas.toml"}
    configs["transit"].write_text(transit, encoding="utf-8")
    configs["saas"].write_text(SAAS.format(data=data), encoding="utf-8")
    return configs


def _time(argv: list[str]) -> tuple[float, float]:
    """(cpu, wall) seconds of one child process."""
    started = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env={**os.environ})
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    if status:
        raise SystemExit(f"{' '.join(argv)} failed with status {status}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "out" / "bench-suggest")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    configs = _prepare(args.data.resolve())
    print(f"{'case':<16} {'cpu s':>7} {'wall s':>7}")
    for name, config in configs.items():
        for extra in ([], ["--exact"]):
            for _ in range(args.repeat):
                cpu, wall = _time([sys.executable, "-m", "dpcr.cli", "suggest", str(config),
                                   *extra])  # fmt: skip
                label = name + (" exact" if extra else "")
                print(f"{label:<16} {cpu:>7.2f} {wall:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
