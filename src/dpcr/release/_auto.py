"""``plan = "auto"``: the planner ranks the running-total plans it can run and picks the best.

Every candidate is calibrated exactly as a release would be (same budget, constraint, queries,
noise and alert rules), and scored by the predicted standard deviation of what a reader looks at
(the settings' ``objective``): the running value's worst std over the horizon (``"worst"``, the
default) or its std at the horizon (``"final"``) -- the plan's own estimator, exact variances --
per query, relative to the disjoint plan's, averaged over queries. Candidates: disjoint intervals;
trees with branching 2, 4, 8 and 16 (Honaker's estimator; binary also plain); under Gaussian
noise the exact square-root and row-rescaled square-root factorizations for a finite horizon
(up to :data:`~dpcr.plans.factorization_plan.MAX_HORIZON` intervals) and the BLT factorization
for an open-ended one (fitted for one participation and for the constraint's participations per
unit, :mod:`dpcr.plans.blt_presets`). An open-ended release is compared over its planning horizon
(``settings.horizon``, ``[release] planning_horizon``; default
:data:`~dpcr.release._calibrate.OPEN_HORIZON`). A candidate that cannot be proven for the
constraint (the row-rescaled square root under at most k > 1) is left out. The choice depends on
the settings only, never on the data, so it is part of the plan a store is bound to. It is the
default when ``[release] plan`` is omitted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from dpcr.errors import DpcrError
from dpcr.plans import DisjointRelease, FactorizationRelease, TreeRelease
from dpcr.plans.factorization_plan import MAX_HORIZON
from dpcr.release._calibrate import OPEN_HORIZON
from dpcr.release._plan_report import plan_report

if TYPE_CHECKING:
    from dpcr.release._plan_report import PlanReport
    from dpcr.release._settings import ReleaseSettings

S = TypeVar("S", bound="ReleaseSettings")

__all__ = ["Ranked", "choose_plan", "rank_plans", "running_candidates"]

#: A forced plan this many times worse than the best candidate is warned about.
WARN_RATIO = 1.5


@dataclass(frozen=True, slots=True, kw_only=True)
class Ranked:
    """One candidate: the plan, its score (mean over queries of its objective's std -- worst
    running value, or at the horizon -- relative to the disjoint plan's; lower is better) and
    its plan report."""

    plan: Any
    score: float
    report: PlanReport


def running_candidates(settings: ReleaseSettings) -> list[Any]:
    """The running-total plans over the settings' grid (start, period, end or horizon)."""
    p = settings.plan
    grid = p.base_grid() if not isinstance(p, DisjointRelease) else p
    if grid.start is None or grid.period is None:
        return [p]  # explicit release times: nothing to compare on a regular grid
    start, period = grid.start, grid.period
    end = getattr(p, "end", None)
    out: list[Any] = [DisjointRelease(start=start, period=period, end=end)]
    for c in (2, 4, 8, 16):
        out.append(TreeRelease(start=start, period=period, branching=c, end=end))
    out.append(TreeRelease(start=start, period=period, end=end, estimator="plain"))
    if settings.mechanism == "gaussian" and end is not None:
        horizon = (end - start) // period
        if 1 <= horizon <= MAX_HORIZON:
            for kind in ("sqrt", "rescaled"):
                out.append(FactorizationRelease(start=start, period=period, horizon=horizon,
                                                factorization=kind))
    elif settings.mechanism == "gaussian":
        planning = settings.horizon or getattr(p, "planning_horizon", None) or OPEN_HORIZON
        if planning <= MAX_HORIZON:
            out.extend(_blt_candidates(settings, start, period, planning))
    if isinstance(p, FactorizationRelease | TreeRelease) and p not in out:
        out.append(p)  # a configured plan outside the list (another scale or height)
    return [c for c in out if settings.mechanism in c.mechanisms]


def _blt_candidates(
    settings: ReleaseSettings, start: int, period: int, planning: int
) -> list[FactorizationRelease]:
    """Open-ended BLTs fitted for one participation and for each class's participations."""
    from dpcr.plans.blt_presets import nearest_fit

    def blt(fit: int) -> FactorizationRelease:
        return FactorizationRelease(start=start, period=period, horizon=None,
                                    factorization="blt", planning_horizon=planning,
                                    fit_participations=fit)

    try:
        touched = list(blt(1).participations(settings.constraint).values())
    except DpcrError:
        touched = []
    return [blt(fit) for fit in sorted({1, *(nearest_fit(m) for m in touched)})]


def rank_plans(
    settings: ReleaseSettings,
    plans: Sequence[Any] | None = None,
    *,
    known: PlanReport | None = None,
) -> list[Ranked]:
    """Every candidate (default :func:`running_candidates`) that can be calibrated within the
    budget, best first. ``known``: the report of ``settings.plan``, if already computed."""
    reports: list[tuple[Any, PlanReport]] = []
    for plan in plans if plans is not None else running_candidates(settings):
        if known is not None and plan == settings.plan:
            reports.append((plan, known))
            continue
        try:
            # Candidates are ranked by their stds; intervals are computed for the chosen plan.
            reports.append((plan, plan_report(dataclasses.replace(settings, plan=plan),
                                              intervals=False)))
        except DpcrError:
            continue  # e.g. a plan this constraint cannot be proven for
    if not reports:
        return []
    base = next((r for p, r in reports if isinstance(p, DisjointRelease)), reports[0][1])

    def std(report: PlanReport, q: str) -> float:
        e = report.predicted[q]
        return e.final_std if settings.objective == "final" else e.running_std

    def score(report: PlanReport) -> float:
        ratios = [
            std(report, q) / std(base, q) for q in report.predicted if std(base, q) > 0
        ]
        return sum(ratios) / len(ratios) if ratios else 1.0

    ranked = [Ranked(plan=p, score=score(r), report=r) for p, r in reports]
    return sorted(ranked, key=lambda x: x.score)


def choose_plan(settings: S) -> S:
    """The settings with the best running-total plan for their grid."""
    ranked = rank_plans(settings)
    return dataclasses.replace(settings, plan=ranked[0].plan) if ranked else settings
