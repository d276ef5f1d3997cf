"""Validation of a changelog as Spark DataFrame operations: the outcome of
:func:`dpcr.changelog.load` (same reasons, counts, freeze points and quarantine file).

1. The source is read by Spark and every record numbered as the loader numbers it (JSONL: the
   line number, blank lines included; Parquet: the row number). A JSONL file is numbered from
   the lines per file block: Spark reads each block's lines in order, so a line's number is the
   lines of the earlier blocks plus its place in its block. A line is carried as its bytes, so
   one that is not UTF-8 (or too long) reaches the per-record pass as written, where the
   loader's staging sets it aside as it does for the whole file (quarantined, ``bad_encoding``
   or ``too_long``).
2. The per-record pass (:mod:`dpcr.engines.spark._records`) stages and checks each record
   (phase 1) and computes its row values.
3. Records become mutations (an update that moves its entry between units becomes a delete half
   and an insert half), hash-partitioned by unit: every later window is per unit or per
   (unit, entry), so one shuffle serves them all.
4. Phase 2 (duplicates: ``min(record)`` per (unit, entry, seq)), freezing of late records, and
   phase 3 (liveness: the last insert or delete before each mutation, a ``last(...,
   ignorenulls)`` over the preceding rows of its (unit, entry)) as window functions.

The result is one frame with a ``status`` per mutation: ``valid``, ``late``, or the
``reason:field`` of its rejection. Only counts and the rejected records (for the error or the
quarantine file) come back to the driver.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TextIO

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from dpcr._fs import ensure_dir, write_atomic
from dpcr.changelog import (
    EPOCH_FACTORS,
    REASONS,
    FrozenPoint,
    JsonlSource,
    LoadReport,
    ParquetSource,
    Staged,
    describe,
    field_label,
    message,
    quarantine_line,
)
from dpcr.engines.spark._records import RECORD, RecordSpec, output_ddl, raw_pass, record_pass
from dpcr.errors import ChangelogError, ConfigError, DpcrError
from dpcr.queries import Sum

SpSource = JsonlSource | ParquetSource


def staged_labels(source: SpSource, unit_column: str | None) -> Staged:
    """A :class:`Staged` carrying what the loader's messages need (field labels, unit mode)."""
    labels = {k: k for k in ("entry", "ts", "seq", "op", "before", "after", "unit")}
    labels |= {k: v for k, v in source.field_names().items() if v is not None}
    return Staged(
        table="",
        ts_factor=EPOCH_FACTORS[source.epoch_unit],
        labels=labels,
        unit_field=source.unit is not None,
        unit_column=unit_column,
    )


def read_source(spark: SparkSession, source: SpSource) -> DataFrame:
    """The source's records with their record numbers in column :data:`RECORD` (a JSON-lines
    file: its lines as bytes, in column ``line``)."""
    return read_numbered(spark, source).frame


@dataclass(frozen=True, slots=True, kw_only=True)
class Numbered:
    """Records read from a source: ``frame`` (with :data:`RECORD`), how many records it holds
    (``count``: lines of a JSON-lines file, blank ones included; rows of Parquet) and, for
    Parquet, the rows of each file read (Spark's path, rows), in numbering order."""

    frame: DataFrame
    count: int
    files: tuple[tuple[str, int], ...] = ()


