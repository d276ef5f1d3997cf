"""The published rows of a release: per reporting interval, query and key, the plan's estimates
from the stored noisy values (post-processing) with their exact standard deviations."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from dpcr.accounting.events import (
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    event_from_dict,
)
from dpcr.errors import StoreError
from dpcr.mechanisms import noise_variance
from dpcr.plans.base import Node
from dpcr.release._results import ReleaseRow
from dpcr.store import Store
from dpcr.timeutil import format_timestamp

if TYPE_CHECKING:
    from dpcr.release._settings import ContinualRelease

__all__ = ["released_rows"]


def _discrete(event: DpEvent) -> DiscreteLaplaceEvent | DiscreteGaussianEvent:
    if not isinstance(event, DiscreteLaplaceEvent | DiscreteGaussianEvent):
        raise StoreError(f"a release carries an unexpected event {event!r}")
    return event


def released_rows(settings: ContinualRelease, store: Store, n: int) -> list[ReleaseRow]:
    """Per reporting interval 1..n, query and key: the estimates of the plan's estimator from
    the stored values (post-processing), with exact stds. A rerun reads the same values."""
    plan = settings.plan
    variances: dict[str, dict[Node, float]] = {}
    for layer, idx, query, data in store.ledger():
        variances.setdefault(query, {})[(layer, idx)] = noise_variance(
            _discrete(event_from_dict(data))
        )
    stored: dict[tuple[str, str], dict[Node, np.ndarray]] = {}
    for r in store.released():
        stored.setdefault((r.query, r.key), {})[(r.layer, r.index)] = np.array([r.value])
    rows: list[ReleaseRow] = []
    if n == 0:
        return rows
    ranges = [plan.reporting_range(i) for i in range(1, n + 1)]
    for q in settings.queries:
        unit = float(q.unit_scale)
        node_var = variances.get(q.name, {})
        # a node's variance is its instance's
        all_var = {
            node: node_var[plan.instance(node)]
            for node in plan.due(0, n)
            if plan.instance(node) in node_var
        }
        for key in q.keys:
            vals = stored.get((q.name, key), {})
            if not vals:
                continue
            est = plan.estimate(vals, all_var, n)
            for i in range(n):
                t_lo, t_hi = ranges[i]
                rows.append(
                    ReleaseRow(
                        query=q.name,
                        key=key,
                        interval=i + 1,
                        start=format_timestamp(t_lo) if t_lo is not None else "",
                        end=format_timestamp(t_hi),
                        change=float(est.change[i, 0]) * unit,
                        estimate=float(est.estimate[i, 0]) * unit,
                        std_change=math.sqrt(float(est.change_var[i])) * unit,
                        std_estimate=math.sqrt(float(est.estimate_var[i])) * unit,
                    )
                )
    rows.sort(key=lambda r: (r.interval, r.query, r.key))
    return rows
