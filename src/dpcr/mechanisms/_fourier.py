"""Tail bounds of weighted sums of discrete Laplace / Gaussian noise from characteristic functions.

``Y = Σ_g w_g (X_g1 + ... + X_gc)``: groups of ``c`` independent copies of one node's noise with
weight ``w``. A node's characteristic function is known in closed form (discrete Laplace,
``q = e^{-1/scale}``: ``φ(θ) = 1 / (1 + 4q sin²(θ/2) / (1 - q)²)``; discrete Gaussian: by
Poisson summation), so ``φ_Y = Π_g φ_g(w_g θ)^c`` costs O(groups) per frequency, whatever the
number of nodes. Both characteristic functions are positive and decrease on ``[0, π]``, so for
every ``θ`` up to ``π / max|w|`` the product at ``θ`` bounds it at every larger frequency up to
there (the *envelope*). Both methods are bounds with every error term accounted for:

* :func:`lattice_quantiles` -- integer weights: ``Y`` lives on the integers. Folded onto the
  window ``[-J, J]`` (period ``P = 2J + 1``), its mass above ``g`` is the finite Fourier sum
  ``(J - g)/P - (1/P) Σ_{k=1}^{J} φ_Y(θ_k) sin((g + 1/2) θ_k) / sin(θ_k / 2)``, ``θ_k = 2πk/P``
  (each term at most ``|φ_Y(θ_k)| / 2k``), cut where the envelope leaves less than :data:`CUT`.
  The folded mass is at least the true mass of ``(g, J]``, so ``P(Y > g) <= folded + P(Y > J)``.
* :func:`smooth_quantiles` -- real weights: ``V = Y + Z``, ``Z ~ N(0, s²)`` independent, has the
  characteristic function ``φ_Y(θ) e^{-s²θ²/2}``, and ``P(Y > u) <= P(V > u - a) / P(Z > -a)``
  with ``a = ZS s``. Folded onto a period ``P``, ``P(V > x) <= 1/2 - x/P - Σ_k φ_V(θ_k)
  sin(θ_k x) / (πk) + P(V >= P/2)`` (``θ_k = 2πk/P``), cut where the Gaussian factor (or the
  envelope) leaves less than :data:`CUT`; ``P(V >= P/2)`` is a Chernoff bound. The result exceeds
  the exact quantile by about ``(ZS + 1/2) s`` at most.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent

__all__ = ["CUT", "SMOOTH_CUT", "ZS", "fast_odd", "lattice_quantiles", "log_cf", "smooth_quantiles"]

Event = DiscreteLaplaceEvent | DiscreteGaussianEvent
Term = tuple[float, Event, int]

#: the most the frequencies left out of a Fourier sum contribute
CUT = 1e-13
#: smoothing: a = ZS s; P(Z < -a) = 1.35e-3 divides the bound by 1 - 1.35e-3 (for a
#: Gaussian-like row, the quantile moves by 6e-4 standard deviations)
ZS = 3.0
ZS_TAIL = 0.5 * math.erfc(ZS / math.sqrt(2))


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


def _cut(terms: Sequence[Term], period: float, last: int, weight: float) -> int:
    """The smallest ``K <= last`` (found to within a factor 2) such that frequencies
    ``θ_k = 2πk/period``, ``K < k <= last``, add at most :data:`CUT` to a sum whose k-th term is
    at most ``weight |φ_Y(θ_k)| / k``; ``last`` when the envelope does not reach ``last``."""
    wmax = max(abs(w) for w, _, _ in terms)
    if math.floor(period / (2 * wmax)) < last:  # θ_last > π / max|w|
        return last
    k = 1
    while k < last:
        env = math.exp(float(log_cf_sum(terms, np.array(2 * math.pi * (k + 1) / period))))
        if weight * env * _harmonic(k + 1, last) <= CUT:
            return k
        k *= 2
    return last


class _Groups:
    """The groups of many rows, flat and by event, to evaluate ``log φ`` of every row at once."""

    def __init__(self, rows: Sequence[Sequence[Term]]) -> None:
        by_event: dict[Event, list[tuple[int, float, int]]] = {}
        for i, terms in enumerate(rows):
            for w, e, c in terms:
                by_event.setdefault(e, []).append((i, abs(w), c))
        self.rows = len(rows)
        self.parts = [
            (e, np.array([i for i, _, _ in items]), np.array([w for _, w, _ in items]),
             np.array([c for _, _, c in items], dtype=np.float64))
            for e, items in by_event.items()
        ]

    def log_cf(self, theta: np.ndarray) -> np.ndarray:
        """``log φ`` of row ``i`` at ``theta[i]`` (one frequency, or a row of them, per row)."""
        out = np.zeros(theta.shape)
        for e, idx, w, c in self.parts:
            w_ = w.reshape((-1,) + (1,) * (theta.ndim - 1))
            c_ = c.reshape(w_.shape)
            part = c_ * log_cf(e, w_ * theta[idx])
            starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])  # idx ascends
            out[idx[starts]] += np.add.reduceat(part, starts, axis=0)
        return out


def _cuts(groups: _Groups, periods: np.ndarray, halves: np.ndarray) -> np.ndarray:
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
    first = np.ceil(hi * periods / (2 * math.pi)).astype(np.int64)  # θ_first >= θ*
    out: np.ndarray = np.where(full, halves, np.clip(first - 1, 0, halves))
    return out


def lattice_quantiles(
    rows: Sequence[Sequence[Term]], *, tail: float, reach: Sequence[float], margin: float
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
    unit = [i for i, t in enumerate(rows) if all(abs(w) == 1 for w, _, _ in t)]
    cuts = halves.copy()
    if unit:
        cuts[unit] = _cuts(_Groups([rows[i] for i in unit]), periods[unit], halves[unit])
    out: list[tuple[int, float] | None] = [None] * len(rows)
    searched = []
    for i, terms in enumerate(rows):
        if len(terms) == 1 and terms[0][2] == 1 and isinstance(terms[0][1], DiscreteLaplaceEvent):
            out[i] = _one_laplace(terms[0][1], tail, margin)  # (φ decays slowly: no window)
        elif periods[i] >= 64 * cuts[i]:
            searched.append(i)
        elif periods[i] <= MAX_PERIOD:
            out[i] = _folded_pmf(terms, int(halves[i]), int(cuts[i]), tail, margin)
    if searched:
        found = _bisect([rows[i] for i in searched], halves[searched], cuts[searched], tail,
                        margin)
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


def _bisect(rows: Sequence[Sequence[Term]], halves: np.ndarray, cuts: np.ndarray,
            tail: float, margin: float) -> list[tuple[int, float] | None]:
    """:func:`lattice_quantiles` of many rows at once: ``F_J(g) = (J - g)/P - Σ_{k<=K} φ_Y(θ_k)
    sin((g + 1/2) θ_k) / (P sin(θ_k / 2))``, bisection on the integer ``g`` from a bracket
    around two standard deviations; rows in chunks of similar ``K``."""
    out: list[tuple[int, float] | None] = [None] * len(rows)
    order = np.argsort(cuts, kind="stable")
    for lo_i in range(0, len(order), 256):
        chunk = order[lo_i : lo_i + 256]
        found = _bisect_chunk(_Groups([rows[i] for i in chunk]), halves[chunk], cuts[chunk],
                              np.array([_sd(rows[i]) for i in chunk]), tail, margin)
        for i, hit in zip(chunk, found, strict=True):
            out[i] = hit
    return out


def _sd(terms: Sequence[Term]) -> float:
    """An estimate of the standard deviation (the search's first bracket only)."""
    total = 0.0
    for w, e, c in terms:
        if isinstance(e, DiscreteLaplaceEvent):
            q = math.exp(-1 / float(e.scale))
            total += c * w * w * 2 * q / (1 - q) ** 2 if q < 1 else math.inf
        else:
            total += c * w * w * float(e.sigma2)
    return math.sqrt(total)


def _bisect_chunk(groups: _Groups, halves: np.ndarray, cuts: np.ndarray, sd: np.ndarray,
                  tail: float, margin: float) -> list[tuple[int, float] | None]:
    periods = (2 * halves + 1).astype(np.float64)
    k = np.arange(1, max(1, int(cuts.max())) + 1, dtype=np.float64)
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
    while np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2)
        good = excess(mid) <= tail
        hi = np.where(good, mid, hi)
        lo = np.where(good, lo, mid)
    final = excess(hi)
    return [(int(g), float(x)) if ok else None for g, x, ok in zip(hi, final, reach, strict=True)]


