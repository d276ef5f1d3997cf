"""Incremental bounding on Spark (a prototype): per-unit state kept between runs, so a run reads
only the mutations of newly closed intervals, never the whole history again.

The state after a run is two small Parquet tables under ``state_dir/v{n}/``:

* ``units``: per privacy unit, the mutations seen so far (``seen``: at-most-k ranks continue from
  it) and its first timestamp (``first_ts``: time-bounded windows start there);
* ``entries``: per (unit, entry), every query's f of the last *kept* mutation (the next kept
  mutation's change is f(after) minus it).

A run bounds the batch against the state -- rank = seen + rank within the batch; the unit's first
timestamp is the state's or, for a new unit, the batch's first -- aggregates exactly as
:func:`dpcr.engines.spark._bound.aggregate`, and writes version ``n + 1`` next to the old one. The
version becomes current only through :func:`commit` (an atomic rename of ``CURRENT``), which the
release loop calls after its store committed the released nodes of the batch: a run that dies in
between leaves ``v{n+1}`` unreferenced, and the next run starts again from ``v{n}`` with the same
batch, so each mutation changes the state exactly once. (In production the store's transaction
would record ``n + 1`` itself, making the two one commit.)

Limits of the prototype: at-most-k and time-bounded constraints (not state machines or hybrid
classes); batches must be whole closed intervals in time order (mutations arriving for an
interval already released are late: the loader freezes their (unit, entry) and never passes them
on); validation runs on the batch alone, so a batch's liveness check does not yet see the
entry's earlier inserts and deletes (a third state table, last insert/delete per (unit, entry),
is the remaining step).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from dpcr.bounding.constraints import AtMostK, Constraint, TimeBounded
from dpcr.bounding.state_machine import StateMachine
from dpcr.engines.spark._bound import _ORDER, _totals
from dpcr.errors import ConfigError
from dpcr.queries import Histogram, Query

CURRENT = "CURRENT"


def current(state_dir: Path) -> int:
    """The committed state version (0: no state yet)."""
    pointer = state_dir / CURRENT
    return int(pointer.read_text().strip()) if pointer.exists() else 0


def commit(state_dir: Path, version: int) -> None:
    """Make ``version`` the current state (atomic: write a temporary file, then rename)."""
    tmp = state_dir / f"{CURRENT}.tmp"
    tmp.write_text(f"{version}\n")
    tmp.replace(state_dir / CURRENT)


def _previous(
    spark: SparkSession, state_dir: Path, version: int, queries: Sequence[Query]
) -> tuple[DataFrame, DataFrame]:
    fs = ", ".join(f"f{i} bigint" for i in range(len(queries)))
    if version == 0:
        units = spark.createDataFrame([], "unit string, seen bigint, first_ts bigint")
        entries = spark.createDataFrame([], f"unit string, entry string, {fs}")
        return units, entries
    base = state_dir / f"v{version}"
    return (
        spark.read.parquet(str(base / "units")),
        spark.read.parquet(str(base / "entries")),
    )


def aggregate_increment(
    spark: SparkSession,
    batch: DataFrame,
    *,
    state_dir: Path,
    queries: Sequence[Query],
    constraint: Constraint,
    release_times: Sequence[int],
    first_interval: int,
    unit_is_entry: bool,
) -> tuple[dict[str, np.ndarray], int]:
    """Totals of intervals ``first_interval .. len(release_times)`` from ``batch`` (validated
    mutations of those intervals, as :func:`dpcr.engines.spark._load.validate` tags them) and
    the state; returns them with the new state version (not yet committed: see
    :func:`commit`)."""
    if isinstance(constraint, StateMachine) or not isinstance(constraint, AtMostK | TimeBounded):
        raise ConfigError(
            f"incremental bounding supports at_most_k and time_bounded constraints so far, "
            f"got {constraint!r}; use SparkEngine.aggregate for a full run"
        )
    version = current(state_dir)
    units, entries = _previous(spark, state_dir, version, queries)
    lo = int(release_times[first_interval - 2]) if first_interval > 1 else None
    rows = batch.where((F.col("status") == "valid") & (F.col("ts") <= int(release_times[-1])))
    if lo is not None:
        rows = rows.where(F.col("ts") > lo)
    rows = rows.join(units, "unit", "left")
    prev = entries.select(
        "unit", "entry", *[F.col(f"f{i}").alias(f"s{i}") for i in range(len(queries))]
    )
    rows = rows.join(prev, ["unit", "entry"], "left")
    ordered = Window.partitionBy("unit").orderBy(*_ORDER)
    rank = F.coalesce(F.col("seen"), F.lit(0)) + F.row_number().over(ordered)
    first_ts = F.coalesce(F.col("first_ts"), F.min("ts").over(Window.partitionBy("unit")))
    rows = rows.withColumn("rank_u", rank).withColumn("first_ts", first_ts)
    if isinstance(constraint, AtMostK):
        rows = rows.withColumn("kept", F.col("rank_u") <= constraint.k)
    else:
        rows = rows.withColumn("kept", F.col("ts") - F.col("first_ts") <= constraint.bound)
    by_entry = Window.partitionBy("unit", "entry").orderBy(*_ORDER)
    for i, q in enumerate(queries):
        default = F.lit(-1 if isinstance(q, Histogram) else 0).cast("long")
        carried = F.coalesce(F.col(f"s{i}"), default)
        rows = rows.withColumn(f"p{i}", F.coalesce(F.lag(f"f{i}").over(by_entry), carried))
    rows = rows.cache()
    try:
        width = len(release_times) - first_interval + 1
        values = {q.name: np.zeros((width, len(q.keys)), dtype=np.int64) for q in queries}
        totals, _clamped = _totals(rows, queries, first_interval, unit_is_entry)
        for r in totals:
            name = queries[int(r["q"])].name
            values[name][int(r["iv"]) - first_interval, int(r["key"])] += int(r["t"])
        _write_state(rows, units, entries, state_dir / f"v{version + 1}", len(queries))
    finally:
        rows.unpersist()
    return values, version + 1


def _write_state(
    rows: DataFrame, units: DataFrame, entries: DataFrame, target: Path, nq: int
) -> None:
    seen = rows.groupBy("unit").agg(
        F.count(F.lit(1)).alias("n"), F.min("first_ts").alias("batch_first")
    )
    new_units = units.join(seen, "unit", "full").select(
        "unit",
        (F.coalesce(F.col("seen"), F.lit(0)) + F.coalesce(F.col("n"), F.lit(0))).alias("seen"),
        F.coalesce(F.col("first_ts"), F.col("batch_first")).alias("first_ts"),
    )
    last = Window.partitionBy("unit", "entry").orderBy(*[F.col(c).desc() for c in _ORDER])
    kept = (
        rows.where(F.col("kept"))
        .withColumn("_last", F.row_number().over(last))
        .where(F.col("_last") == 1)
        .select("unit", "entry", *[f"f{i}" for i in range(nq)])
    )
    new_entries = entries.join(kept.select("unit", "entry"), ["unit", "entry"], "left_anti")
    new_entries = new_entries.unionByName(kept)
    new_units.write.mode("overwrite").parquet(str(target / "units"))
    new_entries.write.mode("overwrite").parquet(str(target / "entries"))
