"""Incremental bounding on Spark: runs over closed intervals with state kept between them give
the totals of one run over everything, and a run repeated after a crash (state not committed)
gives the same totals again."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pyspark")

from dpcr.bounding.constraints import AtMostK, Constraint, TimeBounded
from dpcr.changelog import JsonlSource
from dpcr.engines.spark import SparkEngine, wanted_columns
from dpcr.engines.spark._bound import aggregate
from dpcr.engines.spark._incremental import aggregate_increment, commit, current
from dpcr.engines.spark._load import validate
from dpcr.engines.spark._records import RecordSpec
from dpcr.errors import ConfigError
from engines.helpers import CONSTRAINTS, DAY, HOUR, QUERIES, T0, generate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark() -> Any:
    engine = SparkEngine(conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"})
    yield engine.session()
    engine.stop()


@pytest.mark.parametrize(
    ("seed", "constraint", "unit_column"),
    [(0, AtMostK(k=2), False), (1, AtMostK(k=3), True), (2, TimeBounded(bound=30 * HOUR), False)],
)
def test_increments_equal_one_run(
    spark: Any, tmp_path: Path, seed: int, constraint: Constraint, unit_column: bool
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(generate(seed, unit_column=unit_column)) + "\n")
    times = tuple(T0 + DAY * i for i in range(1, 7))
    spec = RecordSpec(
        source=JsonlSource(path=path),
        unit_column="owner" if unit_column else None,
        queries=QUERIES,
        constraint=constraint,
        wanted=wanted_columns(QUERIES, constraint),
        release_times=times,
    )
    loaded = validate(
        spark,
        spec.source,
        spec,
        on_error="quarantine",
        quarantine_path=tmp_path / "q.jsonl",
        exclude_late=None,
        frozen=[],
        clock=times[-1],
    )
    whole = aggregate(
        loaded.frame,
        queries=QUERIES,
        constraint=constraint,
        release_times=times,
        first_interval=1,
        unit_is_entry=not unit_column,
    )
    state = tmp_path / "state"
    state.mkdir()
    parts: dict[str, list[np.ndarray]] = {q.name: [] for q in QUERIES}
    for first, last in ((1, 2), (3, 4), (5, 6)):
        kw = {
            "state_dir": state,
            "queries": QUERIES,
            "constraint": constraint,
            "release_times": times[:last],
            "first_interval": first,
            "unit_is_entry": not unit_column,
        }
        values, version = aggregate_increment(spark, loaded.frame, **kw)
        if first == 3:  # a crash before the commit: the next run redoes the batch
            again, version_again = aggregate_increment(spark, loaded.frame, **kw)
            assert version_again == version
            for name in values:
                np.testing.assert_array_equal(again[name], values[name])
        commit(state, version)
        for name, v in values.items():
            parts[name].append(v)
    assert current(state) == 3
    for name, v in whole.values.items():
        np.testing.assert_array_equal(np.concatenate(parts[name]), v, err_msg=name)
    loaded.frame.unpersist()


def test_other_constraints_are_refused(spark: Any, tmp_path: Path) -> None:
    frame = spark.createDataFrame([], "status string")
    with pytest.raises(ConfigError, match="at_most_k and time_bounded"):
        aggregate_increment(
            spark,
            frame,
            state_dir=tmp_path,
            queries=QUERIES,
            constraint=CONSTRAINTS[3],
            release_times=[T0 + DAY],
            first_interval=1,
            unit_is_entry=True,
        )
    _ = random
