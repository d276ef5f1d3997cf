"""Open histograms (``open = true``, docs/privacy.md): the noise of every candidate key and the
keys a release publishes.

Every candidate key (a value of the column some kept row holds, :attr:`Aggregates.candidates`)
gets the per-key continual counter a declared key gets: the same plan, the same events, its own
noise per node. A key first seen by a later run gets the nodes released before it appeared
drawn then, with their exact value 0 (no kept row held it) and the event of their instance
(:func:`earlier_nodes`). A key that is not declared is published from the first reporting
interval, at or after the one it appeared in, whose noisy running estimate (the plan's
estimate from the released nodes) reaches the threshold, and at every later interval
(:func:`select_keys`): selection reads released values only, never the exact counts. The store
keeps every candidate key's nodes and each key's first and selection intervals, operator-only;
public rows hold the selected keys from their selection interval on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.accounting.events import DpEvent
from dpcr.engines.base import open_columns
from dpcr.errors import StoreError
from dpcr.mechanisms import add_noise
from dpcr.plans.base import Node
from dpcr.queries import Histogram, Query
from dpcr.release._rows import _discrete, _variances
from dpcr.release._selection import key_selections
from dpcr.store import OpenKey, ReleasedNode, Store

if TYPE_CHECKING:
    from dpcr.noise import Randomness
    from dpcr.plans import ReleasePlan
    from dpcr.release._settings import ReleaseSettings

__all__ = [
    "appeared_interval",
    "draw_open",
    "earlier_nodes",
    "is_open",
    "key_thresholds",
    "open_step",
    "query_columns",
    "select_keys",
]


def key_thresholds(settings: ReleaseSettings) -> dict[str, float]:
    """Per open query, the threshold its noisy running estimate must reach for a key to be
    published (:func:`~dpcr.release._selection.key_selections`: from the plan, the
    calibration and the constraint alone)."""
    return {name: s.threshold for name, s in key_selections(settings).items()}


def is_open(query: Query) -> bool:
    return isinstance(query, Histogram) and query.open


def query_columns(query: Query, candidates: Mapping[str, Mapping[str, int]]) -> tuple[str, ...]:
    """The keys of ``query``'s aggregated values, in column order."""
    if is_open(query):
        return open_columns(query, candidates.get(query.name, {}))
    return query.keys


def appeared_interval(plan: ReleasePlan, first_base: int, upto: int) -> int:
    """The first reporting interval (at most ``upto``) whose base intervals reach
    ``first_base``."""
    for r in range(1, upto + 1):
        if plan.reporting_base(r)[1] >= first_base:
            return r
    return upto


def _node_event(
    q: Query,
    plan: ReleasePlan,
    node: Node,
    instances: Mapping[Node, Mapping[str, DpEvent]],
    to_draw: Any,
) -> DpEvent:
    """The event node ``node`` of ``q`` is (or was) drawn with."""
    inst = plan.instance(node)
    known = instances.get(inst)
    if known is not None and q.name in known:
        return known[q.name]
    event: DpEvent = to_draw[inst[0]][q.name]
    return event


def earlier_nodes(
    settings: ReleaseSettings,
    known: Mapping[str, Mapping[str, OpenKey]],
    agg: Any,
    before: int,
    instances: Mapping[Node, Mapping[str, DpEvent]],
    to_draw: Any,
    *,
    rng: Randomness,
    simulation: bool,
) -> list[ReleasedNode]:
    """The nodes released by earlier runs (reporting intervals ``1 .. before``) of every
    candidate key new to the store: exact value 0 (no kept row held the key by then: every
    such row was a candidate of an earlier run), each with its instance's noise."""
    plan = settings.plan
    nodes = plan.due(0, before)
    out: list[ReleasedNode] = []
    if not nodes:
        return out
    for q in settings.queries:
        if not is_open(q):
            continue
        seen = known.get(q.name, {})
        declared = set(q.keys)
        firsts = agg.candidates.get(q.name, {})
        new = [k for k in firsts if k not in seen and k not in declared]
        if not new:
            continue
        released_to = plan.reporting_base(before)[1]
        early = [k for k in new if firsts[k] <= released_to]
        if early:  # (its earlier nodes' exact values are not all 0: never publish them so)
            raise StoreError(
                f"key {early[0]!r} of {q.name!r} is held by a row of an interval released "
                "already, yet the store does not know it: the store is not this source's; "
                "restore the store that released from it (docs/store.md)"
            )
        for node in nodes:
            event = _discrete(_node_event(q, plan, node, instances, to_draw))
            noisy = _noisy(
                np.zeros((1, len(new)), dtype=np.int64),
                event,
                q,
                new,
                node,
                rng=rng,
                simulation=simulation,
            )
            t_lo, t_hi = plan.node_range(node)
            out.extend(
                ReleasedNode(
                    layer=node[0],
                    index=node[1],
                    t_lo=t_lo,
                    t_hi=t_hi,
                    query=q.name,
                    key=key,
                    value=int(noisy[0, j]),
                )
                for j, key in enumerate(new)
            )
    return out


