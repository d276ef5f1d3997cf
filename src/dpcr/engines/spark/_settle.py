"""The second half of an incremental step on Spark (:mod:`dpcr.engines.spark._step`): counts,
errors and quarantine lines of the validated rows, bounding continued from the seeds, the
result of the whole source, and the next state version."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dpcr.bounding.constraints import Hybrid
from dpcr.changelog import FrozenPoint
from dpcr.engines.base import Aggregates, BoundingReport
from dpcr.engines.spark import _open, _state
from dpcr.engines.spark._bound import Report, _check_histogram_keys, _totals, bound, reports
from dpcr.engines.spark._load import (
    Numbered,
    quarantine_text,
    raise_first,
    reason_counts,
    status_counts,
)
from dpcr.engines.spark._records import (
    RECORD,
    error_histograms,
    f_type,
    is_open,
    machines,
    raw_pass,
)
from dpcr.engines.state import with_counters
from dpcr.queries import GroupedSum, Histogram, Sum

if TYPE_CHECKING:
    from dpcr.engines.base import EngineResult
    from dpcr.engines.spark._step import Consumed, Step

_LIVENESS = ("double_insert", "update_before_insert", "delete_before_insert")


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """The validated rows of a step (``tagged``: the new records' mutations and the pending
    ones, with their status) and their counts: per status over all of them; ``records`` and
    ``split`` of the new records; the valid rows' time range, those after the clock and the
    named columns they show; and over the rows that settle (dated by the step's new
    ``t_last``): the valid ones (``settled``: count, range, columns) and the final rejections
    (``final``: per reason). ``lines``: this run's final quarantine lines."""

    src: DataFrame
    tagged: DataFrame
    by_status: dict[str, int]
    records: int
    split: int
    min_ts: int | None
    max_ts: int | None
    due: int
    present: tuple[bool, ...]
    settled: dict[str, Any]
    final: dict[str, int]
    points: list[FrozenPoint]
    explicit: bool
    stored: tuple[str, ...]
    lines: tuple[_state.QLine, ...] = ()


def _settles(step: Step) -> Any:
    t = step.t_new
    return F.lit(False) if t is None else F.coalesce(F.col("ts") <= t, F.lit(False))


def summarize(
    step: Step, numbered: Numbered, tagged: DataFrame, points: list[FrozenPoint], explicit: bool
) -> Outcome:
    """One pass of counts over ``tagged`` (see :class:`Outcome`); ``explicit``: earlier
    records had sequence numbers of their own (the outcome's says whether any record has).
    """
    spec, clock = step.spec, int(step.request.clock)
    fresh = ~F.col("pend")
    # ("x": a new record whose sequence number is its own, not its record number)
    explicit_seq = fresh & F.col("chk").isNull() & (F.col("seq") != F.col("record"))
    rows = (
        tagged.groupBy("status", _settles(step).alias("settles"))
        .agg(*status_counts(spec, clock, fresh), F.max(explicit_seq).alias("x"))
        .collect()
    )
    by_status: dict[str, int] = {}
    final: dict[str, int] = {}
    records = split = due = 0
    valid_rows = [r for r in rows if r["status"] == "valid"]
    settled_rows = [r for r in valid_rows if r["settles"]]
    for r in rows:
        status = str(r["status"])
        by_status[status] = by_status.get(status, 0) + int(r["n"])
        records += int(r["records"])
        split += int(r["split"])
        reason = status.split(":", 1)[0]
        if status not in ("valid", "late") and (reason not in _LIVENESS or r["settles"]):
            final[reason] = final.get(reason, 0) + int(r["n"])
    due = sum(int(r["due"]) for r in valid_rows)
    stored = tuple(c for c in numbered_columns(tagged) if c not in ("iv", "chk", "value", "pend"))
    outcome = Outcome(
        src=numbered.frame,
        tagged=tagged,
        by_status=by_status,
        records=records,
        split=split,
        min_ts=_extreme(valid_rows, "min_ts", min),
        max_ts=_extreme(valid_rows, "max_ts", max),
        due=due,
        present=_present(valid_rows, len(spec.wanted)),
        settled={
            "valid": sum(int(r["n"]) for r in settled_rows),
            "min_ts": _extreme(settled_rows, "min_ts", min),
            "max_ts": _extreme(settled_rows, "max_ts", max),
            "present": _present(settled_rows, len(spec.wanted)),
        },
        final=final,
        points=points,
        explicit=explicit or any(bool(r["x"]) for r in rows),
        stored=stored,
    )
    return outcome


