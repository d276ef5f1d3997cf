"""Interval method 2 (:func:`dpcr.mechanisms.half_widths`, from characteristic functions) against
the exact computation: the very numbers of method 1 where that one is exact, the exact quantile
of wide integer rows, and for real weights a bound that holds against the exact distribution
(enumerated) and is within about 1 % of a standard deviation of the exact quantile."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.mechanisms import half_width, half_widths, noise_variance
from dpcr.mechanisms._intervals import _pmf


def _laplace(scale: str) -> DiscreteLaplaceEvent:
    return DiscreteLaplaceEvent(scale=Fraction(scale), sensitivity=Fraction(1))


def _gaussian(sigma2: str) -> DiscreteGaussianEvent:
    return DiscreteGaussianEvent(sigma2=Fraction(sigma2), sensitivity2=Fraction(1))


def _integer_rows() -> list[list[tuple[float, object, int]]]:
    rows: list[list[tuple[float, object, int]]] = []
    for scale in ("1/1024", "1/2", "2", "37/3", "18", "300", "1800"):
        for c in (1, 2, 3, 5, 17, 64, 365):
            rows.append([(1.0, _laplace(scale), c)])
    for sigma2 in ("1/100", "1/5", "3", "250", "5000"):
        for c in (1, 2, 7, 100):
            rows.append([(1.0, _gaussian(sigma2), c)])
    e18, e30 = _laplace("18"), _laplace("30")
    rows += [
        [(1.0, e18, 3), (1.0, e30, 4)],  # a plain tree's layers with their own noise
        [(-1.0, e18, 2), (1.0, e30, 1)],
        [(1.0, e18, 3), (2.0, e30, 4)],  # a weight past 1: every frequency
        [(1.0, _gaussian("3"), 2), (1.0, e18, 1)],
        [(1.0, e18, 1), (3.0, _laplace("1/3"), 2)],
    ]
    return rows


def test_integer_rows_are_method_1s_exact_quantiles() -> None:
    """Wherever :func:`half_width` computes the exact quantile, method 2 gives the same number
    (the same criterion: the smallest integer g with P(Y > g) + 1e-10 + 1e-9 <= 2.5 %)."""
    rows = _integer_rows()
    new = half_widths(rows)
    compared = 0
    for row, iv in zip(rows, new, strict=True):
        old = half_width(row)
        assert iv.std == pytest.approx(old.std, rel=1e-12)
        if old.method == "exact":
            assert iv.method == "exact" and iv.half_width == old.half_width, (row, old, iv)
            assert iv.coverage == pytest.approx(old.coverage, abs=1e-8)
            compared += 1
        elif old.method == "normal":
            assert iv == old
        else:  # wide Laplace rows: method 1 had a grid bound, method 2 the exact quantile
            assert iv.method == "exact" and iv.half_width <= old.half_width
    assert compared >= 60


def test_wide_integer_rows_are_exact() -> None:
    """Rows too wide for method 1's exact window: the exact quantile, checked against the
    closed form of one discrete Laplace node (P(X > u) = q^(u+1) / (1 + q)) and a convolution
    (FFT) of 2 and of 20 nodes."""
    for scale in (10**5, 3 * 10**6):
        q = math.exp(-1 / scale)
        want = math.ceil(math.log(0.025 * (1 + q)) / math.log(q)) - 1
        (iv,) = half_widths([[(1.0, _laplace(str(scale)), 1)]])
        assert iv.method == "exact" and iv.half_width == want
    e = _laplace("3000")
    k, p = _pmf(e)
    for c in (2, 20):
        size = 1 << math.ceil(math.log2(c * (2 * k + 1)))
        conv = np.fft.irfft(np.fft.rfft(p, size) ** c, size)[: c * (2 * k) + 1]
        above = np.cumsum(conv[::-1])[::-1]  # above[i] = P(Y >= i - c k)
        g = next(g for g in range(10**6) if above[g + 1 + c * k] + 1.1e-9 <= 0.025)
        (iv,) = half_widths([[(1.0, e, c)]])
        assert iv.method == "exact" and iv.half_width == g, (c, iv, g)


def _group(w: float, e: object, c: int) -> tuple[np.ndarray, np.ndarray]:
    """The values of ``w (X_1 + ... + X_c)`` and their probabilities (pmfs to 1e-13)."""
    k, p = _pmf(e)  # type: ignore[arg-type]
    conv = p
    for _ in range(c - 1):
        conv = np.convolve(conv, p)
    return (np.arange(conv.size) - c * k) * w, conv


def _exact_tail(row: list[tuple[float, object, int]], u: float) -> float:
    """P(Y > u), exactly (up to the pmfs' 1e-13): the widest group's tail by a sorted sum, the
    others enumerated."""
    groups = sorted((_group(*t) for t in row), key=lambda g: g[0].size)
    *rest, (values, probs) = groups
    order = np.argsort(values)
    values, above = values[order], np.cumsum(probs[order][::-1])[::-1]
    base, weight = np.array([0.0]), np.array([1.0])
    for v, q in rest:
        base, weight = np.add.outer(base, v).ravel(), np.outer(weight, q).ravel()
    idx = np.searchsorted(values, u - base, side="right")  # first value > u - base
    tail = np.where(idx < values.size, above[np.minimum(idx, values.size - 1)], 0.0)
    return float(weight @ tail)


@pytest.mark.parametrize(
    "row",
    [
        [(1.0, _laplace("18"), 1), (0.37, _laplace("18"), 2)],
        [(8 / 9, _laplace("18"), 1), (1 / 9, _laplace("18"), 8)],  # a Honaker layer-1 node
        [(1.0, _laplace("5"), 2), (64 / 73, _laplace("5"), 1), (8 / 73, _laplace("5"), 3)],
        [(0.5, _laplace("2"), 1), (0.3, _laplace("2"), 2)],
        [(0.7, _laplace("18"), 1)],
        [(0.999, _laplace("18"), 1)],
        [(1e-3, _laplace("18"), 1), (1.0, _laplace("5"), 1)],
        [(0.25, _laplace("2"), 3), (0.75, _laplace("5"), 1)],
        [(0.93, _gaussian("20"), 2), (0.2, _gaussian("20"), 3)],
        [(0.6, _gaussian("1/3"), 2), (1.0, _laplace("1"), 1)],
        [(0.8, _gaussian("2000"), 1), (0.3, _gaussian("2000"), 2)],  # far out, φ underflows
    ],
)
def test_real_weights_are_bounded_against_the_exact_distribution(
    row: list[tuple[float, object, int]],
) -> None:
    """Real weights (the ``smooth`` method): the exact P(Y > u) is at most what the interval
    claims (and the claim at most 2.5 %); u is at most 1.5 % of a standard deviation above the
    exact quantile, and never above method 1's."""
    (iv,) = half_widths([row])
    assert iv.method == "smooth"
    claimed = (1 - iv.coverage) / 2
    assert _exact_tail(row, iv.half_width) <= claimed + 1e-12 and claimed <= 0.025
    std = math.sqrt(sum(c * w * w * noise_variance(e) for w, e, c in row))  # type: ignore[arg-type]
    assert iv.std == pytest.approx(std, rel=1e-12)
    # the exact quantile, to 1e-6 standard deviations
    lo, hi = 0.0, iv.half_width
    while hi - lo > 1e-6 * std:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _exact_tail(row, mid) <= 0.025 else (mid, hi)
    assert iv.half_width <= hi + 0.015 * std
    assert iv.half_width <= half_width(row).half_width  # type: ignore[arg-type]


def test_random_rows_are_bounded_against_the_exact_distribution() -> None:
    """Random small rows of Laplace and Gaussian nodes, integer and real weights, computed in
    one batch: every interval's claimed tail holds against the enumerated distribution, integer
    rows are method 1's exact quantiles, and real-weighted rows are within 2 % of a standard
    deviation of the exact quantile."""
    rnd = random.Random(2)
    rows: list[list[tuple[float, object, int]]] = []
    while len(rows) < 16:
        row = []
        size = 1
        for _ in range(rnd.randint(1, 3)):
            e = (_laplace(f"{rnd.randint(1, 60)}/{rnd.randint(1, 4)}") if rnd.random() < 0.6
                 else _gaussian(f"{rnd.randint(1, 200)}/{rnd.randint(1, 4)}"))  # fmt: skip
            c = rnd.randint(1, 3)
            size *= (2 * _pmf(e)[0] + 1) * c
            row.append((rnd.choice([1.0, round(rnd.uniform(0.05, 1.5), 3)]), e, c))
        if size <= 10**6:
            rows.append(row)
    for row, iv in zip(rows, half_widths(rows), strict=True):
        claimed = (1 - iv.coverage) / 2
        assert _exact_tail(row, iv.half_width) <= claimed + 1e-12 and claimed <= 0.025
        if iv.method == "exact":
            assert iv.half_width == half_width(row).half_width  # type: ignore[arg-type]
        else:
            assert iv.method == "smooth"
            std = iv.std
            assert _exact_tail(row, iv.half_width - 0.02 * std) > 0.025, (row, iv)


def test_a_rows_interval_does_not_depend_on_the_rows_computed_with_it() -> None:
    """Published intervals depend on the plan and the noise only: a row computed alone, in a
    batch, or in another batch gets the same half-width (rows share frequencies only with rows
    of the same smoothing and period, which depend on each row alone)."""
    e, g = _laplace("18"), _gaussian("40")
    rows = [[(1.0, e, c)] for c in range(1, 30)]
    rows += [[(0.3 + 0.01 * c, e, c), (1.0, e, 1)] for c in range(1, 30)]
    rows += [[(0.5, g, c), (0.9, e, 2)] for c in range(1, 12)]
    batch = half_widths(rows)
    other = half_widths([*rows[::3], [(0.77, e, 40), (1.0, g, 3)]])
    for row, iv in zip(rows, batch, strict=True):
        (alone,) = half_widths([row])
        assert (iv.half_width, iv.method) == (alone.half_width, alone.method), row
        assert iv.coverage == pytest.approx(alone.coverage, abs=1e-12)
    for row, iv in zip(rows[::3], other, strict=False):
        assert iv.half_width == half_widths([row])[0].half_width
    assert half_widths([]) == []
    assert half_widths([[]])[0].half_width == 0.0


def test_noise_of_almost_no_spread_gets_a_bound_not_an_error() -> None:
    """A Honaker-weighted row (weights off the integers) of discrete Laplace nodes with scale
    1/600 (P[noise != 0] < e^-300, std about 1e-111 after weighting): its smoothing would need
    more frequencies than any class may use, so the row falls back to the Chernoff bound, which
    is still an upper bound of the quantile (0: the noise is 0 but with negligible mass)."""
    e = _laplace(str(Fraction(1, 600)))
    row = [(0.4286, e, 3), (0.1429, e, 4), (1.0, e, 1)]
    (iv,) = half_widths([row])
    assert iv.method in ("chernoff", "exact", "smooth")
    assert 0.0 <= iv.half_width <= 1.0 and iv.coverage >= 0.95


def test_pairs_are_those_of_unique_rows() -> None:
    """:meth:`NoiseGroups.pairs` gives what ``np.unique(..., axis=0, return_inverse=True)`` of
    the stacked ``(|w|, event)`` rows gives (the order and indices the tables rely on), on
    random groups with repeated, rounded and tiny weights, and on none."""
    from dpcr.mechanisms._fourier import NoiseGroups

    rng = np.random.default_rng(31)
    for trial in range(200):
        n = int(rng.integers(0, 2000))
        w = np.abs(rng.choice(rng.normal(size=int(rng.integers(1, 40))), n))
        if trial % 3 == 0:
            w = np.round(w * 4) / 4
        if trial % 5 == 0:
            w = w * 1e-300
        ev = rng.integers(0, int(rng.integers(1, 6)), n).astype(np.int64)
        groups = NoiseGroups(n, np.zeros(n, dtype=np.int64), w, np.ones(n), ev, [])
        keys_w, keys_ev, pair_of = groups.pairs()
        if not n:
            assert pair_of.size == keys_w.size == keys_ev.size == 0
            continue
        keys, inverse = np.unique(np.stack([w, ev.astype(np.float64)], axis=1), axis=0,
                                  return_inverse=True)  # fmt: skip
        assert np.array_equal(pair_of, inverse.reshape(-1))
        assert np.array_equal(keys_w, keys[:, 0])
        assert np.array_equal(keys_ev, keys[:, 1].astype(np.int64))
