"""The operator report ranks the alternatives to a forced Gaussian plan from approximate
calibrations: each discrete Gaussian accounted as the continuous Gaussian of the same σ
(closed form) instead of by its privacy-loss distribution. Measured here against the exact
ranking over a grid of settings -- every score within :data:`TOLERANCE` of the exact one and
the same "much worse than the best" verdict -- and kept apart from every exact calibration:
the configured plan, ``plan = "auto"``'s choice, ``dpcr plan`` and the kept ρ are exact."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

import dpcr
from dpcr._lastused import LastUsed
from dpcr.accounting import _pld, accountants, guarantee
from dpcr.cli import main
from dpcr.release import WARN_RATIO, Ranked, _calibrate, _kept_rho, rank_plans
from release.test_calibration_cache import _forget as forget_calibrations
from report.helpers import embedded

#: Largest relative error of an approximate score (measured over the grid below, 2026-11-30:
#: 0.29 % at most, 0.0015 % on the first-run benchmark's settings)
TOLERANCE = 5e-3

EPSILONS = (0.1, 1.0, 10.0)
DELTAS = (1e-9, 1e-7, 1e-5)
CONSTRAINTS = ("k1", "k3", "k8", "time")
PERIODS = ("1d", "1h")
QUERIES = (1, 2, 3)
PLANS = ("disjoint", "tree8", "sqrt")


def _settings(epsilon: float, delta: float, constraint: str, period: str, queries: int,
              plan: str, folder: Path = Path("unused")) -> Any:  # fmt: skip
    end = "2026-01-01" if period == "1d" else "2025-01-31"  # 365 days or 720 hours
    horizon = 365 if period == "1d" else 720
    plans = {
        "disjoint": lambda: dpcr.DisjointRelease(start="2025-01-01", period=period, end=end),
        "tree8": lambda: dpcr.TreeRelease(start="2025-01-01", period=period, end=end,
                                          branching=8),
        "sqrt": lambda: dpcr.FactorizationRelease(start="2025-01-01", period=period,
                                                  horizon=horizon, factorization="sqrt"),
    }
    kinds = {"k1": dpcr.AtMostK(k=1), "k3": dpcr.AtMostK(k=3), "k8": dpcr.AtMostK(k=8),
             "time": dpcr.TimeBounded(bound="2d")}
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=folder / "log.jsonl"),
        constraint=kinds[constraint],
        plan=plans[plan](),
        queries=[dpcr.Count(name="n"), dpcr.Sum(name="s", column="v", lower=0, upper=100),
                 dpcr.Histogram(name="h", column="c", keys=["a", "b", "c"])][:queries],
        budget=dpcr.Budget(epsilon=epsilon, delta=delta),
        noise=dpcr.DiscreteGaussian(),
        output_dir=folder / "out",
    )


def _forget(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process holds no calibration, kept ρ, stated guarantee, event cost or composed
    privacy-loss distribution."""
    forget_calibrations(monkeypatch)
    monkeypatch.setattr(accountants, "_STATED", LastUsed(1024))
    monkeypatch.setattr(guarantee, "_COSTS", LastUsed(1024))
    for cached in (_pld._pld_epsilon, _pld._pld_object, _pld._composed_leaf, accountants._compare):
        cached.cache_clear()


def _warned(ranked: list[Ranked], plan: Any) -> bool:
    mine = next(r for r in ranked if r.plan == plan)
    return mine.score > WARN_RATIO * ranked[0].score


def _compare(settings: Any, monkeypatch: pytest.MonkeyPatch) -> list[Ranked]:
    """The approximate ranking, checked against the exact one; returns it."""
    _forget(monkeypatch)
    report = settings.explain()
    rough = rank_plans(settings, known=report, approximate=True)
    exact = rank_plans(settings, known=report)
    assert {r.plan for r in rough} == {r.plan for r in exact}
    by_plan = {r.plan: r for r in exact}
    for r in rough:
        assert not by_plan[r.plan].approximate
        assert abs(r.score / by_plan[r.plan].score - 1) <= TOLERANCE, r.plan.describe()
        if r.plan == settings.plan:  # the configured plan: its own exact report
            assert not r.approximate and r.report is report
    assert _warned(rough, settings.plan) == _warned(exact, settings.plan)
    return rough


#: one setting per row, every value of each axis at least once (the whole grid is slow)
SAMPLE = [
    (1.0, 1e-6, "k3", "1d", 2, "disjoint"),  # the first-run benchmark's settings
    (0.1, 1e-9, "k1", "1h", 1, "tree8"),
    (1.0, 1e-5, "k8", "1d", 3, "sqrt"),
    (10.0, 1e-7, "time", "1h", 2, "tree8"),
    (10.0, 1e-5, "k1", "1d", 1, "disjoint"),  # σ² < 4 Δ²: exact
    (1.0, 1e-7, "time", "1d", 1, "tree8"),  # 8-ary tree 1.414 times the best: no warning
    (0.1, 1e-5, "k3", "1d", 1, "tree8"),  # 1.516 times: a warning
]


