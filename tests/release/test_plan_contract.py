"""The plan contract: one abstract suite, subclassed by every plan kind, run through the Python API
and the one release loop.

Every plan must: never re-noise on restart; refuse over budget before any write; never publish
from a simulation store; refuse a changed plan; with the noise switched off, estimate exactly the
running values (or windows) a brute-force count of the changelog gives; state a guarantee equal
to the composition of the events its filter records; and count alert rules against the same
budget.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import dpcr
import dpcr.release._draw as release_draw
import dpcr.release._loop as release_loop
from dpcr.accounting.events import event_from_dict
from dpcr.accounting.guarantee import layered_guarantee
from dpcr.errors import BudgetExhaustedError, StoreError
from dpcr.noise import simulation_randomness
from dpcr.store import Store
from dpcr.timeutil import parse_timestamp
from e2e.helpers import mutations, write_jsonl

START = "2025-01-01T00:00:00Z"
END = "2025-01-17T00:00:00Z"  # 16 daily base intervals
CUT = "2025-01-07T00:00:00Z"


def live_count(log: list[dict[str, Any]], t: int) -> int:
    """Brute force: entries alive at time t (inserted at or before t, not deleted by t)."""
    live: set[str] = set()
    for m in log:
        if parse_timestamp(m["ts"], name="ts") <= t:
            if m["op"] == "delete":
                live.discard(m["entry"])
            else:
                live.add(m["entry"])
    return len(live)


class PlanContract:
    """Subclasses set ``plan`` (and ``noise``); each test runs the real release path."""

    plan: ClassVar[Any]
    noise: ClassVar[Any] = dpcr.DiscreteLaplace()
    delta: ClassVar[float] = 0.0
    window: ClassVar[timedelta | None] = None  # a window plan's estimate is the window's change

    def release(self, tmp: Path, *, epsilon: float = 1.0, alerts: tuple[Any, ...] = (),
                k: int = 100) -> dpcr.ContinualRelease:
        return dpcr.ContinualRelease(
            source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
            constraint=dpcr.AtMostK(k=k),
            plan=self.plan,
            queries=[
                dpcr.Count(name="active"),
                dpcr.Histogram(name="zones", column="zone", categories=("A", "B", "C")),
            ],
            budget=dpcr.Budget(epsilon=epsilon, delta=self.delta),
            noise=self.noise,
            output_dir=tmp / "out",
            alerts=alerts,
        )

    def write_log(self, tmp: Path, *, until: str | None = None) -> list[dict[str, Any]]:
        log = mutations()
        write_jsonl(tmp / "log.jsonl", [m for m in log if until is None or m["ts"] < until])
        return log

    def stored(self, release: dpcr.ContinualRelease, *, mode: str = "simulation") -> Any:
        with Store(release.store_path, fingerprint=release.fingerprint(), mode=mode) as st:
            return (
                {(r.query, r.key, r.layer, r.index): r.value for r in st.released()},
                st.ledger(),
            )

    def test_restart_never_renoises(self, tmp_path: Path) -> None:
        log = self.write_log(tmp_path, until=CUT)
        release = self.release(tmp_path)
        first = release.run(until=CUT, rng=simulation_randomness(1))
        values1, ledger1 = self.stored(release)
        assert first.new_intervals > 0 and values1
        again = release.run(until=CUT, rng=simulation_randomness(2))  # nothing new: no draw
        assert again.new_intervals == 0 and again.rows == first.rows
        write_jsonl(tmp_path / "log.jsonl", log)
        second = release.run(until=END, rng=simulation_randomness(3))
        values2, ledger2 = self.stored(release)
        assert second.new_intervals > 0
        assert {k: values2[k] for k in values1} == values1  # never re-noised
        assert all(row in ledger2 for row in ledger1)
        n1 = first.summary["released_intervals"]
        if self.window is None and self.plan.kind != "factorization":
            # running values of old intervals use only nodes closed by then
            assert [r for r in second.rows if r.interval <= n1] == list(first.rows)

    def test_over_budget_refuses_before_any_write(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.write_log(tmp_path)
        release = self.release(tmp_path)
        real = release_loop.calibrate

        def too_generous(settings: Any) -> Any:
            cal = real(settings)
            shrink = {"scale": 1000, "sigma2": 10**6}
            layers = tuple(
                {
                    name: dataclasses.replace(e, **{
                        f: getattr(e, f) / d for f, d in shrink.items() if hasattr(e, f)
                    })
                    for name, e in layer.items()
                }
                for layer in cal.layers
            )
            return dataclasses.replace(cal, layers=layers)

        monkeypatch.setattr(release_loop, "calibrate", too_generous)
        with pytest.raises(BudgetExhaustedError, match="nothing was released"):
            release.run(until=END, rng=simulation_randomness(1))
        assert not (tmp_path / "out" / "public" / "releases.csv").exists()
        values, ledger = self.stored(release)
        assert values == {} and ledger == []

    def test_simulation_store_is_never_published(self, tmp_path: Path) -> None:
        self.write_log(tmp_path)
        release = self.release(tmp_path)
        release.run(until=END, rng=simulation_randomness(1))
        with pytest.raises(StoreError, match="never be published"):
            release.run()  # a real release from the secure source refuses the store

    def test_changed_plan_is_refused(self, tmp_path: Path) -> None:
        self.write_log(tmp_path)
        self.release(tmp_path).run(until=END, rng=simulation_randomness(1))
        with pytest.raises(StoreError, match="different plan"):
            self.release(tmp_path, epsilon=2.0).run(until=END, rng=simulation_randomness(2))

    def test_noise_off_estimates_are_the_exact_running_values(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        log = self.write_log(tmp_path)
        monkeypatch.setattr(release_draw, "add_noise", lambda values, event, rng: values)
        result = self.release(tmp_path).run(until=END, rng=simulation_randomness(1))
        rows = [r for r in result.rows if r.query == "active"]
        assert len(rows) == result.summary["released_intervals"] > 0
        for r in rows:
            end = parse_timestamp(r.end, name="end")
            want = live_count(log, end)
            if self.window is not None:
                want -= live_count(log, end - int(self.window.total_seconds() * 1e6))
            assert r.estimate == pytest.approx(want, abs=1e-6), r
        zones = {(r.interval, r.key): r.estimate for r in result.rows if r.query == "zones"}
        for r in rows:  # every live ticket is in exactly one zone
            total = sum(zones[(r.interval, z)] for z in "ABC")
            assert total == pytest.approx(r.estimate, abs=1e-6)

    def test_stated_guarantee_is_the_composition_of_the_recorded_events(
        self, tmp_path: Path
    ) -> None:
        self.write_log(tmp_path)
        release = self.release(tmp_path, k=3)
        report = release.explain()
        result = release.run(until=END, rng=simulation_randomness(1))
        _, ledger = self.stored(release)
        instances: dict[tuple[int, int], list[Any]] = {}
        for layer, idx, _q, data in ledger:
            instances.setdefault((layer, idx), []).append(event_from_dict(data))
        layers: list[list[Any]] = [[] for _ in range(1 + max(lv for lv, _ in instances))]
        for (layer, _idx), evs in sorted(instances.items()):
            layers[layer].append(dpcr.accounting.ComposedEvent(events=tuple(evs)))
        n = result.summary["released_intervals"]
        participation = release.plan.participation(release.constraint, reporting=n)
        g, _ = layered_guarantee(layers, participation, delta=self.delta)
        assert g.epsilon == result.summary["guarantee"]["spent_epsilon"]
        assert g.epsilon <= report.epsilon <= 1.0 + 1e-12
        if release.plan.schedule().release_count() == n:  # the whole plan: all of it spent
            assert g.epsilon == pytest.approx(report.epsilon, rel=1e-9)
        summary = tmp_path / "out" / "simulation" / "summary.json"  # seeded: apart, marked
        assert json.loads(summary.read_text())["guarantee"]["epsilon"] == report.epsilon
        with (tmp_path / "out" / "simulation" / "releases.csv").open() as fh:
            assert all(r["simulation"].startswith("SIMULATION") for r in csv.DictReader(fh))
        assert not (tmp_path / "out" / "public" / "releases.csv").exists()

    def test_alerts_count_against_the_same_budget(self, tmp_path: Path) -> None:
        self.write_log(tmp_path)
        rule = dpcr.AlertRule(name="busy", statistic="active", what="running", threshold=5,
                              cutoff=2, epsilon=0.25)
        plain = self.release(tmp_path / "a")
        alerted = self.release(tmp_path / "b", alerts=(rule,))
        p, a = plain.explain(), alerted.explain()
        assert a.epsilon <= 1.0 + 1e-12 and p.epsilon <= 1.0 + 1e-12
        assert a.alerts["epsilon"] > 0
        std_plain = p.layers[0].noise_std["active"]
        std_alerted = a.layers[0].noise_std["active"]
        assert std_alerted > std_plain  # the release got less of the budget
        (tmp_path / "b").mkdir()
        self.write_log(tmp_path / "b")
        result = alerted.run(until=END, rng=simulation_randomness(1))
        assert result.summary["guarantee"]["spent_epsilon"] >= a.alerts["epsilon"]
        assert (tmp_path / "b" / "out" / "simulation" / "alerts.csv").exists()

    def test_rows_convert(self, tmp_path: Path) -> None:
        self.write_log(tmp_path)
        result = self.release(tmp_path).run(until=END, rng=simulation_randomness(1))
        assert result.records()[0].keys() >= {"query", "key", "estimate", "std_estimate"}
        assert np.isfinite([r.std_estimate for r in result]).all()


class TestDisjoint(PlanContract):
    plan = dpcr.DisjointRelease(start=START, period="1d", end=END)


class TestDisjointOpenEnded(PlanContract):
    plan = dpcr.DisjointRelease(start=START, period="1d")


class TestTree(PlanContract):
    plan = dpcr.TreeRelease(start=START, period="1d", end=END)


class TestTreeGrowingPlain(PlanContract):
    plan = dpcr.TreeRelease(start=START, period="1d", estimator="plain")


class TestTreeGaussian(PlanContract):
    plan = dpcr.TreeRelease(start=START, period="1d", branching=3, end=END)
    noise = dpcr.DiscreteGaussian()
    delta = 1e-6


class TestWindow(PlanContract):
    plan = dpcr.SlidingWindowRelease(start=START, window="3d", period="2d", end=END)
    window = timedelta(days=3)


class TestFactorization(PlanContract):
    plan = dpcr.FactorizationRelease(start=START, period="1d", horizon=16)
    noise = dpcr.DiscreteGaussian()
    delta = 1e-6


def test_every_plan_kind_has_a_contract_class() -> None:
    from dpcr.plans import PLAN_TYPES

    covered = {cls.plan.kind for cls in PlanContract.__subclasses__()}
    assert covered == set(PLAN_TYPES)


def test_utc_start_is_parsed() -> None:
    want = int(datetime(2025, 1, 1, tzinfo=UTC).timestamp() * 1_000_000)
    assert TestDisjoint.plan.start == want


def test_a_rerun_with_nothing_new_reads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same source content and no interval closed since: the stored release is returned and the
    source is not even loaded; appending a record makes the next run load it."""
    log = mutations()
    write_jsonl(tmp_path / "log.jsonl", log)
    release = TestDisjoint().release(tmp_path)
    first = release.run(until=END, rng=simulation_randomness(1))

    def no_load(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the unchanged source was loaded")

    with monkeypatch.context() as m:
        m.setattr(release_loop, "load_and_aggregate", no_load)
        again = release.run(until=END, rng=simulation_randomness(2))
    assert again.rows == first.rows and again.new_intervals == 0
    assert again.diagnostics == first.diagnostics
    write_jsonl(tmp_path / "log.jsonl", [*log, dict(log[0], entry="new", seq=10**6,
                                                    ts="2025-01-20T00:00:00Z")])
    with monkeypatch.context() as m:
        m.setattr(release_loop, "load_and_aggregate", no_load)
        with pytest.raises(AssertionError, match="loaded"):
            release.run(until=END, rng=simulation_randomness(3))
