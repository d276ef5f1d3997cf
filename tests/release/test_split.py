"""``weights = "auto"``: the planner splits the budget across the queries (dpcr.release._auto).

The split puts every query the same, least factor above its ideal (the least std any candidate
gives it at equal shares). Checked against the plans' own calibration: the stds the planner
predicts for a split are those ``dpcr plan`` computes for it, and no nearby split (a share moved
between two queries) has a smaller largest factor.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pytest

import dpcr
from dpcr.config import parse_config
from dpcr.errors import ConfigError
from dpcr.release import ReleaseSettings, rank_plans
from dpcr.release._auto import measure
from dpcr.report.text import plan_lines

QUERIES = [
    {"name": "signups", "kind": "events", "op": "insert"},
    {"name": "active_by_plan", "kind": "histogram", "column": "plan",
     "keys": ["basic", "pro", "team"], "where": {"status": ["active"]}},
    {"name": "mrr", "kind": "sum", "column": "amount", "lower": 0, "upper": 200, "grid": 1,
     "where": {"status": ["active"]}},
]  # fmt: skip


def raw(mechanism: str = "laplace", queries: Any = None, **release: Any) -> dict[str, Any]:
    """The SaaS release of benchmarks/accuracy.py --saas: weekly for a year, ε = 1."""
    return {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {
            "epsilon": 1.0,
            "mechanism": mechanism,
            "delta": 1e-6 if mechanism == "gaussian" else 0.0,
        },
        "constraint": {"at_most_k": 4, "inserts": 1, "deletes": 0},
        "release": {"start": "2025-01-01", "period": "7d", "end": "2025-12-31", **release},
        "query": [dict(q) for q in (queries or QUERIES)],
    }


def factors(settings: ReleaseSettings, ideal: dict[str, float]) -> dict[str, float]:
    """Each query's std (the planner's measure, from ``dpcr plan``'s own calibration) over
    its ideal."""
    report = settings.explain()
    return {n: measure(settings, report, n) / v for n, v in ideal.items()}


def ideals(settings: ReleaseSettings) -> dict[str, float]:
    equal = dataclasses.replace(settings, weights=None, split="given")
    ranked = rank_plans(equal, split=False)
    return {q.name: min(measure(equal, r.report, q.name) for r in ranked)
            for q in settings.queries}  # fmt: skip


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_the_split_equalises_each_query_above_its_ideal(tmp_path: Path, mechanism: str) -> None:
    chosen = parse_config(raw(mechanism, weights="auto"), base_dir=tmp_path)
    assert chosen.split == "auto" and chosen.weights is not None
    assert abs(sum(chosen.weights) - 3) < 1e-3
    ideal = ideals(chosen)
    got = factors(chosen, ideal)
    # equal factors, up to the 4-digit weights and the noise parameter grid
    assert max(got.values()) / min(got.values()) < 1.01, got
    ranked = rank_plans(chosen)
    assert ranked[0].plan == chosen.plan and ranked[0].weights == chosen.weights
    assert ranked[0].stds is not None
    report = chosen.explain()
    for q in chosen.queries:  # the planner's prediction is the calibration's
        assert ranked[0].stds[q.name] == pytest.approx(measure(chosen, report, q.name), rel=0.01)
    # no split nearby is better: move 3 % of the budget between any two queries
    worst = max(got.values())
    for i, j in itertools.permutations(range(3), 2):
        w = list(chosen.weights)
        w[i], w[j] = w[i] - 0.09, w[j] + 0.09
        moved = dataclasses.replace(chosen, weights=tuple(w), split="given")
        assert max(factors(moved, ideal).values()) > worst


def test_saas_goals_with_the_split(tmp_path: Path) -> None:
    """Issue 32's SaaS goals: weekly sign-ups std ≤ 6.3 (1.5× the one-shot 4.2), the running
    count and MRR within 5 % of the equal-share release's (tree: 114.81 for a count of every row,
    22,964)."""
    chosen = parse_config(raw(weights="auto"), base_dir=tmp_path)
    p = chosen.explain().predicted
    assert chosen.plan.kind == "disjoint"
    assert p["signups"].release_std <= 6.3
    assert p["signups"].running_std <= 1.05 * 114.81
    assert p["mrr"].running_std <= 1.05 * 22_964
    assert p["active_by_plan"].running_std <= 1.05 * 229.64


def test_running_totals_alone_keep_equal_shares(tmp_path: Path) -> None:
    """When one plan is the best for every query (here the tree, for running totals), every
    query is at its ideal with equal shares: the split changes nothing."""
    counts = [
        {"name": "a", "kind": "count"},
        {"name": "b", "kind": "count", "where": {"status": ["active"]}},
    ]
    given = parse_config(raw(queries=counts), base_dir=tmp_path)
    chosen = parse_config(raw(queries=counts, weights="auto"), base_dir=tmp_path)
    assert chosen.plan == given.plan and chosen.weights == (1.0, 1.0)
    assert chosen.fingerprint() == given.fingerprint()


def test_an_event_query_is_ranked_by_one_interval(tmp_path: Path) -> None:
    """An event query publishes a count per interval: the planner compares that std, so a
    release of events alone gets disjoint intervals (a tree's interval is a difference of two
    running estimates)."""
    events = [{"name": "signups", "kind": "events", "op": "insert"}]
    settings = parse_config(raw(queries=events), base_dir=tmp_path)
    assert settings.plan.kind == "disjoint"
    ranked = rank_plans(settings)
    best = min(ranked, key=lambda r: r.report.predicted["signups"].release_std)
    assert best.plan == settings.plan


def test_a_fixed_plan_gets_its_own_split(tmp_path: Path) -> None:
    tree = parse_config(raw(plan="tree", branching=8, weights="auto"), base_dir=tmp_path)
    assert tree.plan.kind == "tree" and tree.split == "auto"
    assert tree.weights is not None and tree.weights[0] > tree.weights[1]  # events need more
    ideal = ideals(tree)
    got = factors(tree, ideal)
    assert max(got.values()) / min(got.values()) < 1.01


def test_a_window_plan_keeps_equal_shares(tmp_path: Path) -> None:
    window = parse_config(raw(plan="window", window="28d", weights="auto"), base_dir=tmp_path)
    assert window.weights == (1.0, 1.0, 1.0) and window.split == "auto"


def test_python_api_gives_the_tomls_split(tmp_path: Path) -> None:
    toml = parse_config(raw(weights="auto"), base_dir=tmp_path)
    py = dpcr.ContinualRelease(
        source=toml.source, constraint=toml.constraint, queries=toml.queries,
        budget=toml.budget, output_dir=toml.output_dir,
        plan=dpcr.AutoPlan(start="2025-01-01", period="7d", end="2025-12-31"), weights="auto",
    )  # fmt: skip
    assert (py.plan, py.weights, py.fingerprint()) == (toml.plan, toml.weights,
                                                       toml.fingerprint())  # fmt: skip
    # the resolved settings replace without re-resolving, and bind the weights
    again = dataclasses.replace(py, until=None)
    assert again.weights == py.weights and again.fingerprint() == py.fingerprint()


def test_plan_states_the_split(tmp_path: Path) -> None:
    chosen = parse_config(raw(weights="auto"), base_dir=tmp_path)
    report = chosen.explain()
    assert report.split == "auto" and report.to_json()["weights"] == dict(
        zip([q["name"] for q in QUERIES], chosen.weights or (), strict=True)
    )
    text = "\n".join(plan_lines(chosen, report))
    assert 'chosen by the planner (weights = "auto"' in text
    assert "each at its own budget split" in text


def test_conflicts_are_refused(tmp_path: Path) -> None:
    weighted = raw(weights="auto")
    weighted["query"][0]["weight"] = 2
    with pytest.raises(ConfigError, match=r"has a weight, and release\.weights") as err:
        parse_config(weighted, base_dir=tmp_path)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r'release\.weights must be "auto"'):
        parse_config(raw(weights="fair"), base_dir=tmp_path)
    given = parse_config(raw(), base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"resolved by dpcr\.ContinualRelease"):
        ReleaseSettings(source=given.source, constraint=given.constraint, plan=given.plan,
                        queries=given.queries, budget=given.budget,
                        weights="auto")  # fmt: skip


def test_a_kind_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    """(found by the CLI fuzz: a list as a query's kind was a traceback)"""
    bad = raw()
    bad["query"][1]["kind"] = ["variance", "mean"]
    with pytest.raises(ConfigError, match=r"query #2\.kind must be str") as err:
        parse_config(bad, base_dir=tmp_path)
    assert "\n" not in str(err.value)