def _gauss_tail(alpha: float, k0: int) -> float:
    """An upper bound on ``Σ_{k>k0} e^{-αk²} / (πk)`` (a geometric series from ``k0 + 1``)."""
    return math.exp(-alpha * (k0 + 1) ** 2) / (
        math.pi * (k0 + 1) * -math.expm1(-alpha * (2 * k0 + 3)))  # fmt: skip


#: the smooth method: the mass of V beyond the window, and what the frequencies left out add
#: (each far below anything that moves a 95 % quantile)
SMOOTH_CUT = 1e-10


def smooth_quantiles(
    rows: Sequence[Sequence[Term]], *, tail: float, s: float, period: float,
    start: Sequence[float],
) -> list[tuple[float, float]]:
    """Per row, ``(u, bound)`` with ``P(Y > u) <= bound <= tail`` by Gaussian smoothing with
    standard deviation ``s`` (module docstring). The rows share the frequencies: ``period`` must
    be at least twice each row's Chernoff bound at :data:`SMOOTH_CUT` of ``V = Y + Z``.
    ``start[i]``: where row ``i``'s search starts (any positive number; near the answer is
    fastest).

    Only the frequencies where ``|φ_V| > ε`` enter the sum: ``ε / (πk)`` summed over all
    ``k <= K`` is at most :data:`SMOOTH_CUT`, and past ``K`` the Gaussian factor alone leaves
    less. Which frequencies those are is screened by one or two groups' factors (dropping
    factors, each at most 1, bounds ``|φ_V|`` from above), then computed exactly."""
    alpha = 0.5 * (s * 2 * math.pi / period) ** 2  # Gaussian factor of frequency k: e^{-αk²}
    k_s = math.ceil(math.sqrt(math.log(1 / SMOOTH_CUT) / alpha))
    while _gauss_tail(alpha, k_s) > SMOOTH_CUT:
        k_s += max(1, k_s // 8)
    k = np.arange(1, k_s + 1, dtype=np.float64)
    theta = 2 * math.pi * k / period
    log_eps = math.log(SMOOTH_CUT * math.pi / _harmonic(1, k_s))
    gauss = -alpha * k * k
    tables: dict[tuple[float, Event], tuple[np.ndarray, float]] = {}
    picked: list[tuple[np.ndarray, np.ndarray]] = []
    for terms in rows:
        logs = []
        for w, e, c in terms:
            hit = tables.get((abs(w), e))
            if hit is None:
                table = log_cf(e, abs(w) * theta)
                hit = tables[(abs(w), e)] = (table, float(table.mean()))
            logs.append((c * hit[1], c, hit[0]))
        # screen with the two factors that decay most (on average), then the exact value
        logs.sort(key=lambda x: x[0])
        screen = gauss.copy()
        for _, c, table in logs[:2]:
            screen += c * table
        ks = np.flatnonzero(screen > log_eps)
        exact = gauss[ks]
        for _, c, table in logs:
            exact = exact + c * table[ks]
        keep = exact > log_eps
        ks = ks[keep]
        picked.append((theta[ks], np.exp(exact[keep]) / (math.pi * k[ks])))
    # the frequencies left out (at most ε / (πk) each, then the Gaussian tail), the float error
    # (of the sum, and of the logarithms: 1e-13 relative on terms adding up to at most 3), the
    # mass beyond the window
    err = 2 * SMOOTH_CUT + 1e-15 * (max(len(c) for _, c in picked) + 100) + 1e-12 + SMOOTH_CUT
    return _search(picked, period, tail, err, s, start)


def _search(picked: Sequence[tuple[np.ndarray, np.ndarray]], period: float, tail: float,
            err: float, s: float, start: Sequence[float]) -> list[tuple[float, float]]:
    """Per row (its frequencies and coefficients), the smallest ``x`` (to within ``s / 4``) whose
    bound on ``P(V > x) / P(Z > -a)`` is at most ``tail``, plus ``a``: a bracket grown from
    ``start``, then bisection, every row at once."""
    rows = len(picked)
    width = max(1, max(len(c) for _, c in picked))
    theta = np.zeros((rows, width))
    coef = np.zeros((rows, width))
    for i, (t, c) in enumerate(picked):
        theta[i, : len(t)] = t
        coef[i, : len(c)] = c

    def bound(xs: np.ndarray) -> np.ndarray:
        s_x = np.einsum("ik,ik->i", np.sin(theta * xs[:, None]), coef)
        out: np.ndarray = (0.5 - xs / period - s_x + err) / (1 - ZS_TAIL)
        return out

    top = period / 2
    hi = np.minimum(np.asarray(start, dtype=np.float64), top)
    lo = hi / 2
    for _ in range(64):  # grow the bracket: bound(lo) > tail >= bound(hi)
        up = bound(hi) > tail
        down = ~up & (bound(lo) <= tail)
        if not (up.any() or down.any()):
            break
        if np.any(up & (hi >= top)):
            raise ValueError("the window does not reach the tail")
        lo, hi = (np.where(up, hi, np.where(down, lo / 2, lo)),
                  np.where(up, np.minimum(2 * hi, top), np.where(down, lo, hi)))
        lo = np.where(lo < s / 4, 0.0, lo)  # bound(0) is about 1/2
    while np.any(hi - lo > s / 4):
        mid = (lo + hi) / 2
        good = bound(mid) <= tail
        hi = np.where(good, mid, hi)
        lo = np.where(good, lo, mid)
    final = bound(hi)
    if np.any(final > tail):
        raise ValueError("the search did not reach the tail")
    return [(float(x) + ZS * s, float(b)) for x, b in zip(hi, final, strict=True)]