def read_numbered(
    spark: SparkSession,
    source: SpSource,
    *,
    offset: int = 0,
    paths: Sequence[str] | None = None,
    skip_rows: int = 0,
) -> Numbered:
    """The records of ``source`` numbered as the loader numbers them, plus ``offset`` (the
    records before them, for a part of a source read on its own: the lines after a position,
    new part files). ``paths``: read these files (of a Parquet directory) instead of
    ``source.path``; ``skip_rows``: leave out the first rows of a Parquet file (numbered as
    they are in the whole file; ``count`` still counts them)."""
    name = describe(source)
    path = str(source.path)
    if not Path(source.path).exists():
        raise ConfigError(f"{name}: no such file; check [source] path")
    if isinstance(source, JsonlSource):
        lines = spark.read.text(path).select(
            F.col("value").cast("binary").alias("line"),  # (the bytes as written)
            F.col("_metadata.file_path").alias("_fp"),
            F.col("_metadata.file_block_start").alias("_blk"),
            F.monotonically_increasing_id().alias("_mid"),
        )
        blocks = sorted(
            lines.groupBy("_fp", "_blk")
            .agg(F.count(F.lit(1)).alias("n"), F.min("_mid").alias("m0"))
            .collect()
        )
        base, rows = offset, []
        for b in blocks:
            rows.append((b["_fp"], b["_blk"], base - b["m0"] + 1))
            base += b["n"]
        bases = spark.createDataFrame(rows, "_fp string, _blk bigint, _base bigint")
        frame = lines.join(F.broadcast(bases), ["_fp", "_blk"]).select(
            "line", (F.col("_mid") + F.col("_base")).alias(RECORD)
        )
        return Numbered(frame=frame, count=base - offset)
    try:
        frame = spark.read.parquet(*(paths if paths is not None else [path]))
    except Exception as exc:  # Spark raises its own analysis errors for unreadable files
        raise ConfigError(
            f"{name}: cannot read the Parquet file ({str(exc).splitlines()[0]}); check "
            "[source] path"
        ) from exc
    columns = _parquet_columns(frame, source)
    numbered = frame.select(
        "*",
        F.col("_metadata.file_path").alias("_fp"),
        F.col("_metadata.row_index").alias("_ri"),
    )
    files = sorted(numbered.groupBy("_fp").agg(F.count(F.lit(1)).alias("n")).collect())
    base, offsets = offset, []
    for f in files:
        offsets.append((f["_fp"], base + 1))
        base += f["n"]
    bases = spark.createDataFrame(offsets, "_fp string, _base bigint")
    if skip_rows:
        numbered = numbered.where(F.col("_ri") >= skip_rows)
    frame = numbered.join(F.broadcast(bases), "_fp").select(
        *[F.col(f"`{c}`") for c in columns], (F.col("_ri") + F.col("_base")).alias(RECORD)
    )
    return Numbered(
        frame=frame,
        count=base - offset,
        files=tuple((str(f["_fp"]), int(f["n"])) for f in files),
    )


def _parquet_columns(frame: DataFrame, source: ParquetSource) -> list[str]:
    """The columns of a Parquet source, checked: none named ``record``, every field's there."""
    name = describe(source)
    columns = frame.columns
    if "record" in columns:
        raise ConfigError(f"{name}: a column may not be named 'record'; rename it")
    names = source.field_names()
    for key in ("entry", "ts", "op", "after", "unit"):
        col = names[key]
        if col is not None and col not in columns:
            raise ConfigError(
                f"{name} has no column {col!r} (the {key} field); columns found: "
                f'{", ".join(columns)}. Rename the column or set [source] {key} = "<column>"'
            )
    return columns


@dataclass(frozen=True, slots=True, kw_only=True)
class Loaded:
    """The validated changelog: ``frame`` (every mutation with its ``status``, partitioned by
    unit and persisted), the report, and the per-frame figures the engine result needs."""

    frame: DataFrame
    report: LoadReport
    min_ts: int | None
    max_ts: int | None
    not_yet_due: int
    present: tuple[bool, ...]


def _mutations(rows: DataFrame) -> DataFrame:
    """One row per mutation (``part`` 0: a whole record; 1/2: the halves of a moving update),
    with ``unit`` and ``op`` of the mutation, hash-partitioned by unit."""
    part = F.explode(
        F.when(F.col("split"), F.array(F.lit(1), F.lit(2))).otherwise(F.array(F.lit(0)))
    )
    parts = rows.withColumn("part", part)
    p = F.col("part")
    return (
        parts.withColumn(
            "unit",
            F.when(p == 1, F.col("before_unit"))
            .when(p == 2, F.col("after_unit"))
            .otherwise(F.col("unit_value")),
        )
        .withColumn(
            "op",
            F.when(p == 1, F.lit("delete")).when(p == 2, F.lit("insert")).otherwise(F.col("op")),
        )
        .withColumn(
            "has_before", F.when(p == 1, True).when(p == 2, False).otherwise(F.col("has_before"))
        )
        .drop("unit_value", "before_unit", "after_unit", "split")
        .repartition("unit")
    )


