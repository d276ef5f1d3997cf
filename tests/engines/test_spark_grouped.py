"""Grouped sums (``kind = "sum"`` with ``by``, docs/privacy.md section 12b) on the Spark engine
against the DuckDB engine: the same results on the same changelogs.

* full runs: generated changelogs (every quarantine reason, moving updates, ties, non-numeric
  values, keys outside the declared ones) with declared-key and open-key grouped sums beside
  the open histograms they follow, under at-most-k, a state machine and per-op limits, each
  entry its own unit or a unit column owning several entries (a unit whose change over the
  keys exceeds the L1 bound in an interval is left out alike): the load and bounding reports,
  the candidate keys (first interval, order) and every per-interval per-key total are equal;
* three incremental steps with appends: each step's result equals the DuckDB engine's run over
  the whole source, the last one Spark's own full run;
* a seeded release over three runs with appends: the same releases.csv byte for byte, the same
  stored values and the same keys' first and selection intervals.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import dpcr
from dpcr.changelog import JsonlSource, ParquetSource
from dpcr.engines import EngineConfig
from dpcr.engines.base import Consumed
from dpcr.engines.spark import SparkEngine
from dpcr.queries import GroupedSum, Query
from engines.helpers import (
    CONSTRAINTS,
    DAY,
    GROUPED_QUERIES,
    HOUR,
    OPEN_QUERIES,
    QUERIES,
    SPARK,
    T0,
    generate,
    run_cuts,
    stored_outputs,
)
from engines.test_spark_differential import _request, run_both, to_parquet
from engines.test_spark_incremental import STEPS, Release, _append, assert_same, chunks

pytestmark = pytest.mark.slow

#: A count, an event count (its changes are clamped per unit whatever the unit), the open
#: histograms and the grouped sums, some of which follow them.
ALL: tuple[Query, ...] = QUERIES[:1] + QUERIES[7:8] + OPEN_QUERIES + GROUPED_QUERIES
GROUPED = [q.name for q in GROUPED_QUERIES]
#: (constraint number in engines.helpers.CONSTRAINTS, a unit column): the constraint kinds and
#: unit modes of the grouped-sum release tests (tests/release/test_grouped_sum.py).
KINDS = {"at_most_k": 1, "state_machine": 3, "op_limits": 6}


@pytest.fixture(scope="module")
def spark_engine() -> Iterator[SparkEngine]:
    engine = SparkEngine(
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g",
              "spark.ui.showConsoleProgress": "false"},
        batch_rows=7,
    )  # fmt: skip
    yield engine
    engine.stop()


def burst(day: int) -> list[str]:
    """Unit u7 inserts three entries of key ``a`` (``kind`` short, v = 10) in the interval of
    ``day``: with a unit column its change of ``v_by_k`` is 3 × 20 steps = 60 > L1 = 40 (of
    ``v_by_kind``, 3 × 2 = 6 > 4), so the unit-interval is left out where the constraint keeps
    all three; each entry alone is within the bound."""
    row = {"owner": "u7", "status": "issued", "k": "a", "kind": "short", "v": 10}
    return [json.dumps({"entry": f"g{n}", "ts": (T0 + day * DAY + (n + 1) * HOUR) // 1_000_000,
                        "op": "insert", "after": row}) for n in range(3)]  # fmt: skip


def assert_grouped_can_fail(result: Any, *, clamped: bool) -> None:
    """Every grouped sum has a non-zero total, the declared keys met a value outside them, and
    (``clamped``) a unit's change was left out of a grouped sum."""
    agg = result.aggregates
    for name in GROUPED:
        assert abs(agg.values[name]).sum() > 0, name
    assert agg.report.unknown_keys.get("v_by_k")
    assert set(agg.candidates) == {q.name for q in ALL if getattr(q, "open", False)}
    assert list(agg.candidates["v_by_k_open"]) == list(agg.candidates["k_open"])
    if clamped:
        assert agg.report.clamped.get("v_by_k") and agg.report.clamped.get("v_by_kind")


#: (seed, constraint kind, a unit column); an odd seed's run is resumed (late records).
FULL = [(50, "at_most_k", False), (51, "at_most_k", True), (52, "state_machine", False),
        (53, "state_machine", True), (54, "op_limits", False), (57, "op_limits", True)]


