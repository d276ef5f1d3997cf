"""Columnar engine: first-k bounding and per-interval mutation statistics on numpy columns.

A changelog is given as equal-length 1-D columns, one row per mutation:

* ``entry``: the entry id, which is also the privacy unit. Integers take the fast path; any other
  sortable dtype (strings, for instance) is first mapped to dense codes with :func:`numpy.unique`.
* ``ts``: the time of the mutation, integer microseconds since the epoch (see :mod:`dpcr.timeutil`).
* ``op``: :data:`INSERT`, :data:`UPDATE` or :data:`DELETE` (int8). No function here needs it:
  an insert has ``old`` null and a delete has ``new`` null, which is all the statistics use.
* ``old``, ``new``: the value before and after the mutation, float64, NaN for null.

This module computes exact statistics and draws no noise:

1. :func:`bound_first_k` keeps each entry's first ``k`` mutations in time order;
2. :func:`mutation_stats` counts, per interval ``[start + i·period, start + (i+1)·period)``, the
   kept mutations and sums their value changes ``new − old`` (null = 0), each clamped to
   ``[−clamp, clamp]`` and rounded to an integer.

:func:`dpcr.mechanisms.release_mutation_stats` adds exact discrete Laplace noise to both vectors
(:func:`dpcr.mechanisms.release_first_k_stats` does all three steps).

Sensitivity (unit = entry). Two neighbouring changelogs differ in all the mutations of one entry.
Bounding is per entry, so the other entries keep exactly the same rows; the differing entry keeps
at most ``k`` rows, each adding 1 to one count and an integer in ``[−clamp, clamp]`` to one sum.
Hence the L1 sensitivity is ``k`` for the count vector and ``k·clamp`` for the sum vector.

>>> import numpy as np
>>> entry = np.array([7, 7, 8, 7, 7])
>>> ts = np.array([0, 10, 20, 30, 40])
>>> bound_first_k(entry, ts, 3).tolist()
[True, True, True, True, False]
>>> old = np.array([np.nan, 1.0, np.nan, 2.0, 5.0])
>>> new = np.array([1.0, 2.0, 9.5, 5.0, np.nan])
>>> stats = mutation_stats(bound_first_k(entry, ts, 3), ts, old, new,
...                        start=0, period=25, intervals=2, clamp=5)
>>> stats.counts.tolist(), stats.sums.tolist()
([3, 1], [7, 3])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from dpcr.errors import ChangelogError, ConfigError

__all__ = [
    "DELETE",
    "INSERT",
    "UPDATE",
    "MutationStats",
    "bound_first_k",
    "mutation_stats",
]

INSERT: Final = 0
UPDATE: Final = 1
DELETE: Final = 2

#: Up to this k, bounding makes k passes of ``np.minimum.at`` (O(k·n), no sort by entry);
#: above it, one stable sort by entry (O(n log n), independent of k).
_PASS_LIMIT: Final = 8

#: Integer entry ids whose range (max − min + 1) is at most this many times the row count are
#: used as dense codes directly; sparser ids are mapped with ``np.unique`` (a sort).
_DENSE_SPAN_FACTOR: Final = 4

#: Largest integer up to which every float64 is exact; bounds the float path of the sums.
_EXACT_FLOAT: Final = 2**53


# ------------------------------------------------------------------------------------ validation


def _column(values: npt.ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ConfigError(f"{name} must be a 1-D column, got shape {arr.shape}")
    return arr


def _same_length(columns: dict[str, np.ndarray]) -> int:
    lengths = {name: int(col.shape[0]) for name, col in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ConfigError(f"columns must have equal lengths, got {lengths}")
    return next(iter(lengths.values()))


def _int_column(values: npt.ArrayLike, name: str) -> np.ndarray:
    arr = _column(values, name)
    if arr.dtype.kind not in "iu":
        raise ConfigError(
            f"{name} must hold integers (microseconds since the epoch), got dtype {arr.dtype}"
        )
    return arr


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    return int(value)


# -------------------------------------------------------------------------------------- bounding


def _dense_codes(entry: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes in ``[0, units)`` with equal codes exactly for equal ids, and ``units``."""
    n = entry.shape[0]
    if entry.dtype.kind in "iu":
        lo, hi = int(entry.min()), int(entry.max())
        span = hi - lo + 1
        if span <= _DENSE_SPAN_FACTOR * n + 1024:
            if entry.dtype.kind == "u":
                codes = (entry - entry.dtype.type(lo)).astype(np.intp)
            else:  # entry - lo is in [0, span); wrap-around in int64 still gives it exactly
                codes = entry.astype(np.intp, copy=False)
                if lo != 0:
                    codes = codes - np.intp(lo)
            return codes, span
    try:
        _, inverse = np.unique(entry, return_inverse=True)
    except TypeError as exc:
        raise ConfigError(f"entry ids must be sortable, got dtype {entry.dtype}: {exc}") from exc
    inv = inverse.reshape(-1).astype(np.intp, copy=False)
    return inv, int(inv.max()) + 1


