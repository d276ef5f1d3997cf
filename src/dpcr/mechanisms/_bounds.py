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


def chernoff_many(groups: NoiseGroups, p: float, extra_var: np.ndarray | None = None) -> np.ndarray:
    """Per row ``i``, ``u`` with ``P(Y_i + Z_i >= u) <= p``, ``Z_i ~ N(0, extra_var[i])``
    (default 0): ``min_t (Σ c log E e^{t w X} + t² v / 2 + log(1/p)) / t`` over the values
    ``t = 2^(j/16)`` of :data:`LADDER` near the row's best (any ``t`` gives a valid bound): from
    a quarter to 1.5 times its Gaussian optimum, and from 0.3 times the edge of its discrete
    Laplace moment generating function up to it. Which values a row tries depends on the row
    alone (never on the other rows of the call), and each distinct ``(|w|, event)`` is
    evaluated once per value: a row's sums are one matrix product."""
    n = groups.rows
    extra = np.zeros(n) if extra_var is None else np.asarray(extra_var, dtype=np.float64)
    # the variance the moment bounds use (a discrete Gaussian's is its σ², at least its
    # variance): the Gaussian optimum t is sqrt(2 log(1/p)) over its root
    bound_var = np.where(groups.laplace, groups.variance, groups.parameter)[groups.ev]
    sd = np.sqrt(groups.per_row(groups.c * groups.w * groups.w * bound_var) + extra)
    edge = np.full(n, np.inf)  # the MGF of w X exists for t < 1 / (scale |w|)
    lap = groups.laplace[groups.ev]
    np.minimum.at(edge, groups.row[lap], groups.parameter[groups.ev[lap]] / groups.w[lap])
    out = np.zeros(n)
    live = np.flatnonzero(sd > 0)
    if not live.size:
        return out
    with np.errstate(divide="ignore"):
        gauss = math.sqrt(2 * math.log(1 / p)) / sd[live]
        lo_g = np.ceil(LADDER * np.log2(0.25 * gauss))
        hi_g = np.floor(LADDER * np.log2(1.5 * gauss))
        lo_e = np.ceil(LADDER * np.log2(0.3 * edge[live]))
        hi_e = np.ceil(LADDER * np.log2(edge[live])) - 1  # 2^(j/16) < edge
    finite = np.isfinite(edge[live])
    j_lo = int(min(lo_g.min(), lo_e[finite].min() if finite.any() else np.inf))
    j_hi = int(max(hi_g.max(), hi_e[finite].max() if finite.any() else -np.inf))
    js = np.arange(j_lo, j_hi + 1, dtype=np.float64)
    t = 2.0 ** (js / LADDER)
    pair_of, pairs = _pairs(groups)
    counts = np.zeros((n, len(pairs)))
    np.add.at(counts, (groups.row, pair_of), groups.c)
    table = np.stack([_log_mgf(groups.events[e], w * t) for w, e in pairs]) if pairs \
        else np.zeros((0, t.size))
    table = np.minimum(table, 1e300)  # (past an edge +inf; 0 copies x inf would be NaN)
    for first in range(0, live.size, 4096):
        rows = live[first : first + 4096]
        r = slice(first, first + rows.size)
        total = counts[rows] @ table + extra[rows, None] * t * t / 2
        mine = ((js >= lo_g[r, None]) & (js <= hi_g[r, None])) | (
            finite[r, None] & (js >= lo_e[r, None]) & (js <= hi_e[r, None]))
        with np.errstate(invalid="ignore", over="ignore"):
            u = (total + math.log(1 / p)) / t
        ok = mine & np.isfinite(u) & (total < 1e299)
        out[rows] = np.where(ok, u, np.inf).min(axis=1)
    return out


#: Chernoff bounds try ``t = 2^(j / LADDER)`` for integers ``j``
LADDER = 16


def _pairs(groups: NoiseGroups) -> tuple[np.ndarray, list[tuple[float, int]]]:
    """Each group's pair (its ``|w|`` and event), and the distinct pairs."""
    if not groups.w.size:
        return np.zeros(0, dtype=np.int64), []
    w, ev, pair_of = groups.pairs()
    return pair_of, [(float(a), int(e)) for a, e in zip(w, ev, strict=True)]


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
    choice, so the same numbers. ``reach`` (a Chernoff bound over other values of ``t``)
    decides where it is clear."""
    if 2 * reach + 3 <= 0.8 * MAX_CELLS:
        return True
    if 2 * reach + 3 > 1.25 * MAX_CELLS:
        return False
    return 2 * chernoff(terms, ALIAS / 2) + 3 <= MAX_CELLS


def _smooth(groups: NoiseGroups, std: np.ndarray, picked: Sequence[int], tail: float,
            done: Callable[[int], None]) -> dict[int, tuple[float, float]]:
    """The ``smooth`` rows, by classes that share one smoothing ``s`` and one period ``P``:
    each row's ``s`` is ``SMOOTH`` times its std over ``ZS + 1/2``, rounded down to a power of
    ``2^(1/4)``, its ``P`` twice its Chernoff bound at that ``s``, rounded up to one; so a
    row's interval depends on the row alone, whichever rows are computed with it."""
    out: dict[int, tuple[float, float]] = {}
    if not picked:
        return out
    rows = np.asarray(picked, dtype=np.int64)
    level = np.floor(4 * np.log2(SMOOTH * std[rows] / (ZS + 0.5)))
    s_row = 2.0 ** (level / 4)
    reach = chernoff_many(groups.take(rows.tolist()), SMOOTH_CUT, s_row * s_row)
    p_level = np.ceil(4 * np.log2(2 * reach))
    finished = 0
    for key in sorted(set(zip(level.tolist(), p_level.tolist(), strict=True))):
        members = rows[(level == key[0]) & (p_level == key[1])].tolist()
        s = 2.0 ** (key[0] / 4)
        found = smooth_quantiles(groups.take(members), tail=tail, s=s,
                                 period=2.0 ** (key[1] / 4),
                                 start=[2 * float(std[j]) for j in members])
        # (a row whose window misses the tail: the Chernoff fallback)
        out.update((j, hit) for j, hit in zip(members, found, strict=True) if hit is not None)
        finished += len(members)
        done(finished)
    return out
