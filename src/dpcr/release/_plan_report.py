"""What ``dpcr plan`` states, from the settings alone: the guarantee per class of the
constraint, each layer's noise, and the predicted errors of every query (noise stds and the 95 %
half-widths a run will publish)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.accounting.composition import Guarantee
from dpcr.accounting.events import (
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    event_to_dict,
)
from dpcr.errors import ConfigError
from dpcr.mechanisms import noise_variance
from dpcr.release._calibrate import (
    OPEN_HORIZON,
    PREDICTION_HORIZON,
    Calibration,
    _budgeting,
    calibrate,
)
from dpcr.release._participation import effective_ops
from dpcr.release._selection import KeySelection, key_selections

if TYPE_CHECKING:
    from dpcr.release._settings import ReleaseSettings

__all__ = [
    "ClassReport",
    "LayerReport",
    "PlanReport",
    "QueryError",
    "QueryParticipation",
    "plan_report",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassReport:
    """One class of the constraint (``"all"`` for a simple one, ``"*"`` a hybrid's default):
    the most instances per layer one unit touches, their total and the class's guarantee."""

    per_layer: tuple[int, ...]
    releases: int
    guarantee: Guarantee


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryParticipation:
    """One query: the ops whose mutations can change it and, per class, the most instances
    per layer one unit's mutations can change through it (what it is calibrated with)."""

    touched_by: tuple[str, ...]
    per_class: Mapping[str, tuple[int, ...]]

    @property
    def releases(self) -> int:
        """The most instances one unit changes through this query (worst class)."""
        return max((sum(c) for c in self.per_class.values()), default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerReport:
    """One layer: the budget share of one instance, the most instances one unit touches (worst
    class), each query's event and noise std (in the statistic's units)."""

    layer: int
    share: float
    instances_per_unit: int
    events: Mapping[str, DpEvent]
    noise_std: Mapping[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryError:
    """Predicted standard deviations (noise only, statistic's units) at the planning horizon:
    of one reporting interval's change, and the largest of the running value (the window's
    value for a window plan) over the horizon, and of the running value at the horizon's last
    interval (``final_std``: the year-end error of a year's release); and the half-widths of
    the published 95 % intervals of the first two (docs/uncertainty.md; None beyond
    :data:`PREDICTED_INTERVALS_UP_TO` intervals)."""

    release_std: float
    running_std: float
    final_std: float = 0.0
    release_half_width: float | None = None
    running_half_width: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanReport:
    """What ``dpcr plan`` states, read from the settings alone (the same for every plan kind)."""

    kind: str
    description: str
    epsilon: float
    delta: float
    rho: float | None
    method: str
    per_class: Mapping[str, ClassReport]
    layers: tuple[LayerReport, ...]
    tail_share: float
    releases: int | None
    horizon: int
    predicted: Mapping[str, QueryError]
    alerts: Mapping[str, Any] = field(default_factory=dict)
    state_machines: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    calibration: Calibration | None = None
    per_query: Mapping[str, QueryParticipation] = field(default_factory=dict)
    #: what plan = "auto" minimises ("worst" or "final", :attr:`ReleaseSettings.objective`)
    objective: str = "worst"
    #: each query's weight (its part of every layer's share is weight / sum of weights), and
    #: whether the planner chose them ("auto") or they were given ("given")
    weights: Mapping[str, float] = field(default_factory=dict)
    split: str = "given"
    #: per open query, how its keys are selected (docs/privacy.md, section 12)
    selections: Mapping[str, KeySelection] = field(default_factory=dict)

    def __repr__(self) -> str:
        from dpcr.release._display import plan_summary

        return plan_summary(self)

    def __str__(self) -> str:
        from dpcr.release._display import plan_text

        return plan_text(self)

    def __rich__(self) -> str:  # (a terminal: rich prints the text)
        return str(self)

    def _repr_html_(self) -> str:  # (a notebook)
        from dpcr.release._display import plan_html

        return plan_html(self)

    @property
    def max_releases_per_unit(self) -> int:
        """The most instances any unit touches (the worst class)."""
        return max((c.releases for c in self.per_class.values()), default=0)

    def to_json(self) -> dict[str, Any]:
        """One schema for every plan kind (docs/config.md, "dpcr plan --json")."""
        out: dict[str, Any] = {
            "plan": self.kind,
            "description": self.description,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "method": self.method,
            "max_releases_per_unit": self.max_releases_per_unit,
            "per_class": {
                name: {
                    "per_layer": list(c.per_layer),
                    "releases": c.releases,
                    "epsilon": c.guarantee.epsilon,
                    "delta": c.guarantee.delta,
                }
                for name, c in self.per_class.items()
            },
            "objective": self.objective,
            "weights": dict(self.weights),
            "split": self.split,
            "selection": {
                name: {
                    "threshold": sel.threshold,
                    "delta": sel.delta,
                    "keys_per_unit": sel.keys_per_unit,
                    "count_per_unit": sel.count_per_unit,
                    "horizon": sel.horizon,
                    **({"follows": sel.follows} if sel.follows is not None else {}),
                }
                for name, sel in self.selections.items()
            },
            "per_query": {
                name: {
                    "touched_by": list(qp.touched_by),
                    "releases": qp.releases,
                    "per_class": {c: list(v) for c, v in qp.per_class.items()},
                }
                for name, qp in self.per_query.items()
            },
            "layers": [
                {
                    "layer": lr.layer,
                    "share": lr.share,
                    "instances_per_unit": lr.instances_per_unit,
                    "mechanisms": {n: event_to_dict(e) for n, e in lr.events.items()},
                    "noise_std": dict(lr.noise_std),
                }
                for lr in self.layers
            ],
            "tail_share": self.tail_share,
            "releases": self.releases,
            "horizon": self.horizon,
            "predicted": {
                n: {
                    "release_std": e.release_std,
                    "running_std": e.running_std,
                    "final_std": e.final_std,
                    "release_half_width": e.release_half_width,
                    "running_half_width": e.running_half_width,
                }
                for n, e in self.predicted.items()
            },
            "state_machines": {k: dict(v) for k, v in self.state_machines.items()},
            "details": dict(self.details),
        }
        if self.alerts.get("rules"):
            out["alerts"] = self.alerts["rules"]
        return out


def _std(event: DpEvent) -> float:
    if not isinstance(event, DiscreteLaplaceEvent | DiscreteGaussianEvent):
        raise ConfigError(f"no additive noise for {event!r}")
    return math.sqrt(noise_variance(event))


def predicted_errors(
    settings: ReleaseSettings,
    calibration: Calibration,
    horizon: int,
    *,
    intervals: bool = True,
) -> dict[str, QueryError]:
    """Exact noise stds of what a reader sees, from the plan's own estimator at ``horizon``.
    Queries whose noise events are the same share the computation (in integer steps; each
    query's grid converts)."""
    out: dict[str, QueryError] = {}
    known: dict[tuple[DpEvent, ...], dict[str, float]] = {}
    for q in settings.queries:
        events = tuple(layer[q.name] for layer in calibration.layers)
        if events not in known:
            known[events] = _errors_in_steps(settings, calibration, q.name, horizon, intervals)
        unit = float(q.unit_scale)
        out[q.name] = QueryError(**{k: v * unit for k, v in known[events].items()})
    return out


def _errors_in_steps(
    settings: ReleaseSettings,
    calibration: Calibration,
    name: str,
    horizon: int,
    intervals: bool,
) -> dict[str, float]:
    """:class:`QueryError`'s fields for the query ``name``, in its integer steps."""
    if not horizon:
        return {"release_std": 0.0, "running_std": 0.0, "final_std": 0.0}
    per_layer = tuple(_std(layer[name]) ** 2 for layer in calibration.layers)
    change_var, estimate_var = settings.plan.variances(per_layer, horizon)
    out = {
        "release_std": math.sqrt(float(change_var[-1])),
        "running_std": math.sqrt(float(np.max(estimate_var))),
        "final_std": math.sqrt(float(estimate_var[-1])),
    }
    if intervals:
        out.update(
            _predicted_half_widths(settings, calibration, name, estimate_var, per_layer, horizon)
        )
    return out


#: ``dpcr plan`` predicts interval half-widths up to this horizon (the weights are probed)
PREDICTED_INTERVALS_UP_TO = 512  # probing the estimator costs O(horizon^2) and more


def _predicted_half_widths(
    settings: ReleaseSettings,
    calibration: Calibration,
    name: str,
    estimate_var: np.ndarray,
    per_layer: Sequence[float],
    horizon: int,
) -> dict[str, float]:
    """The 95 % half-widths (integer steps) of the last interval's change and of the running
    value where its std is largest, exactly as a run will publish them (empty beyond the
    limit)."""
    from dpcr.release._uncertainty import row_intervals

    if not 0 < horizon <= PREDICTED_INTERVALS_UP_TO:
        return {}
    plan = settings.plan
    nodes = sorted(set(plan.due(0, horizon)))
    if any(plan.instance(node)[0] >= len(calibration.layers) for node in nodes):
        return {}
    events = {node: calibration.layers[plan.instance(node)[0]][name] for node in nodes}
    var = {node: per_layer[node[0]] for node in {plan.instance(n) for n in nodes} | set(nodes)}
    worst = int(np.argmax(estimate_var))
    c_iv, e_iv = row_intervals(plan, nodes, events, var, horizon, rows=[horizon - 1, worst])
    return {"release_half_width": c_iv[0].half_width, "running_half_width": e_iv[1].half_width}


def plan_report(
    settings: ReleaseSettings, *, intervals: bool = True, approximate: bool = False
) -> PlanReport:
    """The guarantee and everything ``dpcr plan`` shows (reads no data). ``approximate``: from
    an approximate calibration (:func:`~dpcr.release._calibrate.calibrate`; its
    ``calibration.approximate`` says whether it is one)."""
    from dpcr.bounding.state_machine import derived_ks
    from dpcr.svt.pipeline import alert_plan

    cal = calibrate(settings, approximate=approximate)
    plan = settings.plan
    budgeting = _budgeting(settings)
    releases = plan.schedule().release_count()
    horizon = (
        min(releases, PREDICTION_HORIZON)
        if releases is not None
        else settings.horizon or getattr(plan, "planning_horizon", None) or OPEN_HORIZON
    )
    layers = tuple(
        LayerReport(
            layer=layer,
            share=float(budgeting.layers[layer].share),
            instances_per_unit=max(
                (p.counts[layer] if layer < len(p.counts) else 0)
                for p in cal.participation.values()
            ),
            events=dict(events),
            noise_std={
                q.name: _std(events[q.name]) * float(q.unit_scale) for q in settings.queries
            },
        )
        for layer, events in enumerate(cal.layers)
    )
    per_class = {
        name: ClassReport(per_layer=p.counts, releases=p.total, guarantee=cal.per_class[name])
        for name, p in cal.participation.items()
    }
    order = ("insert", "update", "delete")
    per_query = {
        q.name: QueryParticipation(
            touched_by=tuple(op for op in order if op in effective_ops(settings, q)),
            per_class={c: p.counts for c, p in cal.query_participation(q.name).items()},
        )
        for q in settings.queries
    }
    g = cal.guarantee
    return PlanReport(
        per_query=per_query,
        objective=settings.objective,
        weights={q.name: float(w) for q, w in zip(settings.queries, settings.query_weights,
                                                   strict=True)},
        split=settings.split,
        selections=key_selections(settings, cal),
        kind=plan.kind,
        description=plan.describe(),
        epsilon=g.epsilon,
        delta=g.delta,
        rho=g.rho,
        method=g.method,
        per_class=per_class,
        layers=layers,
        tail_share=float(budgeting.tail),
        releases=releases,
        horizon=horizon,
        predicted=predicted_errors(settings, cal, horizon, intervals=intervals),
        alerts=alert_plan(settings),
        state_machines=derived_ks(settings.constraint),
        details=plan.details(settings.constraint) if hasattr(plan, "details") else {},
        calibration=cal,
    )