def _after_deleted(frame: DataFrame, spec: RecordSpec) -> DataFrame:
    """The delete half of a moving update has no row after: its row values are those of a
    null row (f = 0, or no key for a histogram; no state; class '')."""
    from dpcr.engines.spark._records import error_histograms, machines, no_f

    half = F.col("part") == 1
    for i, q in enumerate(spec.queries):
        value, kind = no_f(q)
        null_f = F.lit(value).cast(kind)
        frame = frame.withColumn(f"f{i}", F.when(half, null_f).otherwise(F.col(f"f{i}")))
        if isinstance(q, Sum):
            frame = frame.withColumn(f"nn{i}", F.when(half, False).otherwise(F.col(f"nn{i}")))
    nulls = [f"hv{i}" for i in error_histograms(spec.queries)]
    for j in range(len(machines(spec.constraint))):
        nulls += [f"st{j}", f"comp{j}"]
    for c in nulls:
        frame = frame.withColumn(c, F.when(half, F.lit(None)).otherwise(F.col(c)))
    return frame.withColumn("cls", F.when(half, F.lit("")).otherwise(F.col("cls")))


#: Record numbers per bucket of :func:`_boundary` (2^16: a bucket's numbers fit one task).
_BUCKET_BITS = 16


def _boundary(frame: DataFrame, seen: int) -> int:
    """The record number of the ``seen``-th record (record numbers can have gaps), or the
    largest when there are fewer: each record is one mutation of part 0 or 1 in ``frame``.
    Two passes that hold no more than a bucket of 2^16 numbers in one task: the count of
    records per bucket of numbers, then the numbers of the one bucket that holds the
    ``seen``-th (a sort of the ``seen`` first records would hold them all in one task)."""
    if seen <= 0:
        return 0
    records = frame.where(F.col("part") != 2).select("record")
    bucket = F.shiftright(F.col("record"), _BUCKET_BITS)
    counts = sorted(
        (int(r["b"]), int(r["n"]))
        for r in records.groupBy(bucket.alias("b")).agg(F.count(F.lit(1)).alias("n")).collect()
    )
    if not counts:
        return 0
    before, target, take = 0, counts[-1][0], counts[-1][1]
    for b, n in counts:
        if before + n >= seen:
            target, take = b, seen - before
            break
        before += n
    row = (
        records.where(bucket == target).orderBy("record").limit(take).agg(F.max("record")).first()
    )
    return int(row[0]) if row is not None and row[0] is not None else 0


def freeze_points(
    frame: DataFrame,
    good: Column,
    boundary: int,
    t_last: int | None,
    given: Sequence[FrozenPoint],
) -> list[FrozenPoint]:
    """Every freeze point: the given ones (the lowest per (unit, entry)) and, for the others,
    the first late mutation's record: a ``good`` mutation numbered above ``boundary`` (the last
    record earlier runs consumed) and dated at or before ``t_last`` (see
    :mod:`dpcr.changelog._resume`)."""
    points: dict[tuple[str, str], int] = {}
    for u, e, r in given:
        points[(u, e)] = min(r, points.get((u, e), r))
    if t_last is not None:
        late = (
            frame.where(good & (F.col("record") > boundary) & (F.col("ts") <= t_last))
            .groupBy("unit", "entry")
            .agg(F.min("record").alias("r"))
            .collect()
        )
        for row in late:
            points.setdefault((row["unit"], row["entry"]), int(row["r"]))
    return sorted((u, e, r) for (u, e), r in points.items())


def apply_points(
    spark: SparkSession, frame: DataFrame, good: Column, points: Sequence[FrozenPoint]
) -> tuple[DataFrame, Column]:
    """``frame`` with the freeze points joined, and the column that says a mutation is late (a
    ``good`` one at or after its (unit, entry)'s point)."""
    if not points:
        return frame, F.lit(False)
    pts = spark.createDataFrame(list(points), "unit string, entry string, _fz bigint")
    frame = frame.join(F.broadcast(pts), ["unit", "entry"], "left")
    return frame, good & F.col("_fz").isNotNull() & (F.col("record") >= F.col("_fz"))


