"""Factorization mechanisms for continual counting: ``A = B C`` with ``A`` the prefix-sum matrix.

The mechanism releases ``B (C x + z)`` = ``A x + B z`` with ``z ~ N(0, sens^2 sigma_1^2 I)``; the
error of running count ``t`` has variance ``sens^2 sigma_1^2 ||B_t||^2`` (exact).

Sensitivity in the changelog model (the *multi-participation* L2 sensitivity of ``C``): one unit
changes the per-interval vector ``x`` by ``d`` with ``|d_i| <= 1`` (the per-interval sensitivity,
erratum 3) supported on
* any ``k`` intervals (at most k mutations), or
* a contiguous run of ``L = ceil(B/W) + 1`` intervals (B-time-bounded, MostSpan).
``sens = max ||C d||``. The maximum of a convex function over the box is at a vertex
``d in {-1, 0, 1}``; when ``C`` has nonnegative entries, ``|C d| <= C |d|`` entrywise, so all
``+1`` is worst. For lower-triangular Toeplitz ``C`` with nonnegative, nonincreasing coefficients
``c_m`` the Gram entry ``G_ab = sum_{r < T-max(a,b)} c_r c_{r+|a-b|}`` is nonincreasing in
``max(a, b)`` and in ``|a - b|``; mapping the sorted support ``s_1 < ... < s_m`` to ``0 .. m-1``
does not increase either, so **the first ``m`` intervals are a worst pattern** and
``sens^2 = sum_{a,b < m} G_ab`` exactly (``m = k`` or ``L``). The tests check this against an
exhaustive search over all supports and sign vectors for small ``T``.

Mechanisms:
* **square root** (Fichtenberger-Henzinger-Upadhyay 2023): ``B = C = A^{1/2}``, Toeplitz with the
  coefficients of ``(1 - x)^{-1/2}``: ``f_m = binom(2m, m) / 4^m``.
* **row-rescaled square root** (finite horizon): ``C' = D C`` with ``D`` diagonal chosen so every
  column of ``C'`` has unit norm, ``B' = B D^{-1}``. Computed with power-series arithmetic (FFT),
  O(T log T). Not Toeplitz: for ``m > 1`` its sensitivity is bounded by Cauchy-Schwarz
  (``sens <= m``), a proven upper bound.
* **BLT** (buffered linear Toeplitz, Dvijotham-McMahan et al. 2024): ``C`` has generating function
  ``c(x) = 1 + sum_j omega_j x / (1 - theta_j x)``; ``C^{-1} z`` is a d-buffer recursion, so a
  streaming step costs O(d) per key. Parameters are fitted per horizon (:func:`fit_blt`), and for
  an open-ended release per horizon and participations (:func:`fit_open_blt`: the infinite
  matrix's exact sensitivity :meth:`BLT.open_sensitivity2` times :meth:`BLT.noise2`).

>>> f = sqrt_coefficients(4)
>>> [float(v) for v in f]
[1.0, 0.5, 0.375, 0.3125]
>>> round(toeplitz_sensitivity2(f, 1), 6)
1.488281
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations, product
from typing import Any

import numpy as np

from dpcr.errors import ConfigError


def _optimize() -> Any:
    """scipy.optimize, imported on first use (it costs ~0.3 s; `dpcr plan` rarely needs it)."""
    from scipy import optimize

    return optimize


def fftconvolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Full linear convolution of two real 1-D arrays through numpy's real FFT (what
    ``scipy.signal.fftconvolve`` computes, without importing scipy.signal)."""
    n = a.size + b.size - 1
    size = 1 << max(0, (n - 1).bit_length())
    out: np.ndarray = np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)[:n]
    return out


def _signal() -> Any:
    """scipy.signal, imported on first use (it costs ~0.3 s; `dpcr plan` rarely needs it)."""
    from scipy import signal

    return signal


__all__ = [
    "BLT",
    "PRESET_BLT",
    "brute_force_sensitivity2",
    "fit_blt",
    "fit_open_blt",
    "lower_bound",
    "rescaled_sqrt",
    "series_inverse",
    "sqrt_coefficients",
    "toeplitz_gram_block",
    "toeplitz_sensitivity2",
    "window_error2",
]


def lower_bound(T: int) -> float:
    """Asymptotic lower bound on the max std of continual counting, units of sigma_1."""
    return 0.701 + math.log(T) / math.pi