@pytest.mark.parametrize("setting", SAMPLE, ids=lambda s: "-".join(map(str, s)))
def test_approximate_scores_are_within_the_tolerance(
    setting: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    _compare(_settings(*setting), monkeypatch)


@pytest.mark.slow
def test_approximate_scores_over_the_whole_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    grid = itertools.product(EPSILONS, DELTAS, CONSTRAINTS, PERIODS, QUERIES, PLANS)
    approximated = 0
    for setting in grid:
        ranked = _compare(_settings(*setting), monkeypatch)
        approximated += sum(r.approximate for r in ranked)
    assert approximated > 1000  # (most settings' alternatives are approximate)


def test_the_approximation_is_used_where_it_saves_and_not_where_it_is_far(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the benchmark's settings: every tree approximate (the square root's vector noise has the
    # accounting's closed form already), and no discrete Gaussian PLD built
    settings = _settings(1.0, 1e-6, "k3", "1d", 2, "disjoint")
    _forget(monkeypatch)
    report = settings.explain()
    built: list[Any] = []
    pld = _pld._discrete_gaussian_pld

    def counted(*args: Any) -> Any:
        built.append(args[0])
        return pld(*args)

    monkeypatch.setattr(_pld, "_discrete_gaussian_pld", counted)
    rough = rank_plans(settings, known=report, approximate=True)
    assert built == []
    assert [r.approximate for r in rough] == [isinstance(r.plan, dpcr.TreeRelease)
                                              for r in rough]  # fmt: skip
    assert sum(r.approximate for r in rough) == 5  # fanout 2 (plain and Honaker), 4, 8, 16
    rank_plans(settings, known=report)
    assert built  # (the exact ranking does build them)
    # σ² below CONTINUOUS_FROM Δ² (ε = 10, one count): the exact calibrations
    small = _settings(10.0, 1e-5, "k1", "1d", 1, "disjoint")
    _forget(monkeypatch)
    assert not any(r.approximate for r in rank_plans(small, known=small.explain(),
                                                     approximate=True))  # fmt: skip
    # a histogram's vector noise: the accounting's closed form already, so exact
    vector = _settings(1.0, 1e-6, "k3", "1d", 3, "disjoint")
    _forget(monkeypatch)
    assert not any(r.approximate for r in rank_plans(vector, known=vector.explain(),
                                                     approximate=True))  # fmt: skip
    # an alert rule composed with the noise: no closed form, so exact
    alerted = dataclasses.replace(settings, alerts=[dpcr.AlertRule(
        name="busy", statistic="n", what="running", threshold=5, cutoff=2, epsilon=0.1)])
    _forget(monkeypatch)
    assert not any(r.approximate for r in rank_plans(alerted, known=alerted.explain(),
                                                     approximate=True))  # fmt: skip
    # Laplace noise: exact
    laplace = dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=Path("unused.jsonl")), constraint=dpcr.AtMostK(k=3),
        plan=dpcr.DisjointRelease(start="2025-01-01", period="1d", end="2026-01-01"),
        queries=[dpcr.Count(name="n")], budget=dpcr.Budget(epsilon=1.0),
    )
    assert not any(r.approximate for r in rank_plans(laplace, approximate=True))


def test_approximate_calibrations_stay_apart_from_exact_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(1.0, 1e-6, "k3", "1d", 2, "disjoint", tmp_path)
    tree = dpcr.TreeRelease(start="2025-01-01", period="1d", end="2026-01-01", branching=8)
    _forget(monkeypatch)
    report = settings.explain()
    kept = {path: dict(rhos) for path, rhos in _kept_rho._KEPT_NEW.items()}
    assert sum(map(len, kept.values())) == 1  # the configured plan's
    rough = rank_plans(settings, known=report, approximate=True)
    # no approximate ρ is kept beside the store: only those of the exact alternatives (the
    # square root, whose accounting is a closed form)
    exact_alternatives = [r for r in rough if not r.approximate and r.plan != settings.plan]
    assert len(exact_alternatives) == 1
    now = {path: dict(rhos) for path, rhos in _kept_rho._KEPT_NEW.items()}
    assert [len(now[path]) - len(kept[path]) for path in kept] == [1]
    approximate = next(r for r in rough if r.plan == tree).report.calibration
    assert approximate is not None and approximate.approximate
    exact = _calibrate.calibrate(dataclasses.replace(settings, plan=tree))
    assert not exact.approximate and exact is not approximate
    # a tree's exact calibration at hand: the approximate ranking takes it
    again = next(r for r in rank_plans(settings, known=report, approximate=True)
                 if r.plan == tree)  # fmt: skip
    assert again.report.calibration is exact
    # plan = "auto" chooses from exact calibrations
    auto = next(r for r in rank_plans(settings) if r.plan == tree)
    assert not auto.approximate


def test_the_report_marks_the_approximate_figures(tmp_path: Path) -> None:
    (tmp_path / "log.jsonl").write_text(json.dumps(
        {"entry": "1", "ts": "2025-01-02T07:57:37Z", "op": "insert", "before": None,
         "after": {"fare": 14.0}}) + "\n")  # fmt: skip
    config = tmp_path / "dpcr.toml"
    config.write_text(
        '[source]\nformat = "jsonl"\npath = "log.jsonl"\n\n'
        '[privacy]\nepsilon = 1.0\ndelta = 1e-6\nmechanism = "gaussian"\n\n'
        "[constraint]\nat_most_k = 3\n\n"
        '[release]\nstart = "2025-01-01T00:00:00Z"\nperiod = "1d"\nplan = "disjoint"\n'
        'end = "2025-03-01T00:00:00Z"\n\n'
        '[[query]]\nname = "active"\nkind = "count"\n\n'
        '[output]\ndir = "out"\n'
    )
    assert main(["run", str(config), "--until", "2025-01-10", "--quiet"]) == 0
    html = (tmp_path / "out" / "public" / "report.html").read_text()
    ranking = embedded(html)["ranking"]
    # the trees (the square root's vector noise has the accounting's closed form already)
    assert [r["approximate"] for r in ranking] == [r["kind"] == "tree" for r in ranking]
    assert "≈ marks figures calibrated approximately" in html
    assert html.count("<td>≈ ") == 5
