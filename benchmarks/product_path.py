"""The product path as a user runs it: whole `dpcr` processes, wall-clock seconds.

Run: .venv/bin/python benchmarks/product_path.py [CONFIG ...] [--repeat 3]
Default config: the transit demo (make demo generates its data). For each config: `dpcr plan`,
a first `dpcr run` into a fresh output folder, and a rerun with nothing new; medians of
``--repeat`` runs, printed as a Markdown table (docs/benchmarks.md, "The product path").
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DPCR = [sys.executable, "-m", "dpcr.cli"]


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([*DPCR, *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def fresh_config(config: Path, out: Path) -> Path:
    """A copy of ``config`` (beside it, so relative paths still resolve) writing to ``out``."""
    text = config.read_text(encoding="utf-8")
    lines = []
    section = ""
    for line in text.splitlines():
        if line.startswith("["):
            section = line.strip()
        if section == "[output]" and line.strip().startswith(("dir", "store")):
            continue
        lines.append(line)
    if "[output]" not in text:
        lines.append("[output]")
    body = "\n".join(lines).replace("[output]", f'[output]\ndir = "{out}"', 1)
    copy = config.with_name(f".bench-{config.name}")
    copy.write_text(body + "\n", encoding="utf-8")
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("configs", nargs="*", type=Path,
                        default=[ROOT / "examples" / "transit" / "dpcr.toml"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| config | `dpcr plan` | first `dpcr run` | rerun, nothing new |")
    print("|---|---|---|---|")
    for config in args.configs:
        plans, firsts, reruns = [], [], []
        for _ in range(args.repeat):
            out = Path(tempfile.mkdtemp(prefix="dpcr-bench-"))
            copy = fresh_config(config.resolve(), out)
            try:
                plans.append(timed(["plan", str(copy)]))
                firsts.append(timed(["run", str(copy), "--quiet", "--no-report"]))
                reruns.append(timed(["run", str(copy), "--quiet", "--no-report"]))
            finally:
                copy.unlink(missing_ok=True)
                shutil.rmtree(out, ignore_errors=True)
        print(f"| {config.name} | {statistics.median(plans):.2f} s | "
              f"{statistics.median(firsts):.2f} s | {statistics.median(reruns):.2f} s |")


if __name__ == "__main__":
    main()
