"""Accuracy of the plans the pipeline runs: exact predicted errors from ``dpcr plan`` itself.

Run: .venv/bin/python benchmarks/accuracy.py [--quick]

Every figure comes from ``ContinualRelease.explain()`` (the calibration and the plan's own
estimator with exact variances: what ``dpcr plan`` prints and ``plan = "auto"`` ranks), not from a
separate library path. Normalisation (as docs/NOTES' continual-counting constants): the std of
the released running count divided by sigma_1 = 1/sqrt(2 rho), the noise one sensitivity-1 count
needs at the same zCDP rho (rho: what the calibration spends; the discrete Gaussian's variance
equals sigma^2 up to a factor 1 - 1e-100 at these scales). Max over the running counts 1..T.
Pure DP rows are in counts (epsilon = 1). ``--quick``: T = 2^12 instead of 2^16. ``--saas``:
only the SaaS table (issue 32: per-query participation).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Any

import dpcr
from dpcr.config import load_config, parse_config
from dpcr.plans.factorization import lower_bound
from dpcr.release import rank_plans

ROOT = Path(__file__).resolve().parents[1]
HOUR = 3600 * 10**6


def settings(*, T: int, mechanism: str, constraint: Any, plan: Any = None) -> Any:
    """A data-free release of T hourly intervals, one count."""
    end = "2025-01-01T00:00:00Z"
    raw = {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0, "delta": 1e-6 if mechanism == "gaussian" else 0.0,
                    "mechanism": mechanism},
        "constraint": {"at_most_k": 1},
        "release": {"plan": "disjoint", "start": end, "period": "1h"},
        "query": [{"name": "n", "kind": "count"}],
    }
    s = parse_config(raw, base_dir=ROOT)
    s = dataclasses.replace(s, constraint=constraint)
    start = s.plan.start
    p = plan if plan is not None else dpcr.DisjointRelease(start=start, period=HOUR,
                                                          end=start + T * HOUR)
    open_ended = getattr(p, "end", None) is None
    return dataclasses.replace(s, plan=p, horizon=T if open_ended else None)


def grid(T: int, kind: str, fit: int = 1) -> Any:
    start = 1735689600 * 10**6  # 2025-01-01
    if kind == "blt":
        return dpcr.FactorizationRelease(start=start, period=HOUR, horizon=None,
                                         factorization="blt", planning_horizon=T,
                                         fit_participations=fit)
    if kind in ("sqrt", "rescaled"):
        return dpcr.FactorizationRelease(start=start, period=HOUR, horizon=T, factorization=kind)
    return dpcr.TreeRelease(start=start, period=HOUR, branching=int(kind),
                            end=start + T * HOUR)


def sigma1_units(T: int, kind: str, constraint: Any, fit: int = 1) -> float | None:
    s = settings(T=T, mechanism="gaussian", constraint=constraint, plan=grid(T, kind, fit))
    try:
        r = s.explain()
    except dpcr.errors.DpcrError:
        return None
    assert r.rho is not None and r.horizon == T, (r.rho, r.horizon)
    return r.predicted["n"].running_std * math.sqrt(2 * r.rho)


def gaussian_table(T: int, e: int) -> None:
    lb = lower_bound(T)
    print(f"## Gaussian, T = 2^{e}: max std of the running count / sigma_1 "
          f"(lower bound 0.701 + ln T / pi = {lb:.3f} for k = 1)")
    print("| constraint | sqrt | row-rescaled sqrt | BLT (open-ended) | BLT fitted for m "
          "| tree c=2 + Honaker | rescaled / LB | BLT / LB |")
    print("|---|---|---|---|---|---|---|---|")
    # m: base intervals one unit touches (k, or ceil(B/W) + 1 = 5 for B = 4W)
    rows = {"k = 1": (dpcr.AtMostK(k=1), 1), "k = 4": (dpcr.AtMostK(k=4), 4),
            "B = 4W": (dpcr.TimeBounded(bound=4 * HOUR), 5)}
    for name, (con, m) in rows.items():
        v = {kind: sigma1_units(T, kind, con) for kind in ("sqrt", "rescaled", "blt", "2")}
        v["fit"] = sigma1_units(T, "blt", con, fit=m)

        def f(x: float | None) -> str:
            return "n/a (no proof)" if x is None else f"{x:.3f}"

        def r(x: float | None, single: bool = name == "k = 1") -> str:
            return "" if x is None or not single else f"{x / lb:.4f}"

        print(f"| {name} | {f(v['sqrt'])} | {f(v['rescaled'])} | {f(v['blt'])} | "
              f"{f(v['fit'])} (m = {m}) | {f(v['2'])} | {r(v['rescaled'])} | {r(v['blt'])} |")
    print()


def pure_table(T: int, e: int) -> None:
    print(f"## Pure DP (discrete Laplace), epsilon = 1, k = 1, T = 2^{e}: max std of the running "
          "count (counts)")
    print("| plan | max std | MSE vs binary |")
    print("|---|---|---|")
    con = dpcr.AtMostK(k=1)
    binary = None
    for c in ("2", "4", "8", "10", "16", "17", "32"):
        s = settings(T=T, mechanism="laplace", constraint=con, plan=grid(T, c))
        std = s.explain().predicted["n"].running_std
        binary = binary or std
        print(f"| tree c={c} + Honaker | {std:.2f} | {(std / binary) ** 2:.3f} |")
    print()


SUBSCRIPTIONS = """
[source]
format = "jsonl"
path = "log.jsonl"
[privacy]
unit = "entry"
epsilon = 1.0
mechanism = "laplace"
[constraint.state_machine]
column = "status"
initial = ["trial", "active"]
transitions = ["trial -> active -> paused -> active", "trial -> cancelled",
               "active -> cancelled", "paused -> cancelled"]
