"""Running counts from factorization mechanisms (post-processing of ``C x + z``), batch and stream.

The released running counts are ``A x + B z``; with ``B = A C^{-1}`` this is the prefix sum of
``x + C^{-1} z``. For BLT, ``y = C^{-1} z`` solves ``y_t = z_t - sum_j omega_j S_{j,t}`` with
buffers
``S_{j,t+1} = theta_j S_{j,t} + y_t``: O(buffers) per step and key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpcr.errors import ConfigError
from dpcr.plans.base import WeightStats
from dpcr.plans.factorization import BLT, sqrt_coefficients


def _signal() -> Any:
    """scipy.signal, imported on first use (it costs ~0.75 s): only past :data:`DIRECT_LIMIT`
    intervals and for the batch helpers of simulations."""
    from scipy import signal

    return signal


__all__ = [
    "BLTStream",
    "blt_prefix",
    "factorization_prefix_estimates",
    "factorization_prefix_variances",
    "factorization_weight_stats",
    "factorization_window_estimates",
    "factorization_window_variances",
    "inverse_coefficients",
    "sqrt_prefix",
]


# --- the integer Toeplitz factorization of the pipeline (y = C'x + z) ------------------------


def inverse_coefficients(coeffs: Sequence[int]) -> np.ndarray:
    """Coefficients of ``1 / c'(x)`` (first column of ``C'^{-1}``): forward substitution up to
    :data:`DIRECT_LIMIT` (:func:`all_pole_filter`, the floating-point operations of
    ``scipy.signal.lfilter``, so the same bits), Newton iteration with FFT products
    (O(n log n)) for longer ones."""
    a = np.asarray(coeffs, dtype=np.float64)
    if a.size > DIRECT_LIMIT:
        from dpcr.plans.factorization import series_inverse

        return series_inverse(a, a.size)
    return _impulse_response(a)


#: (Formerly the longest series :func:`inverse_coefficients` computed without scipy.signal.)
NUMPY_LIMIT = 1024
#: :func:`all_pole_filter` filters in numpy up to this much work (filter length x values: 0.1
#: to 0.2 s), by scipy.signal beyond
NUMPY_WORK = 2 * 10**7


def _impulse_response(a: np.ndarray) -> np.ndarray:
    """``lfilter([1], a, [1, 0, 0, ...])`` step by step as scipy computes it (direct form II
    transposed, ``a`` normalised by ``a[0]``): ``y_i = z_0 + b_0 x_i``, then
    ``z_k = z_{k+1} − a_{k+1} y_i`` (the input is 0 after the first step). Vectorised over the
    state; tests check it bit for bit against ``lfilter``."""
    impulse = np.zeros(a.size)
    impulse[0] = 1.0
    return all_pole_filter(a, impulse)


def all_pole_filter(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``scipy.signal.lfilter([1], a, x, axis=0)``; without scipy.signal (whose import costs
    about 0.75 s with the scipy.stats it pulls in) up to :data:`NUMPY_WORK`, by the same
    floating-point operations in the same order: direct form II transposed with ``b = [1 /
    a_0]`` and ``a / a_0``, ``y_i = z_0 + b_0 x_i``, then ``z_k = z_{k+1} − a_{k+1} y_i`` (``b``
    is 0 past ``b_0``). O(n) steps of O(n) vector work, every column of ``x`` at once; tests
    check it bit for bit."""
    n = a.size
    x = np.asarray(x, dtype=np.float64)
    if n * x.size > NUMPY_WORK:  # scipy's loop in C is faster than the import is slow
        out: np.ndarray = _signal().lfilter([1.0], a, x, axis=0)
        return out
    y = np.empty_like(x)
    if n == 1:
        np.multiply(x, 1.0 / a[0], out=y)
        return y
    normal = a / a[0]
    b0 = 1.0 / a[0]
    tail = normal[1:n].reshape((n - 1,) + (1,) * (x.ndim - 1))
    # the state z_0 .. z_{n-2} of step i sits at buf[i .. i + n - 2]: z_k <- z_{k+1} - a_{k+1} y
    # is then one in-place update of buf[i + 1 .. i + n - 1] (its last entry still 0)
    buf = np.zeros((x.shape[0] + n, *x.shape[1:]))
    for i in range(x.shape[0]):
        y[i] = buf[i] + b0 * x[i]
        buf[i + 1 : i + n] -= tail * y[i]
    return y


