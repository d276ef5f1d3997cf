"""Coupled-worlds (CW) privacy of a count mechanism run on a sliding window of i.i.d. rows.

Setting (papers/coupled-worlds-streaming-composition.txt, section 2): rows are i.i.d. Bernoulli(p);
a window holds n rows in 1/c blocks of b = cn rows; each step the oldest block is replaced; the
mechanism M sees the window's count k and outputs y with probability ``kernel[k][y]`` (the
identity kernel is the exact, noiseless count). The adversary's auxiliary information is the last
(1 − c)n rows of the window (X_{i↓} = z). The private information is one row's value v; alt(X)
replaces that row by a fresh draw from D (the scrubbed world).

:func:`single_step` computes, for one window with the private row in the unseen block x_{i1},
the slopes ε_{j|z} = |ln P0(y_j|z)/P1(y_j|z)|, shifts δ_{j|z} (erratum 6: Σ over y ∈ S of
P(M = y)), ε_max, δ_max and γ = max_j max_{z,z'} |ln P0(y_j|z)/P1(y_j|z')| over the outputs W that
every z can produce (Assumption 1; γ = ∞ when W is empty or a ratio is unbounded), and Theorem 4's
bound ε_t ≤ ε_max + (t − 1)γ, δ_t ≤ t·δ_max. :func:`brute_force_stream` computes the composed
G = (M(X_1), …, M(X_t)) exactly by enumerating all 2^L streams (L = n + b(t − 1)), for every
private row outside the final auxiliary rows, conditioning on the final window's X_{t↓} = z as in
Lemmas 1-2. Probabilities are float64 (enumeration sums ≤ 2^18 terms; relative error ≲ 1e-12).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcr.errors import ConfigError

__all__ = ["CwBound", "CwExact", "brute_force_stream", "single_step"]


def _check(n: int, block: int, p: Fraction, kernel: np.ndarray) -> None:
    if n < 1 or block < 1 or n % block:
        raise ConfigError(f"the window n={n} must be a positive multiple of the block b={block}")
    if not 0 < p < 1:
        raise ConfigError(f"p must be in (0, 1), got {p}")
    if kernel.shape[0] != n + 1 or np.any(kernel < 0) or not np.allclose(kernel.sum(axis=1), 1):
        raise ConfigError(f"the kernel needs n + 1 = {n + 1} rows, each a distribution")


def _binom(k: int, p: float) -> np.ndarray:
    return np.array([math.comb(k, j) * p**j * (1 - p) ** (k - j) for j in range(k + 1)])


@dataclass(frozen=True, slots=True, kw_only=True)
class CwBound:
    epsilon_max: float
    delta_max: float
    gamma: float
    assumption_1: bool

    def theorem4(self, t: int) -> tuple[float, float]:
        """(ε_max + (t − 1)γ, min(1, t·δ_max))."""
        eps = self.epsilon_max + (t - 1) * self.gamma if t > 1 else self.epsilon_max
        return eps, min(1.0, t * self.delta_max)


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((a > 0) & (b > 0), np.abs(np.log(a / np.where(b > 0, b, 1))), np.nan)


def single_step(*, n: int, block: int, p: Fraction, kernel: np.ndarray) -> CwBound:
    """ε_max, δ_max, γ of one window (private row in the unseen block), over z and v ∈ {0, 1}."""
    kernel = np.asarray(kernel, dtype=np.float64)
    _check(n, block, p, kernel)
    pf = float(p)
    rest = _binom(block - 1, pf)  # the other rows of the unseen block
    aux = n - block
    p0 = np.zeros((2, aux + 1, kernel.shape[1]))  # [v, sum z, y]; only sum z matters for counts
    for v in (0, 1):
        for s in range(aux + 1):
            for j, w in enumerate(rest):
                p0[v, s] += w * kernel[v + j + s]
    p1 = (1 - pf) * p0[0] + pf * p0[1]
    w_mask = np.all(p0 > 0, axis=(0, 1)) & np.all(p1 > 0, axis=0)
    eps_max, delta_max = 0.0, 0.0
    for v in (0, 1):
        for s in range(aux + 1):
            for a, b in ((p0[v, s], p1[s]), (p1[s], p0[v, s])):
                r = _ratio(a, b)
                if np.any((a > 0) & (b == 0)):
                    eps_z_max = math.inf
                else:
                    eps_z_max = float(np.nanmax(r)) if np.any(~np.isnan(r)) else 0.0
                eps_max = max(eps_max, eps_z_max)
                finite = r[~np.isnan(r)]
                eps_z_min = float(finite.min()) if finite.size else 0.0
                # δ_{z|max}: the shift at the smallest slope (erratum 6: sums over y ∈ S)
                delta_max = max(delta_max, float(np.maximum(0, a - math.exp(eps_z_min) * b).sum()))
    if not w_mask.any():
        gamma = math.inf
    else:
        gamma = 0.0
        for v in (0, 1):
            for s in range(aux + 1):
                for s2 in range(aux + 1):
                    r = _ratio(p0[v, s][w_mask], p1[s2][w_mask])
                    gamma = max(gamma, float(np.nanmax(r)))
    return CwBound(epsilon_max=eps_max, delta_max=delta_max, gamma=gamma,
                   assumption_1=bool(w_mask.any()))


def _max_over_z(values: np.ndarray, z_of: np.ndarray | None, pz: np.ndarray) -> float:
    """max over z of Σ_y values[z, y] / P(z): the joint masses P(z, y) made conditional on the
    auxiliary information z (dense rows, or one sparse row with z_of[y])."""
    if z_of is None:
        return float((values.sum(axis=1) / pz).max())
    return float((np.bincount(z_of, weights=values[0], minlength=pz.size) / pz).max())


@dataclass(frozen=True, slots=True, kw_only=True)
class CwExact:
    """Exact CW privacy of G over t steps, worst private row and value: ``epsilon`` is the largest
    |log-likelihood ratio| on outputs both worlds can produce, ``delta`` the mass one world puts
    where the other puts none (Theorem 4's δ_t at the largest slope); ``delta_at`` maps a given ε
    to the exact δ_G(ε). Both δ are conditional on the final auxiliary rows z (Theorem 3
    conditions on Z), worst z."""

    epsilon: float
    delta: float
    worst_row: int
    seconds: float

    def __repr__(self) -> str:
        return f"CwExact(epsilon={self.epsilon:.6g}, delta={self.delta:.6g}, row={self.worst_row})"


def brute_force_stream(
    *, n: int, block: int, p: Fraction, kernel: np.ndarray, t: int,
    epsilons: Sequence[float] = (),
) -> tuple[CwExact, list[float]]:
    """Exact (ε_t, δ_t) of G by enumeration, and δ_G(ε) at each of ``epsilons``."""
    import time

    started = time.perf_counter()
    kernel = np.asarray(kernel, dtype=np.float64)
    _check(n, block, p, kernel)
    length = n + block * (t - 1)
    if length > 22:
        raise ConfigError(f"brute force enumerates 2^{length} streams; keep n + b(t − 1) <= 22")
    m = kernel.shape[1]
    deterministic = bool(np.all((kernel == 0) | (kernel == 1)))
    if not deterministic and m**t > 200_000:
        raise ConfigError(f"a randomised kernel needs m^t = {m}^{t} joint outputs; keep it <= 2e5")
    pf = float(p)
    xs = ((np.arange(2**length)[:, None] >> np.arange(length)) & 1).astype(np.int64)
    ones = xs.sum(axis=1)
    weight = pf**ones * (1 - pf) ** (length - ones)
    sums = np.stack([xs[:, i * block:i * block + n].sum(axis=1) for i in range(t)], axis=1)
    aux_cols = range(length - (n - block), length)
    z = (xs[:, list(aux_cols)] << np.arange(n - block)).sum(axis=1) if n > block else 0 * ones
    nz = 2 ** (n - block)
    z_ones = ((np.arange(nz)[:, None] >> np.arange(n - block)) & 1).sum(axis=1)
    pz = pf**z_ones * (1 - pf) ** (n - block - z_ones)  # P(X_t↓ = z): δ is conditional on z
    if deterministic:
        outs = kernel.argmax(axis=1)[sums]
        ycode = (outs * (m ** np.arange(t))).sum(axis=1)
        # sparse: only (z, y) pairs that occur; "ny" indexes them, z_of the z of each
        keys, ycode = np.unique(z * m**t + ycode, return_inverse=True)
        z_of = keys // m**t
        ny = keys.size
    else:
        # distinct window-sum vectors, each with its joint output distribution
        scode = (sums * ((n + 1) ** np.arange(t))).sum(axis=1)
        uniq, inv = np.unique(scode, return_inverse=True)
        ny = m**t
    if not deterministic:
        z_of = None
    worst = (0.0, 0.0, -1)
    deltas = [0.0 for _ in epsilons]
    for rho in range(length - (n - block)):
        dist = np.zeros((2, 1 if deterministic else nz, ny))
        for v in (0, 1):
            sel = xs[:, rho] == v
            w = weight[sel] / (pf if v else 1 - pf)
            if deterministic:
                dist[v, 0] = np.bincount(ycode[sel], weights=w, minlength=ny)
            else:
                grp = np.zeros((nz, uniq.size))
                np.add.at(grp, (z[sel], inv[sel]), w)
                for g, code in enumerate(uniq):
                    ks = [(code // (n + 1) ** i) % (n + 1) for i in range(t)]
                    joint = kernel[ks[0]]
                    for k in ks[1:]:
                        joint = np.multiply.outer(joint, kernel[k]).ravel()
                    # joint is ordered with the last step fastest; re-order to step-0 fastest
                    joint = joint.reshape([m] * t).transpose(*reversed(range(t))).ravel()
                    dist[v] += grp[:, g:g + 1] * joint[None, :]
        p1 = (1 - pf) * dist[0] + pf * dist[1]
        for v in (0, 1):
            for a, b in ((dist[v], p1), (p1, dist[v])):
                r = _ratio(a, b)
                eps = float(np.nanmax(r)) if np.any(~np.isnan(r)) else 0.0
                delta = _max_over_z(np.where((b == 0) & (a > 0), a, 0), z_of, pz)
                row = rho if eps > worst[0] else worst[2]
                worst = (max(eps, worst[0]), max(delta, worst[1]), row)
                for i, e in enumerate(epsilons):
                    d = _max_over_z(np.maximum(0, a - math.exp(e) * b), z_of, pz)
                    deltas[i] = max(deltas[i], d)
    return (
        CwExact(epsilon=worst[0], delta=worst[1], worst_row=worst[2],
                seconds=time.perf_counter() - started),
        deltas,
    )