def sqrt_coefficients(T: int) -> np.ndarray:
    """``f_m = binom(2m, m) / 4^m``, m < T (coefficients of ``(1 - x)^{-1/2}``)."""
    m = np.arange(1, T, dtype=np.float64)
    return np.concatenate([[1.0], np.cumprod((2 * m - 1) / (2 * m))])


def toeplitz_gram_block(coeffs: np.ndarray, m: int) -> np.ndarray:
    """``G_ab``, a, b < m, of the lower-triangular Toeplitz matrix with these coefficients."""
    c = np.asarray(coeffs, dtype=np.float64)
    T = c.size
    G = np.empty((m, m))
    for a in range(m):
        for b in range(m):
            hi, d = T - max(a, b), abs(a - b)  # G_ab = sum_{r < hi} c_r c_{r+d}
            G[a, b] = float(c[:hi] @ c[d : d + hi])
    return G


def _check_monotone(c: np.ndarray) -> None:
    if np.any(c < 0) or np.any(np.diff(c) > 1e-15 * max(1.0, float(c[0]))):
        raise ConfigError(
            "the worst-pattern argument needs nonnegative, nonincreasing Toeplitz coefficients"
        )


def toeplitz_sensitivity2(coeffs: np.ndarray, m: int) -> float:
    """Exact squared L2 sensitivity of Toeplitz ``C`` when a unit touches ``m`` intervals (any
    ``m`` for at most k, or a run of ``m``; same worst case, see the module docstring).

    ``sum_{a,b<m} G_ab = ||C 1_m||^2`` with ``1_m`` the first ``m`` intervals: entry ``t`` of
    ``C 1_m`` is ``S_t - S_{t-m}`` with ``S`` the prefix sums of the coefficients, so the value
    takes O(T) (the Gram block, :func:`toeplitz_gram_block`, takes O(m^2 T))."""
    c = np.asarray(coeffs, dtype=np.float64)
    _check_monotone(c)
    m = min(m, c.size)
    prefix = np.cumsum(c)
    column = prefix.copy()
    column[m:] -= prefix[: c.size - m]
    return float(np.dot(column, column))


def brute_force_sensitivity2(C: np.ndarray, m: int, *, contiguous: bool) -> float:
    """``max ||C d||^2`` over supports of at most ``m`` intervals (any, or one contiguous run) and
    all sign vectors in ``{-1, 1}^support`` (the vertices of the box). Exponential; for tests."""
    T = C.shape[1]
    best = 0.0
    if contiguous:
        supports: list[tuple[int, ...]] = [tuple(range(s, min(s + m, T))) for s in range(T)]
    else:
        supports = [s for r in range(1, m + 1) for s in combinations(range(T), r)]
    for sup in supports:
        cols = C[:, list(sup)]
        for signs in product((-1.0, 1.0), repeat=len(sup)):
            v = cols @ np.asarray(signs)
            best = max(best, float(v @ v))
    return best


