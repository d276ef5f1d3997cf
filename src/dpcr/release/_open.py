"""Open keys (``open = true``, docs/privacy.md): the noise of every candidate key and the
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
public rows hold the selected keys from their selection interval on. An open grouped sum keeps
its candidate keys' nodes alike and publishes each key from the interval the open histogram it
follows (``keys_from``) selects it in (:func:`_followed`; docs/privacy.md, section 12b).
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
from dpcr.queries import GroupedSum, Query, has_open_keys
from dpcr.release._rows import _discrete, _variances
from dpcr.release._selection import key_selections
from dpcr.store import OpenBlock, OpenKey, ReleasedNode, Store

if TYPE_CHECKING:
    from dpcr.noise import Randomness
    from dpcr.plans import ReleasePlan
    from dpcr.release._settings import ReleaseSettings

__all__ = [
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
    return has_open_keys(query)


def query_columns(query: Query, candidates: Mapping[str, Mapping[str, int]]) -> tuple[str, ...]:
    """The keys of ``query``'s aggregated values, in column order."""
    if is_open(query):
        return open_columns(query, candidates.get(query.name, {}))
    return query.keys


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
) -> list[OpenBlock]:
    """The nodes released by earlier runs (reporting intervals ``1 .. before``) of every
    candidate key new to the store: exact value 0 (no kept row held the key by then: every
    such row was a candidate of an earlier run), each with its instance's noise."""
    plan = settings.plan
    nodes = plan.due(0, before)
    out: list[OpenBlock] = []
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
        zeros = np.zeros((1, len(new)), dtype=np.int64)
        rows = [
            _noisy(zeros, _discrete(_node_event(q, plan, node, instances, to_draw)), q, new,
                   node, rng=rng, simulation=simulation)
            for node in nodes
        ]  # fmt: skip
        out.append(
            OpenBlock(
                query=q.name,
                keys=tuple(new),
                nodes=tuple(nodes),
                ranges=tuple(plan.node_range(node) for node in nodes),
                values=np.vstack(rows).astype(np.int64, copy=False),
            )
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


def _appeared(plan: ReleasePlan, firsts: Sequence[int], upto: int) -> np.ndarray:
    """For every first base interval of ``firsts``, the first reporting interval (at most
    ``upto``) whose base intervals reach it."""
    ends = np.array([plan.reporting_base(r)[1] for r in range(1, upto + 1)], dtype=np.int64)
    at = np.searchsorted(ends, np.asarray(firsts, dtype=np.int64), side="left")
    return np.where(at < len(ends), at + 1, upto).astype(np.int64)


def select_keys(
    settings: ReleaseSettings,
    known: Mapping[str, Mapping[str, OpenKey]],
    values: Mapping[str, tuple[list[str], np.ndarray]],
    agg: Any,
    before: int,
    after: int,
    events: Mapping[str, Mapping[Node, DpEvent]],
) -> list[OpenKey]:
    """The store's records of the candidate keys that are new or newly selected by reporting
    intervals ``before + 1 .. after``. ``values[query]``: (the keys not selected yet, sorted;
    their released values, stored and drawn now, of the nodes ``plan.due(0, after)``, a row
    per node and a column per key); ``events[query][node]``: each node's event. A key is
    tested at every interval from the one it appeared in; it is selected at the first whose
    noisy running estimate is at least the query's threshold (:func:`key_thresholds`), and
    stays selected."""
    plan = settings.plan
    thresholds = key_thresholds(settings)
    out: list[OpenKey] = []
    if after <= before:
        return out
    due = plan.due(0, after)
    for q in settings.queries:
        if not is_open(q) or q.name not in values or isinstance(q, GroupedSum):
            continue
        seen = known.get(q.name, {})
        waiting, matrix = values[q.name]
        if not waiting:
            continue
        appeared = _waiting_appeared(plan, seen, agg.candidates.get(q.name, {}), waiting, after)
        node_values = {node: matrix[r] for r, node in enumerate(due)}
        est = plan.estimate(node_values, _variances(dict(events[q.name])), after).estimate
        start = np.maximum(before + 1, appeared)  # (1-based reporting intervals)
        t = np.arange(1, after + 1)[:, None]
        hit = (np.asarray(est[:after]) >= thresholds[q.name]) & (t >= start[None, :])
        first = np.where(hit.any(axis=0), hit.argmax(axis=0) + 1, 0)
        for j in np.flatnonzero((first > 0) | np.array([k not in seen for k in waiting])):
            key = waiting[j]
            selected = int(first[j]) if first[j] else None
            out.append(OpenKey(query=q.name, key=key, appeared=int(appeared[j]),
                               selected=selected))  # fmt: skip
    return out + _followed(settings, known, values, agg, after, out)


def _followed(
    settings: ReleaseSettings,
    known: Mapping[str, Mapping[str, OpenKey]],
    values: Mapping[str, tuple[list[str], np.ndarray]],
    agg: Any,
    after: int,
    chosen: Sequence[OpenKey],
) -> list[OpenKey]:
    """The records of the keys of open grouped sums: each key is selected at the interval the
    histogram it follows (``keys_from``) selects it in, stored or ``chosen`` now (a
    post-processing of that histogram's release; docs/privacy.md, section 12b)."""
    plan = settings.plan
    out: list[OpenKey] = []
    for q in settings.queries:
        if not (isinstance(q, GroupedSum) and q.open and q.name in values):
            continue
        lead = q.keys_from or ""
        selected = {k: r.selected for k, r in known.get(lead, {}).items()}
        selected.update({r.key: r.selected for r in chosen if r.query == lead})
        seen = known.get(q.name, {})
        waiting = values[q.name][0]
        appeared = _waiting_appeared(plan, seen, agg.candidates.get(q.name, {}), waiting, after)
        for j, key in enumerate(waiting):
            when = selected.get(key)
            if when is not None or key not in seen:
                out.append(OpenKey(query=q.name, key=key, appeared=int(appeared[j]),
                                   selected=when))  # fmt: skip
    return out


def _waiting_appeared(
    plan: ReleasePlan,
    seen: Mapping[str, OpenKey],
    firsts: Mapping[str, int],
    waiting: Sequence[str],
    after: int,
) -> np.ndarray:
    """The reporting interval each key of ``waiting`` appeared in: the store's, or (a key new
    to it) from its first base interval."""
    new = [k for k in waiting if k not in seen]
    fresh = dict(zip(new, _appeared(plan, [firsts[k] for k in new], after).tolist(),
                     strict=True))  # fmt: skip
    return np.array([seen[k].appeared if k in seen else fresh[k] for k in waiting], dtype=np.int64)


def _waiting(q: Query, seen: Mapping[str, OpenKey], firsts: Mapping[str, int]) -> list[str]:
    """The candidate keys of ``q`` that are not declared and not selected yet, sorted."""
    declared = set(q.keys)
    keys = {k for k in firsts if k not in declared and k not in seen}
    keys.update(k for k, r in seen.items() if r.selected is None)
    return sorted(keys)


def _gather(
    store: Store, q: Query, waiting: list[str], due: Sequence[Node], blocks: Sequence[OpenBlock]
) -> np.ndarray:
    """The released values of the ``waiting`` keys of ``q`` at every node of ``due``: stored,
    and of ``blocks`` (drawn now); a missing one is refused (an edited or damaged store)."""
    matrix, held = store.open_values(q.name, waiting, due)
    column = {k: j for j, k in enumerate(waiting)}
    row = {node: r for r, node in enumerate(due)}
    columns: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # (a run's blocks share their keys)
    for b in blocks:
        if b.query != q.name:
            continue
        if id(b.keys) not in columns:
            where = np.fromiter((column.get(k, -1) for k in b.keys), np.int64, len(b.keys))
            columns[id(b.keys)] = (where, where >= 0)
        where, wanted = columns[id(b.keys)]
        for r, node in enumerate(b.nodes):
            if node in row:
                matrix[row[node], where[wanted]] = b.values[r, wanted]
                held[row[node], where[wanted]] = True
    lost = np.flatnonzero(~held.all(axis=0))
    if lost.size:
        raise StoreError(
            f"the store lacks released values of key {waiting[int(lost[0])]!r} of {q.name!r}: "
            "it was edited or is corrupt; restore it from a backup (docs/store.md)"
        )
    return matrix


def _published(
    plan: ReleasePlan,
    q: Query,
    keys: Sequence[str],
    matrix: np.ndarray,
    due: Sequence[Node],
) -> list[ReleasedNode]:
    """The rows of ``keys`` (columns of ``matrix``, a row per node of ``due``)."""
    ranges = [plan.node_range(node) for node in due]
    return [
        ReleasedNode(layer=node[0], index=node[1], t_lo=lo, t_hi=hi, query=q.name, key=key,
                     value=int(matrix[r, j]))
        for j, key in enumerate(keys)
        for r, (node, (lo, hi)) in enumerate(zip(due, ranges, strict=True))
    ]  # fmt: skip


def open_step(
    settings: ReleaseSettings,
    store: Store,
    agg: Any,
    before: int,
    after: int,
    drawn: Sequence[OpenBlock],
    instances: Mapping[Node, Mapping[str, DpEvent]],
    to_draw: Any,
    *,
    rng: Randomness,
    simulation: bool,
) -> tuple[list[ReleasedNode], list[OpenKey], list[OpenBlock]]:
    """What a run adds for its open histograms to the values it ``drawn`` (the keys not
    declared, columnar): the published rows of the keys selected (every node of a key
    selected now, the new nodes of a key selected before), the store's records of the keys
    new or newly selected (:func:`select_keys`), and every block of values to keep: those
    drawn and the earlier nodes of the keys new to the store (:func:`earlier_nodes`).
    Nothing without an open histogram."""
    if not any(is_open(q) for q in settings.queries):
        return [], [], []
    plan = settings.plan
    known = store.open_keys()
    earlier = earlier_nodes(settings, known, agg, before, instances, to_draw, rng=rng,
                            simulation=simulation)  # fmt: skip
    blocks = [*drawn, *earlier]
    values: dict[str, tuple[list[str], np.ndarray]] = {}
    events: dict[str, dict[Node, DpEvent]] = {}
    due = plan.due(0, after)
    rows: list[ReleasedNode] = []
    for q in settings.queries:
        if not is_open(q):
            continue
        seen = known.get(q.name, {})
        waiting = _waiting(q, seen, agg.candidates.get(q.name, {}))
        if after > before and waiting:
            values[q.name] = (waiting, _gather(store, q, waiting, due, blocks))
        events[q.name] = {node: _node_event(q, plan, node, instances, to_draw) for node in due}
        chosen = {k for k, r in seen.items() if r.selected is not None}
        for b in drawn:  # (the new nodes of the keys selected by earlier runs)
            cols = [j for j, k in enumerate(b.keys) if k in chosen] if b.query == q.name else []
            if cols:
                rows += _published(plan, q, [b.keys[j] for j in cols], b.values[:, cols], b.nodes)
    keys = select_keys(settings, known, values, agg, before, after, events)
    for q in settings.queries:
        now = [k.key for k in keys if k.query == q.name and k.selected is not None]
        if now:
            waiting, matrix = values[q.name]
            column = {k: j for j, k in enumerate(waiting)}
            rows += _published(plan, q, now, matrix[:, [column[k] for k in now]], due)
    return rows, keys, blocks
