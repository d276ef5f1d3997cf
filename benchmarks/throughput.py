"""Throughput of one batch job: dpcr side by side with the tools users would pick instead.

The job (issue 2, "Checks"): a generated changelog of N mutations over 365 days; keep each entry's
first 3 mutations in time order; per day, the count of kept mutations and the sum of their value
changes (new − old, null = 0) clamped to [−100, 100] and rounded to integers; Laplace noise;
privacy unit = entry; ε = 1 per entry in total, half for the counts and half for the sums, so
every tool has L1 sensitivity 3 (counts) and 300 (sums) and Laplace scale 6 and 600.

Tools, each run in its own subprocess, one after another, on the same data:
  dpcr           dpcr.engines.columnar and dpcr.mechanisms through their public APIs, exact
                 discrete Laplace noise from the OS's secure generator (time-ordered input: the
                 usual changelog order)
  dpcr-unsorted  the same on the rows shuffled (exercises the path that sorts by time)
  opendp         OpenDP's Polars context: unit_of(contributions=1, identifier=entry),
                 truncate_per_group(3, keep="first"), group by day with the 365 days as public
                 keys, dp.len and dp.sum in one query with the scales fixed at 6 and 600
  opendp-memory  the same on an in-memory LazyFrame instead of a file scan (not run by default)
  pipelinedp     PipelineDP's local engine: max_contributions=3, public partitions = days
  numpy          bare numpy (stable argsort + bincount) with numpy's float Laplace: insecure
                 noise, a reference for the cost of the computation alone

What is timed: from the tool's native input, already in memory (numpy columns; an Arrow IPC
file for OpenDP's scan; a list of Python tuples for PipelineDP), to the noisy table of 365 days.
Input preparation, imports and interpreter start are not timed. "Peak" is the kernel's
high-water mark of resident memory (VmHWM) over the timed part, reset just before it through
/proc/self/clear_refs; "run" is that peak minus the resident memory just before the timed part
(so the input is excluded). Noise std is per released value (count / sum). RMSE compares the
released values with the exact first-3 statistics computed independently in the parent process;
PipelineDP keeps 3 random mutations per entry, not the first 3, so its RMSE includes that bias.

Usage: python benchmarks/throughput.py [--n 1e6 1e7] [--skip-peers] [--tools dpcr,opendp,...]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds
DAY_US = 86_400_000_000
DAYS = 365
K = 3
CLAMP = 100
MUTATIONS_PER_ENTRY = 5  # mean; E = N / 5 entries
DELETE_SHARE = 0.1

ALL_TOOLS = ("dpcr", "dpcr-unsorted", "opendp", "opendp-memory", "pipelinedp", "numpy")
DEFAULT_TOOLS = ("dpcr", "dpcr-unsorted", "opendp", "pipelinedp", "numpy")
PEERS = ("opendp", "opendp-memory", "pipelinedp")
COLUMNS = ("entry", "ts", "op", "old", "new")


# ------------------------------------------------------------------------------------------ data


def generate(n: int, seed: int) -> dict[str, np.ndarray]:
    """A valid, time-ordered changelog of ``n`` mutations over 365 days (deterministic in seed).

    N/5 entries; each is inserted once (its first mutation) and receives the other mutations
    uniformly at random (so 1 + Binomial(N − E, 1/E) mutations each, mean 5). Timestamps are
    uniform over the year in microseconds, rows in time order. Per entry in time order: an insert
    (old null), updates, and with probability 0.1 a final delete (new null); new values uniform
    in [0, 100] with 2 decimals, old = the previous new value.
    """
    rng = np.random.default_rng(seed)
    entries = max(1, n // MUTATIONS_PER_ENTRY)
    slot = np.empty(n, dtype=np.int64)  # entry slot of each time-ordered row
    slot[:entries] = np.arange(entries)
    slot[entries:] = rng.integers(0, entries, n - entries)
    slot = slot[rng.permutation(n)]
    ts = np.sort(rng.integers(START_US, START_US + DAYS * DAY_US, n))
    ids = rng.permutation(entries).astype(np.int64)  # shuffled ids, dense in [0, entries)

    by_entry = np.argsort(slot, kind="stable")  # rows grouped by entry, time order within
    grouped = slot[by_entry]
    first = np.ones(n, dtype=bool)
    first[1:] = grouped[1:] != grouped[:-1]
    last = np.ones(n, dtype=bool)
    last[:-1] = grouped[1:] != grouped[:-1]
    new = np.round(rng.uniform(0.0, 100.0, n), 2)
    delete = last & ~first & (rng.random(n) < DELETE_SHARE)
    new[delete] = np.nan
    old = np.empty(n)
    old[0] = np.nan
    old[1:] = new[:-1]
    old[first] = np.nan
    op = np.where(first, 0, np.where(delete, 2, 1)).astype(np.int8)  # columnar INSERT/UPDATE/DELETE

    back = np.empty(n, dtype=np.int64)
    back[by_entry] = np.arange(n)
    return {"entry": ids[slot], "ts": ts, "op": op[back], "old": old[back], "new": new[back]}


def numpy_first_k_stats(d: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-day count and clamped sum of each entry's first 3 mutations.

    Written as one would in bare numpy: a stable argsort by entry of the time-ordered rows puts
    each entry's mutations together in time order; the rank within the entry selects the first 3.
    """
    if not np.all(d["ts"][1:] >= d["ts"][:-1]):
        raise ValueError("numpy_first_k_stats needs time-ordered rows")
    order = np.argsort(d["entry"], kind="stable")
    grouped = d["entry"][order]
    starts = np.ones(grouped.size, dtype=bool)
    starts[1:] = grouped[1:] != grouped[:-1]
    start_pos = np.flatnonzero(starts)
    rank = np.arange(grouped.size) - np.repeat(
        start_pos, np.diff(np.append(start_pos, grouped.size))
    )
    rows = order[rank < K]
    day = (d["ts"][rows] - START_US) // DAY_US
    change = np.nan_to_num(d["new"][rows]) - np.nan_to_num(d["old"][rows])
    change = np.rint(np.clip(change, -CLAMP, CLAMP))
    counts = np.bincount(day, minlength=DAYS)
    sums = np.rint(np.bincount(day, weights=change, minlength=DAYS)).astype(np.int64)
    return counts, sums


