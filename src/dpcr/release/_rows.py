"""The published rows of a release: per reporting interval, query and key, the plan's estimates
from the stored noisy values (post-processing) with their exact standard deviations."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.accounting.events import (
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    event_from_dict,
)
from dpcr.errors import StoreError
from dpcr.mechanisms import noise_variance
from dpcr.plans.base import Node, NodeSeries
from dpcr.queries import DerivedKind, Query
from dpcr.release._consistency import Consistency, consistent_series
from dpcr.release._results import ReleaseRow
from dpcr.release._terms import CLOSED_FORM_KINDS
from dpcr.release._uncertainty import METHOD, cached_on_disk, row_intervals
from dpcr.store import NodeEvent, ReleasedNode, Store
from dpcr.timeutil import format_timestamp

if TYPE_CHECKING:
    from dpcr.release._settings import ReleaseSettings

__all__ = ["Grown", "appendable", "released_rows"]


def _discrete(event: DpEvent) -> DiscreteLaplaceEvent | DiscreteGaussianEvent:
    if not isinstance(event, DiscreteLaplaceEvent | DiscreteGaussianEvent):
        raise StoreError(f"a release carries an unexpected event {event!r}")
    return event


def _variances(events: dict[Node, Any]) -> dict[Node, float]:
    """Each node's noise variance (computed once per distinct event object)."""
    by_id: dict[int, float] = {}
    out = {}
    for node, e in events.items():
        v = by_id.get(id(e))
        if v is None:
            v = by_id[id(e)] = noise_variance(e)
        out[node] = v
    return out


def intervals_cache(settings: ReleaseSettings) -> Path:
    """``<store>.intervals.json``: the published intervals' half-widths by noise (no data)."""
    store = settings.store_path
    return store.with_name(store.name + ".intervals.json")


