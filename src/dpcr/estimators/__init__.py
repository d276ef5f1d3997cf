"""Estimators: post-processing of released values (no privacy cost).

A disjoint release publishes noisy per-interval changes c̃_i = c_i + Z_i with independent noise
of variance v_i. The running value after interval n is estimated by the prefix sum
Σ_{i<=n} c̃_i, unbiased with variance Σ_{i<=n} v_i (exact, not simulated).
"""

from __future__ import annotations

import numpy as np


def prefix_sums(changes: np.ndarray) -> np.ndarray:
    """Running totals along axis 0 (intervals)."""
    return np.cumsum(np.asarray(changes), axis=0)


def prefix_variances(variances: np.ndarray) -> np.ndarray:
    """Exact variance of each running total for independent per-interval noise."""
    return np.cumsum(np.asarray(variances, dtype=np.float64), axis=0)


def range_sum(changes: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Change over intervals lo..hi (0-based, inclusive)."""
    if not 0 <= lo <= hi < len(changes):
        raise IndexError(f"range {lo}..{hi} outside 0..{len(changes) - 1}")
    total: np.ndarray = np.asarray(changes)[lo : hi + 1].sum(axis=0)
    return total


__all__ = ["prefix_sums", "prefix_variances", "range_sum"]
