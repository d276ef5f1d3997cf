"""Tree (HDCR) and direct sliding-window (SWCR) releases through the pipeline.

Same stages as :mod:`dpcr.pipeline` (its loading, bounding/aggregation and store are reused):
the engine gives the EXACT integer change of every query and key per base interval; a tree node or
a window is a sum of those integers, so the exact discrete samplers add noise to it directly.

Tree (``plan = "tree"``): base interval ``W = period``; node ``(l, j)`` totals base intervals
``[j c^l, (j+1) c^l)`` and is released once, when its last base interval closes; its noise is
calibrated to the budget share of its layer (:func:`dpcr.accounting.layered.tree_node_share`).
A restart releases only the nodes that closed since (the store keeps every released node; none is
ever re-noised). Outputs: per base interval the running total from the released nodes (Honaker's
variance-optimal estimate or plain node sums) with its exact standard deviation.

Window (``plan = "window"``): release ``i`` at ``t_i = start + i P`` is the change over
``(t_i - W, t_i]``, a sum of base intervals of length ``GCD(W, P)``; noise calibrated to the most
windows one unit touches (Thm 4.5, 4.6).

Both: the plan's guarantee is computed from the configuration alone (:func:`plan`); before
anything is written, a :class:`~dpcr.accounting.layered.NodeFilter` checks every released and new
node against the budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, cast

import duckdb
import numpy as np

from dpcr.accounting.composition import Guarantee, PrivacyCost
from dpcr.accounting.events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    event_from_dict,
    event_to_dict,
)
from dpcr.accounting.layered import (
    NodeFilter,
    layered_guarantee,
    tail_cost,
    tree_layer_counts,
    tree_node_share,
    window_counts,
)
from dpcr.config import ReleaseConfig
from dpcr.engines.duckdb import aggregate, unit_state
from dpcr.errors import ConfigError, PrivacyError, StoreError
from dpcr.estimators.tree import (
    honaker_nodes,
    honaker_variances,
    prefix_from_nodes,
    prefix_variances,
    tree_nodes,
)
from dpcr.mechanisms import add_noise, noise_variance, round_up
from dpcr.noise import Randomness
from dpcr.pipeline import (
    Progress,
    RunResult,
    _digest,
    _discrete,
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
from dpcr.plans.dcr import DisjointRelease
from dpcr.plans.factorization_plan import FactorizationPlan
from dpcr.plans.planner import plan_prefix, plan_window
from dpcr.plans.tree import TreeRelease
from dpcr.plans.tree_plan import TreePlan
from dpcr.plans.window import SlidingWindowRelease
from dpcr.store import NodeEvent, Released, ReleasedNode, SourceState, Store
from dpcr.timeutil import format_timestamp

__all__ = ["NodePlanSummary", "format_plan", "plan", "run"]

#: Layers accounted one by one for an open-ended growing tree; the rest is bounded by the tail
#: (1 / (GROWING_LAYERS + 1) of the budget). c^64 base intervals is never reached in practice.
GROWING_LAYERS = 64
#: Planning horizon (base intervals, or releases of a window) shown for an open-ended plan.
OPEN_HORIZON = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePlanSummary:
    """What ``dpcr plan`` states for a tree or window plan (no data read).

    ``layers[l]`` describes layer ``l`` (one layer for a window): its budget share, per-query
    event and noise std; ``layer_counts[class]`` the most releases per layer one unit touches.
    """

    kind: str
    epsilon: float
    delta: float
    rho: float | None
    method: str
    max_queries_per_entry: int
    per_class: dict[str, int]
    layer_counts: dict[str, list[int]]
    layers: list[dict[str, Any]]
    releases: int | None
    accounted_layers: int
    tail_share: float
    candidates: str
    horizon: int
    estimator: str | None = None
    events: dict[int, dict[str, DpEvent]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.kind,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "method": self.method,
            "max_queries_per_entry": self.max_queries_per_entry,
            "per_class": self.per_class,
            "layer_counts": self.layer_counts,
            "layers": self.layers,
            "releases": self.releases,
            "accounted_layers": self.accounted_layers,
            "tail_share": self.tail_share,
            "estimator": self.estimator,
            "planner_horizon": self.horizon,
            "candidates": self.candidates,
        }


# --- calibration ---------------------------------------------------------------------------


def _node_events(config: ReleaseConfig, share: Fraction) -> dict[str, DpEvent]:
    """Per-query events of one node (or window) spending ``share`` of the budget, split over the
    queries by weight; parameters rounded up (never more privacy spent than the share)."""
    total_weight = sum(config.weights)
    out: dict[str, DpEvent] = {}
    if config.mechanism == "laplace":
        for q, w in zip(config.queries, config.weights, strict=True):
            eps = Fraction(config.budget.epsilon) * Fraction(w) / Fraction(total_weight) * share
            out[q.name] = DiscreteLaplaceEvent(
                scale=round_up(q.l1_sensitivity / eps),
                sensitivity=q.l1_sensitivity,
                dimension=len(q.keys),
            )
    else:
        rho_total = Fraction(_zcdp_rho_for(config.budget.epsilon, config.budget.delta))
        for q, w in zip(config.queries, config.weights, strict=True):
            rho = rho_total * Fraction(w) / Fraction(total_weight) * share
            out[q.name] = DiscreteGaussianEvent(
                sigma2=round_up(q.l2_sensitivity_squared / (2 * rho)),
                sensitivity2=q.l2_sensitivity_squared,
                dimension=len(q.keys),
            )
    return out


def _tree_events(config: ReleaseConfig, tree: TreeRelease, layer: int) -> dict[str, DpEvent]:
    return _node_events(config, tree_node_share(tree, config.constraint, layer))


def _window_events(config: ReleaseConfig, window: SlidingWindowRelease) -> dict[str, DpEvent]:
    counts = window_counts(window, config.constraint, releases=window.release_count())
    return _node_events(config, Fraction(1, max(1, max(v[0] for v in counts.values()))))


def _noise_std(config: ReleaseConfig, events: dict[str, DpEvent]) -> dict[str, float]:
    return {
        q.name: math.sqrt(noise_variance(_discrete(events[q.name]))) * float(q.unit_scale)
        for q in config.queries
    }


# --- plan ----------------------------------------------------------------------------------


def plan(config: ReleaseConfig) -> NodePlanSummary:
    """The guarantee of a tree or window plan from the configuration alone (no data read)."""
    if isinstance(config.plan, FactorizationPlan):
        from dpcr.factorization_pipeline import plan as plan_factorization

        return plan_factorization(config)
    if config.alerts:
        raise ConfigError("[[alerts]] are available with plan = 'disjoint' only (for now)")
    p = config.plan
    mode: Literal["pure", "zcdp"] = "pure" if config.mechanism == "laplace" else "zcdp"
    if isinstance(p, TreePlan):
        tree = p.tree
        cap = tree.base_count()
        if tree.height is not None:
            accounted = tree.height if cap is None else max(1, min(tree.height, tree.layers(cap)))
        else:
            accounted = GROWING_LAYERS if cap is None else max(1, tree.layers(cap))
        events = {layer: _tree_events(config, tree, layer) for layer in range(accounted)}
        counts = tree_layer_counts(tree, config.constraint, layers=accounted, base_intervals=cap)
        tail: PrivacyCost | None = None
        tail_share = 0.0
        if tree.height is None and cap is None:
            tail_share = 1 / (accounted + 1)
            if config.mechanism == "laplace":
                tail = tail_cost(layers=accounted, epsilon=Fraction(config.budget.epsilon))
            else:
                rho = Fraction(_zcdp_rho_for(config.budget.epsilon, config.budget.delta))
                tail = tail_cost(layers=accounted, rho=rho)
        if cap is not None:
            horizon = cap
        elif tree.height is not None:
            horizon = min(tree.branching**tree.height, 4 * OPEN_HORIZON)
        else:
            horizon = OPEN_HORIZON
        candidates = plan_prefix(
            config.constraint, horizon=horizon, base=tree.period, mode=mode
        ).table()
        kind, estimator, releases = "tree", p.estimator, None
    elif isinstance(p, SlidingWindowRelease):
        releases = p.release_count()
        events = {0: _window_events(config, p)}
        counts = window_counts(p, config.constraint, releases=releases)
        accounted, tail, tail_share = 1, None, 0.0
        horizon = releases if releases is not None else OPEN_HORIZON
        candidates = plan_window(
            config.constraint,
            window=p.window,
            period=p.period,
            horizon=horizon * p.period,
            mode=mode,
        ).table()
        kind, estimator = "window", None
    else:
        raise ConfigError(f"not a tree or window plan: {p!r}")

    widest = [max(v[layer] for v in counts.values()) for layer in range(accounted)]
    layer_events: list[list[DpEvent]] = [
        [ComposedEvent(events=tuple(events[layer].values()))] * widest[layer]
        for layer in range(accounted)
    ]
    guarantee, _ = layered_guarantee(layer_events, counts, delta=config.budget.delta, tail=tail)
    if guarantee.epsilon > config.budget.epsilon * (1 + 1e-9):
        raise PrivacyError(
            f"calibrated noise gives epsilon {guarantee.epsilon:.6g} above the budget "
            f"{config.budget.epsilon}; refusing to release"
        )
    per_class = {name: sum(v) for name, v in counts.items()}
    layers = [
        {
            "layer": layer,
            "share": float(
                tree_node_share(p.tree, config.constraint, layer)
                if isinstance(p, TreePlan)
                else Fraction(1, max(1, widest[0]))
            ),
            "nodes_per_unit": widest[layer],
            "mechanisms": {name: event_to_dict(e) for name, e in events[layer].items()},
            "noise_std": _noise_std(config, events[layer]),
        }
        for layer in range(accounted)
    ]
    return NodePlanSummary(
        kind=kind,
        epsilon=guarantee.epsilon,
        delta=guarantee.delta,
        rho=guarantee.rho,
        method=guarantee.method,
        max_queries_per_entry=max(per_class.values()),
        per_class=per_class,
        layer_counts=counts,
        layers=layers,
        releases=releases,
        accounted_layers=accounted,
        tail_share=tail_share,
        candidates=candidates,
        horizon=horizon,
        estimator=estimator,
        events=events,
    )


def format_plan(config: ReleaseConfig, summary: NodePlanSummary, *, shown: int = 8) -> list[str]:
    """Plain-text lines of ``dpcr plan`` for a tree or window plan."""
    if isinstance(config.plan, FactorizationPlan):
        from dpcr.factorization_pipeline import format_plan as format_factorization

        return format_factorization(config, summary)
    from dpcr.timeutil import format_duration

    p = config.plan
    lines: list[str] = []
    if isinstance(p, TreePlan):
        t = p.tree
        height = f"height {t.height}" if t.height is not None else "growing (unbounded height)"
        lines.append(
            f"Plan: tree release (HDCR), base interval {format_duration(t.period)} from "
            f"{format_timestamp(t.start)}, branching {t.branching}, {height}; "
            f"estimator {p.estimator}"
        )
    elif isinstance(p, SlidingWindowRelease):
        lines.append(
            f"Plan: sliding window (SWCR), window {format_duration(p.window)} every "
            f"{format_duration(p.period)} from {format_timestamp(p.start)}"
        )
    lines.append(
        f"  privacy unit: {config.unit or 'entry'}; constraint: {config.constraint.describe()}; "
        f"mechanism: {config.mechanism}, budget ε={config.budget.epsilon}, "
        f"δ={config.budget.delta}"
    )
    lines.append("  layer  share of budget per node  releases per unit  noise std per query")
    for info in summary.layers[:shown]:
        stds = ", ".join(f"{k}={v:.4g}" for k, v in info["noise_std"].items())
        lines.append(
            f"  {info['layer']:>5}  {info['share']:>24.6g}  {info['nodes_per_unit']:>17}  {stds}"
        )
    if len(summary.layers) > shown:
        lines.append(f"  ... ({len(summary.layers)} layers accounted)")
    if summary.tail_share:
        lines.append(
            f"  layers from {summary.accounted_layers} on: at most {summary.tail_share:.3g} of "
            "the budget together (shares 1/((l+1)(l+2)) telescope)"
        )
    for cls, counts in summary.layer_counts.items():
        label = {"all": "every unit", "*": "other classes"}.get(cls, f"class {cls}")
        head = ", ".join(str(n) for n in counts[:shown])
        more = ", ..." if len(counts) > shown else ""
        lines.append(f"  {label}: releases per layer [{head}{more}]")
    lines.append(
        f"Guarantee: ({summary.epsilon:.6g}, {summary.delta:.3g})-DP per "
        f"{config.unit or 'entry'} over the whole release [{summary.method}]"
    )
    lines.append(
        f"Planner candidates at equal privacy (horizon {summary.horizon} "
        f"{'base intervals' if summary.kind == 'tree' else 'releases'}; variance in units of "
        "one sensitivity-1 count's noise at the whole budget):"
    )
    lines.extend("  " + row for row in summary.candidates.splitlines())
    return lines


# --- run -----------------------------------------------------------------------------------


def _aggregate(
    config: ReleaseConfig,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    times: Sequence[int],
    first: int,
) -> Any:
    return aggregate(
        con,
        table="changelog",
        queries=config.queries,
        constraint=config.constraint,
        release_times=list(times),
        first_interval=first,
        unit_is_entry=config.unit is None,
        exclude_late=(state.records, state.t_last) if state.t_last is not None else None,
    )


def run(
    config: ReleaseConfig,
    *,
    rng: Randomness | None = None,
    progress: Progress = _quiet,
) -> RunResult:
    """Release every node (window) that closed and is not yet released; write the outputs."""
    if isinstance(config.plan, FactorizationPlan):
        from dpcr.factorization_pipeline import run as run_factorization

        return run_factorization(config, rng=rng, progress=progress)
    started = time.time()
    rng, simulation = resolve_randomness(rng)
    summary_plan = plan(config)
    guard = NodeFilter(epsilon_budget=config.budget.epsilon, delta_budget=config.budget.delta)

    progress("open store", 0, 1)
    with open_run(config, simulation=simulation) as (store, con):
        state = store.source_state()
        report, bounds, max_ts = load_source(config, con, state, progress)
        progress("bound and aggregate", 0, 1)
        p = config.plan
        if isinstance(p, TreePlan):
            step = _tree_step(config, p.tree, store, state, con, max_ts, guard, rng)
        elif isinstance(p, SlidingWindowRelease):
            step = _window_step(config, p, store, state, con, max_ts, guard, rng)
        else:
            raise ConfigError(f"not a tree or window plan: {p!r}")
        new_state = SourceState(
            records=report.records,
            interval=step.last,
            t_last=step.t_last,
            digest=_digest(con, report.records),
        )
        summary = _summary(
            config,
            cast(Any, summary_plan),  # same guarantee fields as a disjoint PlanSummary
            report,
            step.agg.report,
            step.guarantee,
            step.last,
            step.new,
            simulation,
            min_ts=bounds[0],
            max_ts=max_ts,
        )
        summary["plan"] = {
            "kind": summary_plan.kind,
            "estimator": summary_plan.estimator,
            "new_nodes": step.new_nodes,
        }
        progress("commit", 0, 1)
        store.commit_release(
            values=step.values,
            events=step.events,
            source=new_state,
            units=unit_state(con),
            summary=summary,
            started=started,
            nodes=(step.node_rows, step.node_events) if isinstance(p, TreePlan) else None,
        )
        progress("commit", 1, 1)
        if isinstance(p, TreePlan):
            rows = _tree_rows(config, p, store, step.last)
        else:
            rows = _window_rows(config, store)
        write_files(config, rows, summary)
    return RunResult(summary=summary, rows=rows, new_intervals=step.new)


@dataclass(slots=True, kw_only=True)
class _Step:
    agg: Any
    guarantee: Guarantee
    last: int
    new: int
    t_last: int | None
    new_nodes: int = 0
    values: list[Released] = field(default_factory=list)
    events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    node_rows: list[ReleasedNode] = field(default_factory=list)
    node_events: list[NodeEvent] = field(default_factory=list)


def _tree_step(
    config: ReleaseConfig,
    tree: TreeRelease,
    store: Store,
    state: SourceState,
    con: duckdb.DuckDBPyConnection,
    max_ts: int | None,
    guard: NodeFilter,
    rng: Randomness,
) -> _Step:
    grid = DisjointRelease(start=tree.start, period=tree.period, end=tree.end)
    before = state.interval
    n = max(len(closed_times(config, grid, max_ts)), before)
    times = [grid.release_time(i) for i in range(1, n + 1)]
    # every base interval from the first: a new parent node sums old base intervals too
    agg = _aggregate(config, con, state, times, 1)
    layers = tree.layers(n)
    new_nodes = tree.new_nodes(before, n)
    layer_ev = {layer: _tree_events(config, tree, layer) for layer in range(layers)}

    released: dict[tuple[int, int], list[DpEvent]] = {}
    for layer, idx, _query, data in store.node_ledger():
        released.setdefault((layer, idx), []).append(event_from_dict(data))
    events: list[list[DpEvent]] = [[] for _ in range(layers)]
    for (layer, _idx), evs in sorted(released.items()):
        if layer >= layers:
            raise StoreError(f"the store holds a layer-{layer} node the tree does not have yet")
        events[layer].append(ComposedEvent(events=tuple(evs)))
    for layer, _idx in new_nodes:
        events[layer].append(ComposedEvent(events=tuple(layer_ev[layer].values())))
    counts = tree_layer_counts(tree, config.constraint, layers=layers, base_intervals=n)
    guarantee = guard.check(events, counts)  # before any value is drawn or written

    step = _Step(
        agg=agg,
        guarantee=guarantee,
        last=n,
        new=n - before,
        t_last=grid.release_time(n) if n else None,
        new_nodes=len(new_nodes),
    )
    by_layer: dict[int, list[int]] = {}
    for layer, idx in new_nodes:
        by_layer.setdefault(layer, []).append(idx)
    if not new_nodes:
        return step
    for q in config.queries:
        exact = tree_nodes(agg.values[q.name], c=tree.branching, height=layers)
        for layer, idxs in sorted(by_layer.items()):
            event = layer_ev[layer][q.name]
            noisy = add_noise(exact[layer][np.asarray(idxs)], _discrete(event), rng)
            entry = ledger_entry(event, q)
            for row, idx in enumerate(idxs):
                lo, hi = tree.node_interval((layer, idx))
                for k, key in enumerate(q.keys):
                    step.node_rows.append(
                        ReleasedNode(
                            layer=layer,
                            index=idx,
                            t_lo=lo,
                            t_hi=hi,
                            query=q.name,
                            key=key,
                            value=int(noisy[row, k]),
                        )
                    )
                step.node_events.append((layer, idx, q.name, entry))
    return step


def _window_step(
    config: ReleaseConfig,
    window: SlidingWindowRelease,
    store: Store,
    state: SourceState,
    con: duckdb.DuckDBPyConnection,
    max_ts: int | None,
    guard: NodeFilter,
    rng: Randomness,
) -> _Step:
    g = math.gcd(window.window, window.period)
    s, w = window.period // g, window.window // g
    # base grid: interval j >= 2 is (s0 + (j-2) g, s0 + (j-1) g], s0 = t_1 - W; window i is
    # base intervals (i-1) s + 2 .. (i-1) s + w + 1 (interval 1, (-inf, s0], is never used)
    s0 = window.start + window.period - window.window
    grid = DisjointRelease(start=s0 - g, period=g)
    releases = DisjointRelease(start=window.start, period=window.period, end=window.end)
    first = store.last_interval() + 1
    n = max(len(closed_times(config, releases, max_ts)), first - 1)
    n_base = (n - 1) * s + w + 1 if n else 0
    times = [grid.release_time(j) for j in range(1, n_base + 1)]
    base_first = (first - 1) * s + 2 if n >= first else n_base + 1
    agg = _aggregate(config, con, state, times, base_first)

    window_ev = _window_events(config, window)
    by_window: dict[int, list[DpEvent]] = {}
    for interval, _query, data in store.ledger():
        by_window.setdefault(interval, []).append(event_from_dict(data))
    events = [ComposedEvent(events=tuple(by_window[i])) for i in sorted(by_window)]
    events += [ComposedEvent(events=tuple(window_ev.values()))] * (n - first + 1)
    guarantee = guard.check([events], window_counts(window, config.constraint, releases=n))

    step = _Step(
        agg=agg,
        guarantee=guarantee,
        last=n,
        new=n - first + 1,
        t_last=releases.release_time(n) if n else None,
        new_nodes=n - first + 1,
    )
    for q in config.queries:
        raw = agg.values[q.name]
        if n < first:
            break
        lo_rows = np.arange(first - 1, n) * s + 2 - base_first
        cs = np.zeros((raw.shape[0] + 1, raw.shape[1]), dtype=np.int64)
        cs[1:] = np.cumsum(raw, axis=0)
        exact = cs[lo_rows + w] - cs[lo_rows]
        event = window_ev[q.name]
        noisy = add_noise(exact, _discrete(event), rng)
        entry = ledger_entry(event, q)
        step.values += released_rows(q, noisy, first, window.window_of)
        step.events += [(first + row, q.name, entry) for row in range(noisy.shape[0])]
    return step


# --- outputs -------------------------------------------------------------------------------


def _tree_rows(config: ReleaseConfig, p: TreePlan, store: Store, n: int) -> list[dict[str, Any]]:
    """Per base interval 1..n, query and key: the running-total estimate and its exact std."""
    tree = p.tree
    c = tree.branching
    layers = tree.layers(n)
    if n == 0:
        return []
    node_var: dict[str, list[float]] = {}
    for layer, _idx, query, data in store.node_ledger():
        v = noise_variance(_discrete(event_from_dict(data)))
        lv = node_var.setdefault(query, [])
        if len(lv) == layer:
            lv.append(v)
        elif len(lv) < layer or not math.isclose(lv[layer], v):
            raise StoreError(f"node noise of layer {layer}, query {query!r} is not uniform")
    values: dict[tuple[str, str], list[list[int]]] = {}
    for node in store.released_nodes():
        lists = values.setdefault((node.query, node.key), [[] for _ in range(layers)])
        if node.index != len(lists[node.layer]):
            raise StoreError(f"node {(node.layer, node.index)} of {node.query!r} is missing")
        lists[node.layer].append(node.value)
    grid = DisjointRelease(start=tree.start, period=tree.period, end=tree.end)
    scale = {q.name: float(q.unit_scale) for q in config.queries}
    m = np.arange(1, n + 1)
    rows: list[dict[str, Any]] = []
    for (query, key), lists in values.items():
        s = node_var[query][:layers]
        levels = [np.asarray(v, dtype=np.int64) for v in lists]
        if p.estimator == "honaker" and min(s) > 0:  # (a zero variance: nodes are exact)
            est = prefix_from_nodes(honaker_nodes(levels, s, c=c), c=c, n=n)
            var = prefix_variances(m, honaker_variances(s, c=c), c=c)
        else:
            est = prefix_from_nodes(levels, c=c, n=n)
            var = prefix_variances(m, s, c=c)
        unit = scale[query]
        for i in range(1, n + 1):
            lo, hi = grid.interval(i)
            rows.append(
                {
                    "query": query,
                    "key": key,
                    "interval": i,
                    "start": format_timestamp(lo) if lo is not None else "",
                    "end": format_timestamp(hi),
                    "change": int(levels[0][i - 1]) * unit,
                    "estimate": float(est[i - 1]) * unit,
                    "std_change": math.sqrt(s[0]) * unit,
                    "std_estimate": math.sqrt(float(var[i - 1])) * unit,
                }
            )
    rows.sort(key=lambda r: (r["interval"], r["query"], r["key"]))
    return rows


def _window_rows(config: ReleaseConfig, store: Store) -> list[dict[str, Any]]:
    """Per window, query and key: the released change over the window and its exact std."""
    std = {
        (i, q): math.sqrt(noise_variance(_discrete(event_from_dict(e))))
        for i, q, e in store.ledger()
    }
    scale = {q.name: float(q.unit_scale) for q in config.queries}
    rows = []
    for r in store.released():
        unit = scale[r.query]
        sd = std[(r.interval, r.query)] * unit
        rows.append(
            {
                "query": r.query,
                "key": r.key,
                "interval": r.interval,
                "start": format_timestamp(r.t_lo) if r.t_lo is not None else "",
                "end": format_timestamp(r.t_hi),
                "change": r.value * unit,
                "estimate": r.value * unit,
                "std_change": sd,
                "std_estimate": sd,
            }
        )
    rows.sort(key=lambda r: (r["interval"], r["query"], r["key"]))
    return rows
