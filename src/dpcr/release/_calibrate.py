"""Calibration: the noise of every layer of a plan, from the budget and the constraint alone.

One policy for every plan. The plan says, per layer, what share of the budget one mechanism
instance spends and its sensitivity factors (:class:`dpcr.plans.base.Budgeting`); each query takes
its weight's part of that share. Alert rules spend their declared (ε, δ) from the same budget.

* Laplace noise: the release spends ``ε − Σ ε_alert`` (pure ε composes exactly by sums), so the
  instance of layer ``l`` for query ``q`` gets ``ε_release · w_q / Σw · share_l`` and scale
  ``Δ₁ · l1_l / that``, rounded up to the parameter grid.
* Gaussian noise: ``σ²`` for a total ρ as above (ρ instead of ε); ρ is the largest value found for
  which the guarantee dpcr states for the whole plan -- the tightest correct accountant over the
  worst unit's composition, alerts and the tail of an open-ended tree included -- stays within
  the budget (:func:`largest_rho`).

Either way the stated guarantee is then computed from the calibrated events, and a plan whose
guarantee exceeds the budget is refused before any data is read.

The search's ρ is kept beside the store (``<store>.calibrations``, :mod:`dpcr.release._kept_rho`),
keyed by everything the search depends on and by the source of the code that computes it, so
that later processes of the same release (a cron job's runs, each run's report ranking the
candidate plans) start from it instead of searching again. The guarantee is computed from the
kept ρ exactly as after a search, and checked against the budget: the file holds no data, and
a ρ in it that the budget does not allow is refused like a search that failed.

An approximate calibration (``calibrate(settings, approximate=True)``, for ranking plans against
each other: :func:`dpcr.release.rank_plans`) accounts each discrete Gaussian as the continuous
Gaussian of the same σ and sensitivity: the search and the guarantee then compose μ = Δ/σ in
closed form (:mod:`dpcr.accounting`, the Gaussian path) instead of the discrete Gaussian's
privacy-loss distribution. Its noise is the discrete Gaussian's at the ρ so found, and its
guarantee is the continuous Gaussians': neither is released with, nor kept beside the store.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpcr.accounting.accountants import own_pld
from dpcr.accounting.composition import Guarantee, zcdp_rho
from dpcr.accounting.events import (
    ApproxDpEvent,
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    GaussianEvent,
    PureDpEvent,
)
from dpcr.accounting.guarantee import (
    Participation,
    layered_guarantee,
    tail_event,
    with_selection,
)
from dpcr.errors import BudgetExhaustedError, ConfigError
from dpcr.mechanisms import round_up
from dpcr.queries import Events, Query
from dpcr.release._kept_rho import keep_rho, kept_key, kept_rho
from dpcr.release._participation import (
    PerQuery,
    flatten,
    query_constraints,
    query_participation,
)

if TYPE_CHECKING:
    from dpcr.release._settings import ReleaseSettings

__all__ = [
    "OPEN_HORIZON",
    "Calibration",
    "calibrate",
    "largest_rho",
]

#: Reporting intervals over which an open-ended plan's predicted error is shown.
OPEN_HORIZON = 1024
#: The longest horizon predictions are computed over (a bounded plan's own if shorter).
PREDICTION_HORIZON = 1 << 16


def largest_rho(epsilon: float, delta: float, spent: Callable[[Fraction], float] | None) -> float:
    """Largest ρ found with ``spent(ρ) <= epsilon`` (``spent``: the ε dpcr states when the plan
    is calibrated to ρ), to within 1e-4 in log ρ. Without ``spent``: :func:`zcdp_rho`.

    From the zCDP ρ, secant steps on log(spent/ε) against log ρ (nearly linear there) aim just
    past the root, then a bracket 1e-4 wide is checked around it: about four evaluations, up
    or down (down when alert rules or pure parts spend budget too). Illinois regula falsi in
    the bracket when the prediction misses; at most 14 evaluations, then halving and
    bisection (a budget the alert rules use up is refused). The search is a function of the
    arguments alone, and only ρ values actually checked are returned."""
    lo = zcdp_rho(epsilon, delta)
    if lo <= 0:
        raise ConfigError(f"budget epsilon={epsilon}, delta={delta} leaves no room for noise")
    if spent is None:
        return lo
    return _search(lo, epsilon, spent)


def _search(start: float, epsilon: float, spent: Callable[[Fraction], float]) -> float:
    """The search of :func:`largest_rho` from ``start``, on x = log ρ."""
    checked: dict[float, float] = {}  # x -> the ρ spent was called with

    def g(x: float, rho: float | None = None) -> float:
        checked[x] = math.exp(x) if rho is None else rho
        value = spent(Fraction(checked[x]))
        return math.log(value / epsilon) if value > 0 else -math.inf

    width, cap, slope = 1e-4, 14, 0.7  # d log ε / d log ρ: 1/2 (ε ≈ 2√(ρ log(1/δ))) to 1
    x0 = math.log(start)
    g0 = g(x0, start)
    a, ga, b, gb = (x0, g0, math.inf, math.inf) if g0 <= 0 else (-math.inf, -math.inf, x0, g0)
    side, last_width = 0, math.inf
    while len(checked) < cap and not b - a <= width * 1.001:
        if math.isfinite(a) and math.isfinite(b):  # bracketed: straddle the predicted root,
            # or halve the bracket when the last step did not (spent jumps where the tightest
            # method changes: a secant step then barely moves)
            root = a - ga * (b - a) / (gb - ga) if math.isfinite(ga) else (a + b) / 2
            x = root - 0.45 * width if side >= 0 else root + 0.45 * width
            x = min(max(x, a + min(width, 0.05 * (b - a))), b - min(width, 0.05 * (b - a)))
            if b - a > 0.5 * last_width:
                x = (a + b) / 2
            last_width = b - a
        elif math.isfinite(a):  # only below: aim just past the root (steps of at most e)
            x = a + min(1.0, max(0.0, -ga / slope if math.isfinite(ga) else 1.0)) + 0.45 * width
        else:  # only above: aim just short of it
            x = b - min(1.0, max(0.0, gb / slope)) - 0.45 * width
        gx = g(x)
        near = (a, ga) if gx <= 0 and math.isfinite(a) else (b, gb)
        if math.isfinite(near[0]) and math.isfinite(near[1]) and math.isfinite(gx) and x != near[0]:
            estimate = (gx - near[1]) / (x - near[0])
            slope = estimate if 0.05 < estimate < 20 else slope
        if gx <= 0:
            if side == -1 and math.isfinite(gb):
                gb /= 2  # Illinois: the same end twice
            a, ga, side = x, gx, -1
        else:
            if side == 1 and math.isfinite(ga):
                ga /= 2
            b, gb, side = x, gx, 1
    if not math.isfinite(a):
        return _downward(math.exp(b), epsilon, spent)
    return checked[a]


def _downward(hi: float, epsilon: float, spent: Callable[[Fraction], float]) -> float:
    lo = hi
    for _ in range(60):
        lo /= 2
        if spent(Fraction(lo)) <= epsilon:
            break
    else:
        raise ConfigError(
            f"no noise level keeps the plan within epsilon = {epsilon}: the alert rules (or "
            "other fixed costs) use the whole budget"
        )
    for _ in range(12):  # bisection on log ρ: within 2^(1/4096) of the largest
        mid = math.sqrt(lo * hi)
        if spent(Fraction(mid)) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


def alert_events(settings: ReleaseSettings) -> tuple[DpEvent, ...]:
    """The event of each alert rule (its sparse vector's proven guarantee over its whole
    stream)."""
    from dpcr.svt.rules import rule_parameters

    out: list[DpEvent] = []
    for rule in settings.alerts:
        p = rule_parameters(rule, settings.queries, settings.owner).parameters
        if p.delta > 0:
            out.append(ApproxDpEvent(epsilon=p.epsilon, delta=p.delta))
        else:
            out.append(PureDpEvent(epsilon=p.epsilon))
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Per layer, the event of each query's instance; the tail of an open-ended tree; the alert
    events; the participation of the whole plan; and the guarantee they compose to."""

    layers: tuple[Mapping[str, DpEvent], ...]
    tail: DpEvent | None
    alerts: tuple[DpEvent, ...]
    participation: Mapping[str, Participation]
    guarantee: Guarantee
    per_class: Mapping[str, Guarantee]
    #: per query and class, the query's own participation (:mod:`dpcr.release._participation`);
    #: None when every query has the plan's (``participation``)
    per_query: PerQuery | None = None
    #: True when the noise was accounted as continuous Gaussians (``calibrate(approximate=
    #: True)``): the guarantee is that approximation's, not one a release may state
    approximate: bool = False

    def layer_event(self, layer: int) -> DpEvent:
        """The composed event of one instance of ``layer`` (all queries)."""
        return ComposedEvent(events=tuple(self.layers[layer].values()))

    def query_participation(self, query: str) -> Mapping[str, Participation]:
        """Per class, the participation ``query`` is accounted with."""
        return self.participation if self.per_query is None else self.per_query[query]

    def worst_unit(self, cls: str) -> DpEvent:
        """Everything the worst unit of class ``cls`` meets over the whole plan: ``counts[l]``
        instances of each layer (of each query, with its own counts), the alert rules and the
        tail (``dpcr account`` composes it under every method; the guarantee is its stated
        one)."""
        from dpcr.accounting.events import SelfComposedEvent

        parts: list[DpEvent] = []
        if self.per_query is None:
            counts = self.participation[cls].counts
            parts += [
                SelfComposedEvent(event=self.layer_event(layer), count=n)
                for layer, n in enumerate(counts[: len(self.layers)])
                if n
            ]
        else:
            for layer, events in enumerate(self.layers):
                for q, event in events.items():
                    qc = self.per_query[q][cls].counts
                    n = qc[layer] if layer < len(qc) else 0
                    if n:
                        parts.append(SelfComposedEvent(event=event, count=n))
        parts += list(self.alerts) + ([self.tail] if self.tail is not None else [])
        return ComposedEvent(events=tuple(parts))


