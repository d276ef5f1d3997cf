"""An incremental step on Spark: read only what is new, continue every history from the state.

A release's *settled* rows are its mutations dated at or before ``t_last``, the end of the last
released interval: no later record can change their verdicts, ranks or contributions (a record
dated there is late and freezes its (unit, entry), :mod:`dpcr.changelog._resume`). The state
(:mod:`dpcr.engines.spark._state`) keeps what later rows need of them -- the tables the DuckDB
engine keeps (:mod:`dpcr.engines.incremental`):

=========== ================================================================================
table       rows
=========== ================================================================================
pending     mutations that passed phases 1-2 dated after ``t_last`` (judged again every run)
live        per (unit, entry): its last settled insert or delete (liveness seed)
keys        per (unit, entry, seq): its records (explicit sequence numbers only)
units       per unit: settled rows ``n``, first time, class, first state-machine failure
entries     per (unit, entry): settled rows, last f per query, last state per machine
okeys       per open query: the candidate keys settled rows hold, with their first interval
ototals     per open query: exact change per settled base interval and key (its text)
qlines      quarantine lines whose verdict is final
head        the reports' counters, the exact totals and clamps of the settled base intervals
=========== ================================================================================

A step reads the records after those the store consumed (the lines after its byte position;
the rows of a Parquet file after those consumed; the new part files of a Parquet directory),
runs the per-record pass on them alone, joins the pending rows and the seeds of the units they
touch, and validates and bounds them exactly as a run over the whole source would: each
mutation gets the same verdict, rank and contribution, so the release is that of a full run.
It then writes the next state version (what the run settles: rows dated by the end of the
last interval it releases), current only once the store has committed.

A state that does not match the store, or a step that cannot be judged from the state alone
(sequence numbers that become explicit), reads the whole source and writes a fresh state.
"""

from __future__ import annotations

import bisect
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from dpcr.changelog import REASONS, FrozenPoint, JsonlSource, LoadReport, ParquetSource, describe
from dpcr.engines.base import AggregateRequest, EngineResult, EngineStateRef
from dpcr.engines.spark import _state
from dpcr.engines.spark._load import (
    Numbered,
    _boundary,
    apply_points,
    check_counts,
    freeze_points,
    mutation_frame,
    read_numbered,
    reason_counts,
    tag,
)
from dpcr.engines.spark._records import RecordSpec, is_open
from dpcr.engines.spark._settle import Outcome, errors, settle, summarize
from dpcr.errors import StoreError

#: New records (bytes as stored) per shuffle partition of a step that continues a state.
PARTITION_BYTES = 64 << 20

_LIVENESS = ("double_insert:op", "update_before_insert:op", "delete_before_insert:op")


class NeedsFullRead(Exception):
    """The new records cannot be judged from the state alone: read the whole source."""