@pytest.mark.parametrize(("seed", "kind", "unit_column"), FULL,
                         ids=[f"{k}-{'owner' if u else 'entry'}" for _s, k, u in FULL])
def test_full_runs_identical(
    spark_engine: SparkEngine, tmp_path: Path, seed: int, kind: str, unit_column: bool
) -> None:
    """One request through both engines; a resumed run (late records) for every other case,
    and a Parquet copy (rows as structs: numbers typed) for one."""
    rng = random.Random(4000 + seed)
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(generate(seed, unit_column=unit_column) + burst(2)) + "\n")
    kw: dict[str, Any] = {"constraint": CONSTRAINTS[KINDS[kind]]}
    if unit_column:
        kw |= {"unit_column": "owner", "unit_is_entry": False}
    if seed % 2:
        kw |= {"exclude_late": (rng.randint(5, 30), T0 + rng.randint(1, 2) * DAY)}
    request = replace(_request(JsonlSource(path=path), rng, **kw), queries=ALL)
    result = run_both(spark_engine, request, tmp_path)
    assert_grouped_can_fail(result, clamped=unit_column)
    if kind == "op_limits" and unit_column:
        parquet = tmp_path / "c.parquet"
        to_parquet(path, parquet, structs=True)
        run_both(spark_engine, replace(request, source=ParquetSource(path=parquet)), tmp_path)


STEPPED = [(60, "at_most_k", False), (61, "state_machine", True), (62, "op_limits", True)]


@pytest.mark.parametrize(("seed", "kind", "unit_column"), STEPPED,
                         ids=[f"{k}-{'owner' if u else 'entry'}" for _s, k, u in STEPPED])
def test_steps_equal_full_runs(
    spark_engine: SparkEngine, tmp_path: Path, seed: int, kind: str, unit_column: bool
) -> None:
    """Three steps with appends (the first settles the burst of u7's interval, whose totals
    and clamps later steps take from the state): every step's candidate keys and per-key
    totals are the DuckDB engine's over the whole source, the last one Spark's full run's."""
    path = tmp_path / "c.jsonl"
    path.write_text("")
    release = Release(spark_engine, tmp_path, JsonlSource(path=path),
                      CONSTRAINTS[KINDS[kind]], unit_column, queries=ALL)  # fmt: skip
    parts = chunks(seed, unit_column)
    parts[0] += burst(1)
    seen: list[dict[str, int]] = []
    results = []
    for k, (lines, (_share, lo, hi)) in enumerate(zip(parts, STEPS, strict=True)):
        _append(path, lines)
        request, result, pending = release.step(lo, hi)
        if k:
            consumed = Consumed(bytes=int(release.store.token or 0))
            assert spark_engine.continues(replace(request, consumed=consumed), release.ref(hi))
        pending.commit(release.commit_store(result, hi))
        seen.append(dict(result.aggregates.candidates["v_by_k_open"]))
        results.append(result)
    whole = spark_engine.aggregate(replace(request, quarantine_path=tmp_path / "q_spark.jsonl"))
    assert_same(whole, result, tmp_path / "quarantine_step.jsonl")
    assert all(seen[-1][key] == iv for key, iv in seen[0].items()) and seen[0]
    for name in GROUPED:
        assert any(abs(r.aggregates.values[name]).sum() for r in results), name
    # (the burst's interval is the first step's; the report counts the intervals a run asks)
    assert bool(results[0].aggregates.report.clamped.get("v_by_k")) == unit_column


def grouped_release(tmp: Path, engine: EngineConfig, *, unit: str, constraint: Any,
                    plan: Any, epsilon: float) -> dpcr.ContinualRelease:  # fmt: skip
    """An open histogram of zones, the fares by zone following it and the fares by kind over
    declared keys, of ``tmp/log.jsonl``."""
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"), unit=unit, constraint=constraint,
        plan=plan,
        queries=[
            dpcr.Histogram(name="zones", column="zone", open=True),
            GroupedSum(name="fares_by_zone", column="fare", lower=0, upper=100, grid=0.5,
                       by="zone", open=True, keys_from="zones"),
            GroupedSum(name="fares_by_kind", column="fare", lower=0, upper=100, grid=0.5,
                       by="kind", categories=("multi", "monthly")),
        ],
        budget=dpcr.Budget(epsilon=epsilon, delta=1e-6), output_dir=tmp / "out", engine=engine,
    )  # fmt: skip