def _noisy(
    exact: np.ndarray,
    event: Any,
    q: Query,
    keys: Sequence[str],
    node: Node,
    *,
    rng: Randomness,
    simulation: bool,
) -> np.ndarray:
    """``exact`` (one row, a column per key of ``keys``) plus noise; a simulation draws each
    key's from its own fork (query, key, node), so that its noise does not depend on which
    other keys a run knows."""
    if not simulation:
        return np.asarray(add_noise(exact, event, rng))
    out = np.empty_like(exact)
    for j, key in enumerate(keys):
        out[:, j : j + 1] = add_noise(
            exact[:, j : j + 1], event, rng.fork(q.name, "key", key, *node)
        )
    return out


def draw_open(
    exact: np.ndarray,
    event: Any,
    q: Query,
    keys: Sequence[str],
    nodes: Sequence[Node],
    *,
    rng: Randomness,
    simulation: bool,
) -> np.ndarray:
    """The noisy values of an open query's due ``nodes`` (rows) and ``keys`` (columns)."""
    if not simulation:
        return np.asarray(add_noise(exact, event, rng))
    rows = [_noisy(exact[r:r + 1], event, q, keys, node, rng=rng, simulation=True)
            for r, node in enumerate(nodes)]  # fmt: skip
    return np.vstack(rows) if rows else exact


def select_keys(
    settings: ReleaseSettings,
    known: Mapping[str, Mapping[str, OpenKey]],
    values: Mapping[str, Mapping[str, Mapping[Node, int]]],
    agg: Any,
    before: int,
    after: int,
    events: Mapping[str, Mapping[Node, DpEvent]],
) -> list[OpenKey]:
    """The store's records of the candidate keys that are new or newly selected by reporting
    intervals ``before + 1 .. after``. ``values[query][key][node]``: every released value of
    the keys not selected yet (stored and drawn now) of the nodes due by ``after``;
    ``events[query][node]``: each node's event. A key is tested at every interval from the one
    it appeared in; it is selected at the first whose noisy running estimate is at least the
    query's threshold (:func:`key_thresholds`), and stays selected."""
    plan = settings.plan
    thresholds = key_thresholds(settings)
    out: list[OpenKey] = []
    if after <= before:
        return out
    due = plan.due(0, after)
    for q in settings.queries:
        if not is_open(q):
            continue
        seen = known.get(q.name, {})
        declared = set(q.keys)
        appeared: dict[str, int] = {
            key: seen[key].appeared if key in seen
            else appeared_interval(plan, first, after)
            for key, first in agg.candidates.get(q.name, {}).items() if key not in declared
        }  # fmt: skip
        for key, record in seen.items():
            appeared.setdefault(key, record.appeared)
        waiting = sorted(k for k in appeared if k not in seen or seen[k].selected is None)
        if not waiting:
            continue
        by_key = values.get(q.name, {})
        lost = [k for k in waiting if not set(due) <= by_key.get(k, {}).keys()]
        if lost:
            raise StoreError(
                f"the store lacks released values of key {lost[0]!r} of {q.name!r}: it was "
                "edited or is corrupt; restore it from a backup (docs/store.md)"
            )
        node_values = {node: np.array([by_key[k][node] for k in waiting]) for node in due}
        est = plan.estimate(node_values, _variances(dict(events[q.name])), after).estimate
        tau = thresholds[q.name]
        for j, key in enumerate(waiting):
            start = max(before + 1, appeared[key])
            hits = np.nonzero(est[start - 1 : after, j] >= tau)[0]
            selected = int(start + hits[0]) if hits.size else None
            if key not in seen or selected is not None:
                out.append(
                    OpenKey(query=q.name, key=key, appeared=appeared[key], selected=selected)
                )
    return out


def open_step(
    settings: ReleaseSettings,
    store: Store,
    agg: Any,
    before: int,
    after: int,
    drawn: Sequence[ReleasedNode],
    instances: Mapping[Node, Mapping[str, DpEvent]],
    to_draw: Any,
    *,
    rng: Randomness,
    simulation: bool,
) -> tuple[list[ReleasedNode], list[OpenKey]]:
    """What a run adds for its open histograms to the values it ``drawn``: the earlier nodes
    of the keys new to the store (:func:`earlier_nodes`), and the store's records of the keys
    new or newly selected (:func:`select_keys`). Nothing without an open histogram."""
    if not any(is_open(q) for q in settings.queries):
        return [], []
    plan = settings.plan
    known = store.open_keys()
    earlier = earlier_nodes(settings, known, agg, before, instances, to_draw, rng=rng,
                            simulation=simulation)  # fmt: skip
    values: dict[str, dict[str, dict[Node, int]]] = {}
    events: dict[str, dict[Node, DpEvent]] = {}
    due = plan.due(0, after)
    for q in settings.queries:
        if not is_open(q):
            continue
        seen = known.get(q.name, {})
        stored = store.released_keys(q.name, [k for k, r in seen.items() if r.selected is None])
        for r in (*drawn, *earlier):
            if r.query == q.name and r.key not in q.keys:
                stored.setdefault(r.key, {})[(r.layer, r.index)] = r.value
        values[q.name] = stored
        events[q.name] = {node: _node_event(q, plan, node, instances, to_draw) for node in due}
    return earlier, select_keys(settings, known, values, agg, before, after, events)
