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
from dataclasses import dataclass
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
    "KEY_BLOCK",
    "draw_open",
    "earlier_nodes",
    "is_open",
    "key_thresholds",
    "open_step",
    "query_columns",
    "select_keys",
]


#: How many keys of an open histogram are drawn, read and tested at once: a run holds the
#: values it draws for every key once (a row per node), and this many keys' values besides.
KEY_BLOCK = 1 << 16


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
    simulation: bool = True,
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
    plan: ReleasePlan,
    base: np.ndarray,
    first: int,
    event: Any,
    q: Query,
    keys: Sequence[str],
    nodes: Sequence[Node],
    *,
    rng: Randomness,
    simulation: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """The noisy values of an open query's due ``nodes`` (rows) from its totals ``base`` (a
    column per key of ``keys``, :func:`query_columns`): (those of its declared keys, those of
    the others), computed :data:`KEY_BLOCK` keys at a time (a block's exact values and noise,
    then the next's: the run holds the noisy values once)."""
    declared, width = len(q.keys), len(keys)
    ours = np.empty((len(nodes), declared), dtype=np.int64)
    rest = np.empty((len(nodes), width - declared), dtype=np.int64)
    for lo in range(0, width, KEY_BLOCK) if width else [0]:
        hi = min(width, lo + KEY_BLOCK)
        exact = plan.exact(base[:, lo:hi], first, nodes)
        if not simulation:
            noisy = np.asarray(add_noise(exact, event, rng))
        elif nodes:  # (a simulation's noise per key: the keys a run knows vary)
            noisy = np.vstack([_noisy(exact[r : r + 1], event, q, keys[lo:hi], node, rng=rng)
                               for r, node in enumerate(nodes)])  # fmt: skip
        else:
            noisy = exact
        split = min(max(declared - lo, 0), hi - lo)  # (the block's declared columns)
        ours[:, lo : lo + split] = noisy[:, :split]
        if split < hi - lo:
            rest[:, lo + split - declared : hi - declared] = noisy[:, split:]
    return ours, rest


def _appeared(plan: ReleasePlan, firsts: Sequence[int], upto: int) -> np.ndarray:
    """For every first base interval of ``firsts``, the first reporting interval (at most
    ``upto``) whose base intervals reach it."""
    ends = np.array([plan.reporting_base(r)[1] for r in range(1, upto + 1)], dtype=np.int64)
    at = np.searchsorted(ends, np.asarray(firsts, dtype=np.int64), side="left")
    return np.where(at < len(ends), at + 1, upto).astype(np.int64)


def select_keys(
    settings: ReleaseSettings,
    q: Query,
    seen: Mapping[str, OpenKey],
    firsts: Mapping[str, int],
    waiting: Sequence[str],
    matrix: np.ndarray,
    variances: Mapping[Node, float],
    before: int,
    after: int,
) -> list[OpenKey]:
    """The store's records of those of ``waiting`` (keys of open histogram ``q`` not selected
    yet) that are new or newly selected by reporting intervals ``before + 1 .. after``.
    ``matrix``: their released values, stored and drawn now, of the nodes ``plan.due(0,
    after)`` (a row per node and a column per key of ``waiting``); ``variances[node]``: each
    node's noise variance; ``firsts``: the first base interval of each candidate key. A key
    is tested at every interval from the one it appeared in; it is selected at the first
    whose noisy running estimate is at least the query's threshold (:func:`key_thresholds`),
    and stays selected. The keys are independent: any split of them selects the same."""
    plan = settings.plan
    out: list[OpenKey] = []
    if after <= before or not waiting:
        return out
    threshold = key_thresholds(settings)[q.name]
    appeared = _waiting_appeared(plan, seen, firsts, waiting, after)
    node_values = {node: matrix[r] for r, node in enumerate(plan.due(0, after))}
    est = plan.estimate(node_values, variances, after).estimate
    start = np.maximum(before + 1, appeared)  # (1-based reporting intervals)
    t = np.arange(1, after + 1)[:, None]
    hit = (np.asarray(est[:after]) >= threshold) & (t >= start[None, :])
    first = np.where(hit.any(axis=0), hit.argmax(axis=0) + 1, 0)
    for j in np.flatnonzero((first > 0) | np.array([k not in seen for k in waiting])):
        key = waiting[int(j)]
        selected = int(first[j]) if first[j] else None
        out.append(OpenKey(query=q.name, key=key, appeared=int(appeared[j]),
                           selected=selected))  # fmt: skip
    return out