def warm_intervals(
    settings: ReleaseSettings,
    layers: Any,
    n: int,
    method: str = METHOD,
    done: Callable[[int, int], None] | None = None,
    first: int = 0,
) -> None:
    """Compute, into the cache beside the store, the 95 % intervals of the rows 1..n a run is
    about to publish (``first``: but the first ``first`` rows, which the process computed
    already), from the plan and its calibrated events (``layers[layer][query]``) alone:
    no data is read, so a run does this while its data step runs; :func:`released_rows` then
    finds them in the cache (the store's events are the planned ones, checked by the run).
    ``method``: the store's interval method (that of a new store by default). ``done(part,
    whole)``: the progress, in thousandths per query."""
    plan = settings.plan
    if getattr(plan, "kind", None) not in CLOSED_FORM_KINDS and not hasattr(plan, "weight_stats"):
        return  # probed plans: computed once, by released_rows
    nodes = plan.due(0, n)
    if not nodes:
        return
    whole = 1000 * len(settings.queries)

    def share(i: int) -> Callable[[int, int], None] | None:
        if done is None:
            return None
        return lambda rows, total: done(1000 * i + 1000 * rows // max(total, 1), whole)

    with cached_on_disk(intervals_cache(settings)):
        for i, q in enumerate(settings.queries):
            events = {node: _discrete(layers[plan.instance(node)[0]][q.name]) for node in nodes}
            row_intervals(plan, nodes, events, _variances(events), n, method=method,
                          rows=range(first, n) if first else None, done=share(i))


@dataclass(slots=True)
class _Inputs:
    """What rows are computed from, read from the store at one head: each query's event per
    node, the events by their JSON text (equal events are one object) and the published
    values per (query, key) and node."""

    events: dict[str, dict[Node, DiscreteLaplaceEvent | DiscreteGaussianEvent]]
    parsed: dict[str, DiscreteLaplaceEvent | DiscreteGaussianEvent]
    stored: dict[tuple[str, str], dict[Node, np.ndarray]]
    since: dict[tuple[str, str], int]
    #: per query, what its rows were last computed from (:func:`_query_inputs`)
    prepared: dict[str, _Prepared] = field(default_factory=dict)

    def add(self, values: Sequence[ReleasedNode], ledger: Sequence[NodeEvent]) -> None:
        """Add the values and ledger rows a commit wrote."""
        for layer, idx, query, data in ledger:
            text = json.dumps(data, sort_keys=True)
            event = self.parsed.get(text)
            if event is None:
                event = self.parsed[text] = _discrete(event_from_dict(data))
            self.events.setdefault(query, {})[(layer, idx)] = event
        for r in values:
            self.stored.setdefault((r.query, r.key), {})[(r.layer, r.index)] = np.array([r.value])


@dataclass(frozen=True, slots=True, kw_only=True)
class Grown:
    """What a commit added to a store that was at ``head`` after ``n`` reporting intervals:
    the released ``values`` and ``ledger`` rows of the nodes due after ``n``. ``published``:
    the rows published at ``head`` (read from the public files, verified by their digests),
    or None; asked only when this process does not hold them."""

    head: str | None
    n: int
    values: Sequence[ReleasedNode]
    ledger: Sequence[NodeEvent]
    published: Callable[[], list[ReleaseRow] | None]


def appendable(settings: ReleaseSettings) -> bool:
    """Whether the rows of a release only grow by the rows of its new intervals: every row of
    an interval depends on the nodes due by it alone (the plans' estimators are prefix-stable,
    the consistency post-processing is online). Not for derived statistics (computed from
    every row of their inputs) nor open histograms (a key selected later is published from its
    selection interval on, with values stored earlier): their rows are computed whole."""
    return not settings.derived and not any(getattr(q, "open", False) for q in settings.queries)


#: The last call's rows, by (settings, store file, store head, n), and what they were computed
#: from: a run computes them to check the published files (:mod:`dpcr.release._published`) and
#: again to publish, the same rows when nothing new was committed in between; a run that
#: commits new intervals computes only their rows (:class:`Grown`). The head names the store's
#: content (verified when the store opened; every commit records the new one; the store's lock
#: keeps other writers out).
_LAST: list[tuple[ReleaseSettings, str, str | None, int, tuple[ReleaseRow, ...],
                  _Inputs | None]] = []


def released_rows(
    settings: ReleaseSettings, store: Store, n: int, *, grown: Grown | None = None
) -> list[ReleaseRow]:
    """Per reporting interval 1..n, query and key: the estimates of the plan's estimator from
    the stored values (post-processing), with exact stds and 95 % intervals, and the query's
    consistency post-processing (online). A rerun reads the same values (and the intervals
    from the cache beside the store). ``grown``: what the run that just committed added to
    the store; the rows of the intervals up to ``grown.n`` are those published before (when
    :func:`appendable`), so only the new intervals' rows are computed."""
    key = (str(store.path), store.recorded_head(), n)
    last = _LAST[0] if _LAST else None
    if last is not None and _same_rows(last[0], settings) and last[1:4] == key:
        return list(last[4])
    base: tuple[ReleaseRow, ...] | None = None
    inputs: _Inputs | None = None
    first = 1
    if grown is not None and 0 < grown.n < n and appendable(settings):
        if last is not None and _same_rows(last[0], settings) \
                and last[1:4] == (key[0], grown.head, grown.n):  # fmt: skip
            base, inputs = last[4], last[5]
            if inputs is not None:
                inputs.add(grown.values, grown.ledger)
        if base is None:
            published = grown.published()
            base = tuple(published) if published is not None else None
        if base and base[-1].interval == grown.n:
            first = grown.n + 1
        else:  # (not the rows of intervals 1 .. grown.n: computed whole)
            base = None
    if inputs is None:
        inputs = _read_inputs(store)
    with cached_on_disk(intervals_cache(settings)):
        rows = _released_rows(settings, inputs, n, first=first, method=store.intervals)
    if base is not None:
        rows = [*base, *rows]
    _LAST[:] = [(settings, *key, tuple(rows), inputs)]
    return rows


def _same_rows(a: ReleaseSettings, b: ReleaseSettings) -> bool:
    """Whether ``a`` and ``b`` are the same settings but perhaps for the public clock (a
    session's runs: each its own settings, at its clock), which the rows do not depend on."""
    if a is b:
        return True
    try:
        return all(
            x is y or x == y
            for x, y in ((getattr(a, f.name), getattr(b, f.name)) for f in fields(a)
                         if f.name != "until")
        )  # fmt: skip
    except (TypeError, ValueError):  # (a field whose == is not a bool)
        return False


def _read_inputs(store: Store) -> _Inputs:
    """The :class:`_Inputs` of the store as it is."""
    inputs = _Inputs(events={}, parsed={}, stored={}, since={})
    inputs.add(store.released(published=True), store.ledger())
    # An open histogram's keys that are not declared: published from their selection
    # interval on, once selected (the others' values are never read here).
    inputs.since = {
        (q, k): rec.selected
        for q, keys in store.open_keys().items() for k, rec in keys.items()
        if rec.selected is not None
    }  # fmt: skip
    return inputs


def _released_rows(
    settings: ReleaseSettings, inputs: _Inputs, n: int, *, first: int = 1, method: str
) -> list[ReleaseRow]:
    """The rows of reporting intervals ``first .. n`` (computed from every node due by n)."""
    plan = settings.plan
    stored = inputs.stored
    since = {qk: s for qk, s in inputs.since.items() if s <= n}
    rows: list[ReleaseRow] = []
    if n == 0 or first > n:
        return rows
    ranges = [plan.reporting_range(i) for i in range(first, n + 1)]
    picked = range(first - 1, n)
    totals: dict[str, np.ndarray] = {}
    order = sorted(
        settings.queries,
        key=lambda q: settings.consistency.get(q.name, Consistency()).total is not None,
    )
    due = plan.due(0, n)
    for q in order:
        unit = float(q.unit_scale)
        keys = [k for k in q.keys if stored.get((q.name, k))]
        keys += sorted(k for (name, k) in since if name == q.name and stored.get((name, k)))
        if not keys:
            continue
        prep = _query_inputs(plan, inputs, q.name, tuple(keys), due)
        all_event, all_var, nodes, values = prep.events, prep.variances, prep.nodes, prep.values
        est = plan.estimate(values, all_var, n)
        change, estimate = est.change * unit, est.estimate * unit
        c_iv, e_iv = row_intervals(plan, nodes, all_event, all_var, n, rows=picked,
                                   method=method)  # fmt: skip
        c_hw = np.zeros(n)
        e_hw = np.zeros(n)
        c_hw[first - 1:] = [iv.half_width for iv in c_iv]
        e_hw[first - 1:] = [iv.half_width for iv in e_iv]
        c_hw *= unit
        e_hw *= unit
        bounds = [
            (change - c_hw[:, None], change + c_hw[:, None]),
            (estimate - e_hw[:, None], estimate + e_hw[:, None]),
        ]
        con = settings.consistency.get(q.name, Consistency())
        if con.modes:
            change, estimate, bounds = _consistent(
                plan.kind, con, change, estimate, bounds, totals.get(con.total or "")
            )
        if q.name in totals or any(q.name == c.total for c in settings.consistency.values()):
            totals[q.name] = estimate[:, 0]
        (c_lo, c_hi), (e_lo, e_hi) = bounds
        for i in picked:
            t_lo, t_hi = ranges[i - first + 1]
            for j, key in enumerate(keys):
                if i + 1 < since.get((q.name, key), 0):
                    continue
                rows.append(
                    ReleaseRow(
                        query=q.name,
                        key=key,
                        interval=i + 1,
                        start=_timestamp(t_lo) if t_lo is not None else "",
                        end=_timestamp(t_hi),
                        change=float(change[i, j]),
                        estimate=float(estimate[i, j]),
                        std_change=math.sqrt(float(est.change_var[i])) * unit,
                        std_estimate=math.sqrt(float(est.estimate_var[i])) * unit,
                        change_lo=float(c_lo[i, j]),
                        change_hi=float(c_hi[i, j]),
                        estimate_lo=float(e_lo[i, j]),
                        estimate_hi=float(e_hi[i, j]),
                    )
                )
    if first == 1:
        rows += derived_rows(settings.derived, settings.queries, rows, n)
    rows.sort(key=lambda r: (r.interval, r.query, r.key))
    return rows


@dataclass(slots=True)
class _Prepared:
    """What one query's rows are computed from, for the nodes ``due`` by some ``n``: each
    due node's event (its instance's) and variance, the nodes with stored values (every key
    has the same ones: one release per node and query) and their values by key."""

    keys: tuple[str, ...]
    due: list[Node]
    events: dict[Node, DiscreteLaplaceEvent | DiscreteGaussianEvent]
    variances: NodeSeries
    nodes: list[Node]
    values: NodeSeries


def _query_inputs(
    plan: Any, inputs: _Inputs, query: str, keys: tuple[str, ...], due: list[Node]
) -> _Prepared:
    """The :class:`_Prepared` of ``query`` for the nodes ``due``: those of its last call
    extended by the nodes due since (a session's runs, whose ``due`` only grows; the
    released values and events of earlier nodes never change) when every earlier node had
    both, else built anew."""
    last = inputs.prepared.get(query)
    if last is None or last.keys != keys or due[: len(last.due)] != last.due \
            or not len(last.events) == len(last.nodes) == len(last.due):  # fmt: skip
        # (a node without an event or values)
        last = _Prepared(keys, [], {}, NodeSeries(), [], NodeSeries())
    new = due[len(last.due):]
    node_event = inputs.events.get(query, {})
    # a node's noise is its instance's
    events = {node: node_event[i] for node, i in zip(new, map(plan.instance, new), strict=True)
              if i in node_event}  # fmt: skip
    last.events.update(events)
    last.variances.update(_variances(events))
    # those due by n with values (the store may hold later ones: rows as they were published
    # after n intervals)
    held = inputs.stored[(query, keys[0])]
    added = [node for node in new if node in held]
    columns = [inputs.stored[(query, k)] for k in keys]
    last.values.update((node, np.array([c[node][0] for c in columns])) for node in added)
    last.nodes = sorted(last.nodes + added) if added else last.nodes
    last.due = due
    inputs.prepared[query] = last
    return last


#: The text of a reporting interval's bounds (the same few hundred times each run: the plan's
#: grid), computed once per process.
_timestamp = functools.lru_cache(maxsize=1 << 16)(format_timestamp)


def derived_rows(
    derived: Sequence[DerivedKind], queries: Sequence[Query], rows: Sequence[ReleaseRow], n: int
) -> list[ReleaseRow]:
    """The rows of each derived statistic from the released ``rows`` of its inputs (their
    running estimates and stds, one key each): post-processing of released values. Its change
    is the difference of consecutive values. Its uncertainty depends on the released values
    (the kind's delta-method std), so it is written where values are, as an approximate 95 %
    interval ``estimate ± 1.96 std`` (no proven coverage); the std columns, which are functions
    of the plan alone for every query, are empty (NaN). Values and intervals are cut to where
    the exact value lies (:meth:`~dpcr.queries.DerivedKind.value_range`)."""
    by_query: dict[str, dict[int, ReleaseRow]] = {}
    for r in rows:
        by_query.setdefault(r.query, {})[r.interval] = r
    out: list[ReleaseRow] = []
    for d in derived:
        series = [by_query.get(name, {}) for name in d.inputs]
        if not all(len(s) == n for s in series):
            continue  # (an input with nothing released yet)
        ivs = range(1, n + 1)
        by_name = {q.name: q for q in queries}
        inputs = [by_name[name] for name in d.inputs]
        value, std = d.combine(
            inputs,
            [np.array([s[i].estimate for i in ivs]) for s in series],
            [np.array([s[i].std_estimate for i in ivs]) for s in series],
        )
        lo, hi = d.value_range(inputs)
        value, low, high = (np.clip(v, lo, hi) for v in (value, value - 1.96 * std,
                                                           value + 1.96 * std))  # fmt: skip
        change = np.diff(value, prepend=0.0)
        for i in ivs:
            first = series[0][i]
            out.append(
                ReleaseRow(
                    query=d.name,
                    key="",
                    interval=i,
                    start=first.start,
                    end=first.end,
                    change=float(change[i - 1]),
                    estimate=float(value[i - 1]),
                    std_change=math.nan,
                    std_estimate=math.nan,
                    estimate_lo=float(low[i - 1]),
                    estimate_hi=float(high[i - 1]),
                )
            )
    return out


Bounds = list[tuple[np.ndarray, np.ndarray]]


def _consistent(
    kind: str,
    con: Consistency,
    change: np.ndarray,
    estimate: np.ndarray,
    bounds: Bounds,
    total: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, Bounds]:
    """Published values under ``con`` (online) and the intervals widened to contain them (cut at
    0 with ``nonnegative``; the truth is >= 0 there): coverage at least the estimator's."""
    published = consistent_series(estimate, modes=con.modes, total=total)
    if kind == "window":
        new_change = published
    else:  # running values: the change is the difference of consecutive published values
        new_change = np.diff(published, axis=0, prepend=np.zeros((1, published.shape[1])))
    out: Bounds = []
    for value, (lo, hi) in zip((new_change, published), bounds, strict=True):
        out.append((np.minimum(lo, value), np.maximum(hi, value)))
    if "nonnegative" in con.modes:
        lo, hi = out[1]
        out[1] = (np.maximum(lo, 0.0), np.maximum(hi, 0.0))
        if kind == "window":
            out[0] = out[1]
    return new_change, published, out