def mutation_frame(src: DataFrame, spec: RecordSpec) -> DataFrame:
    """The per-record pass over ``src`` (:func:`read_numbered`), as mutations partitioned by
    unit (phase 1's verdict in ``chk``)."""
    rows = src.mapInArrow(record_pass(spec), output_ddl(spec))
    return _after_deleted(_mutations(rows), spec)


def tag(frame: DataFrame, *, ok1: Column, dup: Column, late: Column) -> DataFrame:
    """``frame`` with each mutation's ``status`` (``valid``, ``late`` or ``reason:field``),
    ``other`` (the record it conflicts with) and ``value``: phase 1 (``ok1``), duplicates
    (``dup``, the first record in ``_first``), late, and phase 3 (liveness: the last insert or
    delete before each mutation of its (unit, entry), or, when there is none, the seed
    ``s_live``/``s_record`` of the earlier rows when ``frame`` has one)."""
    elig = ok1 & ~dup & ~late
    op = F.col("op")
    before = Window.partitionBy("unit", "entry").orderBy("ts", "seq", "record")
    prev = F.last(
        F.when(
            elig & (op != "update"),
            F.struct((op == "insert").alias("live"), F.col("record").alias("rec")),
        ),
        ignorenulls=True,
    ).over(before.rowsBetween(Window.unboundedPreceding, -1))
    if "s_live" in frame.columns:
        seed = F.struct(F.col("s_live").alias("live"), F.col("s_record").alias("rec"))
        prev = F.coalesce(prev, F.when(F.col("s_live").isNotNull(), seed))
    frame = frame.withColumn("_prev", prev)
    live = F.coalesce(F.col("_prev.live"), F.lit(False))
    chk3 = (
        F.when(elig & (op == "insert") & live, F.lit("double_insert:op"))
        .when(elig & (op == "update") & ~live, F.lit("update_before_insert:op"))
        .when(elig & (op == "delete") & ~live, F.lit("delete_before_insert:op"))
    )
    status = (
        F.when(~ok1, F.col("chk"))
        .when(dup, F.lit("duplicate:seq"))
        .when(late, F.lit("late"))
        .otherwise(F.coalesce(chk3, F.lit("valid")))
    )
    other = F.when(dup, F.col("_first")).when(chk3.isNotNull(), F.col("_prev.rec"))
    value = F.when(~ok1, F.col("value")).when(chk3.isNotNull(), op)
    return (
        frame.withColumn("status", status)
        .withColumn("other", other)
        .withColumn("value", value)
        .drop("_first", "_prev", "_fz", "s_live", "s_record")
    )


