"""``plan = "factorization"`` through the pipeline: an exact discrete square-root factorization.

Same stages as :mod:`dpcr.node_pipeline` (loading, bounding/aggregation and store reused). For base
interval ``t = 1 .. T`` (``T`` the plan's horizon) the plan releases the INTEGER

    y_t = (C' x)_t + z_t,

``x`` the engine's exact integer change per interval (and key), ``C'`` the integer Toeplitz matrix
of :mod:`dpcr.plans.factorization_plan`, ``z_t`` i.i.d. exact discrete Gaussian. The whole vector
``y_1 .. y_T`` (every query, every key) is ONE Gaussian mechanism: per query its event has L2
sensitivity^2 ``Delta_q^2 * S`` (``S`` the exact multi-participation sensitivity^2 of ``C'`` for
the worst class of the constraint) and ``sigma_q^2`` calibrated to the query's share of the zCDP
budget. The ledger holds that one event per query (interval 1), written with the first released
value; later runs release ``y_t`` for newly closed intervals under the same event (never a second
one), computed from the full exact history ``x_1 .. x_t``. Released ``y_t`` are stored once and
never re-noised.

Estimates (post-processing): running totals ``x^ = A C'^{-1} y`` by forward substitution, the
change of interval ``t`` as ``x^_t - x^_{t-1}`` (a window of one interval; wider windows are
differences of prefix estimates, :func:`window_estimates`), with exact variances
``Var(z) * ||row of A C'^{-1}||^2``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, cast

import numpy as np
from scipy import signal

from dpcr.accounting.events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    DpEvent,
    event_from_dict,
    event_to_dict,
)
from dpcr.accounting.layered import NodeFilter, layered_guarantee
from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.config import ReleaseConfig
from dpcr.engines.duckdb import aggregate, unit_state
from dpcr.errors import ConfigError, PrivacyError, StoreError
from dpcr.mechanisms import gaussian, noise_variance, round_up
from dpcr.node_pipeline import NodePlanSummary
from dpcr.noise import Randomness
from dpcr.pipeline import (
    Progress,
    RunResult,
    _digest,
    _quiet,
    _summary,
    _zcdp_rho_for,
    closed_times,
    ledger_entry,
    load_source,
    open_run,
    released_rows,
    resolve_randomness,
    write_files,
)
from dpcr.plans.counts import periodic_most_span
from dpcr.plans.factorization_plan import FactorizationPlan, integer_sensitivity2
from dpcr.plans.planner import plan_prefix
from dpcr.store import Released, SourceState
from dpcr.timeutil import format_timestamp

__all__ = [
    "format_plan",
    "inverse_coefficients",
    "participations",
    "plan",
    "prefix_estimates",
    "prefix_variances",
    "run",
    "window_estimates",
    "window_variances",
]

#: Released integers must stay clear of int64 overflow: |y_t| <= s * sum |x| + |z|.
_INT_LIMIT = 1 << 62


# --- estimators (post-processing) -----------------------------------------------------------


def inverse_coefficients(coeffs: Sequence[int]) -> np.ndarray:
    """Coefficients of ``1 / c'(x)`` (first column of ``C'^{-1}``), by forward substitution."""
    a = np.asarray(coeffs, dtype=np.float64)
    impulse = np.zeros(a.size)
    impulse[0] = 1.0
    out: np.ndarray = signal.lfilter([1.0], a, impulse)
    return out


def prefix_estimates(y: np.ndarray, coeffs: Sequence[int]) -> np.ndarray:
    """Running totals ``A C'^{-1} y`` along axis 0 (intervals x keys), O(T^2) per key."""
    n = y.shape[0]
    a = np.asarray(coeffs[:n], dtype=np.float64)
    u = signal.lfilter([1.0], a, np.asarray(y, dtype=np.float64), axis=0)
    out: np.ndarray = np.cumsum(u, axis=0)
    return out


def prefix_variances(coeffs: Sequence[int], noise_var: float, n: int) -> np.ndarray:
    """Exact ``Var(x^_t)``, t = 1 .. n: ``Var(z) sum_{j<t} b_j^2``, ``b = cumsum(1/c')``."""
    b = np.cumsum(inverse_coefficients(coeffs[:n]))
    out: np.ndarray = noise_var * np.cumsum(b * b)
    return out


def window_estimates(prefix: np.ndarray, w: int) -> np.ndarray:
    """Change over the last ``w`` intervals, ``x^_t - x^_{t-w}`` (``x^_{<=0} = 0``)."""
    if w < 1:
        raise ConfigError(f"window must be >= 1 interval, got {w}")
    out = np.array(prefix, dtype=np.float64, copy=True)
    out[w:] -= prefix[:-w] if w < prefix.shape[0] else prefix[:0]
    return out


