"""The 95 % quantile of real-weighted sums of discrete noise, by Gaussian smoothing.

``Y = Σ_g w_g (X_g1 + ... + X_gc)`` with real weights lives on no lattice, so its distribution
has no finite Fourier series. ``V = Y + Z``, ``Z ~ N(0, s²)`` independent, has the
characteristic function ``φ_V = φ_Y(θ) e^{-s²θ²/2}`` and

    P(Y > u) <= P(V > u - a) / P(Z > -a),   a = ZS s,

and folded onto a period ``P`` (``θ_k = 2πk/P``)

    P(V > x) <= 1/2 - x/P - Σ_{k>=1} φ_V(θ_k) sin(θ_k x) / (πk) + P(V >= P/2),

the folded mass of ``(x, P/2)`` being at least the true mass there; ``P(V >= P/2)`` is a
Chernoff bound under :data:`SMOOTH_CUT`. Only frequencies where ``|φ_V| > ε`` enter the sum:
``ε / (πk)`` over every ``k <= K`` adds at most :data:`SMOOTH_CUT`, and past ``K`` the Gaussian
factor alone leaves less than that (``Σ_{k>K} e^{-αk²} / (πk)``, a geometric bound). Which
frequencies pass is found by blocks of :data:`BLOCK`: each factor ``φ_e(|w| θ)`` is bounded over
a block by its value at the block's argument nearest to ``2πZ`` (``log φ_e`` decreases on
``[0, π]`` and has period ``2π``), which bounds ``|φ_V|`` over the block for every row at once
(one matrix product); the frequencies of the blocks above ``ε`` are computed exactly. Those
omitted terms and the float error are added to the bound. The result exceeds the exact
quantile by about ``(ZS + 1/2) s`` at most.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpcr.mechanisms._fourier import CHUNK_CELLS, Event, NoiseGroups, log_cf

__all__ = ["SMOOTH_CUT", "ZS", "smooth_quantiles"]

#: smoothing: a = ZS s; P(Z < -a) = 1.35e-3 divides the bound by 1 - 1.35e-3 (for a
#: Gaussian-like row, the quantile moves by 6e-4 standard deviations)
ZS = 3.0
ZS_TAIL = 0.5 * math.erfc(ZS / math.sqrt(2))
#: the mass of V beyond the window, and what the frequencies left out add (each far below
#: anything that moves a 95 % quantile)
SMOOTH_CUT = 1e-10


def _gauss_tail(alpha: float, k0: int) -> float:
    """An upper bound on ``Σ_{k>k0} e^{-αk²} / (πk)`` (a geometric series from ``k0 + 1``)."""
    return math.exp(-alpha * (k0 + 1) ** 2) / (
        math.pi * (k0 + 1) * -math.expm1(-alpha * (2 * k0 + 3)))  # fmt: skip


def _harmonic(b: int) -> float:
    """An upper bound on ``Σ_{k=1}^{b} 1/k``."""
    return 1.0 + math.log(b)


#: frequencies bounded together (a block's bound: each factor at the block's point nearest to a
#: multiple of its period)
BLOCK = 32


def _block_bounds(weights: np.ndarray, events: Sequence[Event], period: float,
                  k_g: int) -> np.ndarray:
    """``out[b, p]``: an upper bound on ``log φ_e(w θ_k)`` of pair ``p`` over the frequencies
    of block ``b`` (``k = b BLOCK + 1 .. (b + 1) BLOCK``): ``log φ_e`` decreases with the
    distance of its argument to ``2πZ`` (on ``[0, π]``), and over an interval of arguments that
    distance is least at an end unless the interval holds a multiple of ``2π`` (then 0)."""
    blocks = -(-k_g // BLOCK)
    lo = (np.arange(blocks) * BLOCK + 1).astype(np.float64)
    hi = np.minimum(lo + BLOCK - 1, k_g)
    out = np.empty((blocks, len(weights)))
    for p, (w, e) in enumerate(zip(weights, events, strict=True)):
        a, b = 2 * math.pi * w * lo / period, 2 * math.pi * w * hi / period
        near = np.minimum(_to_2pi(a), _to_2pi(b))
        holds = np.floor(b / (2 * math.pi)) > np.floor(a / (2 * math.pi))
        nearest = np.where(holds | (a == 0), 0.0, near * (1 - 1e-12))
        out[:, p] = np.maximum(log_cf(e, nearest), -1e30)  # (0 copies x -inf would be NaN)
    return out


def _to_2pi(x: np.ndarray) -> np.ndarray:
    """The distance of ``x`` to the nearest multiple of ``2π``."""
    r = np.remainder(x, 2 * math.pi)
    out: np.ndarray = np.minimum(r, 2 * math.pi - r)
    return out


def _block_gauss(alpha: float, k_g: int) -> np.ndarray:
    """The Gaussian factor's ``log`` at each block's first frequency (its largest)."""
    lo = (np.arange(-(-k_g // BLOCK)) * BLOCK + 1).astype(np.float64)
    out: np.ndarray = -alpha * lo * lo
    return out


def smooth_quantiles(
    groups: NoiseGroups, *, tail: float, s: float, period: float, start: Sequence[float],
) -> list[tuple[float, float]]:
    """Per row, ``(u, bound)`` with ``P(Y > u) <= bound <= tail`` by Gaussian smoothing with
    standard deviation ``s`` (module docstring). The rows share the frequencies: ``period`` must
    be at least twice each row's Chernoff bound at :data:`SMOOTH_CUT` of ``V = Y + Z``.
    ``start[i]``: where row ``i``'s search starts (any positive number; near the answer is
    fastest). ValueError when a row's window misses the tail."""
    alpha = 0.5 * (s * 2 * math.pi / period) ** 2  # Gaussian factor of frequency k: e^{-αk²}
    k_s = math.ceil(math.sqrt(math.log(1 / SMOOTH_CUT) / alpha))
    while _gauss_tail(alpha, k_s) > SMOOTH_CUT:
        k_s += max(1, k_s // 8)
    k = np.arange(1, k_s + 1, dtype=np.float64)
    theta = 2 * math.pi * k / period
    log_eps = math.log(SMOOTH_CUT * math.pi / _harmonic(k_s))
    # past k_g the Gaussian factor alone is below ε
    k_g = min(k_s, math.floor(math.sqrt(-log_eps / alpha)))
    k, theta = k[:k_g], theta[:k_g]
    # one table per distinct (|w|, event): log φ_e(|w| θ_k)
    pairs = np.unique(np.stack([groups.w, groups.ev.astype(np.float64)], axis=1), axis=0,
                      return_inverse=True)[1].reshape(-1)  # fmt: skip
    some = np.zeros(int(pairs.max()) + 1 if pairs.size else 0, dtype=np.int64)
    some[pairs] = np.arange(pairs.size)  # a group of each pair
    weights = groups.w[some]
    events = [groups.events[int(groups.ev[j])] for j in some]
    tables = np.stack([log_cf(e, w * theta) for w, e in zip(weights, events, strict=True)])
    counts = np.zeros((groups.rows, len(some)))
    np.add.at(counts, (groups.row, pairs), groups.c)
    gauss = -alpha * k * k
    # blocks of BLOCK frequencies: a bound on every row's log |φ_V| over each block at once
    bound = _block_bounds(weights, events, period, k_g) @ counts.T  # blocks x rows
    bound += _block_gauss(alpha, k_g)[:, None]
    picked: list[tuple[np.ndarray, np.ndarray]] = []
    for i in range(groups.rows):
        blocks = np.flatnonzero(bound[:, i] > log_eps)
        ks = (blocks[:, None] * BLOCK + np.arange(BLOCK)).ravel()
        ks = ks[ks < k_g]  # (0-based: frequency k = ks + 1)
        used = np.flatnonzero(counts[i])
        exact = gauss[ks] + counts[i, used] @ tables[np.ix_(used, ks)]
        keep = exact > log_eps
        ks = ks[keep]
        picked.append((theta[ks], np.exp(exact[keep]) / (math.pi * k[ks])))
    # the frequencies left out (at most ε / (πk) each, then the Gaussian tail), the float error
    # (of the sum, and of the logarithms: 1e-13 relative on terms adding up to at most 3), the
    # mass beyond the window
    width = max((len(c) for _, c in picked), default=0)
    err = 2 * SMOOTH_CUT + 1e-15 * (width + 100) + 1e-12 + SMOOTH_CUT
    out: list[tuple[float, float]] = []
    first = 0
    while first < len(picked):  # chunks of at most CHUNK_CELLS rows x frequencies (and 1 row)
        last, width = first, 1
        while last < len(picked):
            width = max(width, len(picked[last][1]))
            if last > first and (last + 1 - first) * width > CHUNK_CELLS:
                break
            last += 1
        out += _search(picked[first:last], period, tail, err, s, start[first:last])
        first = last
    return out


def _search(picked: Sequence[tuple[np.ndarray, np.ndarray]], period: float, tail: float,
            err: float, s: float, start: Sequence[float]) -> list[tuple[float, float]]:
    """Per row (its frequencies and coefficients), the smallest ``x`` (to within ``s / 4``) whose
    bound on ``P(V > x) / P(Z > -a)`` is at most ``tail``, plus ``a``: a bracket grown from
    ``start``, then bisection, every row at once."""
    rows = len(picked)
    width = max(1, max((len(c) for _, c in picked), default=1))
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
