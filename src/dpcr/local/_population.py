"""Synthetic evolving populations for benchmarks, tests and the planner's workload model."""

from __future__ import annotations

import numpy as np

from dpcr.errors import ConfigError

__all__ = ["synthetic_population"]


def synthetic_population(
    *,
    entries: int,
    domain: int,
    horizon: int,
    seed: int,
    max_changes: int = 2,
    late_insert: float = 0.4,
    delete: float = 0.3,
    within: int | None = None,
) -> np.ndarray:
    """States (n, T) int64, null = ``domain``: each entry is inserted (at period 0, or with
    probability ``late_insert`` at a uniform later period), changes value up to ``max_changes``
    times at uniform periods after insertion, and with probability ``delete`` is deleted at a
    uniform period after insertion. At most ``max_changes + 2`` mutations per entry. With
    ``within=B`` the changes and the delete fall in the B periods after the insertion period
    (a B-time-bounded population: every mutation within B periods of the insertion).

    The data are not private (this is a data generator), so a plain numpy generator is used.
    """
    if entries < 1 or domain < 1 or horizon < 1:
        raise ConfigError("entries, domain and horizon must be >= 1")
    if within is not None and (
        isinstance(within, bool) or not isinstance(within, int) or within < 0
    ):
        raise ConfigError(f"within must be an integer >= 0 (periods), got {within!r}")
    g = np.random.default_rng(seed)
    n, d, T = entries, domain, horizon
    ins = np.where(g.random(n) < late_insert, g.integers(0, T, n), 0)
    states = np.full((n, T), d, dtype=np.int64)
    t = np.arange(T)[None, :]
    alive = t >= ins[:, None]
    value = np.broadcast_to(g.integers(0, d, n)[:, None], (n, T)).copy()
    span = T - ins if within is None else np.full(n, within)  # later periods, after insertion
    for _ in range(max_changes):
        when = ins + 1 + (g.random(n) * span).astype(np.int64)  # may be >= T: no change
        when = np.where(span > 0, when, T)
        new = g.integers(0, d, n)
        value = np.where(t >= when[:, None], new[:, None], value)
    dele = ins + 1 + (g.random(n) * span).astype(np.int64)
    dele = np.where(span > 0, dele, T)
    dele = np.where(g.random(n) < delete, dele, T)
    alive &= t < dele[:, None]
    states[alive] = value[alive]
    return states
