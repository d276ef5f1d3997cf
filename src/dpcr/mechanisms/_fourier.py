"""Characteristic functions of weighted sums of discrete Laplace / Gaussian noise, and the exact
95 % quantile of integer-weighted ones.

``Y = Σ_g w_g (X_g1 + ... + X_gc)``: groups of ``c`` independent copies of one node's noise with
weight ``w``. A node's characteristic function is known in closed form (discrete Laplace,
``q = e^{-1/scale}``: ``φ(θ) = 1 / (1 + 4q sin²(θ/2) / (1 - q)²)``; discrete Gaussian: by
Poisson summation), so ``φ_Y = Π_g φ_g(w_g θ)^c`` costs O(groups) per frequency, whatever the
number of nodes (:class:`NoiseGroups` evaluates it for many rows at once). Both characteristic
functions are positive and decrease on ``[0, π]``.

:func:`lattice_quantiles` -- integer weights: ``Y`` lives on the integers. Folded onto the window
``[-J, J]`` (period ``P = 2J + 1``), its mass above ``g`` is the finite Fourier sum ``(J - g)/P -
(1/P) Σ_{k=1}^{J} φ_Y(θ_k) sin((g + 1/2) θ_k) / sin(θ_k / 2)``, ``θ_k = 2πk/P`` (each term at most
``|φ_Y(θ_k)| / 2k``), cut where the decreasing ``|φ_Y|`` leaves less than :data:`CUT` (unit
weights; every frequency otherwise). The folded mass is at least the true mass of ``(g, J]``, so
``P(Y > g) <= folded + P(Y > J)``. Real weights: :mod:`dpcr.mechanisms._smooth`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain

import numpy as np

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.mechanisms._noise import noise_variance

__all__ = ["CUT", "NoiseGroups", "fast_odd", "lattice_quantiles", "log_cf", "log_cf_sum"]

Event = DiscreteLaplaceEvent | DiscreteGaussianEvent
Term = tuple[float, Event, int]

#: the most the frequencies left out of a Fourier sum contribute
CUT = 1e-13


def log_cf(event: Event, theta: np.ndarray) -> np.ndarray:
    """``log φ(θ)`` of one node's noise (``φ > 0``: the noise is symmetric and both
    characteristic functions are positive), for ``θ >= 0``. Discrete Gaussian with ``σ² >= 1/2``:
    ``φ(θ) = Σ_j e^{-σ²(θ+2πj)²/2} / Σ_j e^{-σ²(2πj)²/2}`` over ``|j| <= 3`` (the terms left out
    are below ``e^{-24π²σ²} < 1e-100``); below, the sum over its support."""
    theta = np.asarray(theta, dtype=np.float64)
    if isinstance(event, DiscreteLaplaceEvent):
        a = 1.0 / float(event.scale)
        q, one_minus_q = math.exp(-a), -math.expm1(-a)
        ratio = 4.0 * q / (one_minus_q * one_minus_q)
        out: np.ndarray = -np.log1p(ratio * np.sin(theta / 2) ** 2)
        return out
    s2 = float(event.sigma2)
    if s2 < 0.5:
        k = np.arange(1, math.ceil(math.sqrt(2 * s2 * 745)) + 2, dtype=np.float64)
        weights = np.exp(-(k**2) / (2 * s2))
        num = 1.0 + 2.0 * np.cos(np.multiply.outer(theta, k)) @ weights
        small: np.ndarray = np.log(num / (1.0 + 2.0 * weights.sum()))
        return small
    t = np.remainder(theta + math.pi, 2 * math.pi) - math.pi  # period 2π
    js = np.arange(-3, 4, dtype=np.float64) * 2 * math.pi
    num = np.exp(-s2 * np.add.outer(t, js) ** 2 / 2).sum(axis=-1)
    den = float(np.exp(-s2 * js**2 / 2).sum())
    with np.errstate(divide="ignore"):  # far out, φ underflows to 0
        wide: np.ndarray = np.log(num / den)
    return wide


def log_cf_sum(terms: Sequence[Term], theta: np.ndarray) -> np.ndarray:
    """``log φ_Y(θ)``."""
    out = np.zeros(np.shape(theta))
    for w, e, c in terms:
        out += c * log_cf(e, abs(w) * np.asarray(theta))
    return out


def fast_odd(n: int) -> int:
    """The smallest odd ``3^a 5^b 7^c >= n``: an odd length numpy's FFT transforms fast.

    >>> [fast_odd(n) for n in (1, 2, 10, 100, 1000)]
    [1, 3, 15, 105, 1029]
    """
    best = 0
    p7 = 1
    while True:
        p57 = p7
        while True:
            p = p57
            while p < n:
                p *= 3
            best = p if not best else min(best, p)
            if p57 >= n:
                break
            p57 *= 5
        if p7 >= n:
            return best
        p7 *= 7


def _harmonic(a: int, b: int) -> float:
    """An upper bound on ``Σ_{k=a}^{b} 1/k`` (0 when ``b < a``)."""
    return 0.0 if b < a else 1.0 / a + math.log(b / a)


class NoiseGroups:
    """The groups ``(w, event, c)`` of many rows, flat: per group its ``row``, ``w`` (absolute:
    the noise is symmetric), ``c`` and ``ev`` (an index into ``events``), sorted by row; with
    each event's variance and parameter, so that sums over a row's groups are numpy reductions.
    :meth:`of` builds one from rows of ``(w, event, c)``; :meth:`terms` gives a row back."""

    def __init__(self, rows: int, row: np.ndarray, w: np.ndarray, c: np.ndarray,
                 ev: np.ndarray, events: Sequence[Event]) -> None:
        self.rows = rows
        self.row = row
        self.w = w
        self.c = c
        self.ev = ev
        self.events = list(events)
        self.variance = np.array([noise_variance(e) for e in self.events])
        self.laplace = np.array([isinstance(e, DiscreteLaplaceEvent) for e in self.events],
                                dtype=bool)  # fmt: skip
        #: per event: 1 / scale (discrete Laplace), sigma2 (discrete Gaussian)
        self.parameter = np.array([1 / float(e.scale) if isinstance(e, DiscreteLaplaceEvent)
                                   else float(e.sigma2) for e in self.events])  # fmt: skip

    @classmethod
    def of(cls, rows: Sequence[Sequence[tuple[float, int, int]]],
           events: Sequence[Event]) -> NoiseGroups:
        """Rows of ``(w, index into events, c)``; groups with ``w == 0`` or ``c <= 0`` are left
        out (they add no noise)."""
        sizes = np.fromiter((len(t) for t in rows), dtype=np.int64, count=len(rows))
        flat = np.array(list(chain.from_iterable(rows)), dtype=np.float64).reshape(-1, 3)
        row = np.repeat(np.arange(len(rows), dtype=np.int64), sizes)
        keep = (flat[:, 0] != 0) & (flat[:, 2] > 0)
        return cls(len(rows), row[keep], np.abs(flat[keep, 0]), flat[keep, 2],
                   flat[keep, 1].astype(np.int64), events)

    @classmethod
    def of_terms(cls, rows: Sequence[Sequence[Term]]) -> NoiseGroups:
        """Rows of ``(w, event, c)``."""
        index: dict[int, int] = {}
        events: list[Event] = []
        for terms in rows:
            for _, e, _ in terms:
                if id(e) not in index:
                    index[id(e)] = len(events)
                    events.append(e)
        return cls.of([[(w, index[id(e)], c) for w, e, c in t] for t in rows], events)

    def take(self, picked: Sequence[int]) -> NoiseGroups:
        """The rows ``picked``, in that order, as groups of their own."""
        new = np.full(self.rows, -1, dtype=np.int64)
        new[np.asarray(picked, dtype=np.int64)] = np.arange(len(picked))
        row = new[self.row]
        keep = np.flatnonzero(row >= 0)
        keep = keep[np.argsort(row[keep], kind="stable")]
        out = NoiseGroups.__new__(NoiseGroups)
        out.rows, out.row, out.w, out.c, out.ev = (len(picked), row[keep], self.w[keep],
                                                   self.c[keep], self.ev[keep])
        out.events, out.variance = self.events, self.variance
        out.laplace, out.parameter = self.laplace, self.parameter
        return out

    def terms(self, i: int) -> list[Term]:
        """Row ``i``'s groups as ``(w, event, c)``."""
        lo, hi = np.searchsorted(self.row, [i, i + 1])
        return [(float(self.w[j]), self.events[int(self.ev[j])], int(self.c[j]))
                for j in range(lo, hi)]  # fmt: skip

    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct ``(|w|, event)`` of the groups, sorted by ``|w|`` then event, as
        ``(w, ev)`` arrays, and each group's index into them: what ``np.unique`` of the
        stacked ``(w, ev)`` rows with ``axis=0, return_inverse=True`` gives (the same order),
        from three one-dimensional ``np.unique`` calls (``axis=0`` sorts the rows as records,
        tens of times slower)."""
        w_keys, w_of = np.unique(self.w, return_inverse=True)
        ev_keys, ev_of = np.unique(self.ev, return_inverse=True)
        code = w_of.reshape(-1).astype(np.int64) * len(ev_keys) + ev_of.reshape(-1)
        codes, pair_of = np.unique(code, return_inverse=True)
        return w_keys[codes // len(ev_keys)], ev_keys[codes % len(ev_keys)], pair_of.reshape(-1)

    def per_row(self, values: np.ndarray) -> np.ndarray:
        """``Σ`` of ``values`` (one per group) over each row's groups."""
        out: np.ndarray = np.bincount(self.row, weights=values, minlength=self.rows)
        return out

    def log_cf(self, theta: np.ndarray) -> np.ndarray:
        """``log φ`` of row ``i`` at ``theta[i]`` (one frequency, or a row of them, per row)."""
        out = np.zeros(theta.shape)
        for k, e in enumerate(self.events):
            mask = self.ev == k
            idx = self.row[mask]  # ascending
            if not idx.size:
                continue
            w = self.w[mask].reshape((-1,) + (1,) * (theta.ndim - 1))
            c = self.c[mask].reshape(w.shape)
            part = c * log_cf(e, w * theta[idx])
            starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
            out[idx[starts]] += np.add.reduceat(part, starts, axis=0)
        return out

    def var(self) -> np.ndarray:
        """Each row's variance (``Σ c w w Var(X)``, in the order of its groups)."""
        return self.per_row(self.c * self.w * self.w * self.variance[self.ev])

    def std(self) -> np.ndarray:
        """Each row's standard deviation."""
        out: np.ndarray = np.sqrt(self.var())
        return out


