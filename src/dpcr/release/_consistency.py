"""Consistency as post-processing, opt-in per query (docs/uncertainty.md).

Modes (:data:`CONSISTENCY_MODES`), applied to the published rows of a query, interval by interval
in order (online: interval i's published values depend only on the estimator's values of
interval i and the published values of interval i - 1, so a published value never changes when
later intervals are released, and a rerun republishes identical rows):

* ``nonnegative`` -- running values (a window plan: window values) are >= 0;
* ``monotone`` -- running values never decrease (for quantities that only grow, e.g. "entries
  ever registered"); not for window plans;
* ``sum_to_total`` -- the keys of a histogram add up to the published running value of the query
  named by ``total`` (a count over the same entries), interval by interval.

Each interval's values are the Euclidean projection of the estimator's values onto the set the
modes define (keys have equal noise, so this is the variance-weighted projection): clamping for
``nonnegative``/``monotone``, ``x = max(lower, e + τ)`` with ``τ`` found by bisection when the keys
must sum to a total. With a running plan, the published change is the difference of consecutive
published running values. All of this reads only released (DP) values: the privacy guarantee is
unchanged. The published interval is the estimator's interval widened to contain the published
value and, with ``nonnegative``, cut at 0 (the truth is >= 0): its coverage is at least the
estimator's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpcr.errors import ConfigError
from dpcr.queries import Count, Histogram, Query, Sum

__all__ = [
    "CONSISTENCY_MODES", "Consistency", "check_consistency", "consistent_series",
    "project_interval",
]

CONSISTENCY_MODES = ("nonnegative", "monotone", "sum_to_total")


@dataclass(frozen=True, slots=True, kw_only=True)
class Consistency:
    """The consistency modes of one query; ``total``: the query whose running value the keys
    sum to (``sum_to_total`` only)."""

    modes: tuple[str, ...] = ()
    total: str | None = None

    def __post_init__(self) -> None:
        modes = tuple(self.modes)
        object.__setattr__(self, "modes", modes)
        for m in modes:
            if m not in CONSISTENCY_MODES:
                raise ConfigError(
                    f"consistency mode {m!r} is unknown; choose from {list(CONSISTENCY_MODES)}"
                )
        if len(set(modes)) != len(modes):
            raise ConfigError(f"consistency lists a mode twice: {list(modes)}")
        if ("sum_to_total" in modes) != (self.total is not None):
            raise ConfigError(
                "consistency 'sum_to_total' needs total = \"<name of a count query>\" (the "
                "running value the keys must add up to), and total needs 'sum_to_total'"
            )


def project_interval(
    raw: np.ndarray, *, lower: np.ndarray | None, total: float | None
) -> np.ndarray:
    """The Euclidean projection of ``raw`` (one value per key) onto ``{x >= lower}`` (elementwise;
    None: no bound) intersected with ``{sum x = total}`` (None: no total). When the total is
    below ``sum(lower)`` no such x exists: the keys keep ``lower`` (docs/uncertainty.md)."""
    raw = np.asarray(raw, dtype=np.float64)
    lo = np.full(raw.shape, -np.inf) if lower is None else np.asarray(lower, dtype=np.float64)
    out: np.ndarray
    if total is None:
        out = np.maximum(raw, lo)
        return out
    if lower is None:
        out = raw + (total - raw.sum()) / raw.size
        return out
    if lo.sum() >= total:
        out = lo.copy()
        return out

    def excess(tau: float) -> float:
        return float(np.maximum(lo, raw + tau).sum()) - total

    a = float(np.min(lo - raw)) - 1.0  # sum = sum(lo) < total
    b = float(total - raw.sum()) / raw.size + 1.0  # raw + b > raw + shift: sum > total
    while excess(b) < 0:
        b = 2 * b + 1
    for _ in range(200):
        mid = (a + b) / 2
        if excess(mid) < 0:
            a = mid
        else:
            b = mid
    x: np.ndarray = np.maximum(lo, raw + b)
    # put the last rounding error on the largest free key so the sum is exact
    free = np.flatnonzero(x > lo)
    if free.size:
        j = free[np.argmax(x[free])]
        x[j] += total - x.sum()
    return x


def consistent_series(
    estimate: np.ndarray, *, modes: Sequence[str], total: np.ndarray | None
) -> np.ndarray:
    """Published running values (n x keys) from the estimator's (n x keys), online: row i from
    row i of ``estimate`` and the published row i - 1. ``total``: the published total per row."""
    n = estimate.shape[0]
    out = np.empty_like(estimate, dtype=np.float64)
    prev: np.ndarray | None = None
    for i in range(n):
        lower: np.ndarray | None = None
        if "nonnegative" in modes:
            lower = np.zeros(estimate.shape[1])
        if "monotone" in modes and prev is not None:
            lower = prev if lower is None else np.maximum(lower, prev)
        t = None if total is None else float(total[i])
        if t is not None and "nonnegative" in modes:
            t = max(t, 0.0)
        out[i] = project_interval(estimate[i], lower=lower, total=t)
        prev = out[i]
    return out


def check_consistency(
    consistency: Mapping[str, Consistency], queries: Sequence[Query], plan_kind: str
) -> None:
    """Refuse modes that do not fit their query or the plan, naming the key and the fix."""
    by_name = {q.name: q for q in queries}
    for name, con in consistency.items():
        if not isinstance(con, Consistency):
            raise ConfigError(f"consistency of {name!r} must be a dpcr.Consistency, got {con!r}")
        q = by_name.get(name)
        if q is None:
            raise ConfigError(f"consistency names query {name!r}, which is not declared")
        if "nonnegative" in con.modes and isinstance(q, Sum) and q.steps_range[0] < 0:
            raise ConfigError(
                f"query {name!r}: consistency 'nonnegative' needs lower >= 0 (the sum can be "
                f"negative with lower = {q.lower}); remove the mode or raise lower"
            )
        if "monotone" in con.modes and plan_kind == "window":
            raise ConfigError(
                f"query {name!r}: consistency 'monotone' is for running totals; a window plan's "
                "values go up and down. Remove the mode"
            )
        if con.total is not None and isinstance(q, Histogram) and q.open:
            raise ConfigError(
                f"query {name!r}: consistency 'sum_to_total' is for histograms with declared "
                "keys; an open histogram publishes only some of its keys: remove it"
            )
        if con.total is not None:
            total = by_name.get(con.total)
            if not isinstance(q, Histogram):
                raise ConfigError(
                    f"query {name!r}: consistency 'sum_to_total' is for histograms (kind = "
                    "\"histogram\"); remove it"
                )
            if not isinstance(total, Count) or total.name == name:
                raise ConfigError(
                    f"query {name!r}: total = {con.total!r} must name a count query declared "
                    "in [[queries]]"
                )
            if "sum_to_total" in consistency.get(total.name, Consistency()).modes:
                raise ConfigError(f"query {con.total!r} is a total: it cannot itself have one")
