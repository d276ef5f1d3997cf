"""The Spark engine against the DuckDB engine: identical results on generated changelogs.

Each case writes a changelog with ties in timestamps, records out of time order, every
quarantine reason, moving updates (with a unit column), non-numeric sums and unknown histogram
keys, and runs one request through both engines: the load reports, the quarantine files (byte
for byte), the bounding reports and every totals array must be equal. One SparkSession serves
the module.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

pytest.importorskip("pyspark")

from dpcr.bounding.constraints import AtMostK
from dpcr.changelog import JsonlSource, ParquetSource
from dpcr.engines.base import AggregateRequest, EngineResult, open_columns
from dpcr.engines.duckdb import DuckDBEngine
from dpcr.engines.spark import SparkEngine
from dpcr.errors import ChangelogError, ConfigError
from dpcr.queries import Count, Histogram, Sum

pytestmark = pytest.mark.slow

from engines.helpers import (  # noqa: E402
    CONSTRAINTS,
    DAY,
    MACHINE,
    OPEN_QUERIES,
    QUERIES,
    T0,
    generate,
)


@pytest.fixture(scope="module")
def spark_engine() -> Any:
    engine = SparkEngine(
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
        batch_rows=7,  # many batches per task: record and seq numbers cross batches
    )
    yield engine
    engine.stop()


def to_parquet(jsonl: Path, path: Path, *, structs: bool) -> None:
    """The valid-JSON lines as Parquet: before/after as JSON text, or as structs."""
    cols = (
        "{'entry': 'VARCHAR', 'ts': 'VARCHAR', 'seq': 'VARCHAR', 'op': 'VARCHAR', "
        "'before': 'JSON', 'after': 'JSON'}"
    )
    rows = (
        f"read_json('{jsonl}', format = 'newline_delimited', columns = {cols}, "
        "ignore_errors = true)"
    )
    rel = (
        "SELECT entry, ts, seq, op, before::VARCHAR AS before, after::VARCHAR AS after "
        f"FROM {rows} WHERE op IS NOT NULL"
    )
    if structs:
        row = "STRUCT(owner VARCHAR, status VARCHAR, k VARCHAR, kind VARCHAR, v DOUBLE)"
        rel = (
            f"SELECT entry, ts, seq, op, TRY_CAST(before::JSON AS {row}) AS before, "
            f"TRY_CAST(after::JSON AS {row}) AS after FROM ({rel})"
        )
    duckdb.sql(f"COPY ({rel}) TO '{path}' (FORMAT parquet)")


def assert_same(a: EngineResult, b: EngineResult) -> None:
    assert b.load == a.load
    assert b.aggregates.report == a.aggregates.report
    assert b.aggregates.first_interval == a.aggregates.first_interval
    assert b.aggregates.last_interval == a.aggregates.last_interval
    assert list(b.aggregates.values) == list(a.aggregates.values)
    for name, arr in a.aggregates.values.items():
        np.testing.assert_array_equal(b.aggregates.values[name], arr, err_msg=name)
    # (open histograms: the candidate keys, in their order, with their first intervals)
    assert [list(c.items()) for c in b.aggregates.candidates.values()] == [
        list(c.items()) for c in a.aggregates.candidates.values()
    ]
    assert list(b.aggregates.candidates) == list(a.aggregates.candidates)
    assert (b.min_ts, b.max_ts, b.not_yet_due, b.missing_columns) == (
        a.min_ts,
        a.max_ts,
        a.not_yet_due,
        a.missing_columns,
    )


def run_both(spark_engine: SparkEngine, request: AggregateRequest, tmp: Path) -> EngineResult:
    """Both engines on ``request``; their results (and quarantine files) must agree."""
    qa, qb = tmp / "quarantine_duckdb.jsonl", tmp / "quarantine_spark.jsonl"
    a = DuckDBEngine().aggregate(replace(request, quarantine_path=qa))
    b = spark_engine.aggregate(replace(request, quarantine_path=qb))
    assert qb.read_bytes() == qa.read_bytes()
    assert_same(a, replace(b, load=replace(b.load, quarantine_path=qa)))
    return a


def _request(source: Any, rng: random.Random, **kw: Any) -> AggregateRequest:
    n = rng.randint(3, 7)
    return AggregateRequest(
        source=source,
        queries=QUERIES,
        constraint=kw.pop("constraint"),
        release_times=[T0 + DAY * i for i in range(1, n + 1)],
        first_interval=rng.randint(1, 3),
        clock=T0 + 4 * DAY,
        on_error="quarantine",
        **kw,
    )


CASES = [(seed, seed % len(CONSTRAINTS), seed % 3 == 1) for seed in range(12)]


@pytest.mark.parametrize(("seed", "c", "unit_column"), CASES)
def test_jsonl_identical(
    spark_engine: SparkEngine, tmp_path: Path, seed: int, c: int, unit_column: bool
) -> None:
    rng = random.Random(1000 + seed)
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(generate(seed, unit_column=unit_column)) + "\n")
    kw: dict[str, Any] = {"constraint": CONSTRAINTS[c]}
    if unit_column:
        kw |= {"unit_column": "owner", "unit_is_entry": False}
    if seed % 4 == 3:  # a resumed run: late records freeze their (unit, entry)
        kw |= {"exclude_late": (rng.randint(5, 30), T0 + rng.randint(1, 3) * DAY)}
    if seed % 5 == 4:
        kw |= {"frozen": [("e1", "e1", 3)] if not unit_column else [("u1", "e2", 4)]}
    result = run_both(spark_engine, _request(JsonlSource(path=path), rng, **kw), tmp_path)
    assert result.load.invalid > 0 and result.load.valid > 0


@pytest.mark.parametrize(("seed", "c", "unit_column"), [(20, 0, False), (21, 1, True),
                                                       (23, 4, True)])
def test_open_histograms_identical(
    spark_engine: SparkEngine, tmp_path: Path, seed: int, c: int, unit_column: bool
) -> None:
    """Open histograms beside every other kind: the same candidate keys (first interval,
    order) and per-interval per-key totals; with a unit column, a unit's change over the L1
    bound of 2 is dropped alike; a resumed run (late records) too."""
    rng = random.Random(2000 + seed)
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(generate(seed, unit_column=unit_column)) + "\n")
    kw: dict[str, Any] = {"constraint": CONSTRAINTS[c]}
    if unit_column:
        kw |= {"unit_column": "owner", "unit_is_entry": False}
    if seed % 2:
        kw |= {"exclude_late": (rng.randint(5, 30), T0 + rng.randint(1, 3) * DAY)}
    request = replace(_request(JsonlSource(path=path), rng, **kw), queries=QUERIES + OPEN_QUERIES)
    result = run_both(spark_engine, request, tmp_path)
    found = result.aggregates.candidates
    assert set(found) == {q.name for q in OPEN_QUERIES}
    assert len(found["v_open"]) > 3 and found["k_open"]
    for q in OPEN_QUERIES:
        assert result.aggregates.values[q.name].shape[1] == len(
            open_columns(q, found[q.name])
        )
    if seed != 21:
        return
    # A Parquet copy (rows as structs: numbers typed) gives the same too.
    parquet = tmp_path / "c.parquet"
    to_parquet(path, parquet, structs=True)
    run_both(spark_engine, replace(request, source=ParquetSource(path=parquet)), tmp_path)


@pytest.mark.parametrize("structs", [False, True])
def test_parquet_identical(spark_engine: SparkEngine, tmp_path: Path, structs: bool) -> None:
    for seed in (3,) if structs else (7,):
        rng = random.Random(seed)
        jsonl = tmp_path / "c.jsonl"
        jsonl.write_text("\n".join(generate(seed, unit_column=True)) + "\n")
        path = tmp_path / f"c{seed}.parquet"
        to_parquet(jsonl, path, structs=structs)
        for constraint in (CONSTRAINTS[seed % 6], MACHINE):
            run_both(
                spark_engine,
                _request(
                    ParquetSource(path=path),
                    rng,
                    constraint=constraint,
                    unit_column="owner",
                    unit_is_entry=False,
                ),
                tmp_path,
            )


@pytest.mark.parametrize("end", [b"\n", b""])
def test_records_set_aside_when_read_and_bare_nan_tokens_are_the_same(
    spark_engine: SparkEngine, tmp_path: Path, end: bytes
) -> None:
    """Lines that are not UTF-8 or longer than ``max_record_bytes`` (in several batches, and
    the last line, with or without a line end), and summed values that are bare NaN or
    infinity tokens (not JSON), are quarantined by both engines alike: the same counts,
    quarantine file (raw bytes, prefixes, digests) and totals."""
    lines = [x.encode() for x in generate(4, unit_column=False)]
    latin1 = lines[0].replace(b'"kind": "short"', b'"kind": "caf\xe9"')
    long = lines[9][:-1] + b', "pad": "' + b"x" * 600 + b'"}'
    lines[3:3] = [latin1]
    lines[20:20] = [long, b"\xff\xfe{not even json"]
    for i, token in ((12, b"NaN"), (30, b"-inf")):
        after = b'{"owner": "u1", "status": "issued", "k": "a", "kind": "short", "v": %s}' % token
        lines.insert(i, b'{"entry": "n%d", "ts": 1735707600, "op": "insert", "after": %s}'
                     % (i, after))  # fmt: skip
    lines.append(latin1.replace(b"\xe9", b"\xe8"))
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\n".join(lines) + end)
    source = JsonlSource(path=path, max_record_bytes=512)
    result = run_both(
        spark_engine,
        _request(source, random.Random(4), constraint=AtMostK(k=2)),
        tmp_path,
    )
    assert result.load.quarantined["bad_encoding"] == 3
    assert result.load.quarantined["too_long"] == 1
    tokens = (tmp_path / "quarantine_duckdb.jsonl").read_text().count("bare NaN or infinity")
    assert tokens == 2


def test_raise_gives_the_same_error(spark_engine: SparkEngine, tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(generate(5, unit_column=False)) + "\n")
    request = replace(
        _request(JsonlSource(path=path), random.Random(5), constraint=AtMostK(k=2)),
        on_error="raise",
    )
    with pytest.raises(ChangelogError) as a:
        DuckDBEngine().aggregate(request)
    with pytest.raises(ChangelogError) as b:
        spark_engine.aggregate(request)
    assert (str(b.value), b.value.record, b.value.field, b.value.reason) == (
        str(a.value),
        a.value.record,
        a.value.field,
        a.value.reason,
    )


def test_unknown_key_error_is_the_same(spark_engine: SparkEngine, tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(generate(8, unit_column=False)) + "\n")
    request = replace(
        _request(JsonlSource(path=path), random.Random(8), constraint=AtMostK(k=3)),
        queries=(Histogram(name="k", column="k", categories=("a", "b"), unknown="error"),),
        quarantine_path=tmp_path / "q.jsonl",
    )
    with pytest.raises(ChangelogError) as a:
        DuckDBEngine().aggregate(request)
    with pytest.raises(ChangelogError) as b:
        spark_engine.aggregate(request)
    assert (str(b.value), b.value.record) == (str(a.value), a.value.record)


def test_missing_columns_are_the_same(spark_engine: SparkEngine, tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(generate(9, unit_column=False)) + "\n")
    request = replace(
        _request(JsonlSource(path=path), random.Random(9), constraint=AtMostK(k=3)),
        queries=(Sum(name="fare", column="fare", lower=0, upper=5), Count(name="n")),
    )
    result = run_both(spark_engine, request, tmp_path)
    assert result.missing_columns == ("fare",)


def test_other_formats_are_refused(spark_engine: SparkEngine, tmp_path: Path) -> None:
    from dpcr.changelog import CsvSource

    path = tmp_path / "c.csv"
    path.write_text("entry,ts,op,before,after\n")
    request = _request(CsvSource(path=path), random.Random(1), constraint=AtMostK(k=1))
    with pytest.raises(ConfigError, match="Parquet or JSON Lines"):
        spark_engine.aggregate(request)