def _is_sorted(ts: np.ndarray) -> bool:
    return ts.shape[0] < 2 or bool(np.all(ts[1:] >= ts[:-1]))


def _time_order(ts: np.ndarray) -> np.ndarray:
    """The permutation that orders rows by (ts, input position): a stable argsort of ``ts``.

    An unstable (faster) argsort is used and then repaired: rows with equal ``ts`` sit in
    contiguous runs, and only the rows inside such runs are re-sorted by position.
    """
    order = np.argsort(ts, kind="quicksort")
    sorted_ts = ts[order]
    tied = sorted_ts[1:] == sorted_ts[:-1]
    if tied.any():
        in_run = np.zeros(ts.shape[0], dtype=bool)
        in_run[:-1] |= tied
        in_run[1:] |= tied
        where = np.flatnonzero(in_run)
        sub = order[where]
        order[where] = sub[np.lexsort((sub, sorted_ts[where]))]
    return order


def _first_k_by_passes(codes: np.ndarray, units: int, k: int) -> np.ndarray:
    """Keep mask of the first ``k`` positions of every code, in position order.

    Pass j finds, for every code, its smallest position not yet kept (``np.minimum.at`` over a
    key equal to the position, or the sentinel ``n`` once kept), and keeps it.
    """
    n = codes.shape[0]
    dtype = np.int32 if n < np.iinfo(np.int32).max else np.int64
    key = np.arange(n, dtype=dtype)
    kept = np.zeros(n, dtype=bool)
    first = np.empty(units, dtype=dtype)
    for _ in range(k):
        first.fill(n)
        np.minimum.at(first, codes, key)
        rows = first[first < n]
        if rows.size == 0:
            break
        kept[rows] = True
        key[rows] = n
    return kept