terminal = ["cancelled"]
allowance = { trial = 2, active = 24 }
[release]
start = "2025-01-01T00:00:00Z"
period = "7d"
end = "2025-12-31T00:00:00Z"
[[query]]
name = "active"
kind = "count"
where = { status = ["active"] }
[[query]]
name = "active_by_plan"
kind = "histogram"
column = "plan"
keys = ["basic", "pro", "team"]
where = { status = ["active"] }
[[query]]
name = "active_seats"
kind = "sum"
column = "seats"
lower = 0
upper = 50
grid = 1
where = { status = ["active"] }
"""


def auto_table() -> None:
    """The auto plan against disjoint (and the best candidate) on the demos."""
    import tempfile
    import tomllib

    print("## plan = \"auto\" against disjoint: first query's predicted running-total std")
    print("| config | auto's choice | worst (auto / disjoint) | year-end (auto / disjoint) "
          "| best year-end candidate (its worst) | auto's year-end / best's |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp) / "subscriptions.toml"
        sub.write_text(SUBSCRIPTIONS, encoding="utf-8")
        configs = {"transit (examples/transit)": ROOT / "examples/transit/dpcr.toml",
                   "subscriptions (k = 30, weekly, a year)": sub}
        for name, path in configs.items():
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
            assert "plan" not in raw["release"], "the demo leaves the plan to auto"
            s = load_config(path)
            ranked = rank_plans(s)
            q = s.queries[0].name
            dis = next(r for r in ranked if isinstance(r.plan, dpcr.DisjointRelease))
            auto = ranked[0]
            assert auto.plan == s.plan
            best_end = min(ranked, key=lambda r: r.report.predicted[q].final_std)
            a, d, b = (x.report.predicted[q] for x in (auto, dis, best_end))
            print(f"| {name} | {auto.plan.kind} c={getattr(auto.plan, 'branching', '-')} | "
                  f"{a.running_std:.1f} / {d.running_std:.1f} = "
                  f"{a.running_std / d.running_std:.3f} | {a.final_std:.1f} / {d.final_std:.1f} "
                  f"= {a.final_std / d.final_std:.3f} | {best_end.plan.kind} "
                  f"c={getattr(best_end.plan, 'branching', '-')}: {b.final_std:.1f} "
                  f"({b.running_std:.1f}) | {a.final_std / b.final_std:.3f} |")
    print()


def saas_settings(constraint: dict[str, Any], plan: str | None,
                  weights: tuple[int, ...] | str, mechanism: str = "laplace",
                  events: bool = False) -> Any:
    """Issue 32's SaaS release: weekly for a year, epsilon = 1, sign-ups (a count of every
    row, or with ``events`` the inserts of each week: an event query), active subscriptions by
    plan and MRR (clamped sum of ``amount``) where active. ``weights = "auto"``: the planner
    splits the budget."""
    release: dict[str, Any] = {"start": "2025-01-01T00:00:00Z", "period": "7d",
                               "end": "2025-12-31T00:00:00Z"}
    if plan is not None:
        release["plan"] = plan
    auto = isinstance(weights, str)
    if auto:
        release["weights"] = weights
        weights = (1, 1, 1)  # (removed below)
    raw = {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"unit": "entry", "epsilon": 1.0, "mechanism": mechanism,
                    "delta": 1e-6 if mechanism == "gaussian" else 0.0},
        "constraint": constraint,
        "release": release,
        "query": [
            {"name": "signups", "kind": "events", "op": "insert", "weight": weights[0]}
            if events else {"name": "signups", "kind": "count", "weight": weights[0]},
            {"name": "active_by_plan", "kind": "histogram", "column": "plan",
             "keys": ["basic", "pro", "team"], "where": {"status": ["active"]},
             "weight": weights[1]},
            {"name": "mrr", "kind": "sum", "column": "amount", "lower": 0, "upper": 200,
             "grid": 1, "where": {"status": ["active"]}, "weight": weights[2]},
        ],
    }
    if auto:
        for q in raw["query"]:
            del q["weight"]
    return parse_config(raw, base_dir=ROOT)


def saas_table() -> None:
    """Issue 32's SaaS workload (benchmarks/saas.py: inserts, plan changes, cancellations, no
    delete; every subscription satisfies at_most_k = 4, inserts = 1, deletes = 0): predicted
    stds with today's per-plan participation (at most 4 for every query) and with per-query
    participation under the per-op limits (sign-ups: 1)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from saas import subscriptions

    per: dict[str, list[str]] = {}
    for m in subscriptions(20_000):
        per.setdefault(m["entry"], []).append(m["op"])
    assert all(len(ops) <= 4 and ops.count("insert") == 1 and "delete" not in ops
               for ops in per.values())
    print("## SaaS subscriptions (issue 32): weekly for a year, epsilon = 1, Laplace")
    print("| constraint | plan | weights | weekly sign-ups std | running count (worst) "
          "| active_by_plan (worst) | MRR (worst) |")
    print("|---|---|---|---|---|---|---|")
    limits = {"at_most_k": 4, "inserts": 1, "deletes": 0}
    rows = [
        ("at_most_k = 4", {"at_most_k": 4}, None, (1, 1, 1)),
        ("at_most_k = 4", {"at_most_k": 4}, "disjoint", (1, 1, 1)),
        ("+ inserts = 1, deletes = 0", limits, None, (1, 1, 1)),
        ("+ inserts = 1, deletes = 0", limits, "disjoint", (1, 1, 1)),
        ("+ inserts = 1, deletes = 0", limits, "disjoint", (2, 3, 3)),
        ("at_most_k = 4; sign-ups an event query (inserts)", {"at_most_k": 4}, None, (1, 1, 1)),
        ("+ inserts = 1, deletes = 0; sign-ups an event query", limits, None, (1, 1, 1)),
        ("+ inserts = 1, deletes = 0; sign-ups an event query", limits, "disjoint", (1, 1, 1)),
        ("+ inserts = 1, deletes = 0; sign-ups an event query", limits, None, "auto"),
        ("at_most_k = 4; sign-ups an event query (inserts)", {"at_most_k": 4}, None, "auto"),
        ("+ inserts = 1, deletes = 0", limits, None, "auto"),
    ]
    for name, con, plan, weights in rows:
        s = saas_settings(con, plan, weights, events="event" in name)
        p = s.explain().predicted
        label = plan or f"auto ({s.plan.kind} c={getattr(s.plan, 'branching', '-')})"
        shown = ":".join(map(str, weights)) if not isinstance(weights, str) else (
            "auto " + ":".join(f"{w:.3g}" for w in s.weights))
        print(f"| {name} | {label} | {shown} | "
              f"{p['signups'].release_std:.2f} | {p['signups'].running_std:.2f} | "
              f"{p['active_by_plan'].running_std:.2f} | {p['mrr'].running_std:.0f} |")
    print()


def main() -> None:
    if "--saas" in sys.argv:
        saas_table()
        return
    e = 12 if "--quick" in sys.argv else 16
    T = 2**e
    t0 = time.perf_counter()
    gaussian_table(T, e)
    pure_table(T, e)
    auto_table()
    saas_table()
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
