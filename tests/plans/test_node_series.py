"""A :class:`~dpcr.plans.base.NodeSeries` gives :func:`~dpcr.plans.base.interval_series` (and the
estimates of the plans built on it) exactly the arrays a plain mapping of the same nodes gives,
whatever the order in which its nodes were added or replaced."""

from __future__ import annotations

import numpy as np
import pytest

from dpcr.plans.base import Node, NodeSeries, interval_series
from dpcr.plans.dcr import DisjointRelease
from dpcr.plans.window import SlidingWindowRelease

DAY = 86_400_000_000


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _check(series: NodeSeries, plain: dict[Node, object], var: NodeSeries,
           plain_var: dict[Node, float], n: int) -> None:  # fmt: skip
    want = interval_series(plain, plain_var, n)  # type: ignore[arg-type]
    got = interval_series(series, var, n)
    assert _same(got[0], want[0]) and _same(got[1], want[1])
    assert all(series[k] is v for k, v in plain.items())


@pytest.mark.parametrize("keys", [0, 1, 3])  # 0: scalar values
@pytest.mark.parametrize("seed", range(6))
def test_random_orders_and_replacements(keys: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    series, var = NodeSeries(), NodeSeries()
    plain: dict[Node, object] = {}
    plain_var: dict[Node, float] = {}
    top = 0
    for _ in range(40):
        # nodes added in batches: mostly the next ones, sometimes out of order, a layer-1
        # node, or a value replaced
        batch = []
        for _ in range(int(rng.integers(1, 5))):
            r = rng.random()
            if r < 0.6:
                top += 1
                node = (0, top)
            elif r < 0.75:
                node = (0, top + int(rng.integers(2, 4)))
            elif r < 0.85:
                node = (1, int(rng.integers(0, 9)))
            else:
                node = (0, int(rng.integers(1, top + 2)))
            big = 2**62 if rng.random() < 0.1 else 10**6
            value = (int(rng.integers(-big, big)) if keys == 0 else
                     np.array(rng.integers(-big, big, size=keys), dtype=np.int64))  # fmt: skip
            batch.append((node, value))
        series.update(iter(batch))
        var.update({node: float(rng.random()) * 9 for node, _ in batch})
        plain.update(batch)
        plain_var.update({node: var[node] for node, _ in batch})
        n = 0
        while (0, n + 1) in plain and (0, n + 1) in plain_var:
            n += 1
        for m in {n // 2, n} - {0}:  # (n = 0 raises for a plain mapping too)
            _check(series, plain, var, plain_var, m)
    assert len(series) == len(plain) and set(series) == set(plain)


def test_unlike_shapes_read_the_mapping() -> None:
    series, var = NodeSeries(), NodeSeries()
    series.update({(0, 1): np.array([1, 2]), (0, 2): np.array([3, 4])})
    var.update({(0, 1): 1.0, (0, 2): 2.0})
    assert series.interval_rows(2) is not None
    series.update({(0, 3): np.array([5, 6, 7])})  # (a ragged series: as a plain mapping fails)
    var.update({(0, 3): 3.0})
    assert series.interval_rows(2) is None
    with pytest.raises(ValueError):
        interval_series(series, var, 3)
    got = interval_series(series, var, 2)
    assert _same(got[0], np.array([[1.0, 2.0], [3.0, 4.0]]))


def test_missing_nodes_raise_as_a_mapping_does() -> None:
    series, var = NodeSeries(), NodeSeries()
    series.update({(0, 1): np.array([1]), (0, 3): np.array([3])})
    var.update({(0, 1): 1.0, (0, 3): 1.0})
    with pytest.raises(KeyError):
        interval_series(series, var, 3)


@pytest.mark.parametrize("plan", [
    DisjointRelease(start=0, period=DAY, end=400 * DAY),
    SlidingWindowRelease(start=0, period=DAY, window=7 * DAY, end=400 * DAY),
], ids=["disjoint", "window"])  # fmt: skip
def test_a_growing_series_estimates_as_a_mapping(plan: object) -> None:
    """A session's rows: nodes added a day at a time, the estimate of every prefix."""
    rng = np.random.default_rng(7)
    series, var = NodeSeries(), NodeSeries()
    plain: dict[Node, np.ndarray] = {}
    plain_var: dict[Node, float] = {}
    for n in range(1, 366):
        node, value = (0, n), rng.integers(-1000, 1000, size=2)
        series.update([(node, value)])
        var.update({node: 2.0})
        plain[node], plain_var[node] = value, 2.0
        want = plan.estimate(plain, plain_var, n)  # type: ignore[attr-defined]
        got = plan.estimate(series, var, n)  # type: ignore[attr-defined]
        assert series.interval_rows(n) is not None and var.interval_rows(n) is not None
        for field in ("change", "estimate", "change_var", "estimate_var"):
            assert _same(getattr(got, field), getattr(want, field)), (n, field)
