"""The 95 % intervals of many rows at once, from characteristic functions (interval method 2).

A row is ``Y = Σ_g w_g (X_g1 + ... + X_gc)``: groups ``(w, event, c)`` of independent nodes.
:func:`half_widths` takes every row of a release and gives each the half-width ``u`` with
``P(|Y| > u) <= 1 - level``, choosing per row (docs/uncertainty.md):

* ``exact`` -- integer weights: the exact quantile (the smallest integer ``g`` with
  ``P(Y > g) + ALIAS + 1e-9 <= tail``, the criterion of :func:`dpcr.mechanisms.half_width`, so
  the same numbers wherever that one computed them exactly), by
  :func:`~dpcr.mechanisms._fourier.lattice_quantiles`;
* ``normal`` -- where :func:`~dpcr.mechanisms.half_width` takes it (wide discrete Gaussians):
  the same numbers;
* ``smooth`` -- real weights otherwise: :func:`~dpcr.mechanisms._fourier.smooth_quantiles` with
  a smoothing of ``SMOOTH`` times the row's standard deviation over ``ZS + 1/2``, so the slack
  over the exact quantile is at most about ``SMOOTH`` standard deviations;
* ``chernoff`` -- where the above fail (no window reaches the tail): the Chernoff bound.

The cost is per distinct row and O(groups) per frequency, never a convolution per node: rows
with many nodes cost what rows with few cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.mechanisms._fourier import SMOOTH_CUT, ZS, lattice_quantiles, smooth_quantiles
from dpcr.mechanisms._intervals import ALIAS, MAX_CELLS, Interval, _log_mgf, _normal, chernoff
from dpcr.mechanisms._noise import noise_variance

__all__ = ["SMOOTH", "half_widths"]

Event = DiscreteLaplaceEvent | DiscreteGaussianEvent
Term = tuple[float, Event, int]

#: the ``smooth`` method's slack over the exact quantile, in standard deviations (about)
SMOOTH = 0.01
#: rows of one smoothing class have standard deviations within this factor
CLASS_RATIO = 1.25


_VARIANCE: dict[Event, float] = {}


def _variance(e: Event) -> float:
    """``noise_variance(e)``, remembered (it converts exact fractions)."""
    v = _VARIANCE.get(e)
    if v is None:
        v = _VARIANCE[e] = noise_variance(e)
    return v


def _std(terms: Sequence[Term]) -> float:
    return math.sqrt(sum(c * w * w * _variance(e) for w, e, c in terms))


#: where Chernoff bounds look for their best ``t``: around the Gaussian optimum, and towards the
#: edge of the discrete Laplace's moment generating function (heavy rows have it there)
_AROUND = np.geomspace(0.25, 1.5, 10)
_EDGE = np.array([0.3, 0.5, 0.7, 0.85, 0.95, 0.999])


def chernoff_many(rows: Sequence[Sequence[Term]], p: float,
                  extra_var: Sequence[float] | None = None) -> np.ndarray:
    """Per row ``i``, ``u`` with ``P(Y_i + Z_i >= u) <= p``, ``Z_i ~ N(0, extra_var[i])``
    (default 0): ``min_t (Σ c log E e^{t w X} + t² v / 2 + log(1/p)) / t`` over 16 values of
    ``t`` near the best (any ``t`` gives a valid bound), every row at once."""
    n = len(rows)
    extra = np.zeros(n) if extra_var is None else np.asarray(extra_var, dtype=np.float64)
    # the variance the moment bounds use (a discrete Gaussian's is its σ², at least its
    # variance): the Gaussian optimum t is sqrt(2 log(1/p)) over its root
    sd = np.sqrt(np.array([sum(c * w * w * _mgf_variance(e) for w, e, c in row) for row in rows])
                 + extra)
    edge = np.full(n, np.inf)
    flat: dict[Event, list[tuple[int, float, int]]] = {}
    for i, terms in enumerate(rows):
        for w, e, c in terms:
            flat.setdefault(e, []).append((i, abs(w), c))
            if isinstance(e, DiscreteLaplaceEvent):  # the MGF exists for |w t| < 1 / scale
                edge[i] = min(edge[i], 1 / (float(e.scale) * abs(w)))
    with np.errstate(divide="ignore", invalid="ignore"):
        gauss = math.sqrt(2 * math.log(1 / p)) / sd
    t = np.concatenate([gauss[:, None] * _AROUND, np.where(
        np.isfinite(edge), edge, gauss)[:, None] * _EDGE], axis=1)
    t = np.where(t < edge[:, None], t, edge[:, None] * 0.999)
    total = extra[:, None] * t * t / 2
    for e, items in flat.items():
        idx = np.array([i for i, _, _ in items])  # ascending: rows were walked in order
        ws = np.array([x for _, x, _ in items])
        cs = np.array([x for _, _, x in items], dtype=np.float64)
        part = cs[:, None] * _log_mgf(e, ws[:, None] * t[idx])
        starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
        total[idx[starts]] += np.add.reduceat(part, starts, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = (total + math.log(1 / p)) / t
    out: np.ndarray = np.where(sd > 0, np.where(np.isfinite(u), u, np.inf).min(axis=1), 0.0)
    return out


def _mgf_variance(e: Event) -> float:
    return float(e.sigma2) if isinstance(e, DiscreteGaussianEvent) else _variance(e)


def half_widths(rows: Sequence[Sequence[Term]], *, level: float = 0.95) -> list[Interval]:
    """The interval of every row (module docstring); ``rows[i]``: its ``(w, event, c)``."""
    tail = (1 - level) / 2
    clean = [[(float(w), e, int(c)) for w, e, c in row if w != 0 and c > 0] for row in rows]
    out: list[Interval | None] = [None] * len(clean)
    live = []
    for i, row in enumerate(clean):
        if row and _std(row) > 0:
            live.append(i)
        else:  # no noise (or less than a float holds): the value itself
            out[i] = Interval(half_width=0.0, coverage=1.0, std=0.0, method="exact")
    terms = [clean[i] for i in live]
    std = [_std(row) for row in terms]
    reach = chernoff_many(terms, ALIAS / 2) if terms else np.zeros(0)
    lattice: list[int] = []
    smooth: list[int] = []
    for j, row in enumerate(terms):
        integer = all(w.is_integer() for w, _, _ in row)
        if not (integer and _fits(row, float(reach[j]))):
            normal = _normal(row, tail)
            if normal is not None:
                out[live[j]] = normal
                continue
        (lattice if integer else smooth).append(j)
    found = lattice_quantiles([terms[j] for j in lattice], tail=tail,
                              reach=[float(reach[j]) for j in lattice], margin=ALIAS + 1e-9)
    for j, hit in zip(lattice, found, strict=True):
        if hit is not None:
            out[live[j]] = Interval(half_width=float(hit[0]), coverage=1 - 2 * hit[1],
                                    std=std[j], method="exact")
    for j, (u, bound) in _smooth(terms, std, smooth, tail).items():
        out[live[j]] = Interval(half_width=u, coverage=1 - 2 * bound, std=std[j], method="smooth")
    failed = [j for j in range(len(terms)) if out[live[j]] is None]
    if failed:  # (no window reached the tail: the Chernoff bound itself)
        bounds = chernoff_many([terms[j] for j in failed], tail)
        for j, u in zip(failed, bounds, strict=True):
            out[live[j]] = Interval(half_width=float(u), coverage=level, std=std[j],
                                    method="chernoff")
    return [iv for iv in out if iv is not None]


def _fits(terms: Sequence[Term], reach: float) -> bool:
    """Whether :func:`dpcr.mechanisms.half_width` computes the row exactly (its window, from
    its own Chernoff bound, within ``MAX_CELLS``) rather than by the normal method: the same
    choice, so the same numbers. ``reach`` (a Chernoff bound over fewer ``t``, at least
    ``half_width``'s) decides where it is clear."""
    if 2 * reach + 3 <= MAX_CELLS:
        return True
    if 2 * reach + 3 > 1.25 * MAX_CELLS:
        return False
    return 2 * chernoff(terms, ALIAS / 2) + 3 <= MAX_CELLS


def _smooth(terms: Sequence[Sequence[Term]], std: Sequence[float], picked: Sequence[int],
            tail: float) -> dict[int, tuple[float, float]]:
    """The ``smooth`` rows, in classes of standard deviations within :data:`CLASS_RATIO`: one
    smoothing (the class's smallest std times ``SMOOTH / (ZS + 1/2)``) and one period each."""
    out: dict[int, tuple[float, float]] = {}
    order = sorted(picked, key=lambda j: std[j])
    first = 0
    while first < len(order):
        low = std[order[first]]
        last = first
        while last < len(order) and std[order[last]] <= CLASS_RATIO * low:
            last += 1
        members = order[first:last]
        first = last
        s = SMOOTH * low / (ZS + 0.5)
        reach = chernoff_many([terms[j] for j in members], SMOOTH_CUT, [s * s] * len(members))
        try:
            found = smooth_quantiles([terms[j] for j in members], tail=tail, s=s,
                                     period=2 * float(np.max(reach)),
                                     start=[2 * std[j] for j in members])
        except ValueError:  # the window misses the tail: the Chernoff fallback
            continue
        out.update(zip(members, found, strict=True))
    return out
