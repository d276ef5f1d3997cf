"""The engine setting: ``[engine]`` in the configuration, ``get_engine``, and the fingerprint."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from dpcr.config import parse_config
from dpcr.engines import EngineConfig, get_engine
from dpcr.errors import ConfigError, MissingExtraError

BASE = {
    "source": {"format": "jsonl", "path": "c.jsonl"},
    "privacy": {"epsilon": 1.0},
    "constraint": {"at_most_k": 3},
    "release": {"plan": "disjoint", "start": "2025-01-01", "period": "1d"},
    "query": [{"name": "n", "kind": "count"}],
}


def test_default_engine_is_duckdb(tmp_path: Path) -> None:
    release = parse_config(BASE, base_dir=tmp_path)
    assert release.engine == EngineConfig()
    assert get_engine(release.engine).name == "duckdb"


def test_engine_table_with_spark_settings(tmp_path: Path) -> None:
    raw = BASE | {
        "engine": {
            "name": "spark",
            "spark": {
                "master": "local[4]",
                "spark": {"executor": {"memory": "8g"}},
                "spark.sql.shuffle.partitions": 16,
            },
        }
    }
    release = parse_config(raw, base_dir=tmp_path)
    assert release.engine.name == "spark"
    assert release.engine.master == "local[4]"
    assert dict(release.engine.conf) == {
        "spark.executor.memory": "8g",
        "spark.sql.shuffle.partitions": "16",
    }
    assert parse_config(BASE | {"engine": "spark"}, base_dir=tmp_path).engine.name == "spark"


def test_switching_engines_keeps_the_fingerprint(tmp_path: Path) -> None:
    release = parse_config(BASE, base_dir=tmp_path)
    spark = dataclasses.replace(release, engine=EngineConfig(name="spark", master="yarn"))
    assert spark.fingerprint() == release.fingerprint()


@pytest.mark.parametrize(
    ("engine", "match"),
    [
        ({"name": "flink"}, "engine.name must be one of"),
        ({"name": "duckdb", "spark": {"master": "local[2]", "x": 1}}, "engine.name is 'duckdb'"),
        ({"name": "spark", "threads": 4}, "key 'threads' is not known"),
        ({"name": "spark", "spark": {"master": ""}}, "master"),
    ],
)
def test_bad_engine_settings_name_the_fix(tmp_path: Path, engine: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_config(BASE | {"engine": engine}, base_dir=tmp_path)


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "pyspark" or m.startswith("dpcr.engines.spark")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark -> ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'dpcr\[spark\]'"):
        import dpcr.engines.spark  # noqa: F401


def test_a_duckdb_memory_limit_is_read_checked_and_applied(tmp_path: Path) -> None:
    """``[engine] memory_limit`` reaches the connection a run opens; a limit that is not an
    amount of memory, or one given for Spark, is refused naming the fix; the releases do not
    change (a run spilling past a tiny limit releases what an unlimited run does)."""
    from dpcr.noise import simulation_randomness
    from dpcr.release._session import open_connection
    from e2e.helpers import mutations, write_jsonl

    raw = BASE | {"engine": {"memory_limit": "1GB"}}
    assert parse_config(raw, base_dir=tmp_path).engine.memory_limit == "1GB"
    con = open_connection("64MiB")
    assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] in (
        "64.0 MiB", "64.0MiB", "67.1 MB", "67.1MB")  # fmt: skip
    con.close()
    for bad, match in ((BASE | {"engine": {"memory_limit": "lots"}}, "amount of memory"),
                       (BASE | {"engine": {"memory_limit": 2}}, "amount of memory"),
                       (BASE | {"engine": {"name": "spark", "memory_limit": "1GB"}},
                        "spark.driver.memory")):  # fmt: skip
        with pytest.raises(ConfigError, match=match):
            parse_config(bad, base_dir=tmp_path)
    write_jsonl(tmp_path / "c.jsonl", mutations())
    released = []
    for limit in (None, "32MB"):
        engine = {} if limit is None else {"engine": {"memory_limit": limit}}
        out = tmp_path / f"out-{limit}"
        release = parse_config(BASE | engine | {"output": {"dir": str(out)}}, base_dir=tmp_path)
        result = release.run(until="2025-01-12", rng=simulation_randomness(5))
        released.append([r.record() for r in result.rows])
    assert released[0] == released[1] and released[0]


@pytest.mark.slow
def test_an_engine_whose_session_another_engine_stopped_starts_again() -> None:
    """Engines of one process share a SparkContext: when one stops it and another starts a new
    session, an engine still holding the stopped session takes the live one."""
    pytest.importorskip("pyspark")
    from dpcr.engines.spark import SparkEngine

    conf = {"spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "2"}
    held, stopper, starter = (SparkEngine(master="local[1]", conf=conf) for _ in range(3))
    try:
        first = held.session()
        stopper.session()
        stopper.stop()  # (the shared context: ``first`` is stopped too)
        live = starter.session()
        assert live is not first
        again = held.session()
        assert again.range(3).count() == 3
    finally:
        for engine in (held, stopper, starter):
            engine.stop()


@pytest.mark.slow
def test_the_boundary_of_consumed_records_is_the_seen_th_record_number() -> None:
    """``_boundary`` (the number of the n-th record of a rerun's earlier runs) against a sort of
    the numbers, with gaps, numbers spread over several buckets and split rows (part 2) that
    are not records; n past the last record gives the largest number."""
    pytest.importorskip("pyspark")
    import numpy as np

    from dpcr.engines.spark import SparkEngine
    from dpcr.engines.spark._load import _boundary

    rng = np.random.default_rng(3)
    numbers = np.sort(rng.choice(np.arange(1, 400_000), size=3_000, replace=False))
    parts = rng.choice([0, 1], size=numbers.size).tolist()
    rows = [(int(r), p) for r, p in zip(numbers, parts, strict=True)]
    rows += [(int(r), 2) for r in numbers[::7]]  # the insert halves of moving updates
    conf = {"spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "3"}
    engine = SparkEngine(master="local[1]", conf=conf)
    try:
        frame = engine.session().createDataFrame(rows, "record long, part int")
        for seen in (0, 1, 2, 1_000, 1_234, 2_999, 3_000, 3_005):
            want = 0 if seen == 0 else int(numbers[min(seen, numbers.size) - 1])
            assert _boundary(frame, seen) == want, seen
    finally:
        engine.stop()
