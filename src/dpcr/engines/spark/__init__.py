"""The Spark engine: the DuckDB engine's results, computed by Spark (extra ``[spark]``).

:class:`SparkEngine` implements :class:`~dpcr.engines.base.Engine` for changelogs in Parquet or
JSON Lines (a file, or for Parquet a directory of part files, on any file system Spark reads).
It gives exactly what :class:`~dpcr.engines.duckdb.DuckDBEngine` gives on the same input: the
load report (records, valid, quarantined per reason, split, late, freeze points), the same
quarantine file, the same bounding report and the same totals
(``tests/engines/test_spark_differential.py`` compares them on generated changelogs).

How the work is split (docs/spark.md):

* per record, on the executors: the loader's own staging and phase-1 SQL and the row values
  the queries and the constraint read, run by DuckDB on each Arrow batch
  (:mod:`dpcr.engines.spark._records`);
* across records, as Spark DataFrame operations: duplicates, freezing of late records,
  liveness (:mod:`dpcr.engines.spark._load`), bounding per unit and the per-interval totals
  (:mod:`dpcr.engines.spark._bound`), all after one shuffle by unit;
* on the driver: the counts, the small totals table and the rejected records only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dpcr.errors import ConfigError, MissingExtraError

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError.for_module(exc.name or "pyspark", "spark") from None

from pathlib import Path

from dpcr.bounding.constraints import Constraint
from dpcr.changelog import FrozenPoint, JsonlSource, ParquetSource
from dpcr.engines.base import (
    AggregateRequest,
    DataStep,
    EngineResult,
    EngineRun,
    EngineStateRef,
    Pending,
    referenced_columns,
)
from dpcr.queries import Query

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_CONF", "SparkEngine", "wanted_columns"]

#: Spark settings the engine starts a session with; ``conf`` given to :class:`SparkEngine`
#: overrides each of them.
DEFAULT_CONF: Mapping[str, str] = {
    "spark.app.name": "dpcr",
    "spark.driver.memory": "3g",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.caseSensitive": "true",
    "spark.sql.shuffle.partitions": "64",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
}


def wanted_columns(queries: tuple[Query, ...], constraint: Constraint) -> tuple[str, ...]:
    """The columns whose presence is checked (:func:`dpcr.engines.base.referenced_columns`)."""
    return referenced_columns(queries, constraint)


class SparkEngine:
    """The distributed engine (:class:`~dpcr.engines.base.Engine`).

    ``master``: ``"local[2]"`` (two local cores), ``"local[*]"``, or a cluster URL such as
    ``"spark://host:7077"`` or ``"yarn"``. ``conf``: Spark settings (strings) over
    :data:`DEFAULT_CONF`. ``batch_rows``: records per batch of the per-record pass on the
    executors (each batch is staged by DuckDB on its own). One SparkSession serves every
    aggregation of the process (Spark keeps one per JVM); it starts on first use and is stopped
    by :meth:`stop`.
    """

    name = "spark"

    def __init__(
        self,
        master: str = "local[2]",
        conf: Mapping[str, str] | None = None,
        *,
        batch_rows: int = 100_000,
    ) -> None:
        if not isinstance(master, str) or not master:
            raise ConfigError(
                f"engine.spark.master must be a Spark master such as 'local[2]' or "
                f"'spark://host:7077', got {master!r}"
            )
        settings: dict[str, Any] = dict(conf or {})
        for key, value in settings.items():
            if not isinstance(key, str) or not isinstance(value, str | int | float | bool):
                raise ConfigError(
                    f"engine.spark: {key!r} = {value!r}: Spark settings are names with "
                    "string, number or boolean values"
                )
        if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
            raise ConfigError(f"batch_rows must be an integer >= 1, got {batch_rows!r}")
        self.batch_rows = batch_rows
        self.master = master
        self.conf = {
            k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in settings.items()
        }
        self._spark: SparkSession | None = None

    def session(self) -> SparkSession:
        """The SparkSession (started on first use, and again when it was stopped elsewhere:
        sessions share one SparkContext per process)."""
        from pyspark.sql import SparkSession

        if self._spark is not None and SparkSession.getActiveSession() is not self._spark:
            self._spark = None  # (stopped, or replaced, by another engine of this process)
        if self._spark is None:
            settings = {**DEFAULT_CONF, **self.conf}
            if self.master.startswith("local"):
                # Local Python workers run this interpreter, which has dpcr installed.
                settings.setdefault("spark.pyspark.python", sys.executable)
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            builder: Any = SparkSession.builder.master(self.master)
            for key, value in settings.items():
                builder = builder.config(key, value)
            self._spark = builder.getOrCreate()
            self._spark.sparkContext.setLogLevel("ERROR")
        return self._spark

    def stop(self) -> None:
        """Stop the SparkSession (a later aggregation starts a new one)."""
        if self._spark is not None:
            self._spark.stop()
            self._spark = None

    def aggregate(self, request: AggregateRequest) -> EngineResult:
        """Load, validate, bound and aggregate on Spark; the same result and errors as
        :meth:`dpcr.engines.duckdb.DuckDBEngine.aggregate`."""
        from dpcr.engines.spark._bound import aggregate
        from dpcr.engines.spark._load import validate
        from dpcr.engines.spark._records import RecordSpec

        source, quarantine, given = _checked(request)
        queries = tuple(request.queries)
        spec = RecordSpec(
            source=source,
            unit_column=request.unit_column,
            queries=queries,
            constraint=request.constraint,
            wanted=wanted_columns(queries, request.constraint),
            release_times=tuple(int(t) for t in request.release_times),
            batch_rows=self.batch_rows,
        )
        spark = self.session()
        loaded = validate(
            spark,
            source,
            spec,
            on_error=request.on_error,
            quarantine_path=quarantine,
            exclude_late=None
            if request.exclude_late is None
            else (int(request.exclude_late[0]), int(request.exclude_late[1])),
            frozen=given,
            clock=int(request.clock),
        )
        try:
            missing: tuple[str, ...] = ()
            if loaded.report.valid:
                missing = tuple(
                    c for c, ok in zip(spec.wanted, loaded.present, strict=True) if not ok
                )
            agg = aggregate(
                loaded.frame,
                queries=queries,
                constraint=request.constraint,
                release_times=spec.release_times,
                first_interval=request.first_interval,
                unit_is_entry=request.unit_is_entry,
            )
        finally:
            loaded.frame.unpersist()
        return EngineResult(
            load=loaded.report,
            aggregates=agg,
            min_ts=None if loaded.min_ts is None else int(loaded.min_ts),
            max_ts=None if loaded.max_ts is None else int(loaded.max_ts),
            not_yet_due=loaded.not_yet_due,
            missing_columns=missing,
        )

    def keeps_state(self, request: AggregateRequest) -> bool:
        return True  # (whether it continues one: continues)

    def step(self, request: AggregateRequest, run: EngineRun) -> DataStep:
        from dpcr.engines.step import engine_step

        return engine_step(self, request, run)

    def continues(self, request: AggregateRequest, state: EngineStateRef) -> bool:
        """Whether :meth:`aggregate_step` will continue the state in ``state.folder`` (read
        only the records after ``request.consumed``) rather than read the whole source."""
        from dpcr.engines.spark._step import resumable

        return resumable(request, state) is not None

    def aggregate_step(
        self, request: AggregateRequest, state: EngineStateRef
    ) -> tuple[EngineResult, Pending]:
        """:meth:`aggregate` as an incremental step (:mod:`dpcr.engines.spark._step`): when
        the state in ``state.folder`` matches the store's head, only the records after those
        consumed are read and only the state of the units they touch; otherwise the whole
        source is read. The result is :meth:`aggregate`'s on the whole source; the returned
        state version becomes current through ``commit`` once the store has committed."""
        from dpcr.engines.spark._step import run

        _checked(request)
        return run(self.session(), request, state, self.batch_rows)


def _checked(
    request: AggregateRequest,
) -> tuple[JsonlSource | ParquetSource, Path | None, list[FrozenPoint]]:
    """The request's source, quarantine path and freeze points, checked before any work."""
    from dpcr.changelog import check_frozen, check_late, check_load_options

    refuse_bounding_options(request)
    source = request.source
    if not isinstance(source, JsonlSource | ParquetSource):
        fmt = getattr(source, "format", type(source).__name__)
        raise ConfigError(
            f"engine 'spark' reads changelogs in Parquet or JSON Lines ([source] format = "
            f"'parquet' or 'jsonl'), not {fmt!r}; convert the source, or use engine "
            "'duckdb', which reads every format"
        )
    quarantine = None if request.quarantine_path is None else Path(request.quarantine_path)
    check_load_options(source, "changelog", request.on_error, quarantine, request.unit_column)
    check_late(request.exclude_late)
    return source, quarantine, check_frozen(request.frozen)


def refuse_bounding_options(request: AggregateRequest) -> None:
    """The Spark engine bounds with ``on_exhausted = "freeze"`` and releases no ``exhausted``
    query; it refuses them (before any work) rather than release something else."""
    from dpcr.queries import Exhausted

    if request.retire:
        raise ConfigError(
            'constraint.on_exhausted = "retire" runs on the DuckDB engine only; remove '
            '[engine] name = "spark" or use on_exhausted = "freeze"'
        )
    for q in request.queries:
        if isinstance(q, Exhausted):
            raise ConfigError(
                f'query {q.name!r}: kind = "exhausted" runs on the DuckDB engine only; remove '
                '[engine] name = "spark" or the query'
            )
