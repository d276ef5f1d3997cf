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
* ``smooth`` -- real weights otherwise: :func:`~dpcr.mechanisms._smooth.smooth_quantiles` with
  a smoothing of ``SMOOTH`` times the row's standard deviation over ``ZS + 1/2``, so the slack
  over the exact quantile is about ``SMOOTH`` standard deviations (docs/uncertainty.md);
* ``chernoff`` -- where the above fail (no window reaches the tail): the Chernoff bound.

The cost is per distinct row and O(groups) per frequency, never a convolution per node: rows
with many nodes cost what rows with few cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.mechanisms._fourier import NoiseGroups, lattice_quantiles
from dpcr.mechanisms._intervals import ALIAS, MAX_CELLS, Interval, _esseen, _log_mgf, chernoff
from dpcr.mechanisms._smooth import SMOOTH_CUT, ZS, smooth_quantiles

__all__ = ["SMOOTH", "chernoff_many", "group_half_widths", "half_widths"]

Event = DiscreteLaplaceEvent | DiscreteGaussianEvent
Term = tuple[float, Event, int]

#: the ``smooth`` method's slack over the exact quantile, in standard deviations (about)
SMOOTH = 0.01
#: rows of one smoothing class have standard deviations within this factor
CLASS_RATIO = 1.25
#: where Chernoff bounds look for their best ``t``: around the Gaussian optimum, and towards the
#: edge of the discrete Laplace's moment generating function (heavy rows have it there)
_AROUND = np.geomspace(0.25, 1.5, 10)
_EDGE = np.array([0.3, 0.5, 0.7, 0.85, 0.95, 0.999])