#: The columns of a validated frame that are not the per-record pass's (added by the step).
_ADDED = ("status", "other", "_first", "raw")


def numbered_columns(tagged: DataFrame) -> list[str]:
    """The per-record pass's columns of ``tagged`` and ``raw`` (what a pending row keeps)."""
    return [c for c in tagged.columns if c not in _ADDED or c == "raw"]


def _extreme(rows: list[Any], name: str, pick: Any) -> int | None:
    values = [int(r[name]) for r in rows if r[name] is not None]
    return pick(values) if values else None


def _present(rows: list[Any], n: int) -> tuple[bool, ...]:
    return tuple(any(bool(r[f"p{c}"]) for r in rows) for c in range(n))


def errors(step: Step, outcome: Outcome) -> Outcome:
    """Raise the first error (``on_error = "raise"``), or write the quarantine file: the final
    lines of earlier runs and this run's, in record order."""
    request = step.request
    counts = reason_counts(outcome.by_status)
    counts.pop("tombstone", None)
    bad = outcome.tagged.where(~F.col("status").isin("valid", "late"))
    if request.on_error == "raise" and counts:
        raise_first(step.spark, outcome.src, step.spec, bad, step.spec.source)
    if request.on_error != "quarantine":
        return outcome
    from dataclasses import replace

    from dpcr._fs import ensure_dir, write_atomic

    lines = _lines(step, outcome, bad, sum(counts.values())) if counts else []
    final = tuple((r, p, line) for r, p, line, is_final in lines if is_final)
    outcome = replace(outcome, lines=final)
    path = request.quarantine_path
    if path is None:
        return outcome
    import heapq

    earlier = _state.quarantine_lines(step.ref.folder, step.head)
    every = heapq.merge(earlier, ((r, p, line) for r, p, line, _f in lines))

    def write(out: Any) -> None:
        for _r, _p, line in every:
            out.write(line)

    ensure_dir(path.parent, 0o700, follow=True)
    write_atomic(path, write, mode=0o600)
    return outcome


def _lines(
    step: Step, outcome: Outcome, bad: DataFrame, count: int
) -> list[tuple[int, int, str, bool]]:
    """This run's quarantine lines (record, part, line, final), in record order (``count``
    rejected mutations: few are sorted on the driver, many by Spark and streamed)."""
    spec, source = step.spec, step.spec.source
    records = bad.where(~F.col("pend")).select(F.col("record").alias(RECORD)).distinct()
    raws = (
        outcome.src.join(records, RECORD, "left_semi")
        .mapInArrow(raw_pass(spec), "record bigint, raw string")
        .withColumnRenamed("raw", "_raw")
    )
    joined = (
        bad.join(raws, "record", "left")
        .withColumn("raw", F.coalesce(F.col("raw"), F.col("_raw")))
        .withColumn("_settles", _settles(step))
    )
    if count <= 100_000:
        rows: Any = sorted(joined.collect(), key=lambda r: (int(r["record"]), int(r["part"])))
    else:
        rows = joined.orderBy("record", "part").toLocalIterator()
    out = []
    for r in rows:
        line = quarantine_text(r, str(r["raw"]), source, spec.unit_column)
        reason = str(r["status"]).partition(":")[0]
        final = reason not in _LIVENESS or bool(r["_settles"])
        out.append((int(r["record"]), int(r["part"]), line, final))
    return out