def query_sensitivity2(settings: ReleaseSettings, query: Any) -> Fraction:
    """Squared L2 sensitivity of one base interval's change. With a column unit the engine
    bounds the unit's change by its L1 norm (a histogram's L1 <= 2 allows +2 on one key), so
    L2² <= L1²; with the entry as the unit, the query's own L2² (a histogram: 2)."""
    if settings.owner is not None:
        return Fraction(query.l1_sensitivity) ** 2
    return Fraction(query.l2_sensitivity_squared)


def _budgeting(settings: ReleaseSettings) -> Any:
    return settings.plan.budgeting(
        settings.constraint, clamped=settings.owner is not None
    )


def _budgetings(
    settings: ReleaseSettings, constraints: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """Per query, the plan's budgeting under the query's constraint (None: no per-query
    accounting, or budgetings of different layer counts)."""
    if constraints is None:
        return None
    clamped = settings.owner is not None
    out = {q: settings.plan.budgeting(c, clamped=clamped) for q, c in constraints.items()}
    if len({len(b.layers) for b in out.values()}) > 1:
        return None
    return out


def _tail_share(settings: ReleaseSettings, budgeting: Any, per_query: Mapping[str, Any] | None
                ) -> Fraction:
    """The share of the budget the tail spends: the plan's, or each query's weight of its own."""
    if per_query is None:
        return Fraction(budgeting.tail)
    total = Fraction(sum(settings.query_weights))
    return sum(
        (Fraction(w) / total * Fraction(per_query[q.name].tail)
         for q, w in zip(settings.queries, settings.query_weights, strict=True)),
        Fraction(0),
    )


def _per_base(settings: ReleaseSettings, per_query: Mapping[str, Any] | None) -> dict[str, Any]:
    """Per event query, the budgeting of its change, which the engine clamps per base
    interval (:class:`dpcr.queries.Events`: its changes do not telescope, so a node summing
    several base intervals has up to ``m`` times its sensitivity; :meth:`dpcr.plans.base.Plan.
    budgeting`, ``clamped``), under the query's own constraint when it is accounted per query
    (``per_query``). Empty under a column unit, whose budgeting is clamped for every query."""
    if settings.owner is not None or not any(isinstance(q, Events) for q in settings.queries):
        return {}
    constraints = query_constraints(settings) if per_query is not None else None
    return {
        q.name: settings.plan.budgeting(
            constraints[q.name] if constraints else settings.constraint, clamped=True
        )
        for q in settings.queries
        if isinstance(q, Events)
    }


def _events(
    settings: ReleaseSettings, amount: Fraction, budgeting: Any = None,
    per_query: Mapping[str, Any] | None = None,
) -> tuple[dict[str, DpEvent], ...]:
    """Per layer and query, the event of one instance: the query's weight of ``amount`` times
    the layer's share (of the query's own budgeting when ``per_query`` gives one)."""
    budgeting = budgeting if budgeting is not None else _budgeting(settings)
    per_base = _per_base(settings, per_query)
    total_weight = Fraction(sum(settings.query_weights))
    layers: list[dict[str, DpEvent]] = []
    for layer, plan_lb in enumerate(budgeting.layers):
        out: dict[str, DpEvent] = {}
        for q, w in zip(settings.queries, settings.query_weights, strict=True):
            own = plan_lb if per_query is None else per_query[q.name].layers[layer]
            # (the share of the query's layer; an event query's sensitivity factors are those
            # of its clamp per base interval)
            lb = per_base[q.name].layers[layer] if q.name in per_base else own
            part = amount * Fraction(w) / total_weight * own.share
            if settings.mechanism == "laplace":
                sens = q.l1_sensitivity * lb.l1
                out[q.name] = DiscreteLaplaceEvent(
                    scale=round_up(sens / part), sensitivity=sens,
                    dimension=_coordinates(q) * lb.values,
                )
            else:
                sens2 = query_sensitivity2(settings, q) * lb.l2
                out[q.name] = DiscreteGaussianEvent(
                    sigma2=round_up(sens2 / (2 * part)), sensitivity2=sens2,
                    dimension=_coordinates(q) * lb.values,
                )
        layers.append(out)
    return tuple(layers)


#: An approximate calibration stands only when every discrete Gaussian it accounts as continuous
#: has σ² at least this many times its squared sensitivity (measured: its plan scores then stay
#: within 0.3 % of the exact ones; at σ² = 0.25 Δ² they were 10 % off); else the exact one is made.
CONTINUOUS_FROM = 4


def _gaussians(layers: Sequence[Mapping[str, DpEvent]]) -> list[DiscreteGaussianEvent]:
    return [e for layer in layers for e in layer.values() if isinstance(e, DiscreteGaussianEvent)]


def _approximable(settings: ReleaseSettings, budgeting: Any, budgetings: Any) -> bool:
    """Whether an approximate calibration would change the accounting: every discrete Gaussian
    has its own privacy-loss distribution (one coordinate, an integer sensitivity); when one
    has not, all are accounted by their continuous surrogates in closed form already
    (:func:`~dpcr.accounting.accountants.own_pld`). Noise levels do not matter: at ρ = 1."""
    return all(own_pld(e) for e in _gaussians(_events(settings, Fraction(1), budgeting,
                                                      budgetings)))


def _near_continuous(calibration: Calibration) -> bool:
    """Whether every discrete Gaussian of ``calibration`` has σ² >= :data:`CONTINUOUS_FROM` Δ²."""
    return all(e.sigma2 >= CONTINUOUS_FROM * e.sensitivity2
               for e in _gaussians(calibration.layers))


def _as_continuous(
    layers: Sequence[Mapping[str, DpEvent]],
) -> tuple[dict[str, DpEvent], ...]:
    """``layers`` with each discrete Gaussian replaced by the continuous Gaussian of the same σ
    and L2 sensitivity (an approximate calibration's accounting, module docstring)."""
    def continuous(e: DpEvent) -> DpEvent:
        if not isinstance(e, DiscreteGaussianEvent):
            return e
        return GaussianEvent(sigma=math.sqrt(e.sigma2), sensitivity=math.sqrt(e.sensitivity2))

    return tuple({q: continuous(e) for q, e in layer.items()} for layer in layers)


def _coordinates(q: Query) -> int:
    """The coordinates of ``q`` with independent noise: its keys; an open histogram's are not
    known in advance (at least two)."""
    return max(len(q.keys), 2) if getattr(q, "open", False) else len(q.keys)


def _planned(
    layers: Sequence[Mapping[str, DpEvent]],
    participation: Mapping[str, Participation],
    *,
    delta: float,
    extra: Sequence[DpEvent],
    tail: DpEvent | None,
    per_query: PerQuery | None = None,
) -> tuple[Guarantee, dict[str, Guarantee]]:
    """The guarantee of the whole plan: per layer, as many instances as the widest class
    meets, composed as one group per layer (``per_query`` None) or per (layer, query)."""
    counts = [participation] if per_query is None else list(per_query.values())
    instances: list[list[Mapping[str, DpEvent]]] = []
    for layer, events in enumerate(layers):
        widest = max((p.counts[layer] if layer < len(p.counts) else 0)
                     for parts in counts for p in parts.values())
        instances.append([events] * widest)
    if per_query is not None:
        groups, flat = flatten(instances, per_query)
        return layered_guarantee(groups, flat, delta=delta, extra=extra, tail=tail)
    layer_events = [
        [ComposedEvent(events=tuple(insts[0].values()))] * len(insts) if insts else []
        for insts in instances
    ]
    return layered_guarantee(layer_events, participation, delta=delta, extra=extra, tail=tail)


#: Calibrations made in this process, by everything they depend on (``dpcr plan`` calibrates
#: a plan more than once: to choose it, to report it, to rank it; a tree's two estimators share
#: one calibration). At most :data:`_KEPT` are kept.
_CALIBRATIONS: dict[str, Calibration] = {}
_KEPT = 64


def _covers(wide: Participation, narrow: Participation) -> bool:
    """True when a unit of ``wide`` can meet at least the instances a unit of ``narrow`` meets:
    every layer's count at least as large (no runs: those refine the count)."""
    if wide.runs is not None or narrow.runs is not None:
        return False
    counts = wide.counts + (0,) * max(0, len(narrow.counts) - len(wide.counts))
    return all(a >= b for a, b in zip(counts, narrow.counts, strict=False))


def _widest(participation: Mapping[str, Participation]) -> dict[str, Participation]:
    """The classes no other class covers (of equal ones, the first): the worst unit is a unit
    of one of them, since meeting fewer instances of the same events loses no more."""
    names = list(participation)
    out: dict[str, Participation] = {}
    for i, name in enumerate(names):
        p = participation[name]
        covered = any(
            j != i and _covers(participation[other], p)
            and (not _covers(p, participation[other]) or j < i)
            for j, other in enumerate(names)
        )
        if not covered:
            out[name] = p
    return out


def calibrate(settings: ReleaseSettings, *, approximate: bool = False) -> Calibration:
    """Calibrate every layer (module docstring) and state the plan's guarantee; raises
    :class:`BudgetExhaustedError` (a :class:`PrivacyError`) when it cannot be proven within the
    budget. A function of the budget, the plan's budgeting and participation, the queries, the
    noise and the alert rules (remembered by them: :data:`_CALIBRATIONS`).

    ``approximate``: Gaussian noise may be accounted as continuous Gaussians (module docstring;
    the result says so: :attr:`Calibration.approximate`): when the discrete Gaussians would
    otherwise each need their privacy-loss distribution, no alert rule spends from the budget
    (a continuous Gaussian composed with other mechanisms has no closed form), their σ² come
    out at least :data:`CONTINUOUS_FROM` times their Δ², and this process does not hold the
    exact calibration already. Otherwise, and for Laplace noise, the exact calibration is
    returned."""
    budgeting = _budgeting(settings)
    participation = settings.plan.participation(settings.constraint, reporting=None)
    constraints = query_constraints(settings)
    budgetings = _budgetings(settings, constraints)
    per_query = query_participation(settings, constraints if budgetings else None, None)
    alerts = alert_events(settings)
    queries = tuple(
        (q.name, type(q).__name__, q.l1_sensitivity, query_sensitivity2(settings, q),
         len(q.keys))
        for q in settings.queries
    )
    per_base = _per_base(settings, budgetings)
    key = repr((budgeting, sorted(per_base.items()), sorted(participation.items()), alerts,
                queries, settings.weights, settings.mechanism, settings.budget.epsilon,
                settings.release_delta, budgetings, per_query))
    known = _CALIBRATIONS.get(key)
    args = (settings, budgeting, participation, alerts)
    counted = (budgetings, per_query) if per_query else None
    if (known is None and approximate and settings.mechanism == "gaussian" and not alerts
            and _approximable(settings, budgeting, budgetings)):
        rough = f"{key} as continuous Gaussians"
        known = _CALIBRATIONS.get(rough)
        if known is None:
            known = _remember(rough, _calibrate(*args, per_query=counted, continuous=True))
        known = known if _near_continuous(known) else None
    if known is None:
        known = _remember(key, _calibrate(*args, per_query=counted,
                                          kept=kept_key(settings, key)))
    return known


def _remember(key: str, calibration: Calibration) -> Calibration:
    """``calibration``, kept in :data:`_CALIBRATIONS` under ``key``."""
    while len(_CALIBRATIONS) >= _KEPT:
        _CALIBRATIONS.pop(next(iter(_CALIBRATIONS)))
    _CALIBRATIONS[key] = calibration
    return calibration


def _calibrate(
    settings: ReleaseSettings, budgeting: Any, participation: Mapping[str, Participation],
    alerts: tuple[DpEvent, ...], *, per_query: tuple[Any, PerQuery] | None = None,
    kept: str | None = None, continuous: bool = False,
) -> Calibration:
    """:func:`calibrate`'s computation; ``kept``: the key of its ρ beside the store (Gaussian
    noise: :func:`~dpcr.release._kept_rho.kept_key`); ``continuous``: account the noise as
    continuous Gaussians (an approximate calibration)."""
    budget = settings.budget
    budgetings, counts = per_query if per_query is not None else (None, None)
    delta = settings.release_delta  # the budget's δ less key selection's (docs/privacy.md, 12)
    alert_delta = sum(float(getattr(e, "delta", 0.0)) for e in alerts)
    if alert_delta and alert_delta >= delta:
        raise ConfigError(
            f"the alert rules spend δ = {alert_delta:.3g}, at least the budget δ = "
            f"{budget.delta:.3g}: nothing is left for the release; lower the rules' delta or "
            "raise privacy.delta"
        )
    tail: DpEvent | None = None

    def accounted(
        layers: Sequence[Mapping[str, DpEvent]],
    ) -> Sequence[Mapping[str, DpEvent]]:
        return _as_continuous(layers) if continuous else layers

    if settings.mechanism == "laplace":
        alert_eps = sum((Fraction(getattr(e, "epsilon", 0.0)) for e in alerts), Fraction(0))
        amount = Fraction(budget.epsilon) - alert_eps
        if amount <= 0:
            raise ConfigError(
                f"the alert rules spend ε = {float(alert_eps):.6g} of the budget "
                f"ε = {budget.epsilon}; nothing is left for the release"
            )
        tail_share = _tail_share(settings, budgeting, budgetings)
        if tail_share:
            tail = tail_event(share=tail_share, epsilon=amount)
        layers = _events(settings, amount, budgeting, budgetings)
    else:
        share = _tail_share(settings, budgeting, budgetings)

        def tail_at(rho: Fraction) -> DpEvent | None:
            return tail_event(share=share, rho=rho) if share else None

        def spent_by(classes: Mapping[str, Participation]) -> Callable[[Fraction], float]:
            def spent(rho: Fraction) -> float:
                events = accounted(_events(settings, rho, budgeting, budgetings))
                g, _ = _planned(events, classes, delta=delta, extra=alerts, tail=tail_at(rho),
                                per_query=counts)
                return g.epsilon
            return spent

        found = kept_rho(settings.store_path, kept)
        if found is not None:
            rho = Fraction(found)
        else:
            # the search accounts for the classes no other class covers; all are checked
            # after (per query: every class, since a class may be wider for one query only)
            widest = _widest(participation) if counts is None else dict(participation)
            rho = Fraction(largest_rho(budget.epsilon, delta, spent_by(widest)))
            if len(widest) < len(participation):
                g, _ = _planned(accounted(_events(settings, rho, budgeting)), participation,
                                delta=delta,
                                extra=alerts, tail=tail_at(rho))
                if g.epsilon > budget.epsilon:  # (float noise of a covered class): all
                    rho = Fraction(largest_rho(budget.epsilon, delta, spent_by(participation)))
            keep_rho(settings.store_path, kept, float(rho))
        tail = tail_at(rho)
        layers = _events(settings, rho, budgeting, budgetings)
    guarantee, per_class = _planned(accounted(layers), participation, delta=delta, extra=alerts,
                                    tail=tail, per_query=counts)
    if guarantee.epsilon > budget.epsilon * (1 + 1e-9) or guarantee.delta > delta * (1 + 1e-9):
        raise BudgetExhaustedError(
            f"calibrated noise gives epsilon {guarantee.epsilon:.6g} (delta "
            f"{guarantee.delta:.3g}) above the budget {budget.epsilon} (delta {delta:.3g}); "
            "refusing to release"
        )
    sel = settings.selection_delta  # open keys: (ε, δ₁ + e^ε·δ₂), docs/privacy.md, 12
    return Calibration(
        layers=layers,
        tail=tail,
        alerts=alerts,
        participation=participation,
        guarantee=with_selection(guarantee, sel),
        per_class={c: with_selection(g, sel) for c, g in per_class.items()},
        per_query=counts,
        approximate=continuous,
    )