def _followed(
    plan: ReleasePlan,
    q: GroupedSum,
    seen: Mapping[str, OpenKey],
    firsts: Mapping[str, int],
    waiting: Sequence[str],
    lead: Mapping[str, int | None],
    after: int,
) -> list[OpenKey]:
    """The records of those of ``waiting`` (keys of open grouped sum ``q``) that are new or
    newly selected: each key is selected at the interval the histogram it follows
    (``keys_from``) selects it in, ``lead[key]`` (stored or selected now; a post-processing of
    that histogram's release: docs/privacy.md, section 12b)."""
    appeared = _waiting_appeared(plan, seen, firsts, waiting, after)
    out: list[OpenKey] = []
    for j, key in enumerate(waiting):
        when = lead.get(key)
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
    stored: tuple[np.ndarray, np.ndarray], q: Query, waiting: list[str], due: Sequence[Node],
    blocks: Sequence[OpenBlock],
) -> np.ndarray:
    """The released values of the ``waiting`` keys of ``q`` at every node of ``due``: those
    ``stored`` (values, held: :meth:`~dpcr.store.Store.open_values`) and of ``blocks`` (drawn
    now, ``q``'s); a missing one is refused (an edited or damaged store)."""
    matrix, held = stored
    row = {node: r for r, node in enumerate(due)}
    columns: dict[int, dict[str, int]] = {}  # (a run's blocks share their keys)
    for b in blocks:
        if id(b.keys) not in columns:
            columns[id(b.keys)] = {k: j for j, k in enumerate(b.keys)}
        column = columns[id(b.keys)]
        where = np.fromiter((column.get(k, -1) for k in waiting), np.int64, len(waiting))
        wanted = np.flatnonzero(where >= 0)
        if not wanted.size:
            continue
        cols = where[wanted]
        for r, node in enumerate(b.nodes):
            if node in row:
                matrix[row[node], wanted] = b.values[r, cols]
                held[row[node], wanted] = True
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
    Waiting keys are read and tested 65,536 key ids at a time (as :data:`KEY_BLOCK` keys are
    drawn: :meth:`~dpcr.store.Store.open_value_blocks`). Nothing without an open histogram."""
    if not any(is_open(q) for q in settings.queries):
        return [], [], []
    plan = settings.plan
    known = store.open_keys()
    earlier = earlier_nodes(settings, known, agg, before, instances, to_draw, rng=rng,
                            simulation=simulation)  # fmt: skip
    blocks = [*drawn, *earlier]
    rows: list[ReleasedNode] = []
    for q in settings.queries:  # (the new nodes of the keys selected by earlier runs)
        if not is_open(q):
            continue
        chosen = {k for k, r in known.get(q.name, {}).items() if r.selected is not None}
        for b in drawn:
            cols = [j for j, k in enumerate(b.keys) if k in chosen] if b.query == q.name else []
            if cols:
                rows += _published(plan, q, [b.keys[j] for j in cols], b.values[:, cols], b.nodes)
    if after <= before:
        return rows, [], blocks
    now: dict[str, list[ReleasedNode]] = {}
    keys: list[OpenKey] = []
    run = _Selecting(settings, store, agg, known, blocks, instances, to_draw, before, after)
    # (histograms first: an open grouped sum follows the selection of the one it names)
    for q in sorted((q for q in settings.queries if is_open(q)),
                    key=lambda q: isinstance(q, GroupedSum)):  # fmt: skip
        keys_q, now[q.name] = _select_query(run, q, keys)
        keys += keys_q
    return rows + [r for q in settings.queries for r in now.get(q.name, [])], keys, blocks


@dataclass(frozen=True)
class _Selecting:
    """What a run's selection reads: the store and its records of the open keys (``known``),
    the data step's result (``agg``), the blocks of values drawn and to keep, each node's
    noise (``instances``, ``to_draw``) and the reporting intervals ``before + 1 .. after``."""

    settings: ReleaseSettings
    store: Store
    agg: Any
    known: Mapping[str, Mapping[str, OpenKey]]
    blocks: Sequence[OpenBlock]
    instances: Mapping[Node, Mapping[str, DpEvent]]
    to_draw: Any
    before: int
    after: int


def _select_query(
    run: _Selecting, q: Query, chosen: Sequence[OpenKey]
) -> tuple[list[OpenKey], list[ReleasedNode]]:
    """The store's records of open query ``q``'s keys new or newly selected by the run, and
    the rows of the keys selected now, the waiting keys read and tested a block of key ids at
    a time. ``chosen``: the records of this run so far (the histograms' selections, which an
    open grouped sum follows)."""
    settings, store, known, before, after = (
        run.settings, run.store, run.known, run.before, run.after
    )
    plan = settings.plan
    due = plan.due(0, after)
    seen = known.get(q.name, {})
    firsts = run.agg.candidates.get(q.name, {})
    waiting = _waiting(q, seen, firsts)
    found: list[OpenKey] = []
    now: list[ReleasedNode] = []
    if not waiting:
        return found, now
    mine = [b for b in run.blocks if b.query == q.name]
    lead: dict[str, int | None] = {}
    if isinstance(q, GroupedSum):
        lead = {k: r.selected for k, r in known.get(q.keys_from or "", {}).items()}
        lead.update({r.key: r.selected for r in chosen if r.query == q.keys_from})
    else:
        variances = _variances({node: _node_event(q, plan, node, run.instances, run.to_draw)
                                for node in due})  # fmt: skip
    # (the stored values a block of key ids at a time, then the keys the store has none of;
    # the keys are independent, and the records are put back in the order of their keys)
    for positions, *stored in store.open_value_blocks(q.name, waiting, due):
        part = [waiting[i] for i in positions.tolist()]
        matrix = _gather((stored[0], stored[1]), q, part, due, mine)
        if isinstance(q, GroupedSum):
            part_found = _followed(plan, q, seen, firsts, part, lead, after)
        else:
            part_found = select_keys(settings, q, seen, firsts, part, matrix, variances,
                                     before, after)  # fmt: skip
        found += part_found
        column = {k: j for j, k in enumerate(part)}
        picked = [k.key for k in part_found if k.selected is not None]
        if picked:
            now += _published(plan, q, picked, matrix[:, [column[k] for k in picked]], due)
    found.sort(key=lambda r: r.key)
    now.sort(key=lambda r: r.key)  # (stable: a key's nodes stay in their order)
    return found, now