def _fft_mul(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    out: np.ndarray = fftconvolve(a[:n], b[:n])[:n]
    return out


def series_inverse(a: np.ndarray, n: int) -> np.ndarray:
    """First ``n`` coefficients of ``1 / a(x)`` (``a_0 != 0``), Newton iteration with FFT."""
    if a[0] == 0:
        raise ConfigError("series_inverse needs a nonzero constant term")
    inv = np.array([1.0 / a[0]])
    size = 1
    while size < n:
        size = min(2 * size, n)
        e = _fft_mul(a, inv, size)  # a * inv = 1 + O(x^{size/2})
        e = -e
        e[0] += 2.0
        inv = _fft_mul(inv, e, size)
    return inv[:n]


@dataclass(frozen=True, slots=True)
class RescaledSqrt:
    """Row-rescaled square root for horizon T: ``u = diag(D)^2`` and the error variance of every
    running count (units of sigma_1^2, sensitivity 1 for single participation)."""

    u: np.ndarray
    error2: np.ndarray


def rescaled_sqrt(T: int) -> RescaledSqrt:
    """Column norms of ``D C`` all 1: ``u_j + sum_{i>j} f_{i-j}^2 u_i = 1``. Reversed (``w_r =
    u_{T-1-r}``) this is the triangular Toeplitz system ``F w = 1``, ``F = Toeplitz(f^2)``, so
    ``w = (1/(1-x)) / F(x)``. Error of count t: ``sum_{i<=t} f_{t-i}^2 / u_i``."""
    f2 = sqrt_coefficients(T) ** 2
    w = np.cumsum(series_inverse(f2, T))
    if np.any(w <= 0):
        raise ConfigError("row rescaling failed (nonpositive scale); horizon too large?")
    u = w[::-1].copy()
    err = fftconvolve(f2, 1.0 / u)[:T]
    return RescaledSqrt(u=u, error2=err)


@dataclass(frozen=True, slots=True)
class BLT:
    """``c(x) = 1 + sum_j omega_j x / (1 - theta_j x)``; ``0 < theta_j < 1``, ``omega_j > 0``."""

    omega: tuple[float, ...]
    theta: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.omega) != len(self.theta) or not self.omega:
            raise ConfigError("BLT needs as many omegas as thetas (at least one buffer)")
        if not all(0 < t < 1 for t in self.theta) or not all(w > 0 for w in self.omega):
            raise ConfigError("BLT needs 0 < theta < 1 and omega > 0")

    @property
    def buffers(self) -> int:
        return len(self.omega)

    def polys(self) -> tuple[np.ndarray, np.ndarray]:
        """``(p, q)`` with ``c(x) = p(x) / q(x)``, ascending coefficients."""
        q = np.array([1.0])
        for t in self.theta:
            q = np.convolve(q, [1.0, -t])
        p = q.copy()
        for j, w in enumerate(self.omega):
            others = np.array([1.0])
            for i, t in enumerate(self.theta):
                if i != j:
                    others = np.convolve(others, [1.0, -t])
            term = np.concatenate([[0.0], w * others])
            p[: term.size] += term
        return p, q

    def c_coefficients(self, T: int) -> np.ndarray:
        m = np.arange(T - 1, dtype=np.float64)
        c = np.ones(T)
        c[1:] = sum(w * t**m for w, t in zip(self.omega, self.theta, strict=True))
        return c

    def noise_coefficients(self, T: int) -> np.ndarray:
        """Coefficients of ``B = A C^{-1}``: ``1 / ((1 - x) c(x))``."""
        p, q = self.polys()
        out: np.ndarray = _signal().lfilter(q, p, np.ones(T))
        return out

    def sensitivity2(self, T: int, m: int) -> float:
        return toeplitz_sensitivity2(self.c_coefficients(T), m)

    def sensitivity2_closed(self, T: int, m: int) -> float:
        """:meth:`sensitivity2` in closed form, O(m^2 d^2) (geometric sums of the buffers)."""
        om = np.asarray(self.omega)
        th = np.asarray(self.theta)
        pp = np.outer(th, th)
        total = 0.0
        for a in range(min(m, T)):
            for b in range(min(m, T)):
                d = abs(a - b)
                n = T - max(a, b)
                if n <= 0:
                    continue
                first = 1.0 if d == 0 else float(om @ th ** (d - 1))
                geo = (1 - pp ** (n - 1)) / (1 - pp)
                total += first + float(om @ (geo * th[None, :] ** d) @ om)
        return total

    def max_error2(self, T: int, m: int = 1) -> float:
        """Max variance of a running count, units of sigma_1^2."""
        b = self.noise_coefficients(T)
        return self.sensitivity2(T, m) * float(b @ b)

    def open_sensitivity2(self, m: int) -> float:
        """Squared L2 sensitivity of the INFINITE matrix for ``m`` participations (any ``m``
        intervals or a run; the first ``m`` are a worst pattern): ``m G_0 + 2 sum_{0<d<m} (m-d)
        G_d`` with ``G_0 = 1 + sum_ij w_i w_j / (1 - t_i t_j)`` and ``G_d = sum_i w_i t_i^(d-1) +
        sum_ij w_i w_j t_j^d / (1 - t_i t_j)`` (geometric sums; an upper bound for every finite
        prefix)."""
        om = np.asarray(self.omega)
        th = np.asarray(self.theta)
        K = 1.0 / (1.0 - np.outer(th, th))
        total = m * (1.0 + float(om @ K @ om))
        for d in range(1, m):
            g = float(om @ th ** (d - 1)) + float(om @ (K * th[None, :] ** d) @ om)
            total += 2 * (m - d) * g
        return total

    def noise2(self, T: int) -> float:
        """``sum_{t<T} b_t^2`` (``b`` as :meth:`noise_coefficients`: the variance of running
        count ``T`` per unit noise), O(d^3 log T), from the buffer recursion's state space
        ``(S, b)``: ``S_{t+1} = (diag(theta) - 1 omega^T) S_t``, ``b_t = b_{t-1} - omega . S_t``,
        summed by doubling. Unlike the polynomial form (:meth:`polys`), it stays accurate when
        decays ``theta_j`` cluster near 1."""
        if T <= 0:
            return 0.0
        om = np.asarray(self.omega)
        d = om.size
        M = np.zeros((d + 1, d + 1))
        M[:d, :d] = np.diag(self.theta) - om[None, :]
        M[d, :d] = -om
        M[d, d] = 1.0
        h = np.r_[-om, 1.0]
        acc, acc_pow = np.zeros_like(M), np.eye(d + 1)  # sum over j < n of (M^j)' h h' M^j; M^n
        blk, blk_pow = np.outer(h, h), M  # the same for a block of 2^i steps
        n = T - 1
        while n:
            if n & 1:
                acc = acc + acc_pow.T @ blk @ acc_pow
                acc_pow = blk_pow @ acc_pow
            n >>= 1
            if n:
                blk = blk + blk_pow.T @ blk @ blk_pow
                blk_pow = blk_pow @ blk_pow
        x1 = np.ones(d + 1)  # S_1 = 1 (the impulse entered every buffer), b_0 = 1
        return 1.0 + float(x1 @ acc @ x1)