def _first_k_by_sort(codes: np.ndarray, k: int) -> np.ndarray:
    """Keep mask of the first ``k`` positions of every code: stable sort, rank within runs."""
    n = codes.shape[0]
    order = np.argsort(codes, kind="stable")
    grouped = codes[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = grouped[1:] != grouped[:-1]
    start_pos = np.flatnonzero(starts)
    run_start = np.repeat(start_pos, np.diff(np.append(start_pos, n)))
    kept = np.zeros(n, dtype=bool)
    kept[order[np.arange(n) - run_start < k]] = True
    return kept


def bound_first_k(entry: npt.ArrayLike, ts: npt.ArrayLike, k: int) -> np.ndarray:
    """Boolean mask of the rows kept when each entry keeps its first ``k`` mutations.

    "First" is in the order of (``ts``, position in the input): rows with equal timestamps keep
    their input order, and the input need not be sorted. The result for one entry depends on
    that entry's rows only.

    Cost: O(n) checks; if ``ts`` is not non-decreasing, one argsort of ``ts``; then ``k`` linear
    passes (for ``k`` <= 8) or one stable sort by entry. Integer ids whose range is at most about
    4n are used directly; other ids cost one ``np.unique``.

    >>> bound_first_k([1, 2, 1, 1, 2], [5, 5, 1, 1, 9], 2).tolist()
    [False, True, True, True, True]
    """
    entry_col = _column(entry, "entry")
    ts_col = _int_column(ts, "ts")
    n = _same_length({"entry": entry_col, "ts": ts_col})
    k = _positive_int(k, "k")
    if n == 0:
        return np.zeros(0, dtype=bool)
    if k >= n:
        return np.ones(n, dtype=bool)
    codes, units = _dense_codes(entry_col)
    order = None if _is_sorted(ts_col) else _time_order(ts_col)
    seq = codes if order is None else codes[order]
    kept_seq = _first_k_by_passes(seq, units, k) if k <= _PASS_LIMIT else _first_k_by_sort(seq, k)
    if order is None:
        return kept_seq
    kept = np.zeros(n, dtype=bool)
    kept[order[kept_seq]] = True
    return kept


# ----------------------------------------------------------------------------------- aggregation


@dataclass(frozen=True, slots=True, kw_only=True)
class MutationStats:
    """Exact (not private) per-interval statistics of the kept mutations.

    ``counts[i]`` and ``sums[i]`` (int64) cover ``[start + i·period, start + (i+1)·period)``;
    every summand of ``sums`` lies in ``[−clamp, clamp]``.
    """

    counts: np.ndarray
    sums: np.ndarray
    start: int
    period: int
    clamp: int

    def __post_init__(self) -> None:
        if self.counts.shape != self.sums.shape or self.counts.ndim != 1:
            raise ConfigError(
                f"counts and sums must be 1-D of equal shape, got {self.counts.shape} "
                f"and {self.sums.shape}"
            )
        _positive_int(self.period, "period")
        _positive_int(self.clamp, "clamp")

    @property
    def intervals(self) -> int:
        return int(self.counts.shape[0])


def _value_changes(old: np.ndarray, new: np.ndarray, clamp: int, rows: np.ndarray) -> np.ndarray:
    """``round(clip(new − old, ±clamp))`` with null (NaN) = 0; ``rows`` maps back for errors."""
    change: np.ndarray = new - old
    bad = ~np.isfinite(change)
    if bad.any():
        where = np.flatnonzero(bad)
        o, w = old[where], new[where]
        infinite = np.flatnonzero(np.isinf(o) | np.isinf(w))
        if infinite.size:
            i = where[infinite[0]]
            row = int(rows[i])
            raise ChangelogError(
                f"row {row}: old and new must be finite or NaN (null), got old={old[i]!r}, "
                f"new={new[i]!r}",
                record=row + 1,
                field="old" if np.isinf(old[i]) else "new",
                reason="infinite_value",
            )
        change[where] = np.where(np.isnan(w), 0.0, w) - np.where(np.isnan(o), 0.0, o)
    np.clip(change, -clamp, clamp, out=change)
    np.rint(change, out=change)
    return change


def mutation_stats(
    kept: npt.ArrayLike,
    ts: npt.ArrayLike,
    old: npt.ArrayLike,
    new: npt.ArrayLike,
    *,
    start: int,
    period: int,
    intervals: int,
    clamp: int,
) -> MutationStats:
    """Per-interval count of the kept mutations and sum of their clamped value changes.

    A kept row at time ``t`` falls in interval ``(t − start) // period``; every kept row must
    fall in ``[0, intervals)`` (the horizon is public, so it is given, never read from the data),
    else :class:`~dpcr.errors.ChangelogError` names the row. Its change is ``new − old`` with
    null (NaN) = 0, clamped to ``[−clamp, clamp]`` and rounded to the nearest integer (ties to
    even), so sums are released on the integer grid and stay within the stated sensitivity.

    >>> s = mutation_stats([True, True, False], [0, 15, 16], [np.nan, 3.0, 0.0],
    ...                    [250.0, 3.4, 1.0], start=0, period=10, intervals=2, clamp=100)
    >>> s.counts.tolist(), s.sums.tolist()
    ([1, 1], [100, 0])
    """
    kept_col = _column(kept, "kept")
    if kept_col.dtype != np.bool_:
        raise ConfigError(f"kept must be a boolean mask, got dtype {kept_col.dtype}")
    ts_col = _int_column(ts, "ts")
    old_col = _column(old, "old").astype(np.float64, copy=False)
    new_col = _column(new, "new").astype(np.float64, copy=False)
    _same_length({"kept": kept_col, "ts": ts_col, "old": old_col, "new": new_col})
    start = _int(start, "start")
    period = _positive_int(period, "period")
    intervals = _positive_int(intervals, "intervals")
    clamp = _positive_int(clamp, "clamp")

    rows = np.flatnonzero(kept_col)
    index = ts_col[rows].astype(np.int64, copy=False) - start
    index //= period
    if index.size and (index.min() < 0 or index.max() >= intervals):
        outside = np.flatnonzero((index < 0) | (index >= intervals))[0]
        row = int(rows[outside])
        raise ChangelogError(
            f"row {row}: ts {int(ts_col[row])} is outside the horizon [{start}, "
            f"{start + intervals * period}) of {intervals} intervals of {period}; "
            "drop rows outside the horizon or widen it",
            record=row + 1,
            field="ts",
            reason="outside_horizon",
        )
    change = _value_changes(old_col[rows], new_col[rows], clamp, rows)
    counts = np.bincount(index, minlength=intervals).astype(np.int64, copy=False)
    if clamp * rows.size < _EXACT_FLOAT:  # every partial sum is an exactly representable integer
        sums = np.rint(np.bincount(index, weights=change, minlength=intervals)).astype(np.int64)
    else:
        sums = np.zeros(intervals, dtype=np.int64)
        np.add.at(sums, index, change.astype(np.int64))
    return MutationStats(counts=counts, sums=sums, start=start, period=period, clamp=clamp)
