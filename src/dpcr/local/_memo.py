"""Exact worst-case loss of memoized longitudinal protocols (RAPPOR-style, L-GRR, L-OUE, ...).

A memoized protocol draws a *permanent* response ``B_v ~ P1[v, ·]`` once per distinct true value
``v`` and reuses it; every period it publishes an *instantaneous* response ``o_t ~ P2[B, ·]`` of
the memo of the current value. Its nominal guarantee is ε_perm for the memo (or ε₁ for one report).
When values change, the outputs of periods with different values are driven by independent memos,
and an adversary comparing "a throughout" with "a→b" sees the instantaneous channel alone over
many periods: the loss grows with the number of periods, without limit.

For two histories (value per period) the likelihood of an output sequence depends only on, for
each *cell* (pair of values the two histories hold at a period), the histogram of outputs in the
cell. :func:`memoized_loss` enumerates every histogram of every cell and returns
``sup_o |ln P[o | first] - ln P[o | second]|`` -- exact up to floating-point rounding.

>>> from dpcr.local._memo import l_grr_channels, memoized_loss
>>> p1, p2 = l_grr_channels(k=2, eps_perm=2.0, eps_1=1.0)
>>> first, second = [0] * 64, [0] * 32 + [1] * 32
>>> round(memoized_loss(permanent=p1, instantaneous=p2, first=first, second=second).epsilon, 2)
44.79

With k = 4 values the same pair gives 44.58 (tests/local, slow): ``e^44.5`` against a nominal
ε_perm = 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from dpcr.errors import ConfigError

__all__ = ["MemoizedLoss", "l_grr_channels", "memoized_loss"]

_MAX_GRID = 50_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoizedLoss:
    """``epsilon``: the exact sup of |log likelihood ratio|; ``cells``: (value in first, value in
    second, periods); ``histograms``: the worst output histogram per cell."""

    epsilon: float
    cells: tuple[tuple[int, int, int], ...]
    histograms: tuple[tuple[int, ...], ...]


def l_grr_channels(*, k: int, eps_perm: float, eps_1: float) -> tuple[np.ndarray, np.ndarray]:
    """L-GRR (Arcolezi et al. 2021; multi-freq-ldpy): GRR(ε_perm) memo, then GRR with p2, q2 chosen
    so that one report is ε₁-LDP (their formulas)."""
    if k < 2 or not 0 < eps_1 < eps_perm:
        raise ConfigError("need k >= 2 and 0 < eps_1 < eps_perm")
    e_p, e_1 = math.exp(eps_perm), math.exp(eps_1)
    p1 = e_p / (e_p + k - 1)
    q1 = (1 - p1) / (k - 1)
    p2 = (q1 - e_1 * p1) / (-p1 * e_1 + k * q1 * e_1 - q1 * e_1 - p1 * (k - 1) + q1)
    q2 = (1 - p2) / (k - 1)
    perm = np.full((k, k), q1) + np.eye(k) * (p1 - q1)
    inst = np.full((k, k), q2) + np.eye(k) * (p2 - q2)
    return perm, inst


def _compositions(n: int, parts: int) -> np.ndarray:
    if parts == 1:
        return np.array([[n]], dtype=np.int64)
    rows = [
        np.hstack([np.full((c.shape[0], 1), first), c])
        for first in range(n + 1)
        for c in [_compositions(n - first, parts - 1)]
    ]
    return np.vstack(rows)


def memoized_loss(
    *,
    permanent: np.ndarray | Sequence[Sequence[float]],
    instantaneous: np.ndarray | Sequence[Sequence[float]],
    first: Sequence[int],
    second: Sequence[int],
) -> MemoizedLoss:
    """Exact worst-case |log likelihood ratio| of a memoized protocol between two histories."""
    p1 = np.asarray(permanent, dtype=float)
    p2 = np.asarray(instantaneous, dtype=float)
    if p1.ndim != 2 or p2.ndim != 2 or p1.shape[1] != p2.shape[0]:
        raise ConfigError("permanent is (values × memos), instantaneous (memos × outputs)")
    if not (np.allclose(p1.sum(axis=1), 1) and np.allclose(p2.sum(axis=1), 1)):
        raise ConfigError("channel rows must sum to 1")
    if len(first) != len(second) or not first:
        raise ConfigError("the two histories need the same, non-zero number of periods")
    cells: dict[tuple[int, int], int] = {}
    for a, b in zip(first, second, strict=True):
        cells[(int(a), int(b))] = cells.get((int(a), int(b)), 0) + 1
    keys = list(cells)
    comps = [_compositions(cells[c], p2.shape[1]) for c in keys]
    if math.prod(c.shape[0] for c in comps) > _MAX_GRID:
        raise ConfigError("too many output histograms to enumerate; shorten the histories")
    with np.errstate(divide="ignore"):
        log_p1, log_p2 = np.log(p1), np.log(p2)
    seg = [c @ log_p2.T for c in comps]  # per cell: (histograms × memos)

    def loglik(which: int, grid: list[np.ndarray]) -> np.ndarray:
        # Π over memo keys v of Σ_B P1[v, B] Π_{cells with key v} P2[B, o]^H
        total = np.zeros(grid[0].shape[0])
        for v in {c[which] for c in keys}:
            acc = log_p1[v][None, :] + sum(
                g for c, g in zip(keys, grid, strict=True) if c[which] == v
            )
            total += logsumexp(acc, axis=1)
        return total

    best, arg = -1.0, None
    rest = comps[1:]
    idx = np.indices([c.shape[0] for c in rest]).reshape(len(rest), -1) if rest else None
    width = 1 if idx is None else idx.shape[1]
    chunk = max(1, 2_000_000 // width)
    for lo in range(0, comps[0].shape[0], chunk):
        hi = min(lo + chunk, comps[0].shape[0])
        i0 = np.repeat(np.arange(lo, hi), width)
        grid = [seg[0][i0]]
        if idx is not None:
            grid += [s[np.tile(j, hi - lo)] for s, j in zip(seg[1:], idx, strict=True)]
        diff = np.abs(loglik(0, grid) - loglik(1, grid))
        j = int(np.nanargmax(diff))
        if diff[j] > best:
            best = float(diff[j])
            arg = (int(i0[j]), None if idx is None else idx[:, j % width])
    if arg is None:  # pragma: no cover - the grid is never empty
        raise ConfigError("no output histogram to evaluate")
    hists = [tuple(int(x) for x in comps[0][arg[0]])]
    if arg[1] is not None:
        hists += [tuple(int(x) for x in c[j]) for c, j in zip(rest, arg[1], strict=True)]
    return MemoizedLoss(
        epsilon=best,
        cells=tuple((a, b, cells[(a, b)]) for a, b in keys),
        histograms=tuple(hists),
    )