# ----------------------------------------------------------------------------------------- tools


@dataclass
class Outcome:
    counts: list[float]
    sums: list[float]
    count_std: float
    sum_std: float
    note: str = ""
    extra: dict[str, Any] | None = None


@dataclass
class Job:
    """``run`` is timed; ``summarise`` (untimed, optional) fills in what the tool reports."""

    run: Callable[[], Outcome]
    summarise: Callable[[Outcome], None] | None = None


def laplace_std(scale: float) -> float:
    return math.sqrt(2.0) * scale


def discrete_laplace_std(scale: float) -> float:
    q = math.exp(-1.0 / scale)
    return math.sqrt(2.0 * q) / (1.0 - q)


def _scales(epsilon: float) -> tuple[float, float]:
    return K / (epsilon / 2), K * CLAMP / (epsilon / 2)


def prepare_dpcr(d: dict[str, np.ndarray], workdir: Path, args: argparse.Namespace) -> Job:
    from fractions import Fraction

    from dpcr.engines.columnar import bound_first_k, mutation_stats
    from dpcr.mechanisms import release_mutation_stats
    from dpcr.noise import secure_randomness

    if args.worker == "dpcr-unsorted":
        perm = np.random.default_rng(args.seed + 1).permutation(d["ts"].size)
        d = {name: col[perm] for name, col in d.items()}
    epsilon = Fraction(args.epsilon)
    rng = secure_randomness()

    def run() -> Outcome:
        kept = bound_first_k(d["entry"], d["ts"], K)
        stats = mutation_stats(
            kept,
            d["ts"],
            d["old"],
            d["new"],
            start=START_US,
            period=DAY_US,
            intervals=DAYS,
            clamp=CLAMP,
        )
        released = release_mutation_stats(stats, k=K, epsilon=epsilon, rng=rng)
        return Outcome(
            counts=released.counts.tolist(),
            sums=released.sums.tolist(),
            count_std=released.count_noise_std,
            sum_std=released.sum_noise_std,
            note=f"ε={float(released.epsilon):g}, secure={not released.simulation}",
            extra={"exact_counts": stats.counts.tolist(), "exact_sums": stats.sums.tolist()},
        )

    return Job(run)


