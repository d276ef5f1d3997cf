"""The store's ledger as the release loop reads it: the event of every released mechanism
instance, and the per-layer events a run draws new instances with.

A release keeps the events it started with: a layer the store already holds is drawn with the
store's events (a newer dpcr may calibrate the same plan a few ulps apart), and a stored event
that is not the plan's, beyond that, is refused."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from dpcr.accounting.events import DpEvent, event_from_dict, nearly_equal
from dpcr.errors import StoreError
from dpcr.store import NodeEvent

Node = tuple[int, int]


def ledger_instances(ledger: Sequence[NodeEvent]) -> dict[Node, dict[str, DpEvent]]:
    """Each query's event per mechanism instance; equal events are one object (accounting
    dedupes by it)."""
    parsed: dict[str, DpEvent] = {}
    instances: dict[Node, dict[str, DpEvent]] = {}
    for layer, idx, query, data in ledger:
        key = json.dumps(data, sort_keys=True)
        if key not in parsed:
            parsed[key] = event_from_dict(data)
        instances.setdefault((layer, idx), {})[query] = parsed[key]
    return instances


def layers_to_draw(
    planned: Sequence[Mapping[str, DpEvent]],
    instances: Mapping[Node, Mapping[str, DpEvent]],
) -> tuple[dict[str, DpEvent], ...]:
    """The plan's per-layer events, each replaced by the store's where the store holds that
    layer; raises :class:`StoreError` when an instance's events are not the plan's."""
    layers = [dict(events) for events in planned]
    adopted: set[int] = set()
    for (layer, idx), events in sorted(instances.items()):
        if layer >= len(layers):
            continue  # beyond the plan's layers: accounted by the caller, never drawn again
        plan_events = planned[layer]
        same = events.keys() == plan_events.keys() and all(
            nearly_equal(events[q], plan_events[q]) for q in events
        )
        if layer in adopted:
            same = same and all(events[q] is layers[layer][q] or events[q] == layers[layer][q]
                                for q in events)  # fmt: skip
        if not same:
            raise StoreError(
                f"the store's event for {(layer, idx)} differs from the plan's; refusing"
            )
        if layer not in adopted:
            layers[layer] = dict(events)
            adopted.add(layer)
    return tuple(layers)
