"""Runs that cost what is new: ``dpcr run`` on a JSON-lines changelog that grows by 1 %.

The job is product.py's (keep each entry's first 3 mutations; daily count and clamped sum;
ε = 1). The generated changelog is split by time: the mutations before the day that leaves 1 %
after it form the file of the first release (``--until`` that day), the rest is appended, and
the release continues to the end of the year. Every run is a whole ``dpcr run`` process (wall
time spawn to exit, CPU = user + sys and peak RSS by ``wait4``):

  full          one run over the whole changelog from an empty output folder (the reference)
  first         the first release, over 99 %
  +1 %          after appending the last 1 %: reads only the appended bytes
  nothing new   the same again (no new record, no interval closed)

The operator diagnostics of "+1 %" and "full" (records, valid, quarantined, kept and dropped
counts) must be equal; tests/release/test_incremental.py checks the released values themselves.
A run whose state file does not match its store rebuilds it from the whole file: it costs what
"full" costs.

Usage: python benchmarks/incremental.py [--n 1e7] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from product import CONFIG, YEAR_US
from runs import Timings, machine
from throughput import DAY_US, K, generate


def write_split(n: int, seed: int, workdir: Path) -> tuple[Path, Path, Path, int]:
    """(whole file, first 99 %, last 1 %, the day that splits them in µs)."""
    import duckdb

    d = generate(n, seed)
    con = duckdb.connect()
    con.register("d", {"entry": d["entry"], "ts": d["ts"] - YEAR_US, "op": d["op"],
                       "old": d["old"], "new": d["new"]})  # fmt: skip
    flat = (
        "SELECT entry, ts, op::INTEGER AS op, CASE WHEN isnan(old) THEN NULL ELSE old END AS "
        "old, CASE WHEN isnan(new) THEN NULL ELSE new END AS new FROM d"
    )
    q99 = con.execute(f"SELECT quantile_disc(ts, 0.99) FROM ({flat})").fetchone()
    cut = int(q99[0]) // DAY_US * DAY_US if q99 else 0
    changelog = f"""SELECT entry, ts,
        CASE op WHEN 0 THEN 'insert' WHEN 1 THEN 'update' ELSE 'delete' END AS op,
        CASE WHEN op = 0 THEN NULL ELSE {{'value': old}} END AS before,
        CASE WHEN op = 2 THEN NULL ELSE {{'value': new}} END AS after FROM ({flat})"""
    whole, first, last = (workdir / f for f in ("whole.jsonl", "first.jsonl", "last.jsonl"))
    con.execute(f"COPY ({changelog} ORDER BY ts, entry) TO '{whole}' (FORMAT json)")
    con.execute(f"COPY ({changelog} WHERE ts < {cut} ORDER BY ts, entry) TO '{first}' "
                "(FORMAT json)")  # fmt: skip
    con.execute(f"COPY ({changelog} WHERE ts >= {cut} ORDER BY ts, entry) TO '{last}' "
                "(FORMAT json)")  # fmt: skip
    con.close()
    return whole, first, last, cut


def dpcr_run(workdir: Path, name: str, path: Path, until: str) -> list[str]:
    out = workdir / f"out-{name}"
    cfg = workdir / f"{name}.toml"
    cfg.write_text(CONFIG.format(fmt="jsonl", path=path, k=K, out=out))
    dpcr = Path(sys.executable).with_name("dpcr")
    return [str(dpcr), "run", str(cfg), "--until", until, "--quiet", "--no-report"]


def _summary(workdir: Path, name: str) -> dict[str, object]:
    runs = sorted((workdir / f"out-{name}").rglob("diagnostics.json"))
    return json.loads(runs[-1].read_text()) if runs else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=float, default=1e7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from dpcr.timeutil import format_timestamp

    timings = Timings()
    with tempfile.TemporaryDirectory(prefix="dpcr-incremental-") as tmp:
        work = Path(tmp)
        whole, first, last, cut = write_split(int(args.n), args.seed, work)
        until = format_timestamp(cut)
        for _rep in range(args.repeat):
            for sub in work.glob("out-*"):
                shutil.rmtree(sub)
            grow = work / "grow.jsonl"
            shutil.copyfile(first, grow)
            steps = [
                ("full", dpcr_run(work, "full", whole, "2026-01-01")),
                ("first", dpcr_run(work, "grow", grow, until)),
                ("+1 %", None),
                ("nothing new", dpcr_run(work, "grow", grow, "2026-01-01")),
            ]
            for label, cmd in steps:
                if label == "+1 %":
                    with grow.open("ab") as f, last.open("rb") as g:
                        shutil.copyfileobj(g, f)
                    cmd = dpcr_run(work, "grow", grow, "2026-01-01")
                assert cmd is not None
                timings.run(label, cmd)
            a, b = _summary(work, "full"), _summary(work, "grow")
            if a.get("changelog") != b.get("changelog") or a.get("bounding") != b.get("bounding"):
                raise SystemExit("the grown release's counts differ from the full run's")
    full, full_cpu = timings.median("full", "wall"), timings.median("full", "cpu")
    print(f"N = {int(args.n):,}, +1 % = mutations from {until}; medians of {args.repeat}; "
          f"{machine()}")
    print(f"{'run':<12} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9} {'wall of full':>13} "
          f"{'CPU of full':>12}")
    for label in timings.runs:
        t, c = timings.median(label, "wall"), timings.median(label, "cpu")
        print(f"{label:<12} {t:>8.2f} {c:>8.2f} {timings.median(label, 'peak'):>9.0f} "
              f"{t / full:>13.1%} {c / full_cpu:>12.1%}")


if __name__ == "__main__":
    main()