def _blt_from(x: np.ndarray) -> BLT:
    d = x.size // 2
    return BLT(omega=tuple(float(v) for v in np.exp(x[:d])),
               theta=tuple(float(v) for v in 1 / (1 + np.exp(-x[d:]))))


def _start(T: int, buffers: int) -> np.ndarray:
    """(log omega, logit theta) of ``1/sqrt(pi m)`` as a nonnegative sum of exponentials with
    geometric time constants (``sum omega < 1``)."""
    tau = np.geomspace(1.0, max(2.0, T / 2), buffers)
    theta0 = np.clip(1 - 1 / (tau + 0.5), 1e-3, 1 - 1e-9)
    grid = np.unique(np.geomspace(1, T - 1, 200).astype(int))
    target = sqrt_coefficients(T)[grid]
    M = np.stack([t ** (grid - 1.0) for t in theta0], axis=1) / target[:, None]
    omega0, _ = _optimize().nnls(M, np.ones(grid.size))
    omega0 = np.maximum(omega0, 1e-6)
    omega0 *= min(1.0, 0.999 / omega0.sum())
    return np.concatenate([np.log(omega0), np.log(theta0 / (1 - theta0))])


def _params(blt: BLT) -> np.ndarray:
    th = np.asarray(blt.theta)
    return np.concatenate([np.log(blt.omega), np.log(th / (1 - th))])


def _bounded_loss(objective: Callable[[BLT], float]) -> Callable[[np.ndarray], float]:
    """The Nelder-Mead loss of (log omega, logit theta): ``objective`` of the BLT, or 1e300
    outside ``sum omega <= 1`` (nonincreasing coefficients, where the exact sensitivity holds),
    for extreme parameters and for a BLT that cannot be built."""

    def loss(x: np.ndarray) -> float:
        d = x.size // 2
        if np.exp(x[:d]).sum() > 1.0 or np.any(np.abs(x) > 60):
            return 1e300
        try:
            val = objective(_blt_from(x))
        except ConfigError:
            return 1e300
        return val if math.isfinite(val) else 1e300

    return loss