def prepare_opendp(d: dict[str, np.ndarray], workdir: Path, args: argparse.Namespace) -> Job:
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    frame = pl.DataFrame(
        {
            "entry": d["entry"],
            "ts": d["ts"],
            "op": d["op"].astype(np.int32),  # OpenDP has no i8 domain
            "old": d["old"],
            "new": d["new"],
        },
        nan_to_null=True,
    )
    n = frame.height
    if args.worker == "opendp-memory":
        source = frame.lazy()
    else:
        path = workdir / "changelog.arrow"
        frame.write_ipc(path)
        del frame
        source = pl.scan_ipc(path)
    count_scale, sum_scale = _scales(args.epsilon)
    keys = pl.LazyFrame({"day": pl.Series(range(DAYS), dtype=pl.Int32)})
    state: dict[str, Any] = {}

    def run() -> Outcome:
        lf = source.with_columns(
            day=((pl.col("ts") - START_US) // DAY_US).cast(pl.Int32),
            change=(pl.col("new").fill_null(0.0) - pl.col("old").fill_null(0.0))
            .clip(-CLAMP, CLAMP)
            .round(0)
            .cast(pl.Int64),
        )
        context = dp.Context.compositor(
            data=lf,
            privacy_unit=dp.unit_of(contributions=1, identifier=pl.col("entry")),
            privacy_loss=dp.loss_of(epsilon=args.epsilon),
            split_evenly_over=1,
            margins=[dp.polars.Margin(by=["day"], max_length=n)],
        )
        query = (
            context.query()
            .truncate_per_group(K, keep="first")
            .group_by("day")
            .agg(
                dp.len(scale=count_scale),
                pl.col("change").fill_null(0).dp.sum((-CLAMP, CLAMP), scale=sum_scale),
            )
            .with_keys(keys)
        )
        table = query.release().collect().sort("day")
        state["query"] = query
        return Outcome(
            counts=table["len"].cast(pl.Float64).to_list(),
            sums=table["change"].cast(pl.Float64).to_list(),
            count_std=math.nan,
            sum_std=math.nan,
        )

    def summarise(outcome: Outcome) -> None:
        summary = state["query"].summarize()
        scales = dict(zip(summary["column"].to_list(), summary["scale"].to_list(), strict=True))
        kinds = set(summary["distribution"].to_list())
        outcome.count_std = discrete_laplace_std(scales["len"])
        outcome.sum_std = discrete_laplace_std(scales["change"])
        outcome.note = f"scales {scales['len']:g}/{scales['change']:g}, {'/'.join(sorted(kinds))}"

    return Job(run, summarise)


def prepare_pipelinedp(d: dict[str, np.ndarray], workdir: Path, args: argparse.Namespace) -> Job:
    import pipeline_dp

    state: dict[str, Any] = {}
    rows = list(
        zip(
            d["entry"].tolist(), d["ts"].tolist(), d["old"].tolist(), d["new"].tolist(), strict=True
        )
    )
    del d

    def change(row: tuple[int, int, float, float]) -> float:
        old, new = row[2], row[3]
        diff = (0.0 if new != new else new) - (0.0 if old != old else old)  # NaN = null = 0
        return float(round(max(-CLAMP, min(CLAMP, diff))))

    def run() -> Outcome:
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=args.epsilon, total_delta=0)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        params = pipeline_dp.AggregateParams(
            noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            metrics=[pipeline_dp.Metrics.COUNT, pipeline_dp.Metrics.SUM],
            max_contributions=K,
            min_value=-CLAMP,
            max_value=CLAMP,
        )
        extractors = pipeline_dp.DataExtractors(
            privacy_id_extractor=lambda r: r[0],
            partition_extractor=lambda r: (r[1] - START_US) // DAY_US,
            value_extractor=change,
        )
        result = engine.aggregate(rows, params, extractors, public_partitions=list(range(DAYS)))
        accountant.compute_budgets()
        by_day = dict(result)
        state["report"] = engine.explain_computations_report()
        return Outcome(
            counts=[by_day[i].count for i in range(DAYS)],
            sums=[by_day[i].sum for i in range(DAYS)],
            count_std=math.nan,
            sum_std=math.nan,
        )

    def summarise(outcome: Outcome) -> None:
        report = "\n".join(state["report"])
        params = [
            float(p) for p in re.findall(r"Laplace mechanism:\s+parameter=([0-9.eE+-]+)", report)
        ]
        outcome.count_std, outcome.sum_std = (laplace_std(p) for p in params)
        outcome.note = f"Laplace b {params[0]:g}/{params[1]:g}, random 3 per entry"

    return Job(run, summarise)


def prepare_numpy(d: dict[str, np.ndarray], workdir: Path, args: argparse.Namespace) -> Job:
    count_scale, sum_scale = _scales(args.epsilon)
    gen = np.random.default_rng()

    def run() -> Outcome:
        counts, sums = numpy_first_k_stats(d)
        return Outcome(
            counts=(counts + gen.laplace(0.0, count_scale, DAYS)).tolist(),
            sums=(sums + gen.laplace(0.0, sum_scale, DAYS)).tolist(),
            count_std=laplace_std(count_scale),
            sum_std=laplace_std(sum_scale),
            note="float Laplace, not secure",
        )

    return Job(run)


PREPARE = {
    "dpcr": prepare_dpcr,
    "dpcr-unsorted": prepare_dpcr,
    "opendp": prepare_opendp,
    "opendp-memory": prepare_opendp,
    "pipelinedp": prepare_pipelinedp,
    "numpy": prepare_numpy,
}


# ---------------------------------------------------------------------------------------- worker


