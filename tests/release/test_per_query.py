"""Each query calibrated with its own participation (docs/privacy.md, "Participation per query").

A subscription's lifecycle (a state machine: insert as trial or active, moves and stays, cancel,
delete from cancelled) allows many mutations, but a count of every row changes only at the
insert and the delete: 2 releases, not k. Through the real release path with the noise off, the
exact loss of every neighbouring pair (D, D without one subscription) stays within the stated
guarantee, and the count's own pairs reach it (the count is neither over- nor under-charged).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import dpcr
import dpcr.release._draw as release_draw
from dpcr.noise import simulation_randomness
from e2e.helpers import write_jsonl
from release.test_neighbours import pair_loss, released, without

START, END = "2025-01-01T00:00:00Z", "2025-01-17T00:00:00Z"
DAY = "2025-01-{:02d}T{:02d}:00:00Z"
MACHINE = dpcr.StateMachine(
    column="status", initial=("trial", "active"),
    transitions=("trial -> active -> cancelled", "trial -> cancelled"),
    terminal=("cancelled",), allowance={"active": 3},
)  # fmt: skip
SIGNUPS = dpcr.Count(name="signups")
QUERIES = (
    SIGNUPS,
    dpcr.Count(name="active", where={"status": "active"}),
    dpcr.Sum(name="mrr", column="amount", lower=0, upper=100),
)


def subscriptions(seed: int, n: int = 8) -> list[dict[str, Any]]:
    """Subscriptions signing up on random days, upgraded, cancelled and deleted (s0: every
    mutation the machine allows, in distinct days)."""
    rnd = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        e, day = f"s{i}", 1 + (0 if i == 0 else rnd.randint(0, 6))
        tier = "gold" if i == 0 else rnd.choice(["gold", "silver"])
        row = {"id": e, "status": "trial", "amount": 0, "tier": tier}
        steps = (
            ["active", "up", "up", "up", "cancelled", "delete"]
            if i == 0
            else [
                rnd.choice(["active", "up", "cancelled", "delete"])
                for _ in range(rnd.randint(0, 5))
            ]
        )
        out.append({"entry": e, "ts": DAY.format(day, 1), "seq": 0, "op": "insert",
                    "before": None, "after": row})  # fmt: skip
        for step in steps:
            day += 1 if i == 0 else rnd.randint(0, 2)
            if day > 15:
                break
            if step == "delete":
                out.append({"entry": e, "ts": DAY.format(day, 2), "seq": 0, "op": "delete",
                            "before": row, "after": None})  # fmt: skip
                break
            new = dict(
                row,
                status=step if step != "up" else row["status"],
                amount=rnd.choice([10, 40, 100]) if step != "cancelled" else 0,
            )
            if i and rnd.random() < 0.1:  # a tier change (dropped under immutable = ["tier"])
                new["tier"] = "silver" if row["tier"] == "gold" else "gold"
            out.append({"entry": e, "ts": DAY.format(day, 2), "seq": 0, "op": "update",
                        "before": row, "after": new})  # fmt: skip
            row = new
    out.sort(key=lambda m: m["ts"])
    for seq, m in enumerate(out):
        m["seq"] = seq
    return out


def _settings(
    tmp: Path,
    name: str,
    log: list[dict[str, Any]],
    *,
    plan: Any,
    noise: Any,
    queries: tuple[Any, ...] = QUERIES,
    constraint: Any = MACHINE,
) -> dpcr.ContinualRelease:
    folder = tmp / name
    folder.mkdir()
    write_jsonl(folder / "log.jsonl", log)
    gaussian = isinstance(noise, dpcr.DiscreteGaussian)
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=folder / "log.jsonl"), constraint=constraint, plan=plan,
        queries=list(queries), budget=dpcr.Budget(epsilon=1.0, delta=1e-6 if gaussian else 0.0),
        noise=noise, output_dir=folder / "out",
    )  # fmt: skip


@pytest.fixture(autouse=True)
def noise_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(release_draw, "add_noise", lambda values, event, rng: values)


def _worst(tmp: Path, log: list[dict[str, Any]], **kw: Any) -> float:
    """max over subscriptions of (exact loss of the pair) / (stated loss)."""
    base = _settings(tmp, "D", log, **kw)
    base.run(until=END, rng=simulation_randomness(0))
    values, events = released(base)
    report = base.explain()
    stated = report.rho if isinstance(kw["noise"], dpcr.DiscreteGaussian) else report.epsilon
    assert stated
    worst = 0.0
    for unit in sorted({m["entry"] for m in log}):
        other = _settings(tmp, f"D-{unit}", without(log, unit, None), **kw)
        other.run(until=END, rng=simulation_randomness(0))
        worst = max(worst, pair_loss(base, values, released(other)[0], events) / stated)
    return worst


PLANS = {
    "disjoint": dpcr.DisjointRelease(start=START, period="1d", end=END),
    "tree": dpcr.TreeRelease(start=START, period="1d", end=END),
}


@pytest.mark.slow
@pytest.mark.parametrize("plan", list(PLANS))
@pytest.mark.parametrize("noise", [dpcr.DiscreteLaplace(), dpcr.DiscreteGaussian()])
def test_no_pair_exceeds_the_stated_guarantee(tmp_path: Path, plan: str, noise: Any) -> None:
    ratio = _worst(tmp_path, subscriptions(3), plan=PLANS[plan], noise=noise)
    assert 0 < ratio <= 1 + 1e-9


def test_a_count_of_every_row_pays_for_its_insert_and_delete_only(tmp_path: Path) -> None:
    """Released alone, the count is calibrated for 2 releases (insert, delete), not the
    machine.s k = 7: s0, inserted on day 1 and deleted on day 7, reaches the stated ε exactly
    (at k = 7 it would reach 2/7 of it)."""
    log = subscriptions(3)
    ratio = _worst(
        tmp_path, log, plan=PLANS["disjoint"], noise=dpcr.DiscreteLaplace(), queries=(SIGNUPS,)
    )
    assert ratio == pytest.approx(1.0)
    assert MACHINE.k == 7


def test_plan_lists_each_query_participation(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path, "P", subscriptions(1), plan=PLANS["disjoint"], noise=dpcr.DiscreteLaplace()
    )
    report = settings.explain()
    got = {name: (qp.touched_by, qp.releases) for name, qp in report.per_query.items()}
    assert got == {
        "signups": (("insert", "delete"), 2),
        "active": (("insert", "update", "delete"), 7),
        "mrr": (("insert", "update", "delete"), 7),
    }
    scales = {q: float(e.scale) for q, e in report.layers[0].events.items()}  # type: ignore[attr-defined]
    assert scales["signups"] == pytest.approx(scales["active"] * 2 / 7, rel=1e-3)  # 2, not 7
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["per_query"]["signups"] == {
        "touched_by": ["insert", "delete"],
        "releases": 2,
        "per_class": {"all": [2]},
    }
    assert report.epsilon <= 1.0


LIMITS = dpcr.OpLimits(limit=7, deletes=1, immutable=("tier",))
BY_TIER = (
    dpcr.Count(name="gold", where={"tier": "gold"}),
    dpcr.Histogram(name="tiers", column="tier", categories=("gold", "silver")),
    dpcr.Sum(name="mrr", column="amount", lower=0, upper=100),
)


def test_statistics_of_immutable_columns_pay_for_inserts_and_deletes(tmp_path: Path) -> None:
    """``immutable = ["tier"]``: a count and a histogram of the tier change only at inserts
    and deletes (2 releases, not 7); a tier change is dropped with the rest of its unit; every
    pair stays within the stated ε, and the gold count released alone reaches it (s0: gold,
    inserted on day 1, deleted on day 7)."""
    log = subscriptions(5)
    assert any(m["op"] == "update" and m["before"]["tier"] != m["after"]["tier"] for m in log)
    settings = _settings(
        tmp_path,
        "P",
        log,
        plan=PLANS["disjoint"],
        noise=dpcr.DiscreteLaplace(),
        queries=BY_TIER,
        constraint=LIMITS,
    )
    report = settings.explain()
    assert {n: q.releases for n, q in report.per_query.items()} == {"gold": 2, "tiers": 2, "mrr": 7}
    for name, queries in (("all", BY_TIER), ("alone", BY_TIER[:1])):
        (tmp_path / name).mkdir()
        ratio = _worst(
            tmp_path / name,
            log,
            plan=PLANS["disjoint"],
            noise=dpcr.DiscreteLaplace(),
            queries=queries,
            constraint=LIMITS,
        )
        assert 0 < ratio <= 1 + 1e-9
    assert ratio == pytest.approx(1.0)  # the gold count alone
