"""A release keeps the events it started with: the store's events a few ulps from the plan's, or
the plan's mechanism with more noise (an earlier, looser calibration), are the ones new instances
of that layer are drawn with; any other event is refused."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent, nearly_equal
from dpcr.errors import StoreError
from dpcr.release._ledger import layers_to_draw


def _gauss(sigma2: Fraction, dimension: int = 1) -> DiscreteGaussianEvent:
    return DiscreteGaussianEvent(sigma2=sigma2, sensitivity2=Fraction(4), dimension=dimension)


PLANNED = ({"a": _gauss(Fraction(1445070387858889733, 1024))},
           {"a": _gauss(Fraction(7, 3))})  # fmt: skip


def test_the_stores_events_are_drawn_where_it_has_the_layer() -> None:
    stored = _gauss(Fraction(1445070387858957045, 1024))  # an older calibration, 5e-14 apart
    layers = layers_to_draw(PLANNED, {(0, 0): {"a": stored}, (0, 3): {"a": stored}})
    assert layers[0]["a"] is stored and layers[1]["a"] is PLANNED[1]["a"]


def test_a_noisier_earlier_calibration_is_kept() -> None:
    """The plan's mechanism with 2.4% more σ² (the zCDP calibration before the exact profile)
    is drawn with; the filter then checks the ledger's own events."""
    stored = _gauss(Fraction(1445070387858889733, 1000))
    layers = layers_to_draw(PLANNED, {(0, 0): {"a": stored}})
    assert layers[0]["a"] is stored


@pytest.mark.parametrize("stored", [
    _gauss(Fraction(1445070387858889733, 1050)),  # 2.5 % less noise
    DiscreteGaussianEvent(sigma2=Fraction(1445070387858889733, 1000), sensitivity2=Fraction(5)),
    _gauss(Fraction(1445070387858889733, 1024), dimension=2),
    DiscreteLaplaceEvent(scale=Fraction(3), sensitivity=Fraction(1)),
])  # fmt: skip
def test_other_events_are_refused(stored: object) -> None:
    with pytest.raises(StoreError, match="differs from the plan's"):
        layers_to_draw(PLANNED, {(0, 1): {"a": stored}})  # type: ignore[dict-item]


def test_instances_of_one_layer_must_agree() -> None:
    one, other = _gauss(Fraction(1445070387858957045, 1024)), PLANNED[0]["a"]
    assert nearly_equal(one, other) and one != other
    with pytest.raises(StoreError):
        layers_to_draw(PLANNED, {(0, 0): {"a": one}, (0, 1): {"a": other}})


def test_a_missing_query_is_refused() -> None:
    with pytest.raises(StoreError):
        layers_to_draw(PLANNED, {(1, 0): {}})


def test_a_stored_event_bounding_fewer_coordinates_takes_the_plans_count() -> None:
    """A stored discrete Gaussian that is the plan's but for a smaller dimension (an open-ended
    BLT's events before they counted every coordinate a unit moves) is accounted and drawn
    with the plan's dimension, the same object for every instance; a larger one stays refused
    (test_other_events_are_refused)."""
    from dpcr.release._ledger import raise_dimensions

    planned = ({"a": _gauss(Fraction(7, 3), dimension=12)},)
    old = _gauss(Fraction(7, 3), dimension=1)
    instances = {(0, 0): {"a": old}, (0, 1): {"a": old}}
    raise_dimensions(instances, planned)
    assert instances[(0, 0)]["a"] == planned[0]["a"]
    assert instances[(0, 0)]["a"] is instances[(0, 1)]["a"]
    assert layers_to_draw(planned, instances)[0]["a"] is instances[(0, 0)]["a"]
    with pytest.raises(StoreError):  # (without the raise, the stored event is refused)
        layers_to_draw(planned, {(0, 0): {"a": old}})


def test_each_pair_of_event_objects_is_compared_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A year of daily instances share one stored event: a run that reads the ledger compares
    it with the plan's once, not once per instance (the cost of a cron step grew with it)."""
    import dpcr.release._ledger as ledger

    calls: list[object] = []
    compare = ledger.at_least_as_noisy

    def counted(stored: object, planned: object) -> bool:
        calls.append(stored)
        return compare(stored, planned)  # type: ignore[arg-type]

    monkeypatch.setattr(ledger, "at_least_as_noisy", counted)
    stored = _gauss(Fraction(1445070387858957045, 1024))
    instances = {(0, i): {"a": stored} for i in range(365)} | {(1, 0): {"a": PLANNED[1]["a"]}}
    layers = layers_to_draw(PLANNED, instances)
    assert layers[0]["a"] is stored and len(calls) == 2
