"""A dense privacy-loss distribution on a grid, in numpy: the PLD method's composition core.

:class:`GridPld` is what dp-accounting's ``DensePLDPmf`` is for a symmetric mechanism (the
remove and add directions alike): masses at the losses ``(lo + i) h`` and a mass at +∞, a
pessimistic (dominating) description of the mechanism. Composition is convolution (by FFT),
self-composition an FFT power; both keep dp-accounting's rules: the k-fold self-composition is
computed on the index range that Chernoff bounds (40 orders of the moment generating function)
show holds all but ``tail`` of the mass, and ``tail`` is added to the mass at +∞; a composition
of two moves at most ``tail/2`` of the lowest losses onto the first kept loss (up: pessimistic)
and at most ``tail/2`` of the highest to +∞. ``get_epsilon_for_delta`` and
``get_delta_for_epsilon`` are dp-accounting's formulas, vectorised (they scan the losses
above the answer from the top; the Python loops took seconds on large grids).

Every array is bounded: a composition whose grid would exceed :data:`MAX_POINTS` raises
:class:`GridTooLarge` (the PLD method then does not apply and the other accountants state the
guarantee).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["MAX_POINTS", "GridPld", "GridTooLarge"]

#: The most grid points a composed PLD may have (32 MB of float64).
MAX_POINTS = 1 << 22


class GridTooLarge(Exception):
    """A PLD would need more than :data:`MAX_POINTS` grid points."""


def _fast_len(n: int) -> int:
    """The smallest 2^a 3^b >= n (a fast FFT length)."""
    best = 1 << max(0, (n - 1).bit_length())
    p3 = 3
    while p3 < best:
        best = min(best, p3 << max(0, (-(-n // p3) - 1).bit_length()))
        p3 *= 3
    return best


def _moments(p: np.ndarray) -> list[tuple[float, float]]:
    """(order, E e^{order·i}) at the 40 orders ±j/n, j = 1..20 (dp-accounting's), i the grid
    index: powers of e^{±i/n} (in [e^-20, e^20]); one matrix product for short grids."""
    n = p.size
    index = np.arange(n, dtype=np.float64) / n
    out: list[tuple[float, float]] = []
    j = np.arange(1, 21, dtype=np.float64)
    if n <= 1 << 14:
        # the exponents once, negated in place for the negative orders (exactly the numbers
        # of exp(±1 · outer): a negation is exact)
        exponents = np.outer(index, j)
        powers = np.exp(exponents)
        for sign in (1.0, -1.0):
            if sign < 0:
                np.exp(np.negative(exponents, out=exponents), out=powers)
            mgf = p @ powers
            out.extend((sign * float(k) / n, float(m)) for k, m in zip(j, mgf, strict=True))
        return out
    for sign in (1.0, -1.0):
        step = np.exp(sign * index)
        weighted = p.copy()
        for k in range(1, 21):
            weighted *= step
            out.append((sign * k / n, float(np.sum(weighted))))
    return out


def _truncation(p: np.ndarray, count: int, tail: float) -> tuple[int, int]:
    """The index range ``[lower, upper]`` of the ``count``-fold composition of ``p`` that
    Chernoff bounds at the orders of :func:`_moments` show holds all but ``tail`` of the
    mass: each order's bound ``(count log E e^{order·i} + log(2/tail)) / order``, rounded up
    (positive orders) or down. :func:`_quick_truncation` when it can tell those roundings."""
    quick = _quick_truncation(p, count, tail) if p.size <= 1 << 14 else None
    return quick if quick is not None else _matrix_truncation(p, count, tail)


def _matrix_truncation(p: np.ndarray, count: int, tail: float) -> tuple[int, int]:
    """:func:`_truncation`'s range from the moment matrix of :func:`_moments`."""
    lower, upper = 0, (p.size - 1) * count
    for order, mgf in _moments(p):
        if not mgf > 0:
            continue
        bound = (count * math.log(mgf) + math.log(2 / tail)) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            upper = min(upper, math.ceil(bound))
        else:
            lower = max(lower, math.floor(bound))
    return lower, upper


def _quick_truncation(p: np.ndarray, count: int, tail: float) -> tuple[int, int] | None:
    """:func:`_truncation`'s range from moments computed as running products (the powers of
    ``e^{±i/n}``: 2 exponentials per index instead of 40), or None where that might differ.

    Both ways compute each moment, a sum of n nonnegative terms, within a relative
    ``eta = (n + 100) 2.3e-16`` of its exact value (each term within a few dozen ulps: the
    index, the exponential, up to 20 products; the sum of n terms within n ulps), so the two
    values of a bound differ by at most ``count 4 eta / |order|`` plus the rounding of its
    own few operations; the margin below is that, doubled. Where rounding ``bound ± margin``
    gives one integer, it is the integer the matrix of :func:`_moments` gives; otherwise
    (an order's bound within the margin of an integer) None, and the caller computes that."""
    n = p.size
    eta = (n + 100) * 2.3e-16
    index = np.arange(n, dtype=np.float64) / n
    lower, upper = 0, (n - 1) * count
    for sign in (1.0, -1.0):
        step = np.exp(sign * index)
        weighted = p.copy()
        for k in range(1, 21):
            weighted *= step
            mgf = float(np.sum(weighted))
            if not 1e-300 < mgf < 1e300:
                return None
            order = sign * float(k) / n
            log_mgf = math.log(mgf)
            bound = (count * log_mgf + math.log(2 / tail)) / order
            margin = 2 * (
                (count * (4 * eta + 1e-15 * (1 + abs(log_mgf))) + 1e-13) / abs(order)
                + 1e-13 * abs(bound)
            )
            if sign > 0:
                edge = math.ceil(bound - margin)
                if edge != math.ceil(bound + margin):
                    return None
                upper = min(upper, edge)
            else:
                edge = math.floor(bound - margin)
                if edge != math.floor(bound + margin):
                    return None
                lower = max(lower, edge)
    return lower, upper


def _check(points: int) -> None:
    if points > MAX_POINTS:
        raise GridTooLarge(f"a PLD of {points:,} grid points (limit {MAX_POINTS:,})")


@dataclass(frozen=True, slots=True, eq=False)
class GridPld:
    """Masses ``probs[i]`` at the loss ``(lo + i) h``, and ``infinity`` at +∞ (a symmetric,
    pessimistic PLD; see the module docstring)."""

    h: float
    lo: int
    probs: np.ndarray
    infinity: float

    @staticmethod
    def from_masses(h: float, masses: dict[int, float], infinity: float) -> GridPld:
        """From ``{grid index: mass}``."""
        lo, hi = min(masses), max(masses)
        _check(hi - lo + 1)
        probs = np.zeros(hi - lo + 1)
        for i, p in masses.items():
            probs[i - lo] += p
        return GridPld(h=h, lo=lo, probs=probs, infinity=infinity)

    def self_compose(self, count: int, tail: float = 1e-15) -> GridPld:
        """The ``count``-fold composition (dp-accounting's ``self_compose``)."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        if count == 1:
            return self
        p = np.maximum(self.probs, 0.0)
        n = p.size
        lower, upper = _truncation(p, count, tail)
        length = upper - lower + 1
        _check(max(length, n))
        size = _fast_len(max(length, n))
        full = np.fft.irfft(np.fft.rfft(p, size) ** count, size)
        out = np.roll(full, -lower)[:length]
        infinity = tail - math.expm1(count * math.log1p(-self.infinity))
        return GridPld(
            h=self.h,
            lo=self.lo * count + lower,
            probs=np.maximum(out, 0.0),
            infinity=min(1.0, infinity),
        )

    def compose(self, other: GridPld, tail: float = 1e-15) -> GridPld:
        """The composition with ``other`` (same grid), tails truncated pessimistically."""
        if other.h != self.h:
            raise ValueError(f"grids differ: {self.h} and {other.h}")
        n = self.probs.size + other.probs.size - 1
        _check(n)
        size = _fast_len(n)
        probs = np.fft.irfft(np.fft.rfft(self.probs, size) * np.fft.rfft(other.probs, size), size)[
            :n
        ]
        probs = np.maximum(probs, 0.0)
        infinity = self.infinity + other.infinity - self.infinity * other.infinity
        cs = np.cumsum(probs)
        left = int(np.searchsorted(cs, tail / 2, side="right"))
        cs_right = np.cumsum(probs[::-1])
        right = n - int(np.searchsorted(cs_right, tail / 2, side="right"))
        right = max(right, left + 1)
        kept = probs[left:right].copy()
        kept[0] += float(np.sum(probs[:left]))  # the lowest losses move up to the first kept
        infinity += float(np.sum(probs[right:]))
        return GridPld(
            h=self.h, lo=self.lo + other.lo + left, probs=kept, infinity=min(1.0, infinity)
        )

    def _losses(self) -> np.ndarray:
        out: np.ndarray = (np.arange(self.probs.size) + self.lo) * self.h
        return out

    def get_delta_for_epsilon(self, epsilon: float) -> float:
        """δ(ε) = P(∞) + Σ_{ℓ > ε} p(ℓ) (1 − e^{ε − ℓ})."""
        losses = self._losses()
        above = losses > epsilon
        return float(self.infinity + np.dot(-np.expm1(epsilon - losses[above]), self.probs[above]))

    def get_epsilon_for_delta(self, delta: float) -> float:
        """The smallest ε >= 0 with δ(ε) <= ``delta`` (math.inf when the mass at +∞ exceeds it):
        dp-accounting's scan from the highest loss, vectorised over the positive losses (an
        answer of at least 0 depends only on them)."""
        if self.infinity > delta:
            return math.inf
        losses = self._losses()
        positive = np.nonzero(losses > 0)[0]
        if positive.size == 0:
            return 0.0
        loss = losses[positive][::-1]  # descending
        prob = self.probs[positive][::-1]
        upper = self.infinity + np.cumsum(prob)  # after adding each loss
        with np.errstate(under="ignore"):
            lower = np.cumsum(np.exp(-loss) * prob)
        # before adding loss j: the masses above it
        up_before = np.concatenate(([self.infinity], upper[:-1]))
        low_before = np.concatenate(([0.0], lower[:-1]))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            candidate = np.log((up_before - delta) / low_before)
        stop = (up_before > delta) & (low_before > 0) & (candidate >= loss)
        # a loss so large that e^{−loss} is 0: the answer is that loss
        huge = (upper >= delta) & (lower == 0)
        first_stop = int(np.argmax(stop)) if stop.any() else loss.size
        first_huge = int(np.argmax(huge)) if huge.any() else loss.size
        if first_huge < first_stop:
            return max(0.0, float(loss[first_huge]))
        if first_stop < loss.size:
            return float(candidate[first_stop])
        total_up, total_low = float(upper[-1]), float(lower[-1])
        if total_up <= total_low + delta:
            return 0.0
        return math.log((total_up - delta) / total_low)
