"""The privacy step of a run: the filter over every event, released and new, BEFORE any
draw; then the noisy value of every due node (a released value is read back from the store,
never drawn again: only the instances a run opens are drawn)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.accounting.events import ComposedEvent, DpEvent, event_to_dict
from dpcr.accounting.guarantee import PrivacyFilter
from dpcr.errors import StoreError
from dpcr.mechanisms import add_noise
from dpcr.plans.base import Node
from dpcr.release._ledger import InstanceLayers
from dpcr.release._open import draw_open, is_open, query_columns
from dpcr.release._participation import flatten, query_constraints, query_participation
from dpcr.release._rows import _discrete
from dpcr.store import NodeEvent, OpenBlock, ReleasedNode

if TYPE_CHECKING:
    from dpcr.noise import Randomness
    from dpcr.release._settings import Progress, ReleaseSettings

__all__ = ["check_filter", "draw"]


def check_filter(
    settings: ReleaseSettings, cal: Any, nodes: list[Node], reporting: int,
    instances: dict[tuple[int, int], dict[str, DpEvent]], opened: set[Node], to_draw: Any,
    *, stored: Sequence[Sequence[DpEvent]] | None = None,
) -> Any:
    """The privacy filter over every event, released (the store's ledger: ``instances``;
    ``stored``: their :class:`~dpcr.release._ledger.InstanceLayers` when the caller holds
    them) and new (the instances this run opens), and the alert rules: BEFORE any draw.
    Returns the guarantee; raises when the budget cannot cover it (nothing is drawn or written
    then)."""
    plan = settings.plan
    guard = PrivacyFilter(
        epsilon_budget=settings.budget.epsilon, delta_budget=settings.release_delta
    )
    if cal.per_query is not None:
        layers = max([len(cal.layers)] + [lv + 1 for lv, _ in instances])
        return _check_per_query(settings, cal, guard, layers, reporting, instances, opened,
                                to_draw)
    if stored is None:
        stored = InstanceLayers.of(instances).layers
    layer_events: list[list[DpEvent]] = [
        list(stored[layer]) if layer < len(stored) else []
        for layer in range(max(len(cal.layers), len(stored)))
    ]
    planned_event = {
        layer: ComposedEvent(events=tuple(events.values()))
        for layer, events in enumerate(to_draw)
    }
    for layer, _idx in opened:
        if layer >= len(to_draw):
            raise StoreError(f"layer {layer} is beyond the layers the plan calibrated")
        layer_events[layer].append(planned_event[layer])
    participation = plan.participation(settings.constraint, reporting=reporting)
    return guard.check(layer_events, participation, extra=cal.alerts)


def _check_per_query(
    settings: ReleaseSettings, cal: Any, guard: PrivacyFilter, layers: int, reporting: int,
    instances: dict[tuple[int, int], dict[str, DpEvent]], opened: set[Node], to_draw: Any,
) -> Any:
    """:func:`check_filter` when every query has its own participation: the instances' events
    grouped per (layer, query), each group met as often as the query's participation says."""
    per_layer: list[list[Mapping[str, DpEvent]]] = [[] for _ in range(layers)]
    for (layer, _idx), evs in sorted(instances.items()):
        per_layer[layer].append(evs)
    for layer, _idx in opened:
        if layer >= len(to_draw):
            raise StoreError(f"layer {layer} is beyond the layers the plan calibrated")
        per_layer[layer].append(to_draw[layer])
    per_query = query_participation(settings, query_constraints(settings), reporting)
    if per_query is None:  # (the calibration's own test: cannot differ for the same settings)
        raise StoreError("per-query participation changed between calibration and release")
    groups, flat = flatten(per_layer, per_query)
    return guard.check(groups, flat, extra=cal.alerts)


def draw(
    settings: ReleaseSettings, nodes: list[Node], agg: Any, to_draw: Any, opened: set[Node],
    *, rng: Randomness, simulation: bool, progress: Progress,
) -> tuple[list[ReleasedNode], list[NodeEvent], list[OpenBlock]]:
    """The noisy value of every due node, query and key (a simulation's noise depends on the
    seed and the node alone), and the ledger rows of the instances this run opens. The values
    of open queries' keys that are not declared come as :class:`OpenBlock` (one per query and
    layer), not as rows."""
    plan, first = settings.plan, agg.first_interval
    total_draws = max(1, len(nodes) * len(settings.queries))
    drawn = 0
    progress("release", 0, total_draws)
    values: list[ReleasedNode] = []
    ledger_rows: list[NodeEvent] = []
    blocks: list[OpenBlock] = []
    by_layer: dict[int, list[Node]] = {}
    for node in nodes:
        by_layer.setdefault(node[0], []).append(node)
    for q in settings.queries:
        keys = query_columns(q, agg.candidates)
        rest = keys[len(q.keys) :]  # (an open query's keys not declared: one tuple, every layer)
        for layer, layer_nodes in sorted(by_layer.items()):
            event = _discrete(to_draw[layer][q.name])
            if is_open(q):  # (the keys not declared: columnar, published once selected)
                noisy, others = draw_open(plan, agg.values[q.name], first, event, q, keys,
                                          layer_nodes, rng=rng, simulation=simulation)
                blocks.append(_block(plan, q, rest, layer_nodes, others))
            else:
                exact = plan.exact(agg.values[q.name], first, layer_nodes)
                if simulation:
                    noisy = np.vstack([
                        add_noise(exact[row:row + 1], event, rng.fork(q.name, *node))
                        for row, node in enumerate(layer_nodes)
                    ]) if layer_nodes else exact
                else:
                    noisy = add_noise(exact, event, rng)
            drawn += len(layer_nodes)
            progress("release", drawn, total_draws)
            _append_rows(values, plan, q, q.keys, layer_nodes, noisy)
        ledger_rows.extend(_ledger_rows(q, to_draw, opened))
    progress("release", total_draws, total_draws)
    return values, ledger_rows, blocks


def _append_rows(
    out: list[ReleasedNode], plan: Any, q: Any, keys: tuple[str, ...], nodes: list[Node],
    noisy: np.ndarray,
) -> None:
    """Append the rows of ``keys`` (the columns of ``noisy``) at ``nodes`` (its rows)."""
    for row, node in enumerate(nodes):
        t_lo, t_hi = plan.node_range(node)
        out.extend(
            ReleasedNode(layer=node[0], index=node[1], t_lo=t_lo, t_hi=t_hi,
                         query=q.name, key=key, value=int(noisy[row, k]))
            for k, key in enumerate(keys)
        )  # fmt: skip


def _block(
    plan: Any, q: Any, keys: tuple[str, ...], nodes: list[Node], values: np.ndarray
) -> OpenBlock:
    """The ``values`` of ``keys``, an open query's keys that are not declared."""
    return OpenBlock(
        query=q.name,
        keys=keys,
        nodes=tuple(nodes),
        ranges=tuple(plan.node_range(node) for node in nodes),
        values=values,
    )


def _ledger_rows(q: Any, to_draw: Any, opened: set[Node]) -> list[NodeEvent]:
    """The ledger rows of query ``q`` for the instances this run opens."""
    entry_of = {
        layer: {**event_to_dict(to_draw[layer][q.name]), "grid": str(q.unit_scale)}
        for layer in {inst[0] for inst in opened}
    }
    return [(lv, idx, q.name, entry_of[lv]) for (lv, idx) in sorted(opened)]