def chernoff_many(groups: NoiseGroups, p: float, extra_var: np.ndarray | None = None) -> np.ndarray:
    """Per row ``i``, ``u`` with ``P(Y_i + Z_i >= u) <= p``, ``Z_i ~ N(0, extra_var[i])``
    (default 0): ``min_t (Σ c log E e^{t w X} + t² v / 2 + log(1/p)) / t`` over 16 values of
    ``t`` near the best (any ``t`` gives a valid bound), every row at once."""
    n = groups.rows
    extra = np.zeros(n) if extra_var is None else np.asarray(extra_var, dtype=np.float64)
    # the variance the moment bounds use (a discrete Gaussian's is its σ², at least its
    # variance): the Gaussian optimum t is sqrt(2 log(1/p)) over its root
    bound_var = np.where(groups.laplace, groups.variance, groups.parameter)[groups.ev]
    sd = np.sqrt(groups.per_row(groups.c * groups.w * groups.w * bound_var) + extra)
    edge = np.full(n, np.inf)  # the MGF of w X exists for t < 1 / (scale |w|)
    lap = groups.laplace[groups.ev]
    np.minimum.at(edge, groups.row[lap], groups.parameter[groups.ev[lap]] / groups.w[lap])
    with np.errstate(divide="ignore", invalid="ignore"):
        gauss = math.sqrt(2 * math.log(1 / p)) / sd
    t = np.concatenate([gauss[:, None] * _AROUND,
                        np.where(np.isfinite(edge), edge, gauss)[:, None] * _EDGE], axis=1)
    t = np.where(t < edge[:, None], t, edge[:, None] * 0.999)
    total = extra[:, None] * t * t / 2
    for k, e in enumerate(groups.events):
        mask = groups.ev == k
        idx = groups.row[mask]  # ascending
        if not idx.size:
            continue
        part = groups.c[mask, None] * _log_mgf(e, groups.w[mask, None] * t[idx])
        starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
        total[idx[starts]] += np.add.reduceat(part, starts, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = (total + math.log(1 / p)) / t
    out: np.ndarray = np.where(sd > 0, np.where(np.isfinite(u), u, np.inf).min(axis=1), 0.0)
    return out


def half_widths(rows: Sequence[Sequence[Term]], *, level: float = 0.95) -> list[Interval]:
    """The interval of every row (module docstring); ``rows[i]``: its ``(w, event, c)``."""
    return group_half_widths(NoiseGroups.of_terms(rows), level=level)


def group_half_widths(groups: NoiseGroups, *, level: float = 0.95,
                      done: Callable[[int, int], None] | None = None) -> list[Interval]:
    """:func:`half_widths` of the rows of ``groups``; ``done(rows, total)`` as they are."""
    report = done if done is not None else (lambda _d, _t: None)
    tail = (1 - level) / 2
    out: list[Interval | None] = [None] * groups.rows
    var_all = groups.var()
    live = np.flatnonzero(var_all > 0).tolist()
    for i in set(range(groups.rows)) - set(live):  # no noise (or less than a float holds)
        out[i] = Interval(half_width=0.0, coverage=1.0, std=0.0, method="exact")
    groups = groups.take(live)
    var = var_all[live]
    std = np.sqrt(var)
    reach = chernoff_many(groups, ALIAS / 2)
    integer = groups.per_row((groups.w != np.round(groups.w)).astype(np.float64)) == 0
    normal = _normal_many(groups, tail, var)
    lattice: list[int] = []
    smooth: list[int] = []
    for j in range(groups.rows):
        if normal[j] is not None and not (integer[j] and _fits(groups.terms(j), reach[j])):
            out[live[j]] = normal[j]
        else:
            (lattice if integer[j] else smooth).append(j)
    report(groups.rows - len(lattice) - len(smooth), groups.rows)
    found = lattice_quantiles(groups.take(lattice), tail=tail, reach=reach[lattice].tolist(),
                              margin=ALIAS + 1e-9)  # fmt: skip
    report(groups.rows - len(smooth), groups.rows)
    for j, hit in zip(lattice, found, strict=True):
        if hit is not None:
            out[live[j]] = Interval(half_width=float(hit[0]), coverage=1 - 2 * hit[1],
                                    std=float(std[j]), method="exact")
    def smoothed(rows: int) -> None:
        report(groups.rows - len(smooth) + rows, groups.rows)

    for j, (u, bound) in _smooth(groups, std, smooth, tail, smoothed).items():
        out[live[j]] = Interval(half_width=u, coverage=1 - 2 * bound, std=float(std[j]),
                                method="smooth")
    failed = [j for j in range(groups.rows) if out[live[j]] is None]
    if failed:  # (no window reached the tail: the Chernoff bound itself)
        bounds = chernoff_many(groups.take(failed), tail)
        for j, u in zip(failed, bounds, strict=True):
            out[live[j]] = Interval(half_width=float(u), coverage=level, std=float(std[j]),
                                    method="chernoff")
    return [iv for iv in out if iv is not None]


def _normal_many(groups: NoiseGroups, tail: float, var: np.ndarray) -> list[Interval | None]:
    """Per row, :func:`dpcr.mechanisms._intervals._normal` from its aggregates: rows of
    discrete Gaussian nodes with σ² >= 9 only (the same sums, in the same order)."""
    sigma2 = groups.parameter[groups.ev]
    gauss = ~groups.laplace[groups.ev]
    eligible = groups.per_row((~gauss | (sigma2 < 9)).astype(np.float64)) == 0
    if not eligible.any():
        return [None] * groups.rows
    s2 = groups.per_row(np.where(gauss, groups.c * groups.w * groups.w * sigma2, 0.0))
    m = groups.per_row(groups.c)
    wmax = np.zeros(groups.rows)
    np.maximum.at(wmax, groups.row, groups.w)
    smin2 = np.full(groups.rows, np.inf)
    np.minimum.at(smin2, groups.row, sigma2)
    return [
        _esseen(float(s2[j]), float(var[j]), int(m[j]), float(wmax[j]), float(smin2[j]), tail)
        if eligible[j] else None
        for j in range(groups.rows)
    ]


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


def _smooth(groups: NoiseGroups, std: np.ndarray, picked: Sequence[int], tail: float,
            done: Callable[[int], None]) -> dict[int, tuple[float, float]]:
    """The ``smooth`` rows, in classes of standard deviations within :data:`CLASS_RATIO`: one
    smoothing (the class's smallest std times ``SMOOTH / (ZS + 1/2)``) and one period each."""
    out: dict[int, tuple[float, float]] = {}
    order = sorted(picked, key=lambda j: float(std[j]))
    first = 0
    while first < len(order):
        low = float(std[order[first]])
        last = first
        while last < len(order) and std[order[last]] <= CLASS_RATIO * low:
            last += 1
        members = order[first:last]
        first = last
        s = SMOOTH * low / (ZS + 0.5)
        rows = groups.take(members)
        reach = chernoff_many(rows, SMOOTH_CUT, np.full(len(members), s * s))
        try:
            found = smooth_quantiles(rows, tail=tail, s=s, period=2 * float(np.max(reach)),
                                     start=[2 * float(std[j]) for j in members])
        except ValueError:  # the window misses the tail: the Chernoff fallback
            found = []
        out.update(zip(members, found, strict=False))
        done(last)
    return out