def _seeded(step: Step, valid: DataFrame) -> DataFrame:
    """``valid`` with the seed columns of its units and entries (see
    :func:`dpcr.engines.spark._bound.bound`)."""
    head, nm = step.head, len(machines(step.request.constraint))
    if head is None:
        return valid
    units = valid.select("unit").distinct()
    cuts = "".join(f", cut{j} bigint" for j in range(nm))
    u = _state.read_seeds(
        step.spark,
        step.ref.folder,
        head,
        "units",
        f"unit string, n bigint, first_ts bigint, cls string{cuts}",
        units,
    )
    fs = "".join(f", f{i} {f_type(q)}" for i, q in enumerate(step.request.queries))
    ms = "".join(f", st{j} string, comp{j} int, cn{j} bigint" for j in range(nm))
    e = _state.read_seeds(
        step.spark,
        step.ref.folder,
        head,
        "entries",
        f"unit string, entry string, ne bigint{fs}{ms}",
        units,
    )
    u = u.select("unit", *[F.col(c).alias(f"s_{c}") for c in u.columns if c != "unit"])
    e = e.select(
        "unit",
        "entry",
        *[F.col(c).alias(f"s_{c}") for c in e.columns if c not in ("unit", "entry")],
    )
    return valid.join(u, "unit", "left").join(e, ["unit", "entry"], "left")


def bound_run(step: Step, tagged: DataFrame) -> DataFrame | None:
    """This run's valid rows up to the last release time, bounded continuing every history
    (persisted); None when there is no release time."""
    if not step.times:
        return None
    queries, constraint = step.request.queries, step.request.constraint
    valid = tagged.where((F.col("status") == "valid") & (F.col("ts") <= int(step.times[-1])))
    bounded = bound(_seeded(step, valid), queries, constraint, seeded=step.head is not None)
    nq, ms = len(queries), machines(constraint)
    keep = [
        "unit",
        "entry",
        "record",
        "op",
        "kept",
        "reason",
        "rank_u",
        "cls",
        "iv",
        "ts",
        "first_ts",
    ]
    keep += [f"f{i}" for i in range(nq)] + [f"p{i}" for i in range(nq)]
    keep += [f"nn{i}" for i, q in enumerate(queries) if isinstance(q, Sum)]
    keep += [f"hv{i}" for i in error_histograms(tuple(queries))]
    if step.head is not None:  # (the keys the seeds hold are candidates too)
        keep += [f"s_f{i}" for i, q in enumerate(queries) if is_open(q)]
    if ms:
        keep += ["mv", "rank_e"]
        for j in range(len(ms)):
            keep += [f"st{j}", f"comp{j}", f"cn{j}", f"bad{j}"]
            keep += [f"s_cut{j}"] if step.head is not None else []
    return step.keep(bounded.select(*keep))


def combine(
    step: Step,
    run: BoundingReport,
    nn: dict[str, int],
    uk: dict[str, int],
    clamped: dict[str, int],
) -> BoundingReport:
    """The bounding report of the whole source: the state's counters plus this run's rows."""
    c = step.head.counters if step.head is not None else {}
    queries = step.request.queries
    dropped, moves = with_counters(run.dropped, run.dropped_moves, c)
    by_class: dict[str, dict[str, int]] = {}
    if isinstance(step.request.constraint, Hybrid):
        old_units = {k[2:]: v for k, v in c.items() if k.startswith("u:")}
        for cls in sorted(set(run.by_class) | set(old_units)):
            new = run.by_class.get(cls, {})
            by_class[cls] = {
                "units": old_units.get(cls, 0) + new.get("units", 0),
                "kept": c.get(f"c:kept:{cls}", 0) + new.get("kept", 0),
                "dropped": c.get(f"c:dropped:{cls}", 0) + new.get("dropped", 0),
            }

    def plus(prefix: str, new: dict[str, int], kind: type | tuple[type, ...]) -> dict[str, int]:
        out = {}
        for q in queries:
            total = c.get(prefix + q.name, 0) + new.get(q.name, 0)
            if isinstance(q, kind) and total:
                out[q.name] = total
        return out

    return BoundingReport(
        units=c.get("units", 0) + run.units,
        mutations=c.get("mutations", 0) + run.mutations,
        kept=c.get("kept", 0) + run.kept,
        dropped={k: v for k, v in sorted(dropped.items()) if v},
        dropped_moves={k: dict(sorted(m.items())) for k, m in sorted(moves.items())},
        clamped=clamped,
        non_numeric=plus("nn:", nn, Sum),
        unknown_keys=plus("uk:", uk, (Histogram, GroupedSum)),
        by_class=by_class,
    )