def _cuts(groups: NoiseGroups, periods: np.ndarray, halves: np.ndarray) -> np.ndarray:
    """Per row of unit weights, the smallest ``K`` with ``|φ_Y(θ_k)| / (2k)`` summed over
    ``K < k <= J`` at most :data:`CUT` (``θ_k = 2πk/P``): ``|φ_Y|`` decreases on ``[0, π]``, so
    ``K + 1`` is the first frequency past the ``θ*`` where ``log φ_Y = log(2 CUT / H)``, ``H >=
    Σ 1/k`` (found by bisection on ``θ``, every row at once)."""
    target = np.log(2 * CUT / (1 + np.log(np.maximum(halves, 1))))
    lo = np.zeros(len(periods))
    hi = np.full(len(periods), math.pi)
    full = groups.log_cf(hi) > target  # even θ = π is not far enough: every frequency
    for _ in range(60):
        mid = (lo + hi) / 2
        above = groups.log_cf(mid) > target
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
        # Done once both ends give every row the same frequency: the brackets nest and the
        # frequency grows with θ, so further halvings leave it as it is.
        if np.array_equal(np.ceil(lo * periods / (2 * math.pi))[~full],
                          np.ceil(hi * periods / (2 * math.pi))[~full]):  # fmt: skip
            break
    first = np.ceil(hi * periods / (2 * math.pi)).astype(np.int64)  # θ_first >= θ*
    out: np.ndarray = np.where(full, halves, np.clip(first - 1, 0, halves))
    return out


