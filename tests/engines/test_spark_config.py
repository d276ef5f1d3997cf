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
