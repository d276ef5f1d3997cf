"""The main job: changelog → bounding → aggregation → disjoint release → store → outputs.

:func:`plan` computes the guarantee from the configuration alone (no data is read).
:func:`run` loads the changelog, bounds it, totals every closed interval that is not yet
released, checks the privacy filter, draws noise from the secure source, commits values and
events to the store in one transaction, and writes the outputs from the store.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from dpcr.accounting import PrivacyFilter, epsilon_of, plan_guarantee
from dpcr.accounting.accountants import stated_guarantee
from dpcr.accounting.events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    SelfComposedEvent,
    ZcdpEvent,
    event_from_dict,
    event_to_dict,
)
from dpcr.bounding.constraints import Hybrid
from dpcr.bounding.state_machine import derived_ks
from dpcr.config import ReleaseConfig
from dpcr.engines.duckdb import aggregate, unit_state
from dpcr.errors import ConfigError, PrivacyError, StoreError
from dpcr.estimators import prefix_sums, prefix_variances
from dpcr.mechanisms import add_noise, noise_variance, round_up
from dpcr.noise import Randomness, require_secure, secure_randomness
from dpcr.plans.counts import max_affected_by_class
from dpcr.plans.dcr import DisjointRelease
from dpcr.queries import Query
from dpcr.store import Released, SourceState, Store
from dpcr.svt.pipeline import alert_plan, evaluate_alerts, write_alert_outputs
from dpcr.timeutil import format_timestamp

Progress = Callable[[str, int, int], None]


def _quiet(stage: str, done: int, total: int) -> None:
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanSummary:
    """What ``dpcr plan`` prints: the plan, the per-unit worst case and the guarantee."""

    epsilon: float
    delta: float
    rho: float | None
    method: str
    max_queries_per_entry: int
    per_class: dict[str, int]
    releases: int | None
    events: dict[str, DpEvent]
    noise_std: dict[str, float]
    alerts: dict[str, Any] = field(default_factory=dict)  # dpcr.svt.pipeline.alert_plan
    state_machines: dict[str, dict[str, Any]] = field(default_factory=dict)  # class -> k, path

    def to_json(self) -> dict[str, Any]:
        return {
            **_alerts_json(self),
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "method": self.method,
            "max_queries_per_entry": self.max_queries_per_entry,
            "per_class": self.per_class,
            "releases": self.releases,
            "queries_per_release": len(self.events),
            "mechanisms": {name: event_to_dict(e) for name, e in self.events.items()},
            "noise_std": self.noise_std,
            "state_machines": self.state_machines,
        }


def _zcdp_rho_for(
    epsilon: float, delta: float, spent: Callable[[Fraction], float] | None = None
) -> float:
    """Largest ρ (to 1e-9 relative) whose zCDP (ε, δ) conversion stays within ``epsilon``.

    With ``spent`` (ρ -> the ε dpcr states for the plan's worst unit when one release is
    calibrated to ρ, i.e. the tightest method), the result is the largest ρ found with
    ``spent(ρ) <= epsilon``: a bracketed search (Illinois regula falsi on log ρ, to 1e-4 relative,
    at most 10 evaluations) upward from the zCDP ρ, which is always within since the tightest
    method is never above the zCDP conversion. Only ρ values actually checked are returned.
    """
    lo, hi = 0.0, max(1.0, epsilon)
    while epsilon_of(ZcdpEvent(rho=hi), delta=delta).epsilon <= epsilon:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if epsilon_of(ZcdpEvent(rho=mid), delta=delta).epsilon <= epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    if lo <= 0:
        raise ConfigError(f"budget epsilon={epsilon}, delta={delta} leaves no room for noise")
    if spent is None or spent(Fraction(lo)) > epsilon:
        return lo
    # bracket [a, b] in u = log ρ with f(u) = spent(e^u) − epsilon, f(a) <= 0 < f(b)
    a = math.log(lo * (1 + 1e-4))
    fa = spent(Fraction(math.exp(a))) - epsilon
    if fa > 0:  # no method tighter than zCDP applies
        return lo
    b = a + math.log(1.6)
    fb = spent(Fraction(math.exp(b))) - epsilon
    evaluations = 3
    while fb <= 0 and evaluations < 10:
        a, fa = b, fb
        b += math.log(1.6)
        fb = spent(Fraction(math.exp(b))) - epsilon
        evaluations += 1
    if fb <= 0:
        return math.exp(b)
    side = 0
    while b - a > 1e-4 and evaluations < 10:
        c = (a * fb - b * fa) / (fb - fa) if fb != fa else (a + b) / 2
        c = min(max(c, a + 0.05 * (b - a)), b - 0.05 * (b - a))
        fc = spent(Fraction(math.exp(c))) - epsilon
        evaluations += 1
        if fc <= 0:
            a, fa = c, fc
            if side == -1:
                fb /= 2
            side = -1
        else:
            b, fb = c, fc
            if side == 1:
                fa /= 2
            side = 1
    return math.exp(a)


def calibrate(config: ReleaseConfig) -> tuple[dict[str, DpEvent], dict[str, int]]:
    """Per-query events of one release, from the budget and the worst-case count alone."""
    if not isinstance(config.plan, DisjointRelease):
        raise ConfigError(
            "this step supports plan = 'disjoint' only; tree and window plans are planned by "
            "dpcr.node_pipeline.plan"
        )
    per_class = max_affected_by_class(config.plan, config.constraint)
    worst = max(per_class.values())
    total_weight = sum(config.weights)
    events: dict[str, DpEvent] = {}
    if config.mechanism == "laplace":
        for q, w in zip(config.queries, config.weights, strict=True):
            eps_q = Fraction(config.budget.epsilon) * Fraction(w) / Fraction(total_weight) / worst
            events[q.name] = DiscreteLaplaceEvent(
                scale=round_up(q.l1_sensitivity / eps_q),
                sensitivity=q.l1_sensitivity,
                dimension=len(q.keys),
            )
    else:

        def gaussians(rho: Fraction) -> dict[str, DpEvent]:
            out: dict[str, DpEvent] = {}
            for q, w in zip(config.queries, config.weights, strict=True):
                rho_q = rho * Fraction(w) / Fraction(total_weight) / worst
                out[q.name] = DiscreteGaussianEvent(
                    sigma2=round_up(q.l2_sensitivity_squared / (2 * rho_q)),
                    sensitivity2=q.l2_sensitivity_squared,
                    dimension=len(q.keys),
                )
            return out

        def spent(rho: Fraction) -> float:
            # the ε `plan` states (tightest method) for the worst unit of every class
            release = ComposedEvent(events=tuple(gaussians(rho).values()))
            return max(
                stated_guarantee(
                    SelfComposedEvent(event=release, count=n), delta=config.budget.delta
                ).epsilon
                for n in set(per_class.values())
            )

        rho = _zcdp_rho_for(config.budget.epsilon, config.budget.delta, spent)
        events = gaussians(Fraction(rho))
    return events, per_class


def plan(config: ReleaseConfig) -> PlanSummary:
    """The guarantee of a disjoint plan (tree / window plans: :func:`dpcr.node_pipeline.plan`)."""
    if not isinstance(config.plan, DisjointRelease):
        raise ConfigError("use dpcr.node_pipeline.plan for tree and window plans")
    events, per_class = calibrate(config)
    planned = plan_guarantee(
        ComposedEvent(events=tuple(events.values())),
        config.plan,
        config.constraint,
        delta=config.budget.delta,
    )
    guarantee = planned.guarantee
    per_class = dict(planned.max_queries_per_entry)
    if guarantee.epsilon > config.budget.epsilon * (1 + 1e-9):
        raise PrivacyError(
            f"calibrated noise gives epsilon {guarantee.epsilon:.6g} above the budget "
            f"{config.budget.epsilon}; refusing to release"
        )
    return PlanSummary(
        epsilon=guarantee.epsilon,
        delta=guarantee.delta,
        rho=guarantee.rho,
        method=guarantee.method,
        max_queries_per_entry=planned.max_queries,
        per_class=per_class,
        releases=planned.releases,
        events=events,
        alerts=alert_plan(config),
        state_machines=derived_ks(config.constraint),
        noise_std={
            name: math.sqrt(noise_variance(e)) * float(q.unit_scale)
            for (name, e), q in zip(events.items(), config.queries, strict=True)
            if isinstance(e, DiscreteLaplaceEvent | DiscreteGaussianEvent)
        },
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    summary: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    new_intervals: int = 0


def _digest(con: duckdb.DuckDBPyConnection, records: int) -> str:
    row = con.execute(
        "SELECT count(*), coalesce(sum(hash(entry, ts, seq, op, CAST(after AS VARCHAR))), 0) "
        "FROM changelog WHERE record <= ?",
        [records],
    ).fetchone()
    assert row is not None
    return f"{row[0]}:{row[1]}"


def load_source(
    config: ReleaseConfig, con: duckdb.DuckDBPyConnection, state: SourceState, progress: Progress
) -> tuple[Any, tuple[int | None, int | None], int | None]:
    """Load the changelog into table ``changelog`` of ``con`` and refuse a source that lost or
    rewrote records consumed by earlier runs. Returns (load report, (min ts, max ts), max ts)."""
    from dpcr.changelog import from_config as source_from_config
    from dpcr.changelog import load as load_changelog

    progress("load changelog", 0, 1)
    source = source_from_config(config.source)
    report = load_changelog(
        source,
        con,
        table="changelog",
        on_error=config.on_error,
        quarantine_path=config.quarantine_path,
        unit_column=config.unit,
    )
    if report.records < state.records:
        raise StoreError(
            f"the source now has {report.records} records but earlier runs consumed "
            f"{state.records}; dpcr needs the whole append-only changelog"
        )
    if state.records and _digest(con, state.records) != state.digest:
        raise StoreError(
            "records already consumed by earlier runs have changed in the source "
            "(rewritten history); released intervals cannot be reconciled. Restore the "
            "original changelog, or start a new release with a new store."
        )
    row = con.execute("SELECT min(ts), max(ts) FROM changelog").fetchone()
    bounds = (row[0], row[1]) if row else (None, None)
    return report, bounds, bounds[1]


def closed_times(config: ReleaseConfig, grid: DisjointRelease, max_ts: int | None) -> list[int]:
    """Release times of ``grid`` whose interval is closed: at or before ``--until``, or else
    strictly before the last mutation in the changelog."""
    horizon = config.until if config.until is not None else max_ts
    if horizon is None:
        return []
    times = grid.release_times(until=horizon)
    if config.until is None:
        # An interval is closed once the changelog shows a later mutation.
        times = [t for t in times if t < horizon]
    return times


def resolve_randomness(rng: Randomness | None) -> tuple[Randomness, bool]:
    """The generator a run draws from, and whether the run is a simulation.

    No generator means a real release from the secure source; a seeded generator makes the run
    a simulation (its store is marked so and can never be published from).
    """
    simulation = rng is not None and not rng.secure
    if rng is None:
        rng = secure_randomness()
    if not simulation:
        require_secure(rng, "a real release")
    return rng, simulation


@contextmanager
def open_run(
    config: ReleaseConfig, *, simulation: bool
) -> Iterator[tuple[Store, duckdb.DuckDBPyConnection]]:
    """The store (bound to the plan's fingerprint and the run's mode) and a DuckDB connection."""
    with Store(
        config.store_path,
        fingerprint=config.fingerprint(),
        mode="simulation" if simulation else "release",
    ) as store:
        con = duckdb.connect()
        con.execute("SET enable_progress_bar = false")
        try:
            yield store, con
        finally:
            con.close()


def _discrete(event: DpEvent) -> DiscreteLaplaceEvent | DiscreteGaussianEvent:
    if not isinstance(event, DiscreteLaplaceEvent | DiscreteGaussianEvent):
        raise StoreError(f"a release carries an unexpected event {event!r}")
    return event


def ledger_entry(event: DpEvent, query: Query) -> dict[str, Any]:
    """The ledger keeps the event and the grid the released integers are on (value k means
    k * grid in the statistic's units)."""
    return {**event_to_dict(event), "grid": str(query.unit_scale)}


def released_rows(
    query: Query,
    noisy: np.ndarray,
    first: int,
    bounds: Callable[[int], tuple[int | None, int]],
) -> list[Released]:
    """Store rows for ``noisy`` (rows = releases ``first``, ``first + 1``, …; columns = keys);
    ``bounds(i)`` is release i's time range."""
    rows: list[Released] = []
    for row in range(noisy.shape[0]):
        lo, hi = bounds(first + row)
        rows.extend(
            Released(
                interval=first + row,
                t_lo=lo,
                t_hi=hi,
                query=query.name,
                key=key,
                value=int(noisy[row, k]),
            )
            for k, key in enumerate(query.keys)
        )
    return rows


def run(
    config: ReleaseConfig,
    *,
    rng: Randomness | None = None,
    progress: Progress = _quiet,
) -> RunResult:
    """Release every closed, not yet released interval; return the summary and output rows."""
    if not isinstance(config.plan, DisjointRelease):  # tree / sliding window
        from dpcr.node_pipeline import run as run_nodes

        return run_nodes(config, rng=rng, progress=progress)
    started = time.time()
    rng, simulation = resolve_randomness(rng)
    summary_plan = plan(config)
    events = summary_plan.events

    progress("open store", 0, 1)
    with open_run(config, simulation=simulation) as (store, con):
        state = store.source_state()
        report, bounds, max_ts = load_source(config, con, state, progress)
        times = closed_times(config, config.plan, max_ts)
        first = store.last_interval() + 1

        progress("bound and aggregate", 0, 1)
        agg = aggregate(
            con,
            table="changelog",
            queries=config.queries,
            constraint=config.constraint,
            release_times=times,
            first_interval=first,
            unit_is_entry=config.unit is None,
            exclude_late=(state.records, state.t_last) if state.t_last is not None else None,
        )
        units = unit_state(con)
        new_intervals = max(0, len(times) - first + 1)

        ledger_events: dict[int, list[DpEvent]] = {}
        for interval, _query, data in store.ledger():
            ledger_events.setdefault(interval, []).append(event_from_dict(data))
        released_events: list[DpEvent] = [
            ComposedEvent(events=tuple(ledger_events[i])) for i in sorted(ledger_events)
        ]
        new_interval_event = ComposedEvent(events=tuple(events.values()))
        guard = PrivacyFilter(
            epsilon_budget=config.budget.epsilon,
            delta_budget=config.budget.delta,
            plan=config.plan,
            constraint=config.constraint,
        )
        guarantee = guard.check(released_events, [new_interval_event] * new_intervals)

        progress("release", 0, max(1, new_intervals))
        new_values: list[Released] = []
        new_events: list[tuple[int, str, dict[str, Any]]] = []
        for q in config.queries:
            event = events[q.name]
            noisy = add_noise(agg.values[q.name], _discrete(event), rng)
            new_values += released_rows(q, noisy, first, config.plan.interval)
            entry = ledger_entry(event, q)
            new_events += [(first + row, q.name, entry) for row in range(noisy.shape[0])]
        progress("release", max(1, new_intervals), max(1, new_intervals))

        last = first - 1 + new_intervals
        new_state = SourceState(
            records=report.records,
            interval=last,
            t_last=config.plan.release_time(last) if last >= 1 else None,
            digest=_digest(con, report.records),
        )
        summary = _summary(
            config,
            summary_plan,
            report,
            agg.report,
            guarantee,
            last,
            new_intervals,
            simulation,
            min_ts=bounds[0] if bounds else None,
            max_ts=max_ts,
        )
        alert_batch = evaluate_alerts(config, store, agg.values, first, new_intervals, rng)
        if alert_batch.states:
            summary.update(alerts=alert_batch.summary, total=_alerts_json(summary_plan)["total"])
        progress("commit", 0, 1)
        store.commit_release(
            alerts=alert_batch.commit,
            values=new_values,
            events=new_events,
            source=new_state,
            units=units,
            summary=summary,
            started=started,
        )
        progress("commit", 1, 1)

        rows = write_outputs(config, store, summary)
        write_alert_outputs(config, store)
    return RunResult(summary=summary, rows=rows, new_intervals=new_intervals)


def _alerts_json(summary: PlanSummary) -> dict[str, Any]:
    """Alert rules and the total guarantee (release + alerts, basic composition)."""
    if not summary.alerts.get("rules"):
        return {}
    return {
        "alerts": summary.alerts["rules"],
        "total": {
            "epsilon": summary.epsilon + summary.alerts["epsilon"],
            "delta": summary.delta + summary.alerts["delta"],
            "method": "basic composition of the release and the alert rules",
        },
    }


def _summary(
    config: ReleaseConfig,
    plan_summary: PlanSummary,
    load_report: Any,
    bounding: Any,
    guarantee: Any,
    last_interval: int,
    new_intervals: int,
    simulation: bool,
    *,
    min_ts: int | None,
    max_ts: int | None,
) -> dict[str, Any]:
    return {
        "simulation": simulation,
        "guarantee": {
            "epsilon": plan_summary.epsilon,
            "delta": plan_summary.delta,
            "method": plan_summary.method,
            "max_queries_per_entry": plan_summary.max_queries_per_entry,
            "per_class": plan_summary.per_class,
            "spent_epsilon": guarantee.epsilon,
        },
        "budget": {"epsilon": config.budget.epsilon, "delta": config.budget.delta},
        "constraint": config.constraint.describe(),
        "unit": config.unit or "entry",
        "changelog": {
            "records": load_report.records,
            "valid": load_report.valid,
            "quarantined": dict(load_report.quarantined),
            "tombstones": load_report.tombstones,
            "quarantine_file": str(config.quarantine_path)
            if sum(load_report.quarantined.values())
            else None,
            "first": format_timestamp(min_ts) if min_ts is not None else None,
            "last": format_timestamp(max_ts) if max_ts is not None else None,
        },
        "bounding": {
            "units": bounding.units,
            "mutations": bounding.mutations,
            "kept": bounding.kept,
            "dropped": bounding.dropped,
            "late": bounding.late,
            "clamped_unit_intervals": bounding.clamped,
            "non_numeric_values": bounding.non_numeric,
            "by_class": bounding.by_class,
        },
        "released_intervals": last_interval,
        "new_intervals": new_intervals,
        "hybrid_column": config.constraint.column
        if isinstance(config.constraint, Hybrid)
        else None,
    }


def write_outputs(
    config: ReleaseConfig, store: Store, summary: dict[str, Any]
) -> list[dict[str, Any]]:
    """Write ``releases.csv`` / ``releases.json`` / ``summary.json`` from the store (so a rerun
    prints exactly what was released) and return the rows."""
    events: dict[tuple[int, str], DpEvent] = {
        (i, q): event_from_dict(e) for i, q, e in store.ledger()
    }
    by_series: dict[tuple[str, str], list[Released]] = {}
    for r in store.released():
        by_series.setdefault((r.query, r.key), []).append(r)
    scale = {q.name: q.unit_scale for q in config.queries}
    rows: list[dict[str, Any]] = []
    for (query, key), series in by_series.items():
        series.sort(key=lambda r: r.interval)
        changes = np.array([r.value for r in series], dtype=np.int64)
        variances = np.array(
            [noise_variance(events[(r.interval, query)]) for r in series],  # type: ignore[arg-type]
            dtype=np.float64,
        )
        totals, total_var = prefix_sums(changes), prefix_variances(variances)
        unit = float(scale[query])
        for r, total, var, tvar in zip(series, totals, variances, total_var, strict=True):
            rows.append(
                {
                    "query": query,
                    "key": key,
                    "interval": r.interval,
                    "start": format_timestamp(r.t_lo) if r.t_lo is not None else "",
                    "end": format_timestamp(r.t_hi),
                    "change": r.value * unit,
                    "estimate": int(total) * unit,
                    "std_change": math.sqrt(var) * unit,
                    "std_estimate": math.sqrt(tvar) * unit,
                }
            )
    rows.sort(key=lambda r: (r["interval"], r["query"], r["key"]))
    write_files(config, rows, summary)
    return rows


OUTPUT_FIELDS = (
    "query",
    "key",
    "interval",
    "start",
    "end",
    "change",
    "estimate",
    "std_change",
    "std_estimate",
)


def write_files(config: ReleaseConfig, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """``releases.csv`` (replaced atomically), ``releases.json`` and ``summary.json``."""
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "releases.csv.tmp"
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=OUTPUT_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(out / "releases.csv")
    (out / "releases.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
