"""Integer matrices for the row-rescaled square root and BLT factorizations of the pipeline.

Both release ``y = Q C' x + z``: ``C'`` an integer lower-triangular Toeplitz matrix with
nonnegative nonincreasing coefficients ``c'_j``, ``Q = diag(q_t)`` positive integers (all 1
except for the row-rescaled square root), ``z`` i.i.d. discrete Gaussian. ``y`` is an integer
vector, released exactly.

**Row-rescaled square root** (finite horizon T). ``c'_j = floor(s binom(2j, j) / 4^j)`` (the
integer square root) and ``q_t = max(1, round(R sqrt(u_t / max u)))`` with ``u`` the real row
scales that give every column of ``D A^{1/2}`` unit norm (:func:`dpcr.plans.factorization.
rescaled_sqrt`). Any positive integers ``q`` give a valid mechanism; the real ``u`` only make it
good. The squared L2 sensitivity is ``max ||Q C' d||^2 = max sum_t q_t^2 (C' d)_t^2`` over the
changes ``d`` one unit can make (``|d_i| <= 1``):

* the entries of ``Q C'`` are ``>= 0``, so ``|Q C' d| <= Q C' |d|`` entrywise and a worst ``d``
  is a 0/1 vector; adding intervals to its support never lowers any ``(Q C' d)_t``;
* one interval (``m = 1``): ``max_j sum_t q_t^2 c'_{t-j}^2``, the largest weighted column norm;
* a run of ``m`` intervals (B-time-bounded, or at most k with ``k >= T``): any support inside a
  run is dominated by the full run, so ``max_s ||Q C' 1_[s, s+m)||^2`` over the ``T - m + 1``
  run starts (runs cut by the horizon's end are inside a full run);
* ``m`` intervals anywhere (at most k, ``1 < k < T``): the weights increase with ``t`` and the
  first-``m`` argument of the Toeplitz case fails; no exact method is implemented, and the plan
  refuses (ConfigError) rather than state an unproven bound.

Every value is an exact integer: ``sum_t w_t r_{t-s}`` for all ``s`` is computed as float64
convolutions of limbs small enough that every product and partial sum is an integer below 2^53
(exact in any summation order), recombined in Python integers (:func:`weighted_tail_sums`).

**BLT** (open-ended). ``c(x) = 1 + sum_i omega_i x / (1 - theta_i x)`` (``sum omega <= 1``) made
integer in fixed point: ``g_{i,1} = floor(omega_i s 2^P)``, ``g_{i,j+1} = floor(g_{i,j} Th_i /
2^Qb)`` with ``Th_i = floor(theta_i 2^Qb)``, ``c'_0 = s``, ``c'_j = floor(sum_i g_{i,j} / 2^P)``,
and ``c'_j = 0`` from a support cap ``L`` on. Each ``g_i`` is nonnegative and nonincreasing, so
``c'`` is (``c'_1 <= s sum omega <= s``), and the Toeplitz worst-pattern theorem of
:mod:`dpcr.plans.factorization` gives the exact sensitivity: for an open-ended release the Gram
entries ``sum_r c'_r c'_{r+|a-b|}`` (finite support) depend on ``|a - b|`` only and do not
increase with it, so the first ``m`` intervals are a worst pattern for every horizon, and
``sum_t (S_t - S_{t-m})^2`` over ``t < L + m`` (``S`` the prefix sums) is the exact sensitivity
of the infinite matrix, an upper bound for (and the limit of) every finite prefix. Integer
arithmetic only: the coefficients are the same on every machine.

>>> blt_integer_coefficients((0.5,), (0.5,), scale=16, cap=6)
[16, 8, 4, 2, 1, 0]
>>> int(weighted_tail_sums([1, 2, 3], [4, 5, 6])[0])  # 1*4 + 2*5 + 3*6
32
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from itertools import pairwise

import numpy as np

from dpcr.errors import ConfigError
from dpcr.plans.blt_presets import OPEN_BLT, blt_preset

__all__ = [
    "OPEN_BLT",
    "RESCALED_RESOLUTION",
    "RESCALED_SCALE",
    "blt_integer_coefficients",
    "blt_preset",
    "open_sensitivity2",
    "rescaled_row_weights",
    "rescaled_sensitivity2",
    "support_cap",
    "weighted_tail_sums",
]

#: ``s`` of the row-rescaled square root's ``C'`` and the resolution ``R`` of its row weights.
RESCALED_SCALE = 1 << 16
RESCALED_RESOLUTION = 1 << 9
_P, _QB = 16, 48


def weighted_tail_sums(w: Sequence[int] | np.ndarray, r: Sequence[int] | np.ndarray) -> np.ndarray:
    """``out[s] = sum_{u >= 0} w[s + u] r[u]`` for ``s < len(w)``, exact (object array of Python
    integers). ``w``, ``r``: nonnegative integers below 2^62.

    ``r`` is split into limbs of ``b`` bits; each limb is convolved with ``w`` by float64 FFT and
    rounded. The rounding is exact when the FFT error is below 1/2: for a length-``N`` FFT
    product of integer vectors the error of every entry is at most ``||w|| ||limb|| ((1 + e)^{3n}
    (1 + e sqrt 5)^{3n+1} (1 + beta)^{3n} - 1)``, ``n = log2 N``, ``e = 2^-53``, ``beta`` the
    twiddle error (Percival 2003); ``b`` is chosen with ``(12 n + 4) e`` for that factor (``beta
    <= 2e`` assumed) and an error budget of 1/4, and every rounded entry is also checked to be
    within 1/4 of an integer (else ConfigError: never happens for these sizes)."""
    wi = np.asarray(w, dtype=np.int64)
    ri = np.asarray(r, dtype=np.int64)
    n = wi.size
    if n == 0:
        return np.zeros(0, dtype=object)
    if np.any(wi < 0) or np.any(ri < 0):
        raise ConfigError("weighted_tail_sums needs nonnegative integers")
    size = 1 << max(1, (n + ri.size - 2).bit_length())
    factor = (12 * size.bit_length() + 4) * 2.0**-53
    wnorm = float(np.linalg.norm(wi.astype(np.float64))) or 1.0
    room = 0.25 / (wnorm * math.sqrt(max(1, ri.size)) * factor)
    limb = min(40, math.floor(math.log2(room + 1)))
    if limb < 1:
        raise ConfigError("weighted_tail_sums: values too large for an exact FFT product")
    fw = np.fft.rfft(wi[::-1].astype(np.float64), size)
    total = np.zeros(n, dtype=object)
    rest = ri.copy()
    shift = 0
    mask = (1 << limb) - 1
    while np.any(rest):
        part = (rest & mask).astype(np.float64)
        conv = np.fft.irfft(fw * np.fft.rfft(part, size), size)[:n][::-1]
        rounded = np.rint(conv)
        if n and float(np.max(np.abs(conv - rounded))) > 0.25:
            raise ConfigError("weighted_tail_sums: an FFT product was not exact")
        total += rounded.astype(np.int64).astype(object) * (1 << shift)
        rest >>= limb
        shift += limb
    return total


@lru_cache(maxsize=16)
def rescaled_row_weights(T: int, resolution: int = RESCALED_RESOLUTION) -> tuple[int, ...]:
    """``q_t = max(1, round(R sqrt(u_t / max u)))``, ``t < T`` (positive integers)."""
    from dpcr.plans.factorization import rescaled_sqrt

    u = rescaled_sqrt(T).u
    q = np.maximum(1, np.rint(resolution * np.sqrt(u / float(u.max()))))
    return tuple(int(v) for v in q)


def _prefix(c: Sequence[int]) -> np.ndarray:
    out = np.zeros(len(c) + 1, dtype=np.int64)
    out[1:] = np.cumsum(np.asarray(c, dtype=np.int64))
    return out


def rescaled_sensitivity2(
    coeffs: Sequence[int], weights: Sequence[int], m: int, *, run: bool
) -> int:
    """``max ||Q C' d||^2`` (exact) for one interval, or a run of ``m`` (``run``); at most k on
    ``1 < m < T`` intervals anywhere raises (see the module docstring)."""
    T = len(coeffs)
    if len(weights) != T:
        raise ConfigError("one row weight per interval is needed")
    c = [int(v) for v in coeffs]
    if any(v < 0 for v in c) or any(b > a for a, b in pairwise(c)):
        raise ConfigError("the sensitivity needs nonnegative nonincreasing coefficients")
    m = max(1, min(m, T))
    if m > 1 and m < T and not run:
        raise ConfigError(
            "the row-rescaled square root has no proven sensitivity for at most k > 1 mutations "
            "anywhere; use release.factorization = 'sqrt' (or plan = 'auto')"
        )
    w = np.asarray(weights, dtype=np.int64) ** 2
    S = _prefix(c)
    u = np.arange(T)
    resp = S[u + 1] - S[np.maximum(0, u + 1 - m)]  # (C' 1_[s, s+m))_{s+u}
    sums = weighted_tail_sums(w, resp * resp)
    return int(max(sums[: T - m + 1]))


def blt_integer_coefficients(
    omega: Sequence[float], theta: Sequence[float], *, scale: int, cap: int
) -> list[int]:
    """``c'_j``, ``j < cap`` (fixed-point recursion, integers only; zeros once the support
    ends). Nonnegative and nonincreasing by construction (module docstring)."""
    if sum(omega) > 1 or not all(0 < t < 1 for t in theta) or not all(w > 0 for w in omega):
        raise ConfigError("BLT needs 0 < theta < 1, omega > 0 and sum(omega) <= 1")
    g = [int(w * scale * (1 << _P)) for w in omega]
    th = [int(t * (1 << _QB)) for t in theta]
    out = [scale]
    while len(out) < cap and any(g):
        out.append(sum(g) >> _P)
        g = [(v * t) >> _QB for v, t in zip(g, th, strict=True)]
    out.extend([0] * (cap - len(out)))
    return out


def open_sensitivity2(coeffs: Sequence[int], m: int) -> int:
    """Exact ``sum_t (S_t - S_{t-m})^2`` of the infinite Toeplitz matrix with these coefficients
    (zero after them): the worst ``m`` intervals of an open-ended release."""
    c = np.asarray([int(v) for v in coeffs] + [0] * (m - 1), dtype=np.int64)
    if np.any(c < 0) or np.any(np.diff(c) > 0):
        raise ConfigError("the worst-pattern theorem needs nonnegative nonincreasing coefficients")
    S = _prefix(c.tolist())
    d = S[1:] - S[np.maximum(0, np.arange(1, c.size + 1) - m)]
    if d.size and int(d.max()) >= 1 << 26:
        return sum(int(v) * int(v) for v in d)
    sq = d * d
    return sum(int(chunk.sum()) for chunk in np.array_split(sq, max(1, sq.size // 1024)))


def support_cap(planning_horizon: int) -> int:
    """Support cap ``L`` of an open-ended BLT's integer coefficients."""
    return max(4096, 8 * planning_horizon)