def fit_open_blt(
    T: int, m: int = 1, *, buffers: int = 4, starts: Sequence[BLT] = (), rounds: int = 8
) -> BLT:
    """BLT minimising ``open_sensitivity2(m) * noise2(T)``: the worst running-count variance
    over the first ``T`` intervals of an OPEN-ENDED release whose units touch ``m`` intervals
    (the infinite matrix's exact sensitivity). Nelder-Mead on (log omega, logit theta) from
    :func:`fit_blt`'s start and ``starts`` (e.g. the fit for a neighbouring ``m``; other buffer
    counts are padded with a negligible buffer or cut), restarted until a round gains nothing;
    ``sum omega <= 1`` is kept (nonincreasing coefficients: the worst-pattern theorem)."""

    loss = _bounded_loss(lambda blt: blt.open_sensitivity2(m) * blt.noise2(T))
    inits = [_start(T, buffers)]
    for b in starts:
        om, th = list(b.omega)[:buffers], list(b.theta)[:buffers]
        pad = buffers - len(om)
        inits.append(_params(BLT(omega=tuple(om + [1e-9] * pad), theta=tuple(th + [0.5] * pad))))
    best_x, best = inits[0], math.inf
    for x in inits:
        val = loss(x)
        for _ in range(rounds):
            res = _optimize().minimize(
                loss, x, method="Nelder-Mead",
                options={"maxiter": 400 * x.size, "xatol": 1e-8, "fatol": 1e-12,
                         "adaptive": True},
            )
            gained = val - res.fun
            if res.fun < val:
                x, val = res.x, float(res.fun)
            if gained <= 1e-10 * val:
                break
        if val < best:
            best_x, best = x, val
    return _blt_from(best_x)


def fit_blt(T: int, *, buffers: int = 4, m: int = 1, maxiter: int = 400) -> BLT:
    """BLT minimising the max running-count variance at horizon ``T`` for ``m`` participations.

    Start: ``1/sqrt(pi m)`` as a nonnegative sum of exponentials with geometric time constants,
    then Nelder-Mead on (log omega, logit theta). Nonincreasing coefficients (``sum omega <= 1``)
    are enforced so the exact sensitivity applies.
    """
    x0 = _start(T, buffers)

    def objective(blt: BLT) -> float:
        bn = blt.noise_coefficients(T)
        return blt.sensitivity2_closed(T, m) * float(bn @ bn)

    loss = _bounded_loss(objective)

    res = _optimize().minimize(
        loss,
        x0,
        method="Nelder-Mead",
        options={"maxiter": maxiter, "xatol": 1e-6, "fatol": 1e-9, "adaptive": True},
    )
    return _blt_from(res.x if res.fun < loss(x0) else x0)


# Fitted once per horizon with :func:`fit_blt` (4 buffers, single participation); the comment is
# the max std of a running count in units of sigma_1 (exact).
PRESET_BLT: dict[int, BLT] = {
    1024: BLT(
        omega=(0.23057587214899475, 0.16003910501976334, 0.06896578975851979, 0.03715602300923811),
        theta=(0.5628300048042782, 0.9218441690689902, 0.9889022176607044, 0.9992293239008638),
    ),  # 3.2729
    4096: BLT(
        omega=(0.2813780867031075, 0.13967839048370112, 0.0473556838198, 0.020461562340112104),
        theta=(0.668346176666899, 0.9605103946010672, 0.9960514897467925, 0.9997748993580455),
    ),  # 3.7160
    16384: BLT(
        omega=(0.3144726957338395, 0.11622556644088784, 0.03199677728968713, 0.011242585002809133),
        theta=(0.7528201171303049, 0.9800993751549983, 0.9985891020989245, 0.9999347589728996),
    ),  # 4.1629
    65536: BLT(
        omega=(
            0.33064590178775444,
            0.09426002175702963,
            0.02174462161444096,
            0.0062782016523761685,
        ),
        theta=(0.8165761112807273, 0.9897428629841529, 0.9994741916738455, 0.9999806498483583),
    ),  # 4.6171
    262144: BLT(
        omega=(0.3373369662754379, 0.07778075379924174, 0.015467894623196645, 0.003592176672200771),
        theta=(0.8565378159601809, 0.9942686992158785, 0.9997866026835273, 0.9999941153632312),
    ),  # 5.0824
    1048576: BLT(
        omega=(
            0.3342528166526619,
            0.06858035286955282,
            0.012626294268708458,
            0.0023306202495229278,
        ),
        theta=(0.8802921544251013, 0.9959873396800467, 0.9998840440333119, 0.9999979283641076),
    ),  # 5.5620
}


def window_error2(beta: np.ndarray, w: int) -> float:
    """Max variance (units of ``sens^2 sigma_1^2``) of a window of ``w`` intervals as the difference
    of two running counts from Toeplitz noise coefficients ``beta``: ``sum_{m<w} beta_m^2 +
    sum_{m>=w} (beta_m - beta_{m-w})^2`` (increasing in t, so the last window is the worst)."""
    b = np.asarray(beta, dtype=np.float64)
    head = b[:w]
    tail = b[w:] - b[: b.size - w]
    return float(head @ head + tail @ tail)
