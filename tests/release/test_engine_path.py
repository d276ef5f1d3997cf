"""The release loop through the engine protocol: an engine other than the loop's own DuckDB
connection gets an AggregateRequest and must give the same release (here a DuckDBEngine stands
in for Spark, so the path runs without a JVM)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import dpcr
import dpcr.engines
from dpcr.engines import EngineConfig
from dpcr.engines.duckdb import DuckDBEngine
from dpcr.errors import ConfigError, StoreError
from dpcr.noise import simulation_randomness
from e2e.helpers import mutations, write_jsonl
from release.helpers import zones_release

CUT = "2025-01-03T00:00:00Z"
END = "2025-01-06T00:00:00Z"


def _release(tmp: Path, name: str, **kw: object) -> dpcr.ContinualRelease:
    return zones_release(dpcr.sources.Jsonl(path=tmp / "log.jsonl"), tmp,
                         engine=EngineConfig(name=name), **kw)  # fmt: skip


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    requests: list[object] = []

    class Recording(DuckDBEngine):
        name = "spark"

        def aggregate(self, request):  # type: ignore[no-untyped-def]
            requests.append(request)
            return super().aggregate(request)

    real = dpcr.engines.get_engine  # (every release resolves its engine: only Spark's stands in)
    monkeypatch.setattr(dpcr.engines, "get_engine",
                        lambda spec=None: Recording() if spec is not None and spec.name == "spark"
                        else real(spec))  # fmt: skip
    return requests


def test_another_engine_gives_the_same_release_and_continues_it(
    tmp_path: Path, stand_in: list[object]
) -> None:
    log = mutations()
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        write_jsonl(tmp_path / sub / "log.jsonl", [m for m in log if m["ts"] < CUT])
    own = _release(tmp_path / "a", "duckdb")
    other = _release(tmp_path / "b", "spark")
    assert own.fingerprint() == other.fingerprint()  # the engine is no part of the plan
    runs = []
    for release in (own, other):
        first = release.run(until=CUT, rng=simulation_randomness(5))
        write_jsonl(Path(release.source.path), log)
        second = release.run(until=END, rng=simulation_randomness(6))
        runs.append((first.rows, second.rows, second.diagnostics))
    assert runs[0] == runs[1]
    assert len(stand_in) == 2
    request = stand_in[1]
    assert request.exclude_late is not None and request.first_interval >= 1  # type: ignore[attr-defined]


def test_another_engine_refuses_rewritten_history_before_reading(
    tmp_path: Path, stand_in: list[object]
) -> None:
    log = mutations()
    write_jsonl(tmp_path / "log.jsonl", log)
    release = _release(tmp_path, "spark")
    release.run(until=CUT, rng=simulation_randomness(1))
    write_jsonl(tmp_path / "log.jsonl", [dict(m, entry="x") if i == 0 else m
                                         for i, m in enumerate(log)])
    with pytest.raises(StoreError, match="rewritten history"):
        release.run(until=END, rng=simulation_randomness(2))
    assert len(stand_in) == 1


def test_another_engine_needs_a_file_source(tmp_path: Path, stand_in: list[object]) -> None:
    db = tmp_path / "app.sqlite"
    import sqlite3

    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (id TEXT PRIMARY KEY, zone TEXT)")
    dpcr.changelog.install_triggers(db, "t", key="id")
    release = dataclasses.replace(
        _release(tmp_path, "spark"), source=dpcr.sources.Sqlite(path=db)
    )
    with pytest.raises(ConfigError, match="DuckDB engine"):
        release.run(until=CUT, rng=simulation_randomness(1))
