"""An open histogram (``open = true``): its TOML and its Python value agree, ``keys`` may be
left out, and what has no meaning with it (``unknown``, a total to sum to, an alert) is refused
in one line before any data is read; the Spark engine runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dpcr
from dpcr.config import parse_config
from dpcr.errors import ConfigError
from dpcr.queries import Histogram
from dpcr.release._settings import _query_identity


def config(tmp: Path, query: dict[str, Any], **extra: Any) -> Any:
    raw: dict[str, Any] = {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0, "delta": 1e-6},
        "constraint": {"at_most_k": 3},
        "release": {
            "plan": "disjoint",
            "start": "2025-01-01T00:00:00Z",
            "period": "1d",
            "end": "2025-02-01T00:00:00Z",
        },
        "query": [{"name": "zones", "kind": "histogram", "column": "zone", **query}],
        **extra,
    }
    return parse_config(raw, base_dir=tmp)


def test_toml_and_python_give_the_same_query(tmp_path: Path) -> None:
    cfg = config(tmp_path, {"open": True})
    assert cfg.queries[0] == Histogram(name="zones", column="zone", open=True)
    assert cfg.queries[0].keys == () and cfg.queries[0].open
    cfg = config(tmp_path, {"open": True, "keys": ["A", "B"]})
    assert cfg.queries[0] == Histogram(name="zones", column="zone", keys=["A", "B"], open=True)
    assert cfg.queries[0].keys == ("A", "B")
    assert "appear" in cfg.queries[0].describe()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({}, r"declare the histogram's keys \(keys = \[...\]\), or set open = true"),
        ({"open": True, "unknown": "other"}, "unknown has no meaning with open = true"),
        ({"open": True, "unknown": "drop"}, "unknown has no meaning with open = true"),
        ({"open": "yes"}, "open must be bool"),
    ],
)
def test_refusals_in_one_line(tmp_path: Path, query: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        config(tmp_path, query)
    assert "\n" not in str(caught.value)


def test_python_refusals_match_the_toml() -> None:
    with pytest.raises(ConfigError, match="or set open = true"):
        Histogram(name="zones", column="zone")
    with pytest.raises(ConfigError, match="unknown has no meaning"):
        Histogram(name="zones", column="zone", open=True, unknown="other")
    with pytest.raises(ConfigError, match="open must be true or false"):
        Histogram(name="zones", column="zone", open=1)  # type: ignore[arg-type]


def test_a_declared_histogram_binds_the_fingerprint_it_bound_before() -> None:
    """Stores written before ``open`` existed keep their fingerprint: a declared histogram's
    identity has no ``open`` in it; an open one's has."""
    declared = Histogram(name="zones", column="zone", keys=["A"])
    assert _query_identity(declared) == (
        "Histogram(name='zones', column='zone', categories=('A',), unknown='error', "
        "where=mappingproxy({}))"
    )
    assert "open=True" in _query_identity(Histogram(name="zones", column="zone", open=True))


def test_the_spark_engine_runs_open_histograms(tmp_path: Path) -> None:
    """(Its results are the DuckDB engine's: tests/engines/test_spark_*.)"""
    cfg = config(tmp_path, {"open": True}, engine={"name": "spark"})
    assert cfg.engine.name == "spark" and cfg.queries[0].open


def test_a_total_to_sum_to_and_an_alert_are_refused(tmp_path: Path) -> None:
    common: dict[str, Any] = {
        "source": dpcr.sources.Jsonl(path=tmp_path / "log.jsonl"),
        "constraint": dpcr.AtMostK(k=3),
        "plan": dpcr.DisjointRelease(start="2025-01-01", period="1d", end="2025-02-01"),
        "budget": dpcr.Budget(epsilon=1.0, delta=1e-6),
        "output_dir": tmp_path / "out",
    }
    queries = [dpcr.Count(name="all"), Histogram(name="zones", column="zone", open=True)]
    with pytest.raises(ConfigError, match=r"sum_to_total.*open histogram"):
        dpcr.ContinualRelease(
            queries=queries, **common,
            consistency={"zones": dpcr.Consistency(modes=("sum_to_total",), total="all")},
        )  # fmt: skip
    with pytest.raises(ConfigError, match="open histogram"):
        dpcr.ContinualRelease(
            queries=queries, **common,
            alerts=[dpcr.AlertRule(name="many", statistic="zones", what="running",
                                    threshold=10, cutoff=1, epsilon=0.1)],
        )  # fmt: skip