def validate(
    spark: SparkSession,
    source: SpSource,
    spec: RecordSpec,
    *,
    on_error: str,
    quarantine_path: Path | None,
    exclude_late: tuple[int, int] | None,
    frozen: list[FrozenPoint],
    clock: int,
) -> Loaded:
    """Validate ``source`` like :func:`dpcr.changelog.load`; raise its errors."""
    name = describe(source)
    src = read_source(spark, source)
    frame = mutation_frame(src, spec)
    ok1 = F.col("chk").isNull()
    first = F.min(F.when(ok1, F.col("record"))).over(Window.partitionBy("unit", "entry", "seq"))
    frame = frame.withColumn("_first", first)
    dup = ok1 & (F.col("record") != F.col("_first"))
    good = ok1 & ~dup
    points: list[FrozenPoint] = []
    cached: list[DataFrame] = []
    if exclude_late is not None or frozen:
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(frame)
        boundary = 0 if exclude_late is None else _boundary(frame, exclude_late[0])
        t_last = None if exclude_late is None else exclude_late[1]
        points = freeze_points(frame, good, boundary, t_last, frozen)
    frame, late = apply_points(spark, frame, good, points)
    tagged = tag(frame, ok1=ok1, dup=dup, late=late).persist(StorageLevel.MEMORY_AND_DISK)
    summary = _summarize(tagged, spec, clock)
    for c in cached:
        c.unpersist()
    counts = reason_counts(summary["by_status"])
    total, split = summary["records"], summary["split"]
    valid = summary["by_status"].get("valid", 0)
    late_n = summary["by_status"].get("late", 0)
    tombstones = counts.pop("tombstone", 0)
    check_counts(name, total, split, valid, counts, tombstones, late_n)
    staged = staged_labels(source, spec.unit_column)
    bad = tagged.where(~F.col("status").isin("valid", "late"))
    if on_error == "raise" and counts:
        try:
            raise_first(spark, src, spec, bad, source)
        finally:
            tagged.unpersist()
    if on_error == "quarantine" and quarantine_path is not None:
        _write_quarantine(spark, src, spec, bad, staged, source, quarantine_path, any(counts))
    report = LoadReport(
        source=name,
        records=total,
        valid=valid,
        quarantined={r: counts[r] for r in REASONS if r in counts},
        quarantine_path=quarantine_path if on_error == "quarantine" else None,
        tombstones=tombstones,
        split=split,
        late=late_n,
        frozen=tuple(points),
    )
    return Loaded(
        frame=tagged,
        report=report,
        min_ts=summary["min_ts"],
        max_ts=summary["max_ts"],
        not_yet_due=summary["not_yet_due"],
        present=summary["present"],
    )


def reason_counts(by_status: dict[str, int]) -> dict[str, int]:
    """Rejected mutations per reason, from the counts per status."""
    counts: dict[str, int] = {}
    for status_key, n in by_status.items():
        if status_key not in ("valid", "late"):
            reason = status_key.split(":", 1)[0]
            counts[reason] = counts.get(reason, 0) + n
    return counts


def check_counts(
    name: str, total: int, split: int, valid: int, counts: dict[str, int], tombstones: int,
    late: int,
) -> None:  # fmt: skip
    """Every record is valid, rejected, a tombstone or late (an internal check)."""
    if set(counts) - set(REASONS) or total + split != valid + sum(counts.values()) + late \
            + tombstones:  # fmt: skip
        raise DpcrError(
            f"{name}: internal error: {total} records ({split} split in two) but {valid} "
            f"valid, {counts} invalid, {tombstones} tombstones and {late} late; please "
            "report this with the input"
        )


def raise_first(
    spark: SparkSession, src: DataFrame, spec: RecordSpec, bad: DataFrame, source: SpSource
) -> NoReturn:
    """Raise the loader's error for the rejected mutation of ``bad`` with the lowest record
    number (a record-level one reads its raw record from ``src``)."""
    staged = staged_labels(source, spec.unit_column)
    first_bad = bad.orderBy("record", "part").limit(1).collect()[0]
    row = _row_dict(first_bad)
    if row["fkey"] == "record":
        raws = _raws(spark, src, spec, [int(row["record"])])
        raw = json.loads(raws[int(row["record"])])
        row["value"] = raw if isinstance(raw, str) else json.dumps(raw)
    raise ChangelogError(
        f"{describe(source)}: record {row['record']}: "
        f"{message(row, staged, source, spec.unit_column)}",
        record=int(row["record"]),
        field=field_label(row["fkey"], staged, spec.unit_column),
        reason=str(row["reason"]),
    )


def status_counts(spec: RecordSpec, clock: int, fresh: Column) -> list[Column]:
    """The aggregates of a pass of counts over validated mutations (per status): ``n`` rows;
    ``records`` and ``split``, of the records whose rows are ``fresh``; the time range
    (``min_ts``, ``max_ts``); ``due``, the rows after ``clock``; and, per wanted column ``c``,
    ``p{c}``: whether a row shows it."""
    op = F.col("op")
    presence = [
        F.max(((op != "delete") & F.col(f"ah{c}")) | ((op != "insert") & F.col(f"bh{c}"))).alias(
            f"p{c}"
        )
        for c in range(len(spec.wanted))
    ]
    return [
        F.count(F.lit(1)).alias("n"),
        F.sum(F.when(fresh & (F.col("part") != 2), 1).otherwise(0)).alias("records"),
        F.sum(F.when(fresh & (F.col("part") == 1), 1).otherwise(0)).alias("split"),
        F.min("ts").alias("min_ts"),
        F.max("ts").alias("max_ts"),
        F.sum(F.when(F.col("ts") > clock, 1).otherwise(0)).alias("due"),
        *presence,
    ]