def window_variances(coeffs: Sequence[int], noise_var: float, n: int, w: int) -> np.ndarray:
    """Exact ``Var(x^_t - x^_{t-w})``: ``Var(z) sum_{j<t} (b_j - b_{j-w})^2``."""
    b = np.cumsum(inverse_coefficients(coeffs[:n]))
    d = b.copy()
    d[w:] -= b[: max(0, n - w)]
    out: np.ndarray = noise_var * np.cumsum(d * d)
    return out


# --- plan ----------------------------------------------------------------------------------


def participations(p: FactorizationPlan, constraint: Any) -> dict[str, int]:
    """Per class, the most base intervals one unit's change touches (capped by the horizon): k
    (at most k, anywhere) or ``ceil(B/W) + 1`` (B-time-bounded, a contiguous run)."""
    classes = constraint.all_classes() if isinstance(constraint, Hybrid) else {"all": constraint}
    out: dict[str, int] = {}
    for name, con in classes.items():
        if isinstance(con, AtMostK):
            m = con.k
        elif isinstance(con, TimeBounded):
            m = periodic_most_span(con.bound, p.period)
        else:
            raise ConfigError(f"unsupported constraint {con!r} for plan = 'factorization'")
        out[name] = max(1, min(m, p.horizon))
    return out


def _check(config: ReleaseConfig) -> FactorizationPlan:
    p = config.plan
    if not isinstance(p, FactorizationPlan):
        raise ConfigError(f"not a factorization plan: {p!r}")
    if config.mechanism != "gaussian":
        raise ConfigError(
            "plan = 'factorization' adds discrete Gaussian noise only: set privacy.mechanism = "
            "'gaussian' and privacy.delta > 0 (e.g. 1e-6), or use plan = 'tree' for Laplace"
        )
    if config.alerts:
        raise ConfigError("[[alerts]] are available with plan = 'disjoint' only (for now)")
    return p


def _events(config: ReleaseConfig, sens2: int) -> dict[str, DpEvent]:
    """Per-query events of the whole release: the zCDP budget split by weight; sigma^2 rounded
    up to the parameter grid (never more privacy spent than the share)."""
    rho_total = Fraction(_zcdp_rho_for(config.budget.epsilon, config.budget.delta))
    total_weight = sum(config.weights)
    out: dict[str, DpEvent] = {}
    for q, w in zip(config.queries, config.weights, strict=True):
        rho = rho_total * Fraction(w) / Fraction(total_weight)
        s2 = q.l2_sensitivity_squared * sens2
        out[q.name] = DiscreteGaussianEvent(
            sigma2=round_up(s2 / (2 * rho)),
            sensitivity2=s2,
            dimension=_check(config).horizon * len(q.keys),  # one vector release
        )
    return out


def _gaussian(event: DpEvent) -> DiscreteGaussianEvent:
    if not isinstance(event, DiscreteGaussianEvent):
        raise StoreError(f"a factorization release carries an unexpected event {event!r}")
    return event


def plan(config: ReleaseConfig) -> NodePlanSummary:
    """The guarantee of a factorization plan from the configuration alone (no data read)."""
    p = _check(config)
    coeffs = p.coefficients()
    parts = participations(p, config.constraint)
    sens = {name: integer_sensitivity2(coeffs, m) for name, m in parts.items()}
    events = _events(config, max(sens.values()))  # hybrid: the worst class
    counts = {name: [1] for name in parts}
    guarantee, _ = layered_guarantee(
        [[ComposedEvent(events=tuple(events.values()))]], counts, delta=config.budget.delta
    )
    if guarantee.epsilon > config.budget.epsilon * (1 + 1e-9):
        raise PrivacyError(
            f"calibrated noise gives epsilon {guarantee.epsilon:.6g} above the budget "
            f"{config.budget.epsilon}; refusing to release"
        )
    noise_std: dict[str, float] = {}
    max_std: dict[str, float] = {}
    for q in config.queries:
        var = noise_variance(_gaussian(events[q.name]))
        noise_std[q.name] = math.sqrt(var) * float(q.unit_scale)
        max_std[q.name] = math.sqrt(float(prefix_variances(coeffs, var, p.horizon)[-1])) * float(
            q.unit_scale
        )
    layer = {
        "layer": 0,
        "share": 1.0,
        "nodes_per_unit": 1,
        "mechanisms": {name: event_to_dict(e) for name, e in events.items()},
        "noise_std": noise_std,
        "participations": parts,
        "sensitivity": {name: math.sqrt(v) / p.scale for name, v in sens.items()},
        "max_std_estimate": max_std,
    }
    candidates = plan_prefix(
        config.constraint, horizon=p.horizon, base=p.period, mode="zcdp"
    ).table()
    return NodePlanSummary(
        kind="factorization",
        epsilon=guarantee.epsilon,
        delta=guarantee.delta,
        rho=guarantee.rho,
        method=guarantee.method,
        max_queries_per_entry=1,
        per_class={name: 1 for name in parts},
        layer_counts=counts,
        layers=[layer],
        releases=p.horizon,
        accounted_layers=1,
        tail_share=0.0,
        candidates=candidates,
        horizon=p.horizon,
        estimator=p.factorization,
        events={0: events},
    )


