"""The store's ledger as the release loop reads it: the event of every released mechanism
instance, and the per-layer events a run draws new instances with.

A release keeps the events it started with: a layer the store already holds is drawn with the
store's events (a newer dpcr may calibrate the same plan a few ulps apart, or with less noise
where its accounting became tighter: the stored mechanism with at least the plan's noise is
kept, and the privacy filter checks the ledger's own events), and any other stored event is
refused."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from dpcr.accounting.events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    DpEvent,
    at_least_as_noisy,
    event_from_dict,
)
from dpcr.errors import StoreError
from dpcr.store import NodeEvent

if TYPE_CHECKING:
    from dpcr.store import Store

Node = tuple[int, int]


def ledger_instances(
    ledger: Sequence[NodeEvent],
    *,
    into: dict[Node, dict[str, DpEvent]] | None = None,
    parsed: dict[str, DpEvent] | None = None,
) -> dict[Node, dict[str, DpEvent]]:
    """Each query's event per mechanism instance; equal events are one object (accounting
    dedupes by it). ``into`` and ``parsed`` (events by their JSON text): what earlier rows
    gave, to add these to."""
    parsed = {} if parsed is None else parsed
    instances: dict[Node, dict[str, DpEvent]] = {} if into is None else into
    for layer, idx, query, data in ledger:
        key = json.dumps(data, sort_keys=True)
        if key not in parsed:
            parsed[key] = event_from_dict(data)
        instances.setdefault((layer, idx), {})[query] = parsed[key]
    return instances


class InstanceLayers:
    """Per layer, the event of each instance of a ledger (its queries' events composed), in
    the order of the instances ``(layer, index)``: what the privacy filter composes
    (:func:`dpcr.release._draw.check_filter`). Instances with the same event objects share one
    :class:`ComposedEvent` (that of the first of them; the accountants take each distinct
    object once). Built from a ledger's instances and extended by those a session's runs add,
    so a run does not pass over every instance released before."""

    def __init__(self) -> None:
        self.layers: list[list[DpEvent]] = []
        self._composed: dict[tuple[int, ...], ComposedEvent] = {}
        self._last: dict[int, int] = {}  # the index of each layer's last instance
        self._max: Node | None = None  # the last instance of all

    @classmethod
    def of(cls, instances: Mapping[Node, Mapping[str, DpEvent]]) -> InstanceLayers:
        """The layers of ``instances``."""
        out = cls()
        out.extend(sorted(instances.items()))
        return out

    def extend(self, items: Iterable[tuple[Node, Mapping[str, DpEvent]]]) -> bool:
        """Add the instances ``items`` (in order) as :meth:`of` would have placed them: False
        when one of them does not come after every instance of its layer, or would be the
        first of its events' instances with the events in another order (the caller builds
        the layers anew then: this object is not to be used)."""
        for node, evs in items:
            layer, idx = node
            if idx <= self._last.get(layer, -1):
                return False
            values = tuple(evs.values())
            key = tuple(sorted(id(e) for e in values))
            event = self._composed.get(key)
            if event is None:
                event = self._composed[key] = ComposedEvent(events=values)
            elif (self._max is not None and node < self._max
                  and not all(a is b for a, b in zip(event.events, values, strict=True))):
                return False  # fmt: skip
            while len(self.layers) <= layer:
                self.layers.append([])
            self.layers[layer].append(event)
            self._last[layer] = idx
            self._max = node if self._max is None else max(self._max, node)
        return True


class LedgerCache:
    """A store's ledger as :func:`ledger_instances` and :func:`layers_to_draw` give it, kept
    by a session between its runs: read again only when the store's head is not the one the
    session committed last (another process released meanwhile, or a run failed)."""

    def __init__(self) -> None:
        self._head: str | None = None
        self._parsed: dict[str, DpEvent] = {}
        self._instances: dict[Node, dict[str, DpEvent]] = {}
        self._to_draw: tuple[dict[str, DpEvent], ...] = ()
        self._layers: InstanceLayers | None = None

    def read(
        self, store: Store, planned: Sequence[Mapping[str, DpEvent]]
    ) -> tuple[dict[Node, dict[str, DpEvent]], tuple[dict[str, DpEvent], ...]]:
        """(instances, the per-layer events to draw with) of ``store`` (see above)."""
        head = store.recorded_head()
        if head is None or head != self._head:
            self._parsed = {}
            self._instances = ledger_instances(store.ledger(), parsed=self._parsed)
            raise_dimensions(self._instances, planned)
            self._to_draw = layers_to_draw(planned, self._instances)
            self._layers = None
            self._head = head
        return self._instances, self._to_draw

    def layer_events(self) -> list[list[DpEvent]]:
        """The :class:`InstanceLayers` of the instances :meth:`read` returned last (the lists
        are not to be changed)."""
        if self._layers is None:
            self._layers = InstanceLayers.of(self._instances)
        return self._layers.layers

    def committed(self, head: str | None, rows: Sequence[NodeEvent]) -> None:
        """A run of the session committed ``rows`` to the ledger, which is now at ``head``
        (drawn with the events :meth:`read` returned, so those stay the ones to draw with)."""
        ledger_instances(rows, into=self._instances, parsed=self._parsed)
        if self._layers is not None:
            nodes = sorted({(layer, idx) for layer, idx, _q, _d in rows})
            if not self._layers.extend((node, self._instances[node]) for node in nodes):
                self._layers = None
        self._head = head


def raise_dimensions(
    instances: dict[Node, dict[str, DpEvent]], planned: Sequence[Mapping[str, DpEvent]]
) -> None:
    """Account every stored discrete Gaussian that bounds fewer coordinates than the plan's
    event of its layer with the plan's count (in place; equal events stay one object). The
    noise drawn does not depend on it: the dimension only bounds the coordinates on which two
    neighbours differ, and a larger bound is a safe one. (An open-ended BLT's events declared
    1 before they counted the m·L coordinates one unit's change moves.)"""
    raised: dict[int, DpEvent] = {}
    for (layer, _idx), events in instances.items():
        if layer >= len(planned):
            continue
        for q, e in events.items():
            p = planned[layer].get(q)
            if (isinstance(e, DiscreteGaussianEvent) and isinstance(p, DiscreteGaussianEvent)
                    and e.dimension < p.dimension):  # fmt: skip
                if id(e) not in raised:
                    raised[id(e)] = dataclasses.replace(e, dimension=p.dimension)
                events[q] = raised[id(e)]


def layers_to_draw(
    planned: Sequence[Mapping[str, DpEvent]],
    instances: Mapping[Node, Mapping[str, DpEvent]],
) -> tuple[dict[str, DpEvent], ...]:
    """The plan's per-layer events, each replaced by the store's where the store holds that
    layer; raises :class:`StoreError` when an instance's events are not the plan's."""
    layers = [dict(events) for events in planned]
    adopted: set[int] = set()
    # (instances share a few event objects: each pair of objects is compared once)
    noisy: dict[tuple[int, int], bool] = {}

    def as_noisy(stored: DpEvent, plan_event: DpEvent) -> bool:
        key = (id(stored), id(plan_event))
        if key not in noisy:
            noisy[key] = at_least_as_noisy(stored, plan_event)
        return noisy[key]

    for (layer, idx), events in sorted(instances.items()):
        if layer >= len(layers):
            continue  # beyond the plan's layers: accounted by the caller, never drawn again
        plan_events = planned[layer]
        same = events.keys() == plan_events.keys() and all(
            as_noisy(events[q], plan_events[q]) for q in events
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