def _summarize(
    tagged: DataFrame, spec: RecordSpec, clock: int, new: Column | None = None
) -> dict[str, Any]:
    """One pass over the mutations: counts per status, records, splits, the valid rows' time
    range, not-yet-due count and which wanted columns appear in a valid row. ``new``: the
    mutations of records read now (records and splits count those only; the others were
    read by earlier runs)."""
    fresh = F.lit(True) if new is None else new
    rows = tagged.groupBy("status").agg(*status_counts(spec, clock, fresh)).collect()
    out: dict[str, Any] = {
        "by_status": {},
        "records": 0,
        "split": 0,
        "min_ts": None,
        "max_ts": None,
        "not_yet_due": 0,
        "present": (False,) * len(spec.wanted),
    }
    for r in rows:
        out["by_status"][r["status"]] = int(r["n"])
        out["records"] += int(r["records"])
        out["split"] += int(r["split"])
        if r["status"] == "valid":
            out["min_ts"], out["max_ts"] = r["min_ts"], r["max_ts"]
            out["not_yet_due"] = int(r["due"])
            out["present"] = tuple(bool(r[f"p{c}"]) for c in range(len(spec.wanted)))
    return out


def quarantine_text(row: Any, raw: str, source: SpSource, unit_column: str | None) -> str:
    """The loader's quarantine line of the rejected mutation ``row`` (a Spark row) whose
    record reads ``raw``."""
    labels = staged_labels(source, unit_column)
    return quarantine_line(_row_dict(row), raw, labels, source, unit_column)


def _row_dict(row: Any) -> dict[str, Any]:
    """A rejected mutation as the loader's messages read it."""
    reason, _, fkey = str(row["status"]).partition(":")
    return {
        "record": int(row["record"]),
        "part": int(row["part"]),
        "reason": reason,
        "fkey": fkey,
        "op": row["op"],
        "unit": row["unit"],
        "entry": row["entry"],
        "ts": None if row["ts"] is None else int(row["ts"]),
        "seq": None if row["seq"] is None else int(row["seq"]),
        "other": None if row["other"] is None else int(row["other"]),
        "value": row["value"],
    }


def _raws(
    spark: SparkSession, src: DataFrame, spec: RecordSpec, records: Sequence[int]
) -> dict[int, str]:
    wanted = spark.createDataFrame([(r,) for r in records], f"{RECORD} bigint")
    picked = src.join(F.broadcast(wanted), RECORD, "left_semi")
    return {
        int(r["record"]): str(r["raw"])
        for r in picked.mapInArrow(raw_pass(spec), "record bigint, raw string").collect()
    }


def _write_quarantine(
    spark: SparkSession,
    src: DataFrame,
    spec: RecordSpec,
    bad: DataFrame,
    staged: Staged,
    source: SpSource,
    path: Path,
    any_bad: bool,
) -> None:
    """The loader's quarantine file: one JSON object per rejected mutation, by (record, part).
    It holds raw records: owner-only (0600), never written through a symbolic link."""
    ensure_dir(path.parent, 0o700, follow=True)

    def lines(out: TextIO) -> None:
        if any_bad:
            records = bad.select(F.col("record").alias(RECORD)).distinct()
            picked = src.join(records, RECORD, "left_semi")
            raws = picked.mapInArrow(raw_pass(spec), "record bigint, raw string")
            joined = bad.join(raws, "record").orderBy("record", "part")
            for r in joined.toLocalIterator():
                out.write(quarantine_line(_row_dict(r), str(r["raw"]), staged, source,
                                          spec.unit_column))  # fmt: skip

    write_atomic(path, lines, mode=0o600)
