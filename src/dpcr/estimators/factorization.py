"""Running counts from factorization mechanisms (post-processing of ``C x + z``), batch and stream.

The released running counts are ``A x + B z``; with ``B = A C^{-1}`` this is the prefix sum of
``x + C^{-1} z``. For BLT, ``y = C^{-1} z`` solves ``y_t = z_t - sum_j omega_j S_{j,t}`` with
buffers
``S_{j,t+1} = theta_j S_{j,t} + y_t``: O(buffers) per step and key.
"""

from __future__ import annotations

import numpy as np
from scipy import signal

from dpcr.plans.factorization import BLT, sqrt_coefficients

__all__ = ["BLTStream", "blt_prefix", "sqrt_prefix"]


def blt_prefix(x: np.ndarray, z: np.ndarray, blt: BLT) -> np.ndarray:
    """Batch: running counts ``A x + A C^{-1} z`` along axis 0 (vectorised over keys)."""
    p, q = blt.polys()
    y = signal.lfilter(q, p, z, axis=0)
    out: np.ndarray = np.cumsum(x + y, axis=0)
    return out


def sqrt_prefix(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Batch: running counts ``A x + A^{1/2} z`` (FFT convolution, O(T log T))."""
    T = z.shape[0]
    f = sqrt_coefficients(T)
    shape = (T,) + (1,) * (z.ndim - 1)
    noise = signal.fftconvolve(z, f.reshape(shape), axes=0)[:T]
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
