"""The Spark engine against the DuckDB engine: identical results on generated changelogs.

Each case writes a changelog with ties in timestamps, records out of time order, every
quarantine reason, moving updates (with a unit column), non-numeric sums and unknown histogram
keys, and runs one request through both engines: the load reports, the quarantine files (byte
for byte), the bounding reports and every totals array must be equal. One SparkSession serves
the module.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

pytest.importorskip("pyspark")

from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid, TimeBounded
from dpcr.bounding.state_machine import StateMachine
from dpcr.changelog import JsonlSource, ParquetSource
from dpcr.engines.base import AggregateRequest, EngineResult
from dpcr.engines.duckdb import DuckDBEngine
from dpcr.engines.spark import SparkEngine
from dpcr.errors import ChangelogError, ConfigError
from dpcr.queries import Count, Histogram, Query, Sum

pytestmark = pytest.mark.slow

HOUR = 3_600_000_000
DAY = 24 * HOUR
T0 = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
STATES = ("issued", "activated", "used", "expired")
MACHINE = StateMachine(
    column="status",
    initial=("issued",),
    transitions=("issued -> activated -> used -> expired", "issued -> expired"),
    terminal=("expired",),
)
QUERIES: tuple[Query, ...] = (
    Count(name="live"),
    Count(name="live_a", where={"k": ["a"]}),
    Sum(name="v", column="v", lower=0, upper=10),
    Sum(name="neg", column="v", lower=-4, upper=-1, grid=0.5),
    Histogram(name="k", column="k", categories=("a", "b", "c")),
    Histogram(name="k_other", column="k", categories=("a", "b"), unknown="other"),
)
CONSTRAINTS: tuple[Constraint, ...] = (
    AtMostK(k=2),
    AtMostK(k=4),
    TimeBounded(bound=30 * HOUR),
    MACHINE,
    Hybrid(
        column="kind",
        classes={"short": AtMostK(k=1), "long": TimeBounded(bound=2 * DAY)},
        default=AtMostK(k=3),
    ),
    Hybrid(column="kind", classes={"short": MACHINE, "long": AtMostK(k=3)}),
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


def _when(rng: random.Random, ts: int) -> Any:
    """The timestamp as ISO text or epoch seconds (both forms the loader reads)."""
    if rng.random() < 0.5:
        return ts // 1_000_000
    when = datetime.fromtimestamp(ts / 1_000_000, tz=UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _row(rng: random.Random, owner: str, state: int) -> dict[str, Any]:
    v: Any = rng.choice([rng.randint(-6, 14), round(rng.uniform(-5, 12), 2), "x", None, "7"])
    row: dict[str, Any] = {
        "owner": owner,
        "status": STATES[min(state, 3)] if rng.random() > 0.05 else "lost",
        "k": rng.choice(["a", "b", "c", "z"]),
        "kind": rng.choice(["short", "long", "other"]),
    }
    if v is not None:
        row["v"] = v
    return row


def generate(seed: int, *, unit_column: bool) -> list[str]:
    """Lines of a JSONL changelog (some of them invalid on purpose)."""
    rng = random.Random(seed)
    times = [T0 + rng.randrange(0, 6 * DAY, HOUR) for _ in range(12)]  # few values: ties
    out: list[dict[str, Any] | str] = []
    for e in range(rng.randint(6, 14)):
        owner = f"u{rng.randint(0, 3)}"
        ts = sorted(rng.sample(times, rng.randint(1, 6)))
        row: dict[str, Any] | None = None
        state = 0
        for i, t in enumerate(ts):
            rec: dict[str, Any] = {"entry": f"e{e}", "ts": _when(rng, t)}
            if rng.random() < 0.3:
                rec["seq"] = rng.randint(0, 5)
            if i == 0 or row is None:
                new = _row(rng, owner, 0)
                rec |= {"op": "insert", "after": new}
                row = new
            elif i == len(ts) - 1 and rng.random() < 0.4:
                rec |= {"op": "delete", "before": row}
                row = None
            else:
                state += rng.choice([0, 1, 1, 2])
                if unit_column and rng.random() < 0.2:
                    owner = f"u{rng.randint(0, 3)}"  # a moving update
                new = _row(rng, owner, state)
                rec |= {"op": "update", "after": new}
                if rng.random() < 0.8:
                    rec["before"] = row
                row = new
            out.append(rec)
    # Every quarantine reason at least once.
    bad: list[dict[str, Any] | str] = [
        "not json",
        "[1, 2]",
        {"entry": "b1", "ts": _when(rng, times[0]), "op": "insert", "after": 5},
        {
            "entry": "b2",
            "ts": _when(rng, times[1]),
            "op": "insert",
            "before": {"a": 1},
            "after": {"a": 1},
        },
        {"entry": "b3", "ts": _when(rng, times[2]), "op": "upsert", "after": {}},
        {"ts": _when(rng, times[3]), "op": "insert", "after": {"owner": "u1"}},
        {"entry": "b4", "ts": "yesterday", "op": "insert", "after": {"owner": "u1"}},
        {
            "entry": "b5",
            "ts": _when(rng, times[4]),
            "seq": "x1",
            "op": "insert",
            "after": {"owner": "u1"},
        },
        {"entry": "b6", "ts": _when(rng, times[5]), "op": "insert", "after": {"k": "a"}},
        {"entry": "b7", "ts": _when(rng, times[6]), "op": "update", "after": {"owner": "u2"}},
        {"entry": "b8", "ts": _when(rng, times[7]), "op": "delete", "before": {"owner": "u2"}},
        {
            "entry": "b9",
            "ts": _when(rng, times[8]),
            "seq": 1,
            "op": "insert",
            "after": {"owner": "u3", "v": 1},
        },
        {
            "entry": "b9",
            "ts": _when(rng, times[9]),
            "seq": 1,
            "op": "update",
            "before": {"owner": "u3"},
            "after": {"owner": "u3"},
        },
        {
            "entry": "b9",
            "ts": _when(rng, times[9]),
            "seq": 2,
            "op": "insert",
            "after": {"owner": "u3"},
        },
        "",
    ]
    for b in bad:
        out.insert(rng.randrange(len(out) + 1), b)
    # Out-of-order arrival: swap a few neighbours.
    for _ in range(len(out) // 4):
        i = rng.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]
    return [r if isinstance(r, str) else json.dumps(r) for r in out]


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


CASES = [(seed, seed % len(CONSTRAINTS), seed % 3 == 1) for seed in range(18)]


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


@pytest.mark.parametrize("structs", [False, True])
def test_parquet_identical(spark_engine: SparkEngine, tmp_path: Path, structs: bool) -> None:
    for seed in (3, 7):
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
