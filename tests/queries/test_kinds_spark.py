"""Every registered query kind (its example, :mod:`queries.kinds`) through the Spark engine and
the DuckDB engine on the generated changelogs of the engine tests: identical totals, reports
and quarantine files (:func:`engines.test_spark_differential.run_both`). ``exhausted`` runs on
DuckDB only (Spark refuses it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from dpcr.changelog import JsonlSource
from dpcr.engines.base import AggregateRequest
from dpcr.engines.spark import SparkEngine
from dpcr.queries import QUERY_KINDS
from engines.helpers import CONSTRAINTS, DAY, T0, generate
from engines.test_spark_differential import run_both
from queries.kinds import example

pytestmark = pytest.mark.slow

QUERIES = tuple(example(kind) for kind in sorted(QUERY_KINDS) if kind != "exhausted")


@pytest.fixture(scope="module")
def spark_engine() -> Any:
    engine = SparkEngine(
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
        batch_rows=7,
    )
    yield engine
    engine.stop()


@pytest.mark.parametrize(("seed", "unit_column"), [(1, False), (2, True), (5, False), (7, True)])
def test_every_kind_is_aggregated_alike_by_both_engines(
    spark_engine: SparkEngine, tmp_path: Path, seed: int, unit_column: bool
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(generate(seed, unit_column=unit_column)) + "\n")
    kw: dict[str, Any] = {"unit_column": "owner", "unit_is_entry": False} if unit_column else {}
    request = AggregateRequest(
        source=JsonlSource(path=path),
        queries=QUERIES,
        constraint=CONSTRAINTS[seed % len(CONSTRAINTS)],
        release_times=[T0 + DAY * i for i in range(1, 7)],
        first_interval=1,
        clock=T0 + 4 * DAY,
        on_error="quarantine",
        **kw,
    )
    result = run_both(spark_engine, request, tmp_path)
    values = result.aggregates.values
    assert set(values) == {q.name for q in QUERIES}
    assert values["sum_squares"].any() and result.aggregates.report.non_numeric["sum_squares"]