def settle(
    step: Step, outcome: Outcome, consumed: Consumed
) -> tuple[EngineResult, _state.SparkPending]:
    """Bound and aggregate this run's rows; the result of the whole source; the next state
    version (written, not yet current)."""
    from dpcr.engines.base import EngineResult
    from dpcr.engines.spark._step import load_report, result_values

    request = step.request
    queries = list(request.queries)
    first_run = step.settled_old + 1
    width = max(0, len(step.times) - first_run + 1)
    per_interval: dict[tuple[int, int], int] = {}
    empty = BoundingReport(units=0, mutations=0, kept=0, dropped={})
    parts: tuple[Report, Report] = (empty, {}, {}), (empty, {}, {})
    bounded = bound_run(step, outcome.tagged)
    rows: list[Any] = []
    if bounded is not None:
        settles = F.lit(False) if step.t_new is None else F.col("ts") <= step.t_new
        parts = reports(bounded, queries, request.constraint, settles)
        _check_histogram_keys(bounded, queries)
        if width:
            rows, per_interval = _totals(bounded, queries, first_run, request.unit_is_entry)
    found = _open.candidates(bounded, queries, seeded=step.head is not None)
    run_values = _open.fill(rows, queries, first_run, width, _open.columns(queries, found))
    lo, n = request.first_interval, len(request.release_times)
    clamps = _clamps(step, per_interval, first_run)
    clamped = {queries[qi].name: 0 for qi, iv, _c in clamps if lo <= iv <= n}
    for qi, iv, count in clamps:
        if lo <= iv <= n:
            clamped[queries[qi].name] += count
    report = combine(step, *parts[0], {k: v for k, v in clamped.items() if v})
    load = load_report(step, outcome)
    c = step.head.counters if step.head is not None else {}
    missing: tuple[str, ...] = ()
    if load.valid:
        present = [
            outcome.present[i] or bool(c.get(f"p:{col}")) for i, col in enumerate(step.spec.wanted)
        ]
        missing = tuple(col for col, ok in zip(step.spec.wanted, present, strict=True) if not ok)
    lows = [v for v in (c.get("min_ts"), outcome.min_ts) if v is not None]
    highs = [v for v in (c.get("max_ts"), outcome.max_ts) if v is not None]
    values = result_values(step, run_values, first_run)
    opened = _open.read_state(step.ref.folder, step.head, lo=lo, first=first_run)
    keys, open_values = _open.merged(queries, opened, found, run_values, lo=lo, hi=n,
                                     first=first_run)  # fmt: skip
    values.update(open_values)  # (in the queries' order: their places are there)
    agg = Aggregates(first_interval=lo, last_interval=n, values=values, report=report,
                     candidates=keys)  # fmt: skip
    result = EngineResult(
        load=load,
        aggregates=agg,
        min_ts=min(lows) if lows else None,
        max_ts=max(highs) if highs else None,
        not_yet_due=outcome.due,
        missing_columns=missing,
    )
    from dpcr.engines.spark._write import write_state

    pending = write_state(step, outcome, bounded, consumed, (found, run_values), clamps,
                          parts[1], opened.keys)  # fmt: skip
    return result, pending


def _clamps(
    step: Step, per_interval: dict[tuple[int, int], int], first_run: int
) -> list[tuple[int, int, int]]:
    """(q, iv, clamped unit-intervals) of every interval: settled ones from the state."""
    out = [c for c in (step.head.clamps if step.head is not None else ()) if c[1] < first_run]
    out += [(q, iv, n) for (q, iv), n in sorted(per_interval.items()) if n]
    return out


def settled_count(step: Step) -> int:
    """The base intervals that end by the step's new ``t_last``."""
    t = step.t_new
    return bisect.bisect_right(step.times, t) if t is not None else 0
