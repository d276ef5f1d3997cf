"""Vectorised Canonne-Kamath-Steinke samplers: batched rejection on int64 numpy arrays.

Every decision compares a uniform integer with a rational threshold; nothing is rounded. Values
that would not fit in int64 are handed to the scalar oracle in :mod:`dpcr.noise.reference`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Final

import numpy as np

from dpcr.noise import reference
from dpcr.noise._randomness import Randomness

_LIMIT: Final = 1 << 56  # keep every den * k well inside int64


def uniform_below(high: np.ndarray, rng: Randomness) -> np.ndarray:
    """Independent uniform integers in ``[0, high[i])`` for an int64 array ``high`` (>= 1)."""
    h = high.astype(np.uint64)
    # Accept w <= 2**64 - 1 - (2**64 mod h); (0 - h) mod h == 2**64 mod h in uint64 arithmetic.
    last = ~((np.uint64(0) - h) % h)
    out = np.empty(h.size, dtype=np.int64)
    todo = np.arange(h.size)
    while todo.size:
        w = rng._words(todo.size)
        ok = w <= last[todo]
        idx = todo[ok]
        out[idx] = w[ok] % h[idx]
        todo = todo[~ok]
    return out


def bernoulli_exp_frac(num: np.ndarray, den: np.ndarray, rng: Randomness) -> np.ndarray:
    """Bernoulli(exp(-num/den)) elementwise for ``0 <= num <= den`` (CKS Algorithm 1)."""
    out = np.empty(num.size, dtype=bool)
    todo = np.arange(num.size)
    k = 1
    while todo.size:
        a = uniform_below(den[todo] * k, rng) < num[todo]
        stopped = todo[~a]
        out[stopped] = k % 2 == 1
        todo = todo[a]
        k += 1
    return out


def bernoulli_exp_one(size: int, rng: Randomness) -> np.ndarray:
    ones = np.ones(size, dtype=np.int64)
    return bernoulli_exp_frac(ones, ones, rng)


def geometric_exp_one(size: int, rng: Randomness) -> np.ndarray:
    """V with P[V = v] = (1 - 1/e) e^-v: count successes of Bernoulli(exp(-1)) before a failure."""
    out = np.zeros(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        todo = todo[bernoulli_exp_one(todo.size, rng)]
        out[todo] += 1
    return out


def bernoulli_exp(num: np.ndarray, den: np.ndarray, rng: Randomness) -> np.ndarray:
    """Bernoulli(exp(-num/den)) elementwise for ``num >= 0``, ``den >= 1``."""
    whole = num // den
    out = np.ones(num.size, dtype=bool)
    todo = np.flatnonzero(whole > 0)
    left = whole[todo]
    while todo.size:
        ok = bernoulli_exp_one(todo.size, rng)
        out[todo[~ok]] = False
        left = left[ok] - 1
        todo = todo[ok]
        more = left > 0
        todo, left = todo[more], left[more]
    live = np.flatnonzero(out)
    out[live] = bernoulli_exp_frac(num[live] - whole[live] * den[live], den[live], rng)
    return out


def _fill(size: int, batch: Callable[[int], np.ndarray], rng: Randomness) -> np.ndarray:
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        got = batch(need + need // 2 + 16)
        got = got[: size - filled]
        out[filled : filled + got.size] = got
        filled += got.size
    return out


def discrete_laplace(scale: Fraction, size: int, rng: Randomness) -> np.ndarray:
    s, t = scale.numerator, scale.denominator
    if s >= _LIMIT // 64 or t >= _LIMIT:
        return np.array([reference.discrete_laplace(scale, rng) for _ in range(size)], np.int64)

    def batch(n: int) -> np.ndarray:
        u = rng.integers(s, n)
        u = u[bernoulli_exp_frac(u, np.full(n, s, dtype=np.int64), rng)]
        v = geometric_exp_one(u.size, rng)
        y = (u + s * v) // t
        negative = rng.integers(2, u.size).astype(bool)
        keep = ~(negative & (y == 0))
        out: np.ndarray = np.where(negative, -y, y)[keep]
        return out

    return _fill(size, batch, rng)


def discrete_gaussian(sigma2: Fraction, size: int, rng: Randomness) -> np.ndarray:
    p, q = sigma2.numerator, sigma2.denominator
    t = math.isqrt(p // q) + 1
    # gamma = (|y| - sigma2/t)^2 / (2 sigma2) = (q t |y| - p)^2 / (2 p q t^2); |y| <= 60 t here.
    if (q * t * 60 * t + p) ** 2 >= _LIMIT or 2 * p * q * t * t >= _LIMIT // 64:
        return np.array([reference.discrete_gaussian(sigma2, rng) for _ in range(size)], np.int64)
    den = 2 * p * q * t * t

    def batch(n: int) -> np.ndarray:
        y = discrete_laplace(Fraction(t), n, rng)
        ok = np.empty(n, dtype=bool)
        near = np.abs(y) <= 60 * t  # P[|y| > 60 t] < e^-60; those go to the scalar oracle
        a = q * t * np.abs(y[near]) - p
        ok[near] = bernoulli_exp(a * a, np.full(a.size, den, dtype=np.int64), rng)
        for i in np.flatnonzero(~near).tolist():
            gamma = (abs(int(y[i])) - sigma2 / t) ** 2 / (2 * sigma2)
            ok[i] = reference.bernoulli_exp(gamma, rng)
        return y[ok]

    return _fill(size, batch, rng)