def format_plan(config: ReleaseConfig, summary: NodePlanSummary) -> list[str]:
    """Plain-text lines of ``dpcr plan`` for a factorization plan."""
    from dpcr.timeutil import format_duration

    p = _check(config)
    layer = summary.layers[0]
    lines = [
        f"Plan: exact discrete square-root factorization, {p.horizon} base intervals of "
        f"{format_duration(p.period)} from {format_timestamp(p.start)} to "
        f"{format_timestamp(p.end)}; C' = floor({p.scale} * (1-x)^(-1/2)) (integer Toeplitz)",
        f"  privacy unit: {config.unit or 'entry'}; constraint: {config.constraint.describe()}; "
        f"mechanism: discrete gaussian, budget ε={config.budget.epsilon}, "
        f"δ={config.budget.delta}",
        "  one Gaussian mechanism on the whole vector y = C'x + z (all intervals, keys, queries)",
    ]
    for name, m in layer["participations"].items():
        label = {"all": "every unit", "*": "other classes"}.get(name, f"class {name}")
        lines.append(
            f"  {label}: touches at most {m} base intervals; sensitivity of C' / scale = "
            f"{layer['sensitivity'][name]:.6g} (exact, worst pattern: the first {m} intervals)"
        )
    for q in config.queries:
        lines.append(
            f"  {q.name}: noise std of y = {layer['noise_std'][q.name]:.4g} (scaled by "
            f"{p.scale}); running total std up to {layer['max_std_estimate'][q.name]:.4g}"
        )
    lines.append(
        f"Guarantee: ({summary.epsilon:.6g}, {summary.delta:.3g})-DP per "
        f"{config.unit or 'entry'} over the whole release [{summary.method}]"
    )
    lines.append(
        f"Planner candidates at equal privacy (horizon {summary.horizon} base intervals; "
        "variance in units of one sensitivity-1 count's noise at the whole budget):"
    )
    lines.extend("  " + row for row in summary.candidates.splitlines())
    return lines


# --- run -----------------------------------------------------------------------------------


def _mix(raw: np.ndarray, coeffs: Sequence[int], lo: int, hi: int) -> np.ndarray:
    """Exact ``(C' x)_t`` for rows ``lo .. hi-1`` (0-based), int64 with an overflow guard."""
    x = np.asarray(raw, dtype=np.int64)
    if hi <= lo:
        return np.zeros((0, x.shape[1]), dtype=np.int64)
    total = np.abs(x[:hi]).sum(axis=0).max(initial=0)
    if int(total) * int(coeffs[0]) >= _INT_LIMIT >> 1:
        raise ConfigError(
            "the scaled changes would overflow 64-bit integers; use a coarser grid for sums"
        )
    c = np.asarray(coeffs[:hi], dtype=np.int64)
    out = np.empty((hi - lo, x.shape[1]), dtype=np.int64)
    for k in range(x.shape[1]):
        out[:, k] = np.convolve(x[:hi, k], c)[lo:hi]
    return out


