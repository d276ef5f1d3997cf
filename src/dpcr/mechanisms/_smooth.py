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
#: the most frequencies a class of rows is smoothed over; a class that needs more (a smoothing
#: far narrower than the period: noise of almost no spread next to the lattice of its weights)
#: gets None, and its rows the Chernoff bound
MAX_FREQUENCIES = 1 << 20


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
) -> list[tuple[float, float] | None]:
    """Per row, ``(u, bound)`` with ``P(Y > u) <= bound <= tail`` by Gaussian smoothing with
    standard deviation ``s`` (module docstring). The rows share the frequencies: ``period`` must
    be at least twice each row's Chernoff bound at :data:`SMOOTH_CUT` of ``V = Y + Z``.
    ``start[i]``: where row ``i``'s search starts (any positive number; near the answer is
    fastest). None for a row whose window misses the tail, and for every row when the
    smoothing needs more than :data:`MAX_FREQUENCIES` frequencies."""
    alpha = 0.5 * (s * 2 * math.pi / period) ** 2  # Gaussian factor of frequency k: e^{-αk²}
    if alpha * MAX_FREQUENCIES**2 < math.log(1 / SMOOTH_CUT):
        return [None] * groups.rows  # (more frequencies than MAX_FREQUENCIES)
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
    pairs = groups.pairs()[2]
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
    over = (bound > log_eps).T  # rows x blocks
    offsets = np.arange(BLOCK)
    for i in range(groups.rows):
        blocks = over[i].nonzero()[0]
        ks = (blocks[:, None] * BLOCK + offsets).ravel()
        ks = ks[ks < k_g]  # (0-based: frequency k = ks + 1)
        used = counts[i].nonzero()[0]
        exact = gauss[ks] + counts[i, used] @ tables[used[:, None], ks]
        keep = exact > log_eps
        ks = ks[keep]
        picked.append((theta[ks], np.exp(exact[keep]) / (math.pi * k[ks])))
    # per row: the frequencies left out (at most ε / (πk) each, then the Gaussian tail), the
    # float error (of the sum, and of the logarithms: 1e-13 relative on terms adding up to at
    # most 3), the mass beyond the window
    err = [3 * SMOOTH_CUT + 1e-15 * (len(c) + 100) + 1e-12 for _, c in picked]
    out: list[tuple[float, float] | None] = [None] * len(picked)
    # rows padded to the power of 2 at or above their number of frequencies, in chunks of at
    # most CHUNK_CELLS (so a row's sums do not depend on the other rows of the call)
    width = np.array([1 << max(0, len(c) - 1).bit_length() for _, c in picked])
    for w in np.unique(width).tolist():
        same = np.flatnonzero(width == w)
        step = max(1, CHUNK_CELLS // w)
        for lo in range(0, same.size, step):
            chunk = same[lo : lo + step].tolist()
            found = _search([picked[i] for i in chunk], int(w), period, tail,
                            [err[i] for i in chunk], s, [start[i] for i in chunk])
            for i, hit in zip(chunk, found, strict=True):
                out[i] = hit
    return out


def _search(picked: Sequence[tuple[np.ndarray, np.ndarray]], width: int, period: float,
            tail: float, err: Sequence[float], s: float,
            start: Sequence[float]) -> list[tuple[float, float] | None]:
    """Per row (its frequencies and coefficients, padded to ``width``), the smallest ``x`` of
    the lattice ``s/4 Z`` whose bound on ``P(V > x) / P(Z > -a)`` is at most ``tail`` (plus
    ``a``), or None when none in the window is: a bracket grown from ``start``, then bisection,
    every row at once and each on its own."""
    rows = len(picked)
    theta = np.zeros((rows, width))
    coef = np.zeros((rows, width))
    for i, (t, c) in enumerate(picked):
        theta[i, : len(t)] = t
        coef[i, : len(c)] = c
    errs = np.asarray(err, dtype=np.float64)
    step = s / 4
    top = math.floor(period / 2 / step)  # x = top step is still inside the window

    def bound(js: np.ndarray) -> np.ndarray:
        xs = js * step
        s_x = np.einsum("ik,ik->i", np.sin(theta * xs[:, None]), coef)
        out: np.ndarray = (0.5 - xs / period - s_x + errs) / (1 - ZS_TAIL)
        return out

    # bound(lo) > tail >= bound(hi), lo = 0 at the least (bound(0) is about 1/2)
    hi = np.clip(np.ceil(np.asarray(start) / step), 1, top)
    lo = np.floor(hi / 2)
    reached = np.ones(rows, dtype=bool)
    for _ in range(64):
        up = reached & (bound(hi) > tail)
        reached &= ~(up & (hi >= top))  # the window does not reach the tail
        up &= reached
        down = reached & ~up & (lo > 0) & (bound(lo) <= tail)
        if not (up.any() or down.any()):
            break
        lo, hi = (np.where(up, hi, np.where(down, np.floor(lo / 2), lo)),
                  np.where(up, np.minimum(2 * hi, top), np.where(down, lo, hi)))
    active = reached & (hi - lo > 1)
    while active.any():
        mid = np.floor((lo + hi) / 2)
        good = bound(mid) <= tail
        hi = np.where(active & good, mid, hi)
        lo = np.where(active & ~good, mid, lo)
        active &= hi - lo > 1
    final = bound(hi)
    return [(float(j) * step + ZS * s, float(b)) if ok and b <= tail else None
            for j, b, ok in zip(hi, final, reached, strict=True)]  # fmt: skip