def release_three_runs(tmp_path: Path, log: list[dict[str, Any]], cuts: tuple[str, ...],
                       **kw: Any) -> list[Any]:  # fmt: skip
    """The release over ``log`` run at each of ``cuts``, appending the records dated before
    it, on DuckDB then on Spark: per engine the releases.csv bytes, the stored values and
    the open keys' (first, selection) intervals."""
    outputs = []
    for name, engine in (("duckdb", EngineConfig()), ("spark", SPARK)):
        tmp = tmp_path / name
        tmp.mkdir()
        path = tmp / "log.jsonl"
        path.write_text("")
        release = grouped_release(tmp, engine, **kw)
        run_cuts(release, path, log, cuts, 40)
        csv = (tmp / "out" / "simulation" / "releases.csv").read_bytes()
        outputs.append((csv, *stored_outputs(release)))
        if name == "spark":  # (the later runs continued the state)
            state = release.store_path.with_name(release.store_path.name + ".state") / "spark"
            current = (state / "CURRENT").read_text().strip()
            head = json.loads((state / f"v{current}" / "HEAD.json").read_text())
            assert head["tables"]["okeys"] and int(current) == len(cuts)
    return outputs


@pytest.fixture
def zones(tmp_path: Path) -> Iterator[None]:
    """The zones of :func:`release.test_grouped_sum.fares_log`, for the threshold of
    :func:`grouped_release` at ε = 8 with the ten-day disjoint plan."""
    from dpcr.release._selection import key_selections
    from release.test_open_keys import END, START, ZONES, zones_for

    (tmp_path / "probe").mkdir()
    probe = grouped_release(tmp_path / "probe", EngineConfig(), unit="entry",
                            constraint=dpcr.AtMostK(k=3), epsilon=8.0,
                            plan=dpcr.DisjointRelease(start=START, period="1d", end=END))
    ZONES.clear()
    ZONES.update(zones_for(key_selections(probe)["zones"].threshold))
    yield
    ZONES.clear()


@pytest.mark.usefixtures("zones")
def test_a_seeded_release_is_byte_identical(tmp_path: Path) -> None:
    """Keys selected over the runs (each entry its own unit, at most 3 mutations): the fares by
    zone follow the zones from the same intervals, on both engines alike."""
    from release.test_grouped_sum import fares_log
    from release.test_open_keys import END, START

    duck, spark = release_three_runs(
        tmp_path, fares_log(), ("2025-01-03T00:00:00Z", "2025-01-06T00:00:00Z", END),
        unit="entry", constraint=dpcr.AtMostK(k=3), epsilon=8.0,
        plan=dpcr.DisjointRelease(start=START, period="1d", end=END),
    )  # fmt: skip
    assert spark == duck
    csv, _values, keys = duck
    assert b"fares_by_zone" in csv and b"fares_by_kind" in csv
    assert keys["fares_by_zone"] == keys["zones"]
    assert {k for k, (_first, sel) in keys["zones"].items() if sel is not None} >= {"A", "B", "D"}


def test_a_seeded_release_of_rider_units_is_byte_identical(tmp_path: Path) -> None:
    """Riders owning several tickets (a unit column: per-unit L1 drops), a state machine over
    the rides, a tree plan: the same bytes and stored values on both engines."""
    from release.test_neighbours import CONSTRAINTS as RELEASE_CONSTRAINTS
    from release.test_neighbours import END, PLANS
    from release.test_open_neighbours import open_log

    duck, spark = release_three_runs(
        tmp_path, open_log(7), ("2025-01-05T00:00:00Z", "2025-01-10T00:00:00Z", END),
        unit="rider_id", constraint=RELEASE_CONSTRAINTS["state_machine"], epsilon=8.0,
        plan=PLANS["tree"],
    )  # fmt: skip
    assert spark == duck
    _csv, values, keys = duck
    assert any(v for (q, *_r), v in values.items() if q == "fares_by_kind")
    assert any(v for (q, *_r), v in values.items() if q == "fares_by_zone")
    assert keys["fares_by_zone"] == keys["zones"] and len(keys["zones"]) > 3