def run(
    config: ReleaseConfig,
    *,
    rng: Randomness | None = None,
    progress: Progress = _quiet,
) -> RunResult:
    """Release ``y_t`` for every closed interval not yet released; write the outputs."""
    started = time.time()
    p = _check(config)
    rng, simulation = resolve_randomness(rng)
    summary_plan = plan(config)
    events = summary_plan.events[0]
    coeffs = p.coefficients()
    guard = NodeFilter(epsilon_budget=config.budget.epsilon, delta_budget=config.budget.delta)

    progress("open store", 0, 1)
    with open_run(config, simulation=simulation) as (store, con):
        state = store.source_state()
        report, bounds, max_ts = load_source(config, con, state, progress)
        progress("bound and aggregate", 0, 1)
        grid = p.grid()
        before = state.interval
        n = min(max(len(closed_times(config, grid, max_ts)), before), p.horizon)
        times = [grid.release_time(i) for i in range(1, n + 1)]
        agg = aggregate(
            con,
            table="changelog",
            queries=config.queries,
            constraint=config.constraint,
            release_times=times,
            first_interval=1,  # y_t needs the whole history x_1 .. x_t
            unit_is_entry=config.unit is None,
            exclude_late=(state.records, state.t_last) if state.t_last is not None else None,
        )

        stored: dict[str, DpEvent] = {}
        for interval, query, data in store.ledger():
            if interval != 1 or query in stored:
                raise StoreError(f"unexpected ledger row ({interval}, {query!r}) for this plan")
            stored[query] = event_from_dict(data)
        if stored and stored != events:
            raise StoreError("the store's release event differs from the plan's; refusing")
        new_event = not stored and n > before
        # ONE event for the whole plan: a restart adds none
        released = [ComposedEvent(events=tuple(events.values()))] if stored or new_event else []
        guarantee = guard.check([released], summary_plan.layer_counts)  # before any draw

        values: list[Released] = []
        ledger_rows: list[tuple[int, str, dict[str, Any]]] = []
        for q in config.queries:
            if n <= before:
                break
            event = _gaussian(events[q.name])
            exact = _mix(agg.values[q.name], coeffs, before, n)
            noisy, _ = gaussian(
                exact, sigma2=event.sigma2, sensitivity2=event.sensitivity2, rng=rng
            )
            values += released_rows(q, noisy, before + 1, grid.interval)
            if new_event:
                ledger_rows.append((1, q.name, ledger_entry(event, q)))

        new_state = SourceState(
            records=report.records,
            interval=n,
            t_last=grid.release_time(n) if n else None,
            digest=_digest(con, report.records),
        )
        summary = _summary(
            config,
            cast(Any, summary_plan),  # same guarantee fields as a disjoint PlanSummary
            report,
            agg.report,
            guarantee,
            n,
            n - before,
            simulation,
            min_ts=bounds[0],
            max_ts=max_ts,
        )
        summary["plan"] = {
            "kind": "factorization",
            "estimator": p.factorization,
            "new_nodes": n - before,
        }
        progress("commit", 0, 1)
        store.commit_release(
            values=values,
            events=ledger_rows,
            source=new_state,
            units=unit_state(con),
            summary=summary,
            started=started,
        )
        progress("commit", 1, 1)
        rows = _rows(config, p, coeffs, store.released(), stored or events)
        write_files(config, rows, summary)
    return RunResult(summary=summary, rows=rows, new_intervals=n - before)


def _rows(
    config: ReleaseConfig,
    p: FactorizationPlan,
    coeffs: Sequence[int],
    released: Sequence[Released],
    events: dict[str, DpEvent],
) -> list[dict[str, Any]]:
    """Per interval, query and key: the estimated change and running total with exact stds."""
    series: dict[str, dict[str, list[Released]]] = {}
    for r in released:
        series.setdefault(r.query, {}).setdefault(r.key, []).append(r)
    scale = {q.name: float(q.unit_scale) for q in config.queries}
    rows: list[dict[str, Any]] = []
    for query, by_key in series.items():
        keys = sorted(by_key)
        n = len(by_key[keys[0]])
        for key in keys:
            if [r.interval for r in by_key[key]] != list(range(1, n + 1)):
                raise StoreError(f"released values of {query!r}[{key!r}] are not 1 .. {n}")
        y = np.array([[r.value for r in by_key[k]] for k in keys], dtype=np.int64).T
        est = prefix_estimates(y, coeffs)
        change = window_estimates(est, 1)
        var = noise_variance(_gaussian(events[query]))
        pvar = prefix_variances(coeffs, var, n)
        cvar = window_variances(coeffs, var, n, 1)
        unit = scale[query]
        for col, key in enumerate(keys):
            for i, r in enumerate(by_key[key]):
                rows.append(
                    {
                        "query": query,
                        "key": key,
                        "interval": r.interval,
                        "start": format_timestamp(r.t_lo) if r.t_lo is not None else "",
                        "end": format_timestamp(r.t_hi),
                        "change": float(change[i, col]) * unit,
                        "estimate": float(est[i, col]) * unit,
                        "std_change": math.sqrt(float(cvar[i])) * unit,
                        "std_estimate": math.sqrt(float(pvar[i])) * unit,
                    }
                )
    rows.sort(key=lambda r: (r["interval"], r["query"], r["key"]))
    return rows
