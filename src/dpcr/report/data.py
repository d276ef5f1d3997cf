"""What the public report shows, gathered from the settings and the store.

Everything here is public: the released rows (DP values and their exact stds), the plan and its
guarantee per constraint class (from the settings alone), the budget spent after each reporting
interval (the guarantee of what was released up to it, computed like the release loop's filter
does), the runs that released (their clock, intervals and spent budget only: a run that
released nothing is in the operator report alone), the planner's ranking at equal
privacy (settings only), and the alert answers that ``alerts.csv`` publishes. The one exception
is ``truth``: the exact series, present only for a simulation store (:mod:`dpcr.report.truth`),
and refused for a release by :func:`ReportData.__post_init__`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dpcr.errors import ConfigError

if TYPE_CHECKING:
    from dpcr.accounting.guarantee import Participation
    from dpcr.plans.base import Node
    from dpcr.release import ContinualRelease, ReleaseRow, RunResult
    from dpcr.store import Store

__all__ = ["BUDGET_POINTS", "ReportData", "budget_by_interval", "gather"]

#: The budget curve is computed at no more than this many reporting intervals.
BUDGET_POINTS = 120
#: Only these fields of a stored run are public.
_RUN_FIELDS = ("clock", "released_intervals", "new_intervals")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportData:
    """The content of one report. ``truth`` maps ``(query, key)`` to the exact running values
    (window values for a window plan) per reporting interval: simulation only."""

    simulation: bool
    summary: dict[str, Any]
    rows: tuple[ReleaseRow, ...]
    plan: dict[str, Any]
    budget: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    ranking: list[dict[str, Any]]
    planner_table: list[str]
    alert_rules: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    truth: dict[tuple[str, str], list[float]] | None = None
    #: what each statistic is, in words (its kind, column, filter and grid: its units)
    statistics: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.truth is not None and not self.simulation:
            raise ConfigError(
                "exact values may appear only in a simulation's report; a release's report "
                "holds DP values only (docs/report.md)"
            )

    def to_json(self) -> dict[str, Any]:
        """The embedded data (``<script id="dpcr-data">``): every number the page shows."""
        out: dict[str, Any] = {
            "simulation": self.simulation,
            "summary": self.summary,
            "rows": [r.record() for r in self.rows],
            "plan": self.plan,
            "budget": self.budget,
            "runs": self.runs,
            "ranking": self.ranking,
            "alert_rules": self.alert_rules,
            "alerts": self.alerts,
            "statistics": self.statistics,
        }
        if self.truth is not None:
            out["truth"] = [
                {"query": q, "key": k, "interval": i + 1, "value": v}
                for (q, k), values in self.truth.items()
                for i, v in enumerate(values)
            ]
        return out


def budget_by_interval(
    settings: ContinualRelease, n: int, *, points: int = BUDGET_POINTS
) -> list[dict[str, Any]]:
    """After reporting intervals ``1..n`` (at most ``points`` of them, always ``n``): the
    per-unit guarantee of everything released up to there, overall and per constraint class.
    The same composition as the release loop's filter: every instance due by then with its
    layer's calibrated event, the plan's participation at that interval, the alert rules."""
    from dpcr.accounting.events import DpEvent
    from dpcr.accounting.guarantee import layered_guarantee, with_selection
    from dpcr.release import calibrate, flatten, query_constraints, query_participation
    from dpcr.timeutil import format_timestamp

    if n <= 0:
        return []
    cal = calibrate(settings)
    plan = settings.plan
    if n <= points:
        marks = list(range(1, n + 1))
    else:
        marks = sorted({max(1, round(n * k / points)) for k in range(1, points + 1)} | {n})
    events = [cal.layer_event(layer) for layer in range(len(cal.layers))]
    schedule = plan.schedule()
    out: list[dict[str, Any]] = []
    # The instances due by each mark grow with it: each mark adds those due since the last
    # one. The guarantee depends only on how many instances of each layer are due and on the
    # participation, which most marks share: composed once per distinct pair.
    due: set[Node] = set()
    counts = [0] * len(events)
    known: dict[tuple[tuple[int, ...], tuple[tuple[str, Participation], ...], str], Any] = {}
    last = 0
    for i in marks:
        for node in plan.due(last, i):
            instance = plan.instance(node)
            if instance not in due:
                due.add(instance)
                if instance[0] < len(events):
                    counts[instance[0]] += 1
        last = i
        participation = plan.participation(settings.constraint, reporting=i)
        per_query = (
            None if cal.per_query is None
            else query_participation(settings, query_constraints(settings), i)
        )
        key = (tuple(counts), tuple(sorted(participation.items())), repr(per_query))
        if key not in known:
            if per_query is not None:  # each query with its own participation
                groups, flat = flatten(
                    [[cal.layers[lv]] * n for lv, n in enumerate(counts)], per_query
                )
                known[key] = layered_guarantee(
                    groups, flat, delta=settings.release_delta, extra=cal.alerts
                )
            else:
                layer_events: list[list[DpEvent]] = [
                    [e] * n for e, n in zip(events, counts, strict=True)
                ]
                known[key] = layered_guarantee(
                    layer_events, participation, delta=settings.release_delta,
                    extra=cal.alerts,
                )
        g, per_class = known[key]
        sel = settings.selection_delta  # open keys (docs/privacy.md, section 12)
        g, per_class = with_selection(g, sel), {c: with_selection(pg, sel)
                                                 for c, pg in per_class.items()}
        out.append({
            "interval": i,
            "end": format_timestamp(schedule.release_time(i)),
            "spent_epsilon": g.epsilon,
            "spent_delta": g.delta,
            "remaining_epsilon": max(0.0, settings.budget.epsilon - g.epsilon),
            "per_class": {c: {"epsilon": pg.epsilon, "delta": pg.delta}
                          for c, pg in per_class.items()},
        })
    return out


def _ranking(settings: ContinualRelease, report: Any) -> list[dict[str, Any]]:
    from dpcr.plans import SlidingWindowRelease
    from dpcr.release import rank_plans

    if isinstance(settings.plan, SlidingWindowRelease):
        return []
    return [
        {
            "plan": r.plan.describe(),
            "kind": r.plan.kind,
            "configured": r.plan == settings.plan,
            "score": r.score,
            "approximate": r.approximate,
            "predicted": {q: {"release_std": e.release_std, "running_std": e.running_std,
                              "final_std": e.final_std}
                          for q, e in r.report.predicted.items()},
        }
        for r in rank_plans(settings, known=report, approximate=True)
    ]


def gather(
    settings: ContinualRelease,
    *,
    simulation: bool,
    result: RunResult | None = None,
    truth: dict[tuple[str, str], list[float]] | None = None,
    store: Store | None = None,
) -> ReportData:
    """The report's content from the store (or from a run's ``result``, which holds the same
    rows) and the settings. Reads no source data. ``store``: an open store (a snapshot: every
    figure from one state of it) to read instead of opening it."""
    from dpcr.release import stored_result
    from dpcr.store import reading

    if result is None:
        result = stored_result(settings, simulation=simulation, store=store)
    report = settings.explain()
    with reading(store, settings.store_path, fingerprint=settings.fingerprint(),
                 mode="simulation" if simulation else "release") as opened:  # fmt: skip
        return _gathered(settings, opened, result, report, simulation=simulation, truth=truth)


def _gathered(
    settings: ContinualRelease, store: Store, result: RunResult, report: Any, *,
    simulation: bool, truth: dict[tuple[str, str], list[float]] | None,
) -> ReportData:  # fmt: skip
    from dpcr.release import public_summary
    from dpcr.report.text import candidate_lines
    from dpcr.svt.pipeline import alert_rows, alert_totals

    runs = [
        {**{k: run.get(k) for k in _RUN_FIELDS},
         "spent_epsilon": run.get("guarantee", {}).get("spent_epsilon"),
         "spent_delta": run.get("guarantee", {}).get("spent_delta")}
        for run in store.runs()
        if run.get("new_intervals")  # a run that released nothing is the operator's
    ]
    alerts = alert_rows(settings, store)
    summary = public_summary(settings, result.summary, alert_totals(settings, store))
    n = store.source_state().interval
    plan = report.to_json()
    plan["constraint"] = settings.constraint.describe()
    plan["unit"] = settings.unit
    plan["noise"] = settings.mechanism
    plan["budget"] = {"epsilon": settings.budget.epsilon, "delta": settings.budget.delta}
    return ReportData(
        simulation=simulation,
        summary=summary,
        rows=tuple(result.rows),
        plan=plan,
        budget=budget_by_interval(settings, n),
        runs=runs,
        ranking=_ranking(settings, report),
        planner_table=candidate_lines(settings, report),
        alert_rules=list(report.alerts.get("rules", [])),
        alerts=alerts,
        truth=truth,
        statistics={q.name: q.describe() for q in settings.queries},
    )