def _status_kib(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    if not match:
        raise RuntimeError(f"{field} not in /proc/self/status")
    return int(match.group(1))


def _reset_peak() -> str:
    """Reset the resident high-water mark; say how peaks are measured."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        _status_kib("VmHWM")
        return "VmHWM"
    except (OSError, RuntimeError):
        return "ru_maxrss"


def worker(args: argparse.Namespace) -> None:
    workdir = Path(args.data)
    d = {name: np.load(workdir / f"{name}.npy") for name in COLUMNS}
    job = PREPARE[args.worker](d, workdir, args)
    del d
    gc.collect()
    method = _reset_peak()
    base_kib = _status_kib("VmRSS") if method == "VmHWM" else 0
    started = time.perf_counter()
    outcome = job.run()
    wall = time.perf_counter() - started
    if method == "VmHWM":
        peak_kib = _status_kib("VmHWM")
    else:
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if job.summarise is not None:
        job.summarise(outcome)
    print(
        json.dumps(
            {
                "wall": wall,
                "peak_mib": peak_kib / 1024,
                "run_mib": (peak_kib - base_kib) / 1024 if method == "VmHWM" else math.nan,
                "memory": method,
                **outcome.__dict__,
            }
        )
    )


# ---------------------------------------------------------------------------------------- parent


def rmse(released: list[float], exact: np.ndarray) -> float:
    diff = np.asarray(released, dtype=np.float64) - exact
    return float(np.sqrt(np.mean(diff**2)))


def run_tool(tool: str, n: int, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        tool,
        "--data",
        str(workdir),
        "--epsilon",
        str(args.epsilon),
        "--seed",
        str(args.seed),
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {args.timeout:g} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def fmt_rate(rate: float) -> str:
    return f"{rate / 1e6:.2f} M"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", nargs="+", type=float, default=[1e6, 1e7], help="changelog sizes")
    parser.add_argument("--skip-peers", action="store_true", help="run dpcr and bare numpy only")
    parser.add_argument(
        "--tools", default=",".join(DEFAULT_TOOLS), help=f"comma list of {ALL_TOOLS}"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilon", type=int, default=1, help="ε per entry (an integer here)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per tool run")
    parser.add_argument("--worker", choices=ALL_TOOLS, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = sorted(set(tools) - set(ALL_TOOLS))
    if unknown:
        parser.error(f"unknown tools {unknown}; choose from {ALL_TOOLS}")
    if args.skip_peers:
        tools = [t for t in tools if t not in PEERS]

    print(
        f"# throughput: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores, numpy {np.__version__}, ε = {args.epsilon} per entry, "
        f"k = {K}, clamp = ±{CLAMP}, {DAYS} days, seed {args.seed}",
        flush=True,
    )
    rows: list[tuple[str, ...]] = []
    for n in (int(x) for x in args.n):
        with tempfile.TemporaryDirectory(prefix="dpcr-throughput-") as tmp:
            workdir = Path(tmp)
            started = time.perf_counter()
            data = generate(n, args.seed)
            generated = time.perf_counter() - started
            for name in COLUMNS:
                np.save(workdir / f"{name}.npy", data[name])
            counts, sums = numpy_first_k_stats(data)
            kept = int(counts.sum())
            del data
            print(
                f"# N = {n:,}: generated in {generated:.1f} s; {n // MUTATIONS_PER_ENTRY:,} "
                f"entries, {kept:,} mutations kept by first-{K}",
                flush=True,
            )
            for tool in tools:
                r = run_tool(tool, n, workdir, args)
                if "error" in r:
                    print(f"#   {tool}: {r['error']}", flush=True)
                    rows.append((tool, f"{n:.0e}", "—", "—", "—", "—", "—", r["error"]))
                    continue
                if "exact_counts" in (r.get("extra") or {}):
                    same = (
                        r["extra"]["exact_counts"] == counts.tolist()
                        and r["extra"]["exact_sums"] == sums.tolist()
                    )
                    r["note"] += f", exact stats {'match' if same else 'DIFFER from'} reference"
                row = (
                    tool,
                    f"{n:.0e}".replace("e+0", "e"),
                    f"{r['wall']:.2f}",
                    fmt_rate(n / r["wall"]),
                    f"{r['peak_mib']:,.0f} (+{r['run_mib']:,.0f})",
                    f"{r['count_std']:.2f} / {r['sum_std']:.0f}",
                    f"{rmse(r['counts'], counts):.2f} / {rmse(r['sums'], sums):.0f}",
                    r["note"],
                )
                print("#   " + " | ".join(row), flush=True)
                rows.append(row)

    header = (
        "tool",
        "N",
        "wall s",
        "mutations/s",
        "peak MiB (+run)",
        "noise std count / sum",
        "RMSE count / sum",
        "notes",
    )
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
