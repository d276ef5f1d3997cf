"""Exact inversion tables: sampling by comparing uniform 64-bit words with exact boundaries.

A table describes a distribution on {0, 1, ..., m} by boundaries 0 < b_1 <= ... <= b_m < 1
(b_i = P[value < i]); a uniform real u in [0, 1) gives ``value(u) = #{i : b_i <= u}``, so
P[value = k] = b_{k+1} - b_k exactly. The value m stands for "m or more" when the support is
infinite; the caller then draws the remainder by memorylessness or by an exact tail sampler.

The boundaries are irrational (they involve exp of rationals); they are known through rigorous
integer bounds (:mod:`dpcr.noise._exact`) at any precision. A word U holds the first 64 bits of
u, and the table stores F_i = floor(b_i 2**64) exactly: b_i <= u is decided by ``F_i < U``
(true) or ``F_i > U`` (false). Only when ``U == F_i`` (probability about m 2**-64 per draw) are
more bits of u drawn and compared with more bits of b_i, in plain Python. No floating-point
number takes part in any decision.

A guide table on the top bits of U makes a draw O(1): most buckets contain at most one boundary,
so ``value = base[j] + (U > next[j])``; the rare crowded buckets use a binary search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from dpcr.noise._randomness import Randomness
from dpcr.noise._table_cache import load_floors, save_floors

BoundsFn = Callable[[int], tuple[Sequence[int], Sequence[int]]]

_U64_MAX: Final = (1 << 64) - 1
_MAX_GUARD: Final = 1 << 16


class InversionTable:
    """Exact inversion on m boundaries given by ``bounds(p) -> (lo, hi)`` lists with
    ``lo[i] <= b_{i+1} 2**p <= hi[i]``. ``key``: a name of the distribution that determines
    ``bounds`` and ``m`` (its kind and exact parameters), under which the floors are kept in
    the folder of :func:`dpcr.noise.table_cache` (None: always computed)."""

    __slots__ = ("_base", "_bounds", "_next", "_shift", "floors", "m")

    def __init__(self, bounds: BoundsFn, m: int, *, key: str | None = None) -> None:
        if m < 1:
            raise ValueError("a table needs at least one boundary")
        self._bounds = bounds
        self.m = m
        floors = load_floors(key, m) if key is not None else None
        if floors is None:
            floors = np.array(self._floors(64, range(m)), dtype=np.uint64)
            if np.any(np.diff(floors.astype(object)) < 0):  # pragma: no cover - a proof bug
                raise RuntimeError("inversion table boundaries are not sorted")
            if key is not None:
                save_floors(key, floors)
        self.floors = floors
        bits = max(10, min(22, (4 * (m + 1)).bit_length()))
        self._shift = np.uint64(64 - bits)
        starts = np.arange(1 << bits, dtype=np.uint64) << self._shift
        base = np.searchsorted(self.floors, starts, side="left")
        nxt = np.full(starts.size, _U64_MAX, dtype=np.uint64)
        has = base < m
        nxt[has] = self.floors[base[has]]
        last_in_bucket = starts + np.uint64((1 << (64 - bits)) - 1)
        two = base + 1 < m
        crowded = np.zeros(starts.size, dtype=bool)
        crowded[two] = self.floors[base[two] + 1] <= last_in_bucket[two]
        base32 = base.astype(np.int32)
        base32[crowded] = -1  # marks buckets needing a binary search
        self._base = base32
        self._next = nxt

    def _floors(self, p: int, indices: range | list[int]) -> list[int]:
        """floor(b_{i+1} 2**p) for i in ``indices``, exactly (raise precision until decided)."""
        guard = 32
        while guard <= _MAX_GUARD:
            lo, hi = self._bounds(p + guard)
            out = [lo[i] >> guard for i in indices]
            if all(hi[i] >> guard == f for i, f in zip(indices, out, strict=True)):
                return out
            guard *= 2
        raise RuntimeError(
            "cannot separate a table boundary from a dyadic number"
        )  # pragma: no cover

    def draw(self, words: np.ndarray, rng: Randomness) -> np.ndarray:
        """Values (int64) for the uniform words ``words``; ``rng`` supplies extra bits for ties."""
        j = words >> self._shift
        base = self._base[j]
        nxt = self._next[j]
        values: np.ndarray = (base + (words > nxt)).astype(np.int64)
        tie = words == nxt
        crowded = np.flatnonzero(base < 0)
        if crowded.size:
            w = words[crowded]
            v = np.searchsorted(self.floors, w, side="left")
            values[crowded] = v
            tie[crowded] = (v < self.m) & (self.floors[np.minimum(v, self.m - 1)] == w)
        for i in np.flatnonzero(tie).tolist():
            values[i] = self.resolve(int(words[i]), rng)
        return values

    def resolve(self, word: int, rng: Randomness) -> int:
        """The exact value for a word equal to some F_i: draw further bits of u lazily."""
        count = int(np.searchsorted(self.floors, np.uint64(word), side="left"))
        v, p = word, 64  # u lies in [v, v + 1) / 2**p
        for i in range(count, self.m):
            if int(self.floors[i]) != word:
                break
            while True:  # decide b_{i+1} <= u
                f = self._floors(p, [i])[0]
                if f != v:
                    break
                v = (v << 64) | int(rng._words(1)[0])
                p += 64
            if f > v:
                break
            count += 1
        return count


def sign_bits(size: int, rng: Randomness) -> np.ndarray:
    """``size`` independent fair bits as a bool array."""
    words = rng._words((size + 63) // 64)
    bits: np.ndarray = np.unpackbits(words.view(np.uint8))[:size].view(bool)
    return bits