@dataclass
class Step:
    """What one step works with (filled as it goes)."""

    spark: SparkSession
    request: AggregateRequest
    ref: EngineStateRef
    spec: RecordSpec
    head: _state.Head | None  # None: the whole source is read, from an empty state
    version: int
    times: tuple[int, ...]  # the request's release times and the settling ones
    settled_old: int  # base intervals whose totals the state holds
    cached: list[DataFrame] = field(default_factory=list)
    cleanup: list[Path] = field(default_factory=list)
    partitions: str | None = None  # the session's shuffle partitions, while a step narrows them

    def narrow(self, new_bytes: int) -> None:
        """A step that continues a state shuffles what is new (and the few rows of the state
        it touches), not the history: one shuffle partition per :data:`PARTITION_BYTES` of
        new records, at most the session's setting (a task per empty partition costs more
        than the rows)."""
        if self.head is None:
            return
        conf = self.spark.conf
        self.partitions = str(conf.get("spark.sql.shuffle.partitions"))
        wanted = max(1, -(-new_bytes // PARTITION_BYTES))
        conf.set("spark.sql.shuffle.partitions", str(min(int(self.partitions), wanted)))

    def keep(self, frame: DataFrame) -> DataFrame:
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(frame)
        return frame

    @property
    def t_last_old(self) -> int | None:
        late = self.request.exclude_late
        return None if late is None else int(late[1])

    @property
    def t_new(self) -> int | None:
        """The end of the last interval this run releases (rows dated by then settle)."""
        ends = [t for t in (self.ref.settle_at, self.t_last_old) if t is not None]
        return max(ends) if ends else None


def resumable(request: AggregateRequest, ref: EngineStateRef) -> _state.Head | None:
    """The committed state version when this step can continue it (it matches the store's
    head, the configuration, the consumed position and the settled intervals' ends)."""
    spec = _state.spec_digest(request)
    head = _state.matching(ref.folder, ref.store, ref.fingerprint, spec)
    if head is None:
        return None
    consumed = request.consumed
    if isinstance(request.source, JsonlSource) and (
        consumed is None or consumed.bytes != head.bytes
    ):
        return None
    times = _times(request, ref)
    if len(times) < head.settled or _state.times_digest(times[: head.settled]) != head.times:
        return None
    return head


def _times(request: AggregateRequest, ref: EngineStateRef) -> tuple[int, ...]:
    return tuple(int(t) for t in request.release_times) + tuple(int(t) for t in ref.settle_times)


def run(
    spark: SparkSession, request: AggregateRequest, ref: EngineStateRef, batch_rows: int
) -> tuple[EngineResult, _state.SparkPending]:
    """One step (see the module docstring)."""
    head = resumable(request, ref)
    try:
        return _run(spark, request, ref, batch_rows, head)
    except NeedsFullRead:
        return _run(spark, request, ref, batch_rows, None)


def _run(
    spark: SparkSession,
    request: AggregateRequest,
    ref: EngineStateRef,
    batch_rows: int,
    head: _state.Head | None,
) -> tuple[EngineResult, _state.SparkPending]:
    from dpcr.engines.spark import wanted_columns

    times = _times(request, ref)
    version = _state.prepare(ref.folder, head)
    settled_old = 0
    if head is not None and request.exclude_late is not None:
        settled_old = bisect.bisect_right(times, int(request.exclude_late[1]))
    source = request.source
    if not isinstance(source, JsonlSource | ParquetSource):  # (refused before: SparkEngine)
        raise TypeError(f"not a Spark source: {source!r}")
    spec = RecordSpec(
        source=source,
        unit_column=request.unit_column,
        queries=tuple(request.queries),
        constraint=request.constraint,
        wanted=wanted_columns(tuple(request.queries), request.constraint),
        release_times=times,
        batch_rows=batch_rows,
    )
    step = Step(
        spark=spark,
        request=request,
        ref=ref,
        spec=spec,
        head=head,
        version=version,
        times=times,
        settled_old=settled_old,
    )
    try:
        numbered, consumed = _read_new(step)
        outcome = _validate(step, numbered)
        result, pending = settle(step, outcome, consumed)
        return result, pending
    finally:
        for frame in step.cached:
            frame.unpersist()
        for path in step.cleanup:
            shutil.rmtree(path, ignore_errors=True)
        if step.partitions is not None:
            spark.conf.set("spark.sql.shuffle.partitions", step.partitions)


@dataclass(frozen=True, slots=True, kw_only=True)
class Consumed:
    """What of the source the new state version covers."""

    lines: int
    bytes: int
    files: tuple[tuple[str, int, int], ...]


def _read_new(step: Step) -> tuple[Numbered, Consumed]:
    """The records to read (see the module docstring), numbered as in the whole source."""
    source, head, spark = step.spec.source, step.head, step.spark
    path = Path(source.path)
    if isinstance(source, JsonlSource):
        consumed = step.request.consumed
        end = consumed.size if consumed is not None and consumed.size is not None else None
        size = os.stat(path).st_size if end is None else end
        start = head.bytes if head is not None else 0
        if head is not None or size < os.stat(path).st_size:
            tmp = _state.scratch(step.ref.folder) / "tail"
            tmp.mkdir(exist_ok=True)
            step.cleanup.append(tmp)
            path = _copy(path, start, size, tmp / "tail.jsonl")
        step.narrow(size - start)
        offset = head.lines if head is not None else 0
        numbered = read_numbered(spark, replace(source, path=path), offset=offset)
        return numbered, Consumed(lines=offset + numbered.count, bytes=size, files=())
    assert isinstance(source, ParquetSource)
    if path.is_dir():
        files = _part_files(path)
        new = files
        if head is not None:
            new = _new_files(path, head.files, files)
        offset = head.lines if head is not None else 0
        if not files:
            raise StoreError(f"{describe(source)}: the folder holds no Parquet part file")
        step.narrow(sum(size for _name, size, _m in new))
        if not new:  # nothing new: the last file's schema, no row
            last = read_numbered(spark, source, paths=[str(path / files[-1][0])])
            nothing = Numbered(frame=last.frame.limit(0), count=0)
            return nothing, Consumed(lines=offset, bytes=0, files=files)
        numbered = read_numbered(
            spark, source, offset=offset, paths=[str(path / name) for name, _s, _m in new]
        )
        return numbered, Consumed(lines=offset + numbered.count, bytes=0, files=files)
    skip = head.lines if head is not None else 0
    numbered = read_numbered(spark, source, skip_rows=skip)
    rows = max(1, numbered.count)
    step.narrow(os.stat(path).st_size * max(0, numbered.count - skip) // rows)
    return numbered, Consumed(lines=numbered.count, bytes=0, files=())


def _copy(path: Path, start: int, end: int, target: Path) -> Path:
    """Bytes ``start .. end`` of ``path`` into ``target`` (owner-only)."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(path, "rb") as f, os.fdopen(fd, "wb") as out:
        f.seek(start)
        left = end - start
        while left > 0:
            block = f.read(min(1 << 22, left))
            if not block:
                break
            out.write(block)
            left -= len(block)
    return target


def _part_files(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """The part files of a Parquet folder as Spark lists them (not starting with ``_`` or
    ``.``), in name order, with their size and modification time."""
    out = []
    for p in sorted(folder.iterdir(), key=lambda p: p.name):
        if p.name.startswith(("_", ".")):
            continue
        if not p.is_file():
            raise StoreError(
                f"{str(folder)!r}: {p.name!r} is not a file; the Spark engine continues a "
                "Parquet folder of part files only (no partition folders)"
            )
        st = p.stat()
        out.append((p.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _new_files(
    folder: Path,
    consumed: Sequence[tuple[str, int, int]],
    files: Sequence[tuple[str, int, int]],
) -> tuple[tuple[str, int, int], ...]:
    """The part files added since ``consumed``; refuse a consumed one that changed or went
    (rewritten history), or a new one that sorts before a consumed one (it would renumber the
    records earlier runs consumed)."""
    now = {name: (size, mtime) for name, size, mtime in files}
    for name, size, mtime in consumed:
        if now.get(name) != (size, mtime):
            raise StoreError(
                f"{str(folder)!r}: part file {name!r}, consumed by earlier runs, has changed "
                "or is gone (rewritten history); restore it, or start a new release with a new "
                "store"
            )
    last = max((name for name, _s, _m in consumed), default="")
    new = tuple(f for f in files if f[0] not in {c[0] for c in consumed})
    early = [name for name, _s, _m in new if name < last]
    if early:
        raise StoreError(
            f"{str(folder)!r}: new part file {early[0]!r} sorts before {last!r}, which earlier "
            "runs consumed, so it would renumber their records; name new part files so that "
            "they sort after the earlier ones"
        )
    return new


def _with_pending(step: Step, frame: DataFrame) -> DataFrame:
    """``frame`` (the new records' mutations, ``pend`` False) with the state's pending
    mutations (``pend`` True, their base interval computed anew)."""
    frame = frame.withColumn("pend", F.lit(False)).withColumn("raw", F.lit(None).cast("string"))
    head = step.head
    if head is None or not head.pending:
        return frame
    stored = [c for c in frame.columns if c not in ("iv", "chk", "value", "pend")]
    schema = frame.select(*stored).schema
    path = _state.version_dir(step.ref.folder, head.version) / "pending"
    pending = step.spark.read.schema(schema).parquet(str(path))
    times = step.times
    iv = F.lit(-1)
    if times:
        earlier = F.size(
            F.filter(F.array(*[F.lit(int(t)) for t in times]), lambda t: t < F.col("ts"))
        )
        iv = F.when(F.col("ts") <= int(times[-1]), earlier + 1).otherwise(F.lit(-1))
    pending = (
        pending.withColumn("chk", F.lit(None).cast("string"))
        .withColumn("value", F.lit(None).cast("string"))
        .withColumn("iv", iv.cast("int"))
        .withColumn("pend", F.lit(True))
    )
    return frame.unionByName(pending.select(*frame.columns))


def _duplicates(step: Step, frame: DataFrame) -> tuple[DataFrame, Column]:
    """``frame`` with ``_first`` (the first record of each (unit, entry, seq), earlier runs'
    included) and the column that says a mutation is a duplicate. A state without explicit
    sequence numbers continued: every sequence number is its record's, so there are none
    (a new record with one of its own makes the step read the whole source, :class:`NeedsFullRead`).
    """
    ok1 = F.col("chk").isNull()
    head = step.head
    if head is not None and not head.explicit:
        return frame.withColumn("_first", F.lit(None).cast("long")), F.lit(False)
    first = F.min(F.when(ok1, F.col("record"))).over(Window.partitionBy("unit", "entry", "seq"))
    if head is not None:
        keys = _state.read_seeds(
            step.spark,
            step.ref.folder,
            head,
            "keys",
            "unit string, entry string, seq bigint, record bigint",
            _touched(frame),
        )
        earliest = keys.groupBy("unit", "entry", "seq").agg(F.min("record").alias("_kfirst"))
        frame = frame.join(earliest, ["unit", "entry", "seq"], "left")
        first = F.least(first, F.col("_kfirst"))
    frame = frame.withColumn("_first", first).drop("_kfirst")
    return frame, ok1 & ~F.col("pend") & (F.col("record") != F.col("_first"))


def _touched(frame: DataFrame) -> DataFrame:
    return frame.select("unit").distinct()


def _validate(step: Step, numbered: Numbered) -> Outcome:
    """Phases 1-3 over the new records and the pending rows, continuing every history."""
    request, spark, head = step.request, step.spark, step.head
    base = step.keep(_with_pending(step, mutation_frame(numbered.frame, step.spec)))
    frame, dup = _duplicates(step, base)
    ok1 = F.col("chk").isNull()
    good = ok1 & ~dup
    if head is not None:
        boundary = head.lines
    elif request.exclude_late is not None:
        boundary = _boundary(frame, int(request.exclude_late[0]))
    else:
        boundary = 0
    points: list[FrozenPoint] = list(request.frozen)
    new_good = good & ~F.col("pend")
    if step.t_last_old is not None or points:
        points = freeze_points(frame, new_good, boundary, step.t_last_old, points)
    frame, late = apply_points(spark, frame, new_good, points)
    if head is not None:
        live = _state.read_seeds(
            spark,
            step.ref.folder,
            head,
            "live",
            "unit string, entry string, live boolean, record bigint",
            _touched(base),
        ).select("unit", "entry", F.col("live").alias("s_live"), F.col("record").alias("s_record"))
        frame = frame.join(live, ["unit", "entry"], "left")
    tagged = step.keep(tag(frame, ok1=ok1, dup=dup, late=late))
    outcome = summarize(step, numbered, tagged, points, head is not None and head.explicit)
    base.unpersist()  # (``tagged`` holds what follows needs)
    if head is not None and not head.explicit and outcome.explicit:
        raise NeedsFullRead("sequence numbers became explicit")
    return errors(step, outcome)


def result_values(
    step: Step, run_values: dict[str, np.ndarray], first_run: int
) -> dict[str, np.ndarray]:
    """Totals of the request's intervals: the settled ones from the state, the others from
    this run's (intervals ``first_run ..``)."""
    lo, n = step.request.first_interval, len(step.request.release_times)
    width = max(0, n - lo + 1)
    queries = list(step.request.queries)
    values = {q.name: np.zeros((width, len(q.keys)), dtype=np.int64) for q in queries}
    if step.head is not None:
        for qi, iv, key, value in step.head.totals:
            if lo <= iv <= n and iv < first_run:
                values[queries[qi].name][iv - lo, key] = value
    for q in queries:
        if is_open(q):  # (its columns are its candidate keys: dpcr.engines.spark._open)
            continue
        a = max(lo, first_run)
        if a <= n:
            part = run_values[q.name][a - first_run : n - first_run + 1]
            values[q.name][a - lo : a - lo + len(part)] = part
    return values


def load_report(step: Step, outcome: Outcome) -> LoadReport:
    """The load report of the whole source: the state's counters and this run's counts."""
    c = step.head.counters if step.head is not None else {}
    run = outcome.by_status
    counts = reason_counts(run)
    tombstones = counts.pop("tombstone", 0)
    quarantined = {k[2:]: v for k, v in c.items() if k.startswith("q:")}
    for k, v in counts.items():
        quarantined[k] = quarantined.get(k, 0) + v
    records = c.get("records", 0) + outcome.records
    split = c.get("split", 0) + outcome.split
    valid = c.get("valid", 0) + run.get("valid", 0)
    late = c.get("late", 0) + run.get("late", 0)
    tombstones += c.get("tombstones", 0)
    name = describe(step.request.source)
    check_counts(name, records, split, valid, quarantined, tombstones, late)
    quarantine = step.request.quarantine_path if step.request.on_error == "quarantine" else None
    return LoadReport(
        source=name,
        records=records,
        valid=valid,
        quarantined={r: quarantined[r] for r in REASONS if quarantined.get(r)},
        quarantine_path=quarantine,
        tombstones=tombstones,
        split=split,
        late=late,
        frozen=tuple(outcome.points),
    )
