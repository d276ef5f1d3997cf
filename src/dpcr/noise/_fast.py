"""Vectorised exact discrete Laplace and discrete Gaussian samplers built on inversion tables.

Discrete Laplace, scale t = n/d, q = exp(-1/t), P[X = x] = (1 - q)/(1 + q) q^|x|:

* t <= 2048: one table for |X| (P[|X| = 0] = (1-q)/(1+q), P[|X| = k] = 2(1-q)q^k/(1+q)) on
  [0, m) with tail mass q^m <= 2**-10; a draw past the table is m + Geometric(q), by
  memorylessness, and Geometric(q) is |X'| - 1 given |X'| >= 1. A fair sign bit finishes.
* t > 2048: X = ±G, G ~ Geometric(q), with (-, 0) rejected (probability (1-q)/2 < 2**-12).
  G = 2**L H + R: the binary digits of a geometric variable are independent, so the low L bits R
  split into chunks, each a truncated geometric on [0, 2**b) with ratio q**(2**s), and the high
  part H ~ Geometric(q**(2**L)) with q**(2**L) in [e**-1/2, e**-1/4), each drawn from its own
  table with one word.

Discrete Gaussian, sigma2 = p/q: one table for |X| on [0, m) with m ~ 6.5 sigma (tail mass
about 2**-30); a draw past it takes the exact tail sampler: |X| = m + g with g proposed from
Geometric(exp(-m/sigma2)) and accepted with probability exp(-g²/(2 sigma2)) (CKS Bernoulli),
since exp(-(m+g)²/(2 sigma2)) ∝ exp(-m g/sigma2) exp(-g²/(2 sigma2)). For sigma above about
1.6e5 the table would be too large and CKS Algorithm 3 is used with the vectorised Laplace
proposals and the scalar exact acceptance.

Tables are built once per parameter (cached) with rigorous integer bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Final

import numpy as np

from dpcr.noise import reference
from dpcr.noise._exact import cdiv, exp_neg, exp_neg_powers
from dpcr.noise._randomness import Randomness
from dpcr.noise._tables import BoundsFn, InversionTable, sign_bits

_SMALL_SCALE: Final = 2048
_DIGIT_BITS: Final = 12
_MAX_GAUSS_TABLE: Final = 1 << 20


# --- boundaries ----------------------------------------------------------------------------------


def _abs_laplace_bounds(n: int, d: int, m: int) -> BoundsFn:
    """b_k = P[|X| < k] = 1 - 2 q^k/(1+q), k = 1..m, q = exp(-d/n)."""

    def bounds(prec: int) -> tuple[list[int], list[int]]:
        w = prec + m.bit_length() + 16
        one = 1 << w
        qlo, qhi = exp_neg_powers(d, n, m, w)
        lo = [one - cdiv(2 * qhi[k] << w, one + qlo[1]) for k in range(1, m + 1)]
        hi = [one - (2 * qlo[k] << w) // (one + qhi[1]) for k in range(1, m + 1)]
        s = w - prec
        return [x >> s for x in lo], [cdiv(x, 1 << s) for x in hi]

    return bounds


def _geometric_bounds(num: int, den: int, m: int) -> BoundsFn:
    """b_h = P[H < h] = 1 - r^h, h = 1..m, r = exp(-num/den)."""

    def bounds(prec: int) -> tuple[list[int], list[int]]:
        w = prec + m.bit_length() + 16
        one = 1 << w
        rlo, rhi = exp_neg_powers(num, den, m, w)
        s = w - prec
        lo = [(one - rhi[h]) >> s for h in range(1, m + 1)]
        hi = [cdiv(one - rlo[h], 1 << s) for h in range(1, m + 1)]
        return lo, hi

    return bounds


def _truncated_geometric_bounds(num: int, den: int, size: int) -> BoundsFn:
    """b_i = (1 - r^i)/(1 - r^size), i = 1..size-1, r = exp(-num/den): the law on [0, size)
    with P[i] ∝ r^i."""

    def bounds(prec: int) -> tuple[list[int], list[int]]:
        w = prec + size.bit_length() + 16
        one = 1 << w
        rlo, rhi = exp_neg_powers(num, den, size, w)
        den_lo, den_hi = one - rhi[size], one - rlo[size]
        lo = [((one - rhi[i]) << prec) // den_hi for i in range(1, size)]
        hi = [cdiv((one - rlo[i]) << prec, den_lo) for i in range(1, size)]
        return lo, hi

    return bounds


def _abs_gaussian_bounds(p: int, q: int, m: int) -> BoundsFn:
    """b_k = P[|X| < k] = (1 + 2 sum_{0<j<k} w_j) / Z, k = 1..m, w_j = exp(-j²/(2 sigma2)),
    Z = 1 + 2 sum_{j>0} w_j, sigma2 = p/q.

    w_{j+1} = w_j c_j with c_j = exp(-(2j+1)/(2 sigma2)) = a b^j, a = exp(-q/(2p)),
    b = exp(-q/p). The sum stops at J once w_J (1 + sigma2/J), a bound on the rest
    (sum_{j>=J} w_j <= w_J / (1 - exp(-J/sigma2)) <= w_J (1 + sigma2/J)), is below
    2**-(prec+16); that bound is added to the upper bound of Z.
    """

    def bounds(prec: int) -> tuple[list[int], list[int]]:
        reach = math.isqrt(100 * (prec + 64) * p // q + 1) + m + 2  # > the stopping J
        w = prec + 2 * reach.bit_length() + 24
        slack = w - prec - 16  # the tail bound may take 2**slack units: 2**-(prec+16) of Z
        one = 1 << w
        alo, ahi = exp_neg(q, 2 * p, w)
        blo, bhi = exp_neg(q, p, w)
        wlo, whi, clo, chi = one, one, alo, ahi
        plo, phi = [one], [one]  # partial sums 1 + 2 sum_{0<j<k} w_j for k = 1, 2, ...
        slo, shi = one, one
        j = 0
        while True:
            j += 1
            wlo, whi = (wlo * clo) >> w, cdiv(whi * chi, one)
            clo, chi = (clo * blo) >> w, cdiv(chi * bhi, one)
            if j >= m and whi * (q * j + p) <= q * j << slack:  # w_j (1 + sigma2/j) small
                tail = 2 * (whi + 1) + 2 * cdiv(whi * p, q * j)
                break
            slo += 2 * wlo
            shi += 2 * whi
            if j < m:
                plo.append(slo)
                phi.append(shi)
        zlo, zhi = slo, shi + tail
        lo = [(x << prec) // zhi for x in plo]
        hi = [cdiv(x << prec, zlo) for x in phi]
        return lo, hi

    return bounds


# --- plans (cached per parameter) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Digit:
    shift: int
    table: InversionTable


@dataclass(frozen=True, slots=True)
class _LaplacePlan:
    low_bits: int  # L; 0 means the |X| table is used
    table: InversionTable  # |X| table (L = 0) or H table (L > 0)
    digits: tuple[_Digit, ...]


@lru_cache(maxsize=64)
def _laplace_plan(scale: Fraction) -> _LaplacePlan:
    n, d = scale.numerator, scale.denominator
    if n <= _SMALL_SCALE * d:
        m = cdiv(7 * n, d) + 1  # q^m <= exp(-7) ... tail 2 q^m/(1+q) < 2**-10 once m >= 6.93 t
        table = InversionTable(_abs_laplace_bounds(n, d, m), m, key=f"abs-laplace:{n}:{d}:{m}")
        return _LaplacePlan(0, table, ())
    low = (n // d).bit_length() - 2  # 2**L in (t/4, t/2]
    m = cdiv(7 * n, d << low) + 1  # Q^m <= 2**-10 with Q = exp(-2**L/t)
    top = InversionTable(_geometric_bounds(d << low, n, m), m, key=f"geometric:{d << low}:{n}:{m}")
    chunks = -(-low // _DIGIT_BITS)
    digits = []
    start = 0
    for c in range(chunks):
        bits = (low - start) // (chunks - c)
        table = InversionTable(
            _truncated_geometric_bounds(d << start, n, 1 << bits), (1 << bits) - 1,
            key=f"truncated-geometric:{d << start}:{n}:{1 << bits}",
        )
        digits.append(_Digit(start, table))
        start += bits
    return _LaplacePlan(low, top, tuple(digits))


@lru_cache(maxsize=64)
def _gaussian_table(sigma2: Fraction) -> InversionTable | None:
    p, q = sigma2.numerator, sigma2.denominator
    m = math.isqrt(42 * p // q + 1) + 2  # about 6.5 sigma: tail mass about exp(-21) / sigma
    if m > _MAX_GAUSS_TABLE:
        return None
    return InversionTable(_abs_gaussian_bounds(p, q, m), m, key=f"abs-gaussian:{p}:{q}:{m}")


# --- draws ---------------------------------------------------------------------------------------


def _abs_laplace(plan: _LaplacePlan, size: int, rng: Randomness) -> np.ndarray:
    """|X| from the small-scale table, past-the-table draws completed exactly."""
    table = plan.table
    values = table.draw(rng._words(size), rng)
    far = np.flatnonzero(values == table.m)
    if far.size:
        values[far] += _geometric_from_abs(plan, far.size, rng)
    return values


def _geometric_from_abs(plan: _LaplacePlan, size: int, rng: Randomness) -> np.ndarray:
    """Geometric(q): |X| - 1 given |X| >= 1."""
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        v = _abs_laplace(plan, 2 * (size - filled) + 8, rng)
        v = v[v >= 1][: size - filled] - 1
        out[filled : filled + v.size] = v
        filled += v.size
    return out


def _high_part(table: InversionTable, size: int, rng: Randomness) -> np.ndarray:
    values = table.draw(rng._words(size), rng)
    far = np.flatnonzero(values == table.m)
    if far.size:  # H >= m: H = m + a fresh H (memoryless)
        values[far] += _high_part(table, far.size, rng)
    return values


def _geometric_digits(plan: _LaplacePlan, size: int, rng: Randomness) -> np.ndarray:
    g = _high_part(plan.table, size, rng) << plan.low_bits
    for digit in plan.digits:
        g |= digit.table.draw(rng._words(size), rng) << digit.shift
    return g


def discrete_laplace(scale: Fraction, size: int, rng: Randomness) -> np.ndarray:
    plan = _laplace_plan(scale)
    if plan.low_bits == 0:
        magnitude = _abs_laplace(plan, size, rng)
        negative = sign_bits(size, rng)
        out: np.ndarray = np.where(negative, -magnitude, magnitude)
        return out
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        g = _geometric_digits(plan, need, rng)
        negative = sign_bits(need, rng)
        keep = ~(negative & (g == 0))
        x = np.where(negative, -g, g)[keep]
        out[filled : filled + x.size] = x
        filled += x.size
    return out


def _gaussian_tail(sigma2: Fraction, m: int, size: int, rng: Randomness) -> np.ndarray:
    """|X| given |X| >= m (m >= 1), exactly, one at a time (probability about 2**-30)."""
    out = np.empty(size, dtype=np.int64)
    for i in range(size):
        while True:
            x = 0
            while x == 0:  # Geometric(exp(-m/sigma2)) is |Y| - 1 given Y != 0, Y ~ DLap(sigma2/m)
                x = int(discrete_laplace(sigma2 / m, 1, rng)[0])
            g = abs(x) - 1
            if reference.bernoulli_exp(Fraction(g * g) / (2 * sigma2), rng):
                out[i] = m + g
                break
    return out


def discrete_gaussian(sigma2: Fraction, size: int, rng: Randomness) -> np.ndarray:
    table = _gaussian_table(sigma2)
    if table is None:
        return _gaussian_cks(sigma2, size, rng)
    magnitude = table.draw(rng._words(size), rng)
    far = np.flatnonzero(magnitude == table.m)
    if far.size:
        magnitude[far] = _gaussian_tail(sigma2, table.m, far.size, rng)
    negative = sign_bits(size, rng)
    out: np.ndarray = np.where(negative, -magnitude, magnitude)
    return out


def _gaussian_cks(sigma2: Fraction, size: int, rng: Randomness) -> np.ndarray:
    """CKS Algorithm 3 for very large sigma2: Laplace(t) proposals, t = floor(sigma) + 1,
    accepted with probability exp(-(|y| - sigma2/t)²/(2 sigma2))."""
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1
    out: list[int] = []
    while len(out) < size:
        for y in discrete_laplace(Fraction(t), size - len(out), rng).tolist():
            if reference.bernoulli_exp((abs(y) - sigma2 / t) ** 2 / (2 * sigma2), rng):
                out.append(y)
    return np.array(out, dtype=np.int64)
