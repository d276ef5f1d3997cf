"""``plan = "auto"``: the planner ranks the running-total plans it can run and picks the best.

Every candidate is calibrated exactly as a release would be (same budget, constraint, queries,
noise and alert rules), and scored by the predicted standard deviation of what a reader looks at
(the settings' ``objective``): the running value's worst std over the horizon (``"worst"``, the
default) or its std at the horizon (``"final"``) -- the plan's own estimator, exact variances --
per query, relative to the disjoint plan's, averaged over queries. An event query
(:class:`~dpcr.queries.Events`) publishes a count per interval, so its measure is one interval's
std whatever the objective. Candidates: disjoint intervals;
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

``weights = "auto"`` (:func:`split_scores`) lets the planner split the budget too. Every
query's std scales with its share ``s`` of the budget as ``s^-1`` (Laplace) or ``s^-1/2``
(Gaussian), so a score relative to another plan at the same shares cannot prefer one split over
another. The split's reference is instead fixed per query: the least std any candidate gives
that query at equal shares (its ideal). A candidate gives query ``i`` the std ``a_i`` times its
ideal at equal shares; the split makes every query the same factor above its ideal, as small as
possible (minimax): shares ``∝ a_i`` (Laplace) or ``∝ a_i²`` (Gaussian), and the factor -- the
candidate's score -- is the mean of the ``a_i`` (Laplace) or their root mean square
(Gaussian). The candidate with the least factor wins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from dpcr.errors import DpcrError
from dpcr.plans import DisjointRelease, FactorizationRelease, SlidingWindowRelease, TreeRelease
from dpcr.plans.factorization_plan import MAX_HORIZON
from dpcr.queries import Events
from dpcr.release._calibrate import OPEN_HORIZON
from dpcr.release._plan_report import plan_report

if TYPE_CHECKING:
    from dpcr.release._plan_report import PlanReport
    from dpcr.release._settings import ReleaseSettings

S = TypeVar("S", bound="ReleaseSettings")

__all__ = ["Ranked", "choose_plan", "choose_split", "rank_plans", "running_candidates",
           "split_scores"]

#: A forced plan this many times worse than the best candidate is warned about.
WARN_RATIO = 1.5


@dataclass(frozen=True, slots=True, kw_only=True)
class Ranked:
    """One candidate: the plan, its score (mean over queries of its objective's std -- worst
    running value, or at the horizon -- relative to the disjoint plan's; lower is better) and
    its plan report (at the settings' weights). Ranked with ``weights = "auto"``: the score is
    relative to the plan equal shares choose, at the candidate's own ``weights`` (one per
    query, summing to the number of queries), and ``stds`` the predicted std of each query's
    measure at those weights."""

    plan: Any
    score: float
    report: PlanReport
    weights: tuple[float, ...] | None = None
    stds: Mapping[str, float] | None = None

    @property
    def approximate(self) -> bool:
        """Whether the candidate was calibrated approximately (:func:`rank_plans`)."""
        return self.report.calibration is not None and self.report.calibration.approximate


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
    split: bool | None = None,
    approximate: bool = False,
) -> list[Ranked]:
    """Every candidate (default :func:`running_candidates`) that can be calibrated within the
    budget, best first. ``known``: the report of ``settings.plan``, if already computed.
    ``split`` (default: whether the settings' weights are ``"auto"``): score each candidate at
    its own split (:func:`split_scores`) instead of the settings' weights. ``approximate``:
    under Gaussian noise, the candidates other than ``settings.plan`` may be calibrated as if
    their noise were continuous Gaussians of the same σ (``calibrate(approximate=True)``: the
    closed form instead of the discrete Gaussian's privacy-loss distribution; each
    :attr:`Ranked.approximate` says whether it was) -- an accuracy hint for a report, never a
    plan = "auto" choice (tests/release/test_rank_approximate.py measures the error)."""
    split = settings.split == "auto" if split is None else split
    if split:  # every candidate at equal shares first; the split is computed from those
        settings = dataclasses.replace(settings, weights=None, split="given")
        known = None
    reports: list[tuple[Any, PlanReport]] = []
    for plan in plans if plans is not None else running_candidates(settings):
        if known is not None and plan == settings.plan:
            reports.append((plan, known))
            continue
        try:
            # Candidates are ranked by their stds; intervals are computed for the chosen plan.
            rough = approximate and plan != settings.plan
            reports.append((plan, plan_report(dataclasses.replace(settings, plan=plan),
                                              intervals=False, approximate=rough)))
        except DpcrError:
            continue  # e.g. a plan this constraint cannot be proven for
    if not reports:
        return []
    base = next((r for p, r in reports if isinstance(p, DisjointRelease)), reports[0][1])

    def score(report: PlanReport) -> float:
        ratios = [
            measure(settings, report, q) / measure(settings, base, q)
            for q in report.predicted if measure(settings, base, q) > 0
        ]
        return sum(ratios) / len(ratios) if ratios else 1.0

    ranked = sorted((Ranked(plan=p, score=score(r), report=r) for p, r in reports),
                    key=lambda x: x.score)  # fmt: skip
    return split_scores(settings, ranked) if split else ranked


def measure(settings: ReleaseSettings, report: PlanReport, name: str) -> float:
    """The std the planner compares for query ``name``: one interval's for an event query,
    else the running value's (worst over the horizon, or at it: the settings' objective)."""
    e = report.predicted[name]
    if any(q.name == name and isinstance(q, Events) for q in settings.queries):
        return e.release_std
    return e.final_std if settings.objective == "final" else e.running_std


def split_scores(settings: ReleaseSettings, ranked: Sequence[Ranked]) -> list[Ranked]:
    """``ranked`` (at equal shares) scored again, each candidate at its own split: the shares
    that put every query the same, least factor above its ideal (module docstring). Weights
    are rounded to 4 significant digits (they are part of the fingerprint); the score (the
    largest factor) and the stds are those of the rounded weights."""
    if not ranked:
        return []
    names = [q.name for q in settings.queries]
    power = 1.0 if settings.mechanism == "laplace" else 0.5  # std ∝ share^-power
    ideal = {n: min(measure(settings, r.report, n) for r in ranked) for n in names}
    out = []
    for r in ranked:
        std = {n: measure(settings, r.report, n) for n in names}
        a = [std[n] / ideal[n] if ideal[n] > 0 else 1.0 for n in names]
        raw = [x ** (1 / power) for x in a]
        weights = tuple(float(f"{len(a) * x / sum(raw):.4g}") for x in raw)
        shares = [w / sum(weights) for w in weights]
        # at equal shares (1/n) query i has std std_i; at share s_i, std_i * (1/(n s_i))^power
        factor = [(1 / (len(a) * s)) ** power for s in shares]
        score = max(x * f for x, f in zip(a, factor, strict=True))
        stds = {n: std[n] * f for n, f in zip(names, factor, strict=True)}
        out.append(dataclasses.replace(r, score=score, weights=weights, stds=stds))
    return sorted(out, key=lambda x: x.score)


def choose_plan(settings: S, *, split: bool = False) -> S:
    """The settings with the best running-total plan for their grid; with ``split``, and the
    budget split across queries that plan is scored at (``weights = "auto"``)."""
    ranked = rank_plans(settings, split=split)
    if not ranked:
        return settings
    best = ranked[0]
    if split and best.weights is not None:
        return dataclasses.replace(settings, plan=best.plan, weights=best.weights, split="auto")
    return dataclasses.replace(settings, plan=best.plan)


def choose_split(settings: S) -> S:
    """The settings with ``weights = "auto"`` resolved for their own plan: the split it is
    scored at among the running-total candidates (equal shares when it is no running-total
    plan, e.g. a sliding window)."""
    plans = running_candidates(settings)
    if settings.plan not in plans:
        running = not isinstance(settings.plan, SlidingWindowRelease)
        plans = [*plans, settings.plan] if running else []
    ranked = [r for r in rank_plans(settings, plans, split=True) if r.plan == settings.plan]
    weights = ranked[0].weights if ranked and ranked[0].weights else None
    return dataclasses.replace(settings, weights=weights, split="auto")

