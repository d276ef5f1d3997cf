"""A store publishes its rows' intervals with the method it was created with (its meta table's
``intervals``): method 2 for a store created now, method 1 for one that released before the key
existed. Published intervals never change, so a rerun of an old store passes its published-file
check and goes on with method 1."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import dpcr
import dpcr.store._store as store_module
from dpcr.mechanisms import noise_variance
from dpcr.noise import simulation_randomness
from dpcr.release._calibrate import calibrate
from dpcr.release._rows import intervals_cache
from dpcr.release._uncertainty import _CACHE, row_intervals
from e2e.helpers import mutations, write_jsonl


def _release(tmp: Path) -> dpcr.ContinualRelease:
    write_jsonl(tmp / "log.jsonl", mutations())
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=dpcr.AtMostK(k=3),
        plan=dpcr.TreeRelease(start="2025-01-01", period="1d", branching=4),
        queries=[dpcr.Count(name="n")],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
    )


def _method(store: Path) -> str | None:
    con = sqlite3.connect(store)
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'intervals'").fetchone()
    finally:
        con.close()
    return None if row is None else str(row[0])


def _expected(release: dpcr.ContinualRelease, n: int, method: str) -> list[float]:
    plan = release.plan
    nodes = plan.due(0, n)
    cal = calibrate(release)
    events = {node: cal.layers[plan.instance(node)[0]]["n"] for node in nodes}
    var = {node: noise_variance(e) for node, e in events.items()}
    _, estimate = row_intervals(plan, nodes, events, var, n, method=method)
    return [iv.half_width for iv in estimate]


def test_a_new_store_publishes_with_method_2(tmp_path: Path) -> None:
    release = _release(tmp_path)
    result = release.run(until="2025-01-12", rng=simulation_randomness(3))
    assert _method(release.store_path) == "2"
    shown = [(r.estimate_hi - r.estimate_lo) / 2 for r in result.rows]
    assert shown == pytest.approx(_expected(release, len(shown), "2"), rel=1e-12)
    assert shown != pytest.approx(_expected(release, len(shown), "1"), rel=1e-6)


def test_a_store_that_released_with_method_1_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = _release(tmp_path)
    with monkeypatch.context() as m:  # the store as an earlier dpcr wrote it
        m.setattr(store_module, "INTERVAL_METHOD", "1")
        release.run(until="2025-01-07", rng=simulation_randomness(3))
    con = sqlite3.connect(release.store_path)
    with con:
        con.execute("DELETE FROM meta WHERE key = 'intervals'")
    con.close()
    intervals_cache(release).unlink(missing_ok=True)  # nothing remembered: recomputed
    _CACHE.clear()
    result = release.run(until="2025-01-12", rng=simulation_randomness(3))
    assert _method(release.store_path) is None
    shown = [(r.estimate_hi - r.estimate_lo) / 2 for r in result.rows]
    assert shown == pytest.approx(_expected(release, len(shown), "1"), rel=1e-12)
