"""Rigorous fixed-point bounds on exp(-x) for rational x, in plain integer arithmetic.

A *bound at precision p* of a real number y >= 0 is a pair of integers ``(lo, hi)`` with
``lo <= y * 2**p <= hi``. Nothing here uses floating point; every rounding is directed (floor for
lower bounds, ceiling for upper bounds), so the bounds are proofs, not estimates.
"""

from __future__ import annotations

Bound = tuple[int, int]


def cdiv(a: int, b: int) -> int:
    """Ceiling of a / b for b > 0."""
    return -((-a) // b)


def mul(x: Bound, y: Bound, w: int) -> Bound:
    """Bound of the product of two non-negative numbers bounded at precision ``w``."""
    return (x[0] * y[0]) >> w, cdiv(x[1] * y[1], 1 << w)


def _exp_neg_unit(num: int, den: int, w: int) -> Bound:
    """Bound at precision ``w`` of exp(-num/den) for ``0 <= num <= den`` (alternating series).

    Terms T_j = floor(T_{j-1} num / (den j)) satisfy t_j - j <= T_j <= t_j for the exact terms
    t_j = 2**w x**j / j!; the exact terms decrease from j = 1 on, so the alternating remainder
    after the last non-zero term is at most that term's successor, which is <= J. The total error
    is at most sum_j j + J <= J**2 + J.
    """
    total = 0
    term = 1 << w
    j = 0
    while term:
        total += -term if j & 1 else term
        j += 1
        term = term * num // (den * j)
    err = j * j + j
    return max(total - err, 0), total + err


def exp_neg(num: int, den: int, prec: int) -> Bound:
    """Bound at precision ``prec`` of exp(-num/den) for integers ``num >= 0``, ``den >= 1``.

    The width ``hi - lo`` is at most 2 (a few units in the last place).
    """
    if num < 0 or den < 1 or prec < 0:
        raise ValueError(f"exp_neg needs num >= 0, den >= 1, prec >= 0; got {num}, {den}, {prec}")
    if num == 0:
        return 1 << prec, 1 << prec
    whole, rest = divmod(num, den)
    guard = 24 + 2 * whole.bit_length()
    w = prec + guard
    result = _exp_neg_unit(rest, den, w)
    if whole:
        power: Bound = (1 << w, 1 << w)
        base = _exp_neg_unit(1, 1, w)
        n = whole
        while n:  # binary powering of the bounds of exp(-1)
            if n & 1:
                power = mul(power, base, w)
            n >>= 1
            if n:
                base = mul(base, base, w)
        result = mul(result, power, w)
    lo, hi = result
    return lo >> guard, cdiv(hi, 1 << guard)


def exp_neg_powers(num: int, den: int, count: int, w: int) -> tuple[list[int], list[int]]:
    """Bounds at precision ``w`` of exp(-k num/den) for k = 0, ..., count (by recurrence).

    Each step multiplies by the bound of exp(-num/den), so the relative width grows by about
    2**-(w - 4) per step; callers add log2(count) + 8 guard bits.
    """
    step = exp_neg(num, den, w)
    lo, hi = [1 << w], [1 << w]
    cur: Bound = (1 << w, 1 << w)
    for _ in range(count):
        cur = mul(cur, step, w)
        lo.append(cur[0])
        hi.append(cur[1])
    return lo, hi