def lattice_quantiles(
    groups: NoiseGroups, *, tail: float, reach: Sequence[float], margin: float
) -> list[tuple[int, float] | None]:
    """Per row, ``(g, excess)``: the smallest integer ``g >= 0`` with ``excess(g) = F_J(g) +
    margin <= tail``, ``F_J(g)`` the mass of ``(g, J]`` folded onto ``[-J, J]``, ``J >=
    ceil(reach) + 1``. ``margin`` must hold ``P(Y > J)``, :data:`CUT` and the float error; then
    ``P(Y > g) <= excess(g)``. Integer weights only. None when no ``g`` in the window
    qualifies. Rows with few frequencies after the cut are searched together, by bisection on
    ``g``; the others take one inverse FFT each (the folded pmf), but one discrete Laplace node
    is in closed form."""
    halves = np.array([(fast_odd(2 * math.ceil(r) + 3) - 1) // 2 for r in reach], dtype=np.int64)
    periods = 2 * halves + 1
    unit = np.flatnonzero(groups.per_row((groups.w != 1).astype(np.float64)) == 0)
    cuts = halves.copy()
    if unit.size:
        cuts[unit] = _cuts(groups.take(unit.tolist()), periods[unit], halves[unit])
    out: list[tuple[int, float] | None] = [None] * groups.rows
    searched = []
    single = np.bincount(groups.row, minlength=groups.rows) == 1
    for i in range(groups.rows):
        one = groups.terms(i)[0] if single[i] else None
        if one is not None and one[2] == 1 and isinstance(one[1], DiscreteLaplaceEvent):
            out[i] = _one_laplace(one[1], tail, margin)  # (φ decays slowly: no window)
        elif periods[i] >= 64 * cuts[i]:
            searched.append(i)
        elif periods[i] <= MAX_PERIOD:
            out[i] = _folded_pmf(groups.terms(i), int(halves[i]), int(cuts[i]), tail, margin)
    if searched:
        found = _bisect(groups.take(searched), halves[searched], cuts[searched], tail, margin)
        for i, hit in zip(searched, found, strict=True):
            out[i] = hit
    return out


#: the longest folded pmf :func:`lattice_quantiles` computes (past it, a row is left to the
#: Chernoff bound)
MAX_PERIOD = 1 << 23


def _one_laplace(event: DiscreteLaplaceEvent, tail: float,
                 margin: float) -> tuple[int, float] | None:
    """One discrete Laplace node, in closed form: ``P(X > g) = q^(g+1) / (1 + q)``, ``g >=
    0``."""
    a = 1.0 / float(event.scale)
    q = math.exp(-a)

    def excess(g: int) -> float:
        return math.exp(-a * (g + 1)) / (1 + q) + margin

    if tail - margin <= 0:
        return None
    g = max(0, math.ceil(math.log((tail - margin) * (1 + q)) / -a) - 1)
    while g > 0 and excess(g - 1) <= tail:
        g -= 1
    while excess(g) > tail:
        g += 1
    return g, excess(g)


def _folded_pmf(terms: Sequence[Term], half: int, cut: int, tail: float,
                margin: float) -> tuple[int, float] | None:
    """:func:`lattice_quantiles` of one row from its folded pmf (one inverse FFT)."""
    period = 2 * half + 1
    theta = 2 * math.pi * np.arange(1, cut + 1, dtype=np.float64) / period
    spectrum = np.zeros(half + 1)
    spectrum[0] = 1.0
    spectrum[1 : cut + 1] = np.exp(log_cf_sum(terms, theta))
    pmf = np.fft.irfft(spectrum, n=period)  # index j <-> value j (mod period)
    above = np.append(np.cumsum(pmf[half:0:-1])[::-1], 0.0)  # above[g] = F_J(g)
    excess = above + margin
    ok = np.nonzero(excess <= tail)[0]
    return (int(ok[0]), float(excess[ok[0]])) if ok.size else None


def _bisect(groups: NoiseGroups, halves: np.ndarray, cuts: np.ndarray, tail: float,
            margin: float) -> list[tuple[int, float] | None]:
    """:func:`lattice_quantiles` of many rows at once: ``F_J(g) = (J - g)/P - Σ_{k<=K} φ_Y(θ_k)
    sin((g + 1/2) θ_k) / (P sin(θ_k / 2))``, bisection on the integer ``g`` from a bracket
    around two standard deviations; rows in chunks of similar ``K``."""
    out: list[tuple[int, float] | None] = [None] * groups.rows
    sd = groups.std()
    # rows padded to the power of 2 at or above their cut, in chunks of at most CHUNK_CELLS (so
    # a row's sums do not depend on the other rows of the call)
    width = np.array([1 << max(0, int(c) - 1).bit_length() for c in cuts])
    for w in sorted(set(width.tolist())):  # (np.unique would import numpy.ma)
        same = np.flatnonzero(width == w)
        step = max(1, CHUNK_CELLS // w)
        for lo in range(0, same.size, step):
            chunk = same[lo : lo + step]
            found = _bisect_chunk(groups.take(chunk.tolist()), int(w), halves[chunk],
                                  cuts[chunk], sd[chunk], tail, margin)
            for i, hit in zip(chunk.tolist(), found, strict=True):
                out[i] = hit
    return out


#: the most rows x frequencies one chunk of :func:`_bisect` (or of a smooth search) holds
CHUNK_CELLS = 1 << 20


def _bisect_chunk(groups: NoiseGroups, width: int, halves: np.ndarray, cuts: np.ndarray,
                  sd: np.ndarray, tail: float, margin: float) -> list[tuple[int, float] | None]:
    periods = (2 * halves + 1).astype(np.float64)
    k = np.arange(1, width + 1, dtype=np.float64)
    theta = 2 * math.pi * k[None, :] / periods[:, None]
    kept = k[None, :] <= cuts[:, None]
    with np.errstate(under="ignore"):
        weights = np.where(kept, np.exp(groups.log_cf(theta)), 0.0)
    weights /= np.sin(theta / 2) * periods[:, None]

    def excess(g: np.ndarray) -> np.ndarray:
        s = np.einsum("ik,ik->i", np.sin((g[:, None] + 0.5) * theta), weights)
        out: np.ndarray = (halves - g) / periods - s + margin
        return out

    top = halves.astype(np.float64)
    reach = excess(top) <= tail
    # excess(lo) > tail (-1: below every g), excess(hi) <= tail: first a bracket around 2 sd
    lo = np.clip(np.floor(1.5 * sd) - 1, -1, top)
    hi = np.clip(np.ceil(2.5 * sd) + 1, 0, top)
    lo = np.where((lo >= 0) & (excess(lo) <= tail), -1.0, lo)
    hi = np.where(excess(hi) > tail, top, hi)
    lo = np.minimum(lo, hi - 1)
    active = hi - lo > 1
    while active.any():
        mid = np.floor((lo + hi) / 2)
        good = excess(mid) <= tail
        hi = np.where(active & good, mid, hi)
        lo = np.where(active & ~good, mid, lo)
        active &= hi - lo > 1
    final = excess(hi)
    return [(int(g), float(x)) if ok else None for g, x, ok in zip(hi, final, reach, strict=True)]