#: Up to this many intervals, estimates are computed by forward substitution (O(n^2), the same
#: floating-point operations for an interval whatever comes later, so republished rows are
#: bit-identical); beyond, by FFT (O(n log n); earlier rows may move in their last bits).
DIRECT_LIMIT = 16384


def _weights(weights: Sequence[int] | None, n: int) -> np.ndarray | None:
    return None if weights is None else np.asarray(weights[:n], dtype=np.float64)


def _conv_prefix(f: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``(f * g)[:n]`` along axis 0 of ``g`` (vectors or n x keys): direct up to
    :data:`DIRECT_LIMIT` (prefix-stable), FFT beyond."""
    n = g.shape[0]
    if n == 0:
        return np.zeros_like(g, dtype=np.float64)
    if n <= DIRECT_LIMIT and g.ndim == 1:
        direct: np.ndarray = np.convolve(f[:n], g)[:n]
        return direct
    shape = (n,) + (1,) * (g.ndim - 1)
    out: np.ndarray = _signal().fftconvolve(f[:n].reshape(shape), g, axes=0)[:n]
    return out


def factorization_prefix_estimates(
    y: np.ndarray, coeffs: Sequence[int], *, weights: Sequence[int] | None = None
) -> np.ndarray:
    """Running totals ``A C'^{-1} Q^{-1} y`` along axis 0 (intervals x keys), O(T log T) per key
    (``weights``: the row weights ``q`` of ``Q``, absent for 1)."""
    n = y.shape[0]
    yf = np.asarray(y, dtype=np.float64)
    q = _weights(weights, n)
    if q is not None:
        yf = yf / q.reshape((n,) + (1,) * (yf.ndim - 1))
    if n <= DIRECT_LIMIT:
        u = all_pole_filter(np.asarray(coeffs[:n], dtype=np.float64), yf)
    else:
        u = _conv_prefix(inverse_coefficients(coeffs[:n]), yf)
    out: np.ndarray = np.cumsum(u, axis=0)
    return out


def factorization_prefix_variances(
    coeffs: Sequence[int], noise_var: float, n: int, *, weights: Sequence[int] | None = None
) -> np.ndarray:
    """Exact ``Var(x^_t)``, t = 1 .. n: ``Var(z) sum_{j<t} b_j^2 / q_{t-1-j}^2``, ``b =
    cumsum(1/c')`` (``q = 1`` without weights)."""
    b = np.cumsum(inverse_coefficients(coeffs[:n]))
    return _noise_sums(b * b, noise_var, _weights(weights, n))


def factorization_weight_stats(
    coeffs: Sequence[int], n: int, *, weights: Sequence[int] | None = None
) -> tuple[WeightStats, WeightStats]:
    """Aggregates of the weights of ``y_j`` in change ``t`` (``inv_{t-j} / q_j``, ``inv`` the
    coefficients of ``1/c'``) and running total ``t`` (``b_{t-j} / q_j``, ``b = cumsum(inv)``):
    O(n) per row set without weights, O(n^2) vectorised with them."""
    inv = inverse_coefficients(coeffs[:n])
    q = _weights(weights, n)
    return _stats(inv, q), _stats(np.cumsum(inv), q)


def _stats(f: np.ndarray, q: np.ndarray | None) -> WeightStats:
    count = np.cumsum(f != 0)
    if q is None:
        return WeightStats(
            sum_sq=np.cumsum(f * f),
            max_abs=np.maximum.accumulate(np.abs(f)),
            count=count,
            integer=np.logical_and.accumulate(f == np.floor(f)),
        )
    from numpy.lib.stride_tricks import sliding_window_view

    n = f.size
    max_abs = np.empty(n)
    integer = np.empty(n, dtype=bool)
    # Row t of the weights is f[t - j] / q[j] for j <= t (0 beyond): the rows of the Toeplitz
    # matrix are windows of one padded vector, view[n-1-t, j] = padded[n-1-t+j] = f[t-j]; a
    # block of rows lo .. hi-1 reads columns j < hi only (the rest are 0).
    view = sliding_window_view(np.concatenate([f[::-1], np.zeros(max(0, n - 1))]), n)
    rows = max(1, (1 << 22) // max(1, n))
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)
        w = view[n - hi : n - lo][::-1, :hi] / q[None, :hi]
        max_abs[lo:hi] = np.abs(w).max(axis=1)
        integer[lo:hi] = np.all(w == np.floor(w), axis=1)
    return WeightStats(
        sum_sq=_noise_sums(f * f, 1.0, q), max_abs=max_abs, count=count, integer=integer
    )


def factorization_window_estimates(prefix: np.ndarray, w: int) -> np.ndarray:
    """Change over the last ``w`` intervals, ``x^_t - x^_{t-w}`` (``x^_{<=0} = 0``)."""
    if w < 1:
        raise ConfigError(f"window must be >= 1 interval, got {w}")
    out = np.array(prefix, dtype=np.float64, copy=True)
    out[w:] -= prefix[:-w] if w < prefix.shape[0] else prefix[:0]
    return out


def factorization_window_variances(
    coeffs: Sequence[int],
    noise_var: float,
    n: int,
    w: int,
    *,
    weights: Sequence[int] | None = None,
) -> np.ndarray:
    """Exact ``Var(x^_t - x^_{t-w})``: ``Var(z) sum_{j<t} (b_j - b_{j-w})^2 / q_{t-1-j}^2``."""
    b = np.cumsum(inverse_coefficients(coeffs[:n]))
    d = b.copy()
    d[w:] -= b[: max(0, n - w)]
    return _noise_sums(d * d, noise_var, _weights(weights, n))


def _noise_sums(sq: np.ndarray, noise_var: float, q: np.ndarray | None) -> np.ndarray:
    """``Var(z) sum_{j<t} sq_j / q_{t-1-j}^2`` for t = 1 .. n (``q = 1`` without weights)."""
    if q is None:
        out: np.ndarray = noise_var * np.cumsum(sq)
        return out
    weighted: np.ndarray = noise_var * np.maximum(_conv_prefix(sq, 1.0 / (q * q)), 0.0)
    return weighted


def blt_prefix(x: np.ndarray, z: np.ndarray, blt: BLT) -> np.ndarray:
    """Batch: running counts ``A x + A C^{-1} z`` along axis 0 (vectorised over keys)."""
    p, q = blt.polys()
    y = _signal().lfilter(q, p, z, axis=0)
    out: np.ndarray = np.cumsum(x + y, axis=0)
    return out


def sqrt_prefix(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Batch: running counts ``A x + A^{1/2} z`` (FFT convolution, O(T log T))."""
    T = z.shape[0]
    f = sqrt_coefficients(T)
    shape = (T,) + (1,) * (z.ndim - 1)
    noise = _signal().fftconvolve(z, f.reshape(shape), axes=0)[:T]
    out: np.ndarray = np.cumsum(x, axis=0) + noise
    return out


class BLTStream:
    """Streaming running counts of a BLT factorization, one step per base interval, per key."""

    def __init__(self, blt: BLT, *, keys: int) -> None:
        self.blt = blt
        self._omega = np.asarray(blt.omega)
        self._theta = np.asarray(blt.theta)[:, None]
        self._buf = np.zeros((blt.buffers, keys))
        self._total = np.zeros(keys)

    def update(self, x: np.ndarray, z: np.ndarray) -> None:
        """Add the exact change ``x`` of the closing interval with its noise draw ``z``."""
        y = z - self._omega @ self._buf
        self._buf *= self._theta
        self._buf += y
        self._total += x + y

    def get(self) -> np.ndarray:
        return self._total.copy()
