"""The next state version of an incremental step on Spark: what the rows that settle leave for
later runs (see :mod:`dpcr.engines.spark._step` and :mod:`dpcr.engines.spark._state`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dpcr.bounding.constraints import Hybrid
from dpcr.engines.base import BoundingReport
from dpcr.engines.spark import _open, _state
from dpcr.engines.spark._records import RECORD, f_type, is_open, machines, raw_pass
from dpcr.engines.spark._settle import Outcome, _settles, settled_count
from dpcr.engines.state import SEP

if TYPE_CHECKING:
    from dpcr.engines.spark._step import Consumed, Step

_ELIGIBLE = ("valid", "double_insert:op", "update_before_insert:op", "delete_before_insert:op")


def _units(step: Step, settling: DataFrame) -> DataFrame:
    """Per unit of the settling rows: rows so far, first time, class, first failures."""
    cuts = []
    for j in range(len(machines(step.request.constraint))):
        bad = F.col(f"bad{j}")
        first = F.min(F.when(bad > 0, 4 * F.col("rank_u") + bad))
        if step.head is not None:
            first = F.least(first, F.first(f"s_cut{j}"))
        cuts.append(first.cast("long").alias(f"cut{j}"))
    return settling.groupBy("unit").agg(
        F.max("rank_u").cast("long").alias("n"),
        F.first("first_ts").cast("long").alias("first_ts"),
        F.first("cls").alias("cls"),
        *cuts,
    )


def _entries(step: Step, settling: DataFrame) -> DataFrame:
    """Per (unit, entry) of the settling rows: rows so far, and f of every query and the
    state of every machine at its last row."""
    queries, nm = step.request.queries, len(machines(step.request.constraint))
    fields = [f"f{i}" for i in range(len(queries))]
    for j in range(nm):
        fields += [f"st{j}", f"comp{j}", f"cn{j}"]
    last = F.max(F.struct(F.col("rank_u").alias("_r"), *[F.col(c) for c in fields]))
    ne = F.max("rank_e") if nm else F.lit(0)
    casts = {f"comp{j}": "int" for j in range(nm)} | {f"st{j}": "string" for j in range(nm)}
    casts |= {f"f{i}": "string" for i, q in enumerate(queries) if is_open(q)}
    grouped = settling.groupBy("unit", "entry").agg(ne.cast("long").alias("ne"), last.alias("_l"))
    columns = [F.col(f"_l.{c}").cast(casts.get(c, "long")).alias(c) for c in fields]
    return grouped.select("unit", "entry", "ne", *columns)


def _live(step: Step, tagged: DataFrame) -> DataFrame:
    """Per (unit, entry): its last settling insert or delete (valid, or refused by liveness
    alone), in (ts, seq, record) order."""
    op = F.col("op")
    rows = tagged.where(F.col("status").isin(*_ELIGIBLE) & (op != "update") & _settles(step))
    last = F.max(F.struct("ts", "seq", "record", (op == "insert").alias("live")))
    return (
        rows.groupBy("unit", "entry")
        .agg(last.alias("m"))
        .select("unit", "entry", F.col("m.live").alias("live"), F.col("m.record").alias("record"))
    )


def _pending(step: Step, outcome: Outcome) -> DataFrame:
    """The mutations that do not settle and may still count (they passed phases 1-2 and are
    not frozen), with their raw records when a quarantine file may need them."""
    rows = outcome.tagged.where(F.col("status").isin(*_ELIGIBLE) & ~_settles(step))
    if step.request.on_error == "quarantine":
        records = rows.where(~F.col("pend")).select(F.col("record").alias(RECORD)).distinct()
        raws = (
            outcome.src.join(records, RECORD, "left_semi")
            .mapInArrow(raw_pass(step.spec), "record bigint, raw string")
            .withColumnRenamed("raw", "_raw")
        )
        rows = rows.join(raws, "record", "left").withColumn(
            "raw", F.coalesce(F.col("raw"), F.col("_raw"))
        )
    return rows.select(*outcome.stored)


def _add(c: dict[str, int], key: str, value: int) -> None:
    if value:
        c[key] = c.get(key, 0) + int(value)


def _counters(
    step: Step, outcome: Outcome, report: tuple[BoundingReport, dict[str, int], dict[str, int]]
) -> dict[str, int]:
    """The state's counters with this run's settling rows and new records added."""
    c = dict(step.head.counters) if step.head is not None else {}
    for key, n in (
        ("records", outcome.records),
        ("split", outcome.split),
        ("late", outcome.by_status.get("late", 0)),
    ):
        _add(c, key, n)
    for reason, n in outcome.final.items():
        _add(c, "tombstones" if reason == "tombstone" else f"q:{reason}", n)
    settled = outcome.settled
    _add(c, "valid", settled["valid"])
    for key, pick in (("min_ts", min), ("max_ts", max)):
        if settled[key] is not None:
            c[key] = pick(c.get(key, settled[key]), int(settled[key]))
    for col, present in zip(step.spec.wanted, settled["present"], strict=True):
        if present:
            c[f"p:{col}"] = 1
    r, nn, uk = report
    _add(c, "units", r.units)
    _add(c, "mutations", r.mutations)
    _add(c, "kept", r.kept)
    for reason, n in r.dropped.items():
        _add(c, f"d:{reason}", n)
    for reason, moves in r.dropped_moves.items():
        for move, n in moves.items():
            _add(c, f"mv:{reason}{SEP}{move}", n)
    for name, n in nn.items():
        _add(c, f"nn:{name}", n)
    for name, n in uk.items():
        _add(c, f"uk:{name}", n)
    if isinstance(step.request.constraint, Hybrid):
        for cls, counts in r.by_class.items():
            _add(c, f"u:{cls}", counts["units"])
            _add(c, f"c:kept:{cls}", counts["kept"])
            _add(c, f"c:dropped:{cls}", counts["dropped"])
    return c


def write_state(
    step: Step,
    outcome: Outcome,
    bounded: DataFrame | None,
    consumed: Consumed,
    run: tuple[dict[str, dict[str, int]], dict[str, np.ndarray]],
    clamps: list[tuple[int, int, int]],
    report: tuple[BoundingReport, dict[str, int], dict[str, int]],
    open_keys: dict[int, dict[str, int]],
) -> _state.SparkPending:
    """Write the next version (everything but its head) and return it, to be committed.
    ``run``: this run's candidate keys (open queries) and totals of intervals
    ``settled_old + 1 ..``; ``open_keys``: the candidate keys the state holds."""
    spark, folder, head, version = step.spark, step.ref.folder, step.head, step.version
    nm = len(machines(step.request.constraint))
    run_values = run[1]
    tables = dict(head.tables) if head is not None else {}
    rows = dict(head.rows) if head is not None else {}
    cuts = "".join(f", cut{j} bigint" for j in range(nm))
    fs = "".join(f", f{i} {f_type(q)}" for i, q in enumerate(step.request.queries))
    ms = "".join(f", st{j} string, comp{j} int, cn{j} bigint" for j in range(nm))
    deltas: dict[str, tuple[DataFrame, str]] = {}
    if step.t_new is not None:
        if bounded is not None:
            settling = bounded.where(F.col("ts") <= step.t_new)
            deltas["units"] = (
                _units(step, settling),
                f"unit string, n bigint, first_ts bigint, cls string{cuts}",
            )
            deltas["entries"] = (
                _entries(step, settling),
                f"unit string, entry string, ne bigint{fs}{ms}",
            )
        deltas["live"] = (
            _live(step, outcome.tagged),
            "unit string, entry string, live boolean, record bigint",
        )
    if outcome.explicit:
        new_keys = outcome.tagged.where(~F.col("pend") & F.col("chk").isNull())
        deltas["keys"] = (
            new_keys.select("unit", "entry", "seq", "record"),
            "unit string, entry string, seq bigint, record bigint",
        )
    for table, (delta, schema) in deltas.items():
        tables[table], rows[table] = _state.write_table(
            spark, folder, head, version, table, delta, schema
        )
    target = _state.version_dir(folder, version) / "pending"
    _pending(step, outcome).write.mode("overwrite").parquet(str(target))
    tables["qlines"] = _state.write_qlines(folder, head, version, outcome.lines)
    settled_new = settled_count(step)
    first_run = step.settled_old + 1
    totals = [t for t in (head.totals if head is not None else ()) if t[1] < first_run]
    for qi, q in enumerate(step.request.queries):
        if is_open(q):  # (kept by key text: okeys and ototals)
            continue
        for iv in range(first_run, settled_new + 1):
            totals += [
                (qi, iv, k, int(v)) for k, v in enumerate(run_values[q.name][iv - first_run]) if v
            ]
    tables |= _open.write_state(folder, head, version, step.request.queries, open_keys, run,
                                first=first_run, settled=settled_new)  # fmt: skip
    new_head = _state.Head(
        version=version,
        store=None,
        fingerprint=step.ref.fingerprint,
        spec=_state.spec_digest(step.request),
        lines=consumed.lines,
        bytes=consumed.bytes,
        files=consumed.files,
        explicit=outcome.explicit,
        counters=_counters(step, outcome, report),
        totals=tuple(totals),
        clamps=tuple(c for c in clamps if c[1] <= settled_new),
        settled=settled_new,
        times=_state.times_digest(step.times[:settled_new]),
        tables=tables,
        rows=rows,
        pending=True,
    )
    return _state.SparkPending(folder=folder, head=new_head)
