"""The events the privacy filter composes, per layer, are the same whether built from the whole
ledger or extended by the instances a session's runs add (:class:`InstanceLayers`,
:meth:`LedgerCache.layer_events`): the same composed event objects in the same order."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpcr.accounting.events import ComposedEvent, DiscreteLaplaceEvent, DpEvent
from dpcr.release._ledger import InstanceLayers, LedgerCache

Node = tuple[int, int]


def reference(instances: dict[Node, dict[str, DpEvent]]) -> list[list[DpEvent]]:
    """The per-layer events as the filter built them from every instance at each run."""
    layers = max([lv + 1 for lv, _ in instances], default=0)
    out: list[list[DpEvent]] = [[] for _ in range(layers)]
    composed: dict[tuple[int, ...], DpEvent] = {}
    for (layer, _idx), evs in sorted(instances.items()):
        key = tuple(sorted(id(e) for e in evs.values()))
        if key not in composed:
            composed[key] = ComposedEvent(events=tuple(evs.values()))
        out[layer].append(composed[key])
    return out


def _alike(a: list[list[DpEvent]], b: list[list[DpEvent]]) -> bool:
    """The same lists, with one composed object where the other has one (the identities the
    accountants group by), of the same events in the same order."""
    if [len(x) for x in a] != [len(x) for x in b]:
        return False
    pair: dict[int, int] = {}
    for x, y in zip((e for layer in a for e in layer), (e for layer in b for e in layer),
                    strict=True):  # fmt: skip
        if pair.setdefault(id(x), id(y)) != id(y):
            return False
        xe, ye = x.events, y.events  # type: ignore[attr-defined]
        if len(xe) != len(ye) or not all(p is q for p, q in zip(xe, ye, strict=True)):
            return False
    return len(set(pair.values())) == len(pair)


EVENTS = [DiscreteLaplaceEvent(scale=Fraction(s), sensitivity=Fraction(1)) for s in (2, 3, 5)]


def _instance(rng: np.random.Generator) -> dict[str, DpEvent]:
    queries = ["a", "b"] if rng.random() < 0.8 else ["b", "a"]  # (another order, rarely)
    return {q: EVENTS[int(rng.integers(0, 2 if rng.random() < 0.9 else 3))] for q in queries}


@pytest.mark.parametrize("seed", range(30))
def test_extended_layers_are_the_whole_ledgers(seed: int) -> None:
    rng = np.random.default_rng(seed)
    held: dict[Node, dict[str, DpEvent]] = {}
    layers = InstanceLayers.of(held)
    counts = [0, 0, 0]
    for _ in range(25):
        batch: dict[Node, dict[str, DpEvent]] = {}
        for _ in range(int(rng.integers(1, 4))):
            layer = int(rng.integers(0, 3))
            if rng.random() < 0.1 and counts[layer] > 1:  # an earlier index: out of order
                idx = int(rng.integers(0, counts[layer]))
            else:
                idx = counts[layer]
                counts[layer] += 1 + int(rng.random() < 0.2)
            batch[(layer, idx)] = _instance(rng)
        held.update(batch)
        if layers is None or not layers.extend(sorted(batch.items())):
            layers = InstanceLayers.of(held)
        assert _alike(layers.layers, reference(held))
        assert _alike(InstanceLayers.of(held).layers, reference(held))


class _Store:
    def __init__(self) -> None:
        self.rows: list[tuple[int, int, str, dict[str, object]]] = []
        self.head = "0"

    def recorded_head(self) -> str:
        return self.head

    def ledger(self) -> list[tuple[int, int, str, dict[str, object]]]:
        return list(self.rows)


def test_a_sessions_ledger_cache_gives_the_whole_ledgers_layers() -> None:
    from dpcr.accounting.events import event_to_dict

    store = _Store()
    cache = LedgerCache()
    planned = ({"a": EVENTS[0], "b": EVENTS[1]}, {"a": EVENTS[0], "b": EVENTS[1]})
    for step in range(1, 40):
        instances, _ = cache.read(store, planned)  # type: ignore[arg-type]
        got = [list(x) for x in cache.layer_events()]
        fresh = LedgerCache()
        fresh.read(store, planned)  # type: ignore[arg-type]
        assert _alike(got, reference(instances))
        assert [[repr(e) for e in x] for x in got] == \
            [[repr(e) for e in x] for x in fresh.layer_events()]  # fmt: skip
        rows = [(lv, idx, q, event_to_dict(planned[lv][q]))
                for lv, idx in ([(0, step)] + ([(1, step // 2)] if step % 2 == 0 else []))
                for q in ("a", "b")]  # fmt: skip
        store.rows += rows
        store.head = str(step)
        cache.committed(store.head, rows)  # type: ignore[arg-type]
        assert cache._layers is not None  # (extended, not built again at the next run)
