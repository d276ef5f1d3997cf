"""Alerts inside ``dpcr plan`` / ``dpcr run`` (called from the release loop, dpcr.release).

:func:`alert_plan` states each rule's sensitivity, noise, guarantee and (α, β) from the config
alone. :func:`evaluate_alerts` feeds the exact running values / window changes of the new
reporting intervals (of any plan) to each rule's sparse vector, resuming from the state in the
store (threshold noise, count of ⊤, exact running totals), and returns what to commit with the
release.
:func:`alert_rows` gives the rows of ``alerts.csv`` / ``alerts.json`` from the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.errors import StoreError
from dpcr.noise import Randomness, require_secure
from dpcr.store import AlertRow, Store
from dpcr.svt.rules import (
    ACCURACY_BETA,
    OPEN_ENDED_INTERVALS,
    rule_accuracy,
    rule_parameters,
    rule_sensitivity,
)
from dpcr.timeutil import format_timestamp

if TYPE_CHECKING:  # (the sparse vector is imported once a release has alerts)
    from dpcr.svt._sparse import SparseVector

__all__ = ["ALERT_FIELDS", "AlertBatch", "alert_plan", "alert_rows", "evaluate_alerts"]


def alert_plan(config: Any) -> dict[str, Any]:
    """Per rule: sensitivity, noise, guarantee, accuracy; and the total of all rules (basic
    composition; the release's own guarantee is added by the caller)."""
    rules = getattr(config, "alerts", ())
    out: list[dict[str, Any]] = []
    eps = delta = 0.0
    count = config.plan.schedule().release_count()
    horizon = count if count else OPEN_ENDED_INTERVALS
    for rule in rules:
        svt = rule_parameters(rule, config.queries, config.owner)
        p = svt.parameters
        query = next(q for q in config.queries if q.name == rule.statistic)
        acc = rule_accuracy(p, queries=horizon * len(query.keys))
        grid = float(query.unit_scale)
        out.append(
            {
                "name": rule.name,
                "rule": rule.describe(),
                "sensitivity": rule_sensitivity(rule, config.queries, config.owner) * grid,
                "mechanism": p.to_dict(),
                "epsilon": p.epsilon,
                "delta": p.delta,
                "accuracy": {
                    "alpha": acc.alpha * grid,
                    "alpha_value": None if acc.alpha_value is None else acc.alpha_value * grid,
                    "beta": ACCURACY_BETA,
                    "queries": acc.queries,
                    "horizon": f"{horizon} intervals" + ("" if count else " (open-ended plan)"),
                },
            }
        )
        eps += p.epsilon
        delta += p.delta
    return {"rules": out, "epsilon": eps, "delta": delta}


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertBatch:
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: list[AlertRow] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def commit(self) -> tuple[dict[str, dict[str, Any]], list[AlertRow]] | None:
        return (self.states, self.rows) if self.states else None


def evaluate_alerts(
    config: Any,
    store: Store,
    values: dict[str, np.ndarray],
    first: int,
    new_intervals: int,
    rng: Randomness,
) -> AlertBatch:
    """Answer every rule for intervals first .. first + new_intervals − 1 (exact values)."""
    rules = getattr(config, "alerts", ())
    if not rules:
        return AlertBatch()
    from dpcr.svt._sparse import TOP, SparseState

    if store.mode == "release":
        require_secure(rng, "alerts of a real release")
    saved = store.alert_states()
    states: dict[str, dict[str, Any]] = {}
    rows: list[AlertRow] = []
    summary: dict[str, Any] = {}
    for rule in rules:
        query = next(q for q in config.queries if q.name == rule.statistic)
        keys = list(query.keys)
        st = saved.get(rule.name, {})
        last = int(st.get("last_interval", 0))
        if last != first - 1:
            raise StoreError(
                f"alert {rule.name!r} has answered up to interval {last} but this run starts at "
                f"interval {first}; the store is inconsistent"
            )
        changes = np.asarray(values[query.name], dtype=np.int64).reshape(-1, len(keys))
        changes = changes[:new_intervals]
        running0 = np.array(st.get("running", [0] * len(keys)), dtype=np.int64)
        running = running0 + np.cumsum(changes, axis=0)
        if rule.what == "running":
            series = running
            recent: list[list[int]] = []
        else:
            w = int(rule.window or 1)
            before = np.array(st.get("recent", []), dtype=np.int64).reshape(-1, len(keys))
            allc = np.vstack([before, changes])
            csum = np.vstack([np.zeros((1, len(keys)), np.int64), np.cumsum(allc, axis=0)])
            ends = np.arange(before.shape[0] + 1, allc.shape[0] + 1)
            series = csum[ends] - csum[np.maximum(ends - w, 0)]
            recent = allc[max(0, allc.shape[0] - (w - 1)) :].tolist() if w > 1 else []
        svt: SparseVector = rule_parameters(rule, config.queries, config.owner)
        old = st.get("svt", {})
        svt.state = SparseState(
            threshold_noise=old.get("threshold_noise"),
            count=int(old.get("count", 0)),
            answered=int(old.get("answered", 0)),
        )
        out = svt.release(series.reshape(-1), rng=rng)
        ans = out.answers.reshape(series.shape)
        vals = out.values.reshape(series.shape)
        for r in range(series.shape[0]):
            for k, key in enumerate(keys):
                a = int(ans[r, k])
                if a < 0:
                    continue
                v = int(vals[r, k]) if (rule.numeric and a == TOP) else None
                rows.append((rule.name, first + r, key, a, v))
        states[rule.name] = {
            "last_interval": first - 1 + series.shape[0],
            "running": running[-1].tolist() if series.shape[0] else running0.tolist(),
            "recent": recent if series.shape[0] else st.get("recent", []),
            "svt": {
                "threshold_noise": svt.state.threshold_noise,
                "count": svt.state.count,
                "answered": svt.state.answered,
            },
            "event": svt.parameters.to_dict(),
        }
        summary[rule.name] = {
            "above": int((ans == TOP).sum()),
            "count": svt.state.count,
            "cutoff": rule.cutoff,
            "halted": svt.halted,
            "epsilon": svt.parameters.epsilon,
            "delta": svt.parameters.delta,
        }
    return AlertBatch(states=states, rows=rows, summary=summary)


ALERT_FIELDS = ("rule", "statistic", "key", "interval", "end", "above", "value")


def alert_totals(config: Any, store: Store) -> dict[str, dict[str, Any]]:
    """Per alert rule, what its published answers add up to: the ⊤ answers so far (``count``),
    the ``cutoff``, whether the rule has stopped (``halted``) and its budget. A function of the
    published answers and the settings alone, the same after every run that answers nothing."""
    counts = {rule.name: 0 for rule in getattr(config, "alerts", ())}
    if not counts:
        return {}
    from dpcr.svt._sparse import TOP

    for rule, _interval, _key, answer, _value in store.alerts():
        if rule in counts and answer == TOP:
            counts[rule] += 1
    return {
        rule.name: {
            "count": counts[rule.name],
            "cutoff": rule.cutoff,
            "halted": counts[rule.name] >= rule.cutoff,
            "epsilon": rule.epsilon,
            "delta": rule.delta,
        }
        for rule in config.alerts
    }


def alert_rows(config: Any, store: Store) -> list[dict[str, Any]]:
    """The rows of ``alerts.csv`` / ``alerts.json`` from the store (none without alert rules)."""
    rules = {r.name: r for r in getattr(config, "alerts", ())}
    if not rules:
        return []
    from dpcr.svt._sparse import TOP

    scale: dict[str, Fraction] = {
        r.name: next(q.unit_scale for q in config.queries if q.name == r.statistic)
        for r in rules.values()
    }
    out_rows: list[dict[str, Any]] = []
    for rule, interval, key, answer, value in store.alerts():
        if rule not in rules:
            continue
        _, hi = config.plan.reporting_range(interval)
        out_rows.append(
            {
                "rule": rule,
                "statistic": rules[rule].statistic,
                "key": key,
                "interval": interval,
                "end": format_timestamp(hi),
                "above": bool(answer == TOP),
                "value": None if value is None else float(value * scale[rule]),
            }
        )
    return out_rows
