"""The randomness seam: the only place dpcr obtains random bits.

Two kinds of :class:`Randomness` exist:

* :func:`secure_randomness` reads the operating system's cryptographically secure generator
  (``getrandom(2)`` through :func:`os.getrandom` / :func:`os.urandom`). It is the only kind that
  :func:`require_secure` accepts, so it is the only kind a real release can use.
* :func:`simulation_randomness` is a seeded, reproducible generator (numpy's PCG64) for tests and
  simulations. It is not cryptographic and is refused wherever a real release is made.

Every sampler in :mod:`dpcr.noise` consumes nothing but :meth:`Randomness.uniform_uint64`, so the
choice of generator is the caller's and is visible in one place.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Final, final

import numpy as np

from dpcr.errors import ConfigError, InsecureRandomnessError

__all__ = [
    "Randomness",
    "require_secure",
    "secure_randomness",
    "simulation_randomness",
]

_TWO64: Final = 1 << 64
_MAX_HIGH: Final = 1 << 62


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
        raise ConfigError(f"size must be a non-negative int, got {size!r}")
    return int(size)


class Randomness:
    """A source of uniform random bits; subclasses provide :meth:`_words`.

    ``secure`` is ``True`` only for the OS-entropy generator returned by
    :func:`secure_randomness`.
    """

    __slots__ = ()

    @property
    def secure(self) -> bool:
        return False

    def _words(self, size: int) -> np.ndarray:
        """``size`` independent uniform 64-bit words (dtype uint64, may be read-only)."""
        raise NotImplementedError

    def fork(self, *key: int | str) -> Randomness:
        """The generator of one draw site named by ``key``.

        The secure source is its own fork (every draw is fresh anyway). A seeded generator
        returns a generator determined by its seed and ``key`` alone, so a simulation draws the
        same noise for a node whichever run, and in whichever order, releases it.
        """
        return self

    def uniform_uint64(self, size: int) -> np.ndarray:
        """``size`` independent uniform words in ``[0, 2**64)`` as a (writable) uint64 array."""
        words = self._words(_check_size(size))
        return words if words.flags.writeable else words.copy()

    def integers(self, high: int, size: int) -> np.ndarray:
        """``size`` independent uniform integers in ``[0, high)`` (int64), exactly.

        ``1 <= high <= 2**62``. Words at or above the largest multiple of ``high`` below 2**64 are
        rejected, so every value has probability exactly ``1/high``.
        """
        size = _check_size(size)
        if isinstance(high, bool) or not isinstance(high, int | np.integer):
            raise ConfigError(f"high must be an int, got {high!r}")
        high = int(high)
        if not 1 <= high <= _MAX_HIGH:
            raise ConfigError(f"high must be in [1, 2**62], got {high}")
        out = np.empty(size, dtype=np.int64)
        if high & (high - 1) == 0:  # a power of two: mask, no rejection
            np.bitwise_and(self._words(size), np.uint64(high - 1), out=out, casting="unsafe")
            return out
        # Accept w < limit = 2**64 - (2**64 mod high), i.e. w <= ~rem.
        last = np.uint64(_TWO64 - 1 - (_TWO64 % high))
        h = np.uint64(high)
        filled = 0
        while filled < size:
            need = size - filled
            w = self._words(need + (need >> 4) + 8)
            w = w[w <= last][:need]
            out[filled : filled + w.size] = w % h
            filled += w.size
        return out


@final
class _OsRandomness(Randomness):
    """OS entropy (``getrandom``). Small requests are served from a buffer that a child
    process never inherits (it is dropped after ``fork``)."""

    __slots__ = ("_buf", "_lock", "_pid", "_pos")

    _BUFFER_WORDS: Final = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buf = np.empty(0, dtype=np.uint64)
        self._pos = 0
        self._pid = os.getpid()

    @property
    def secure(self) -> bool:
        return True

    @staticmethod
    def _read(size: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * size), dtype=np.uint64)

    def _words(self, size: int) -> np.ndarray:
        if size >= self._BUFFER_WORDS // 4:
            return self._read(size)
        with self._lock:
            if self._pid != os.getpid():  # forked: never reuse the parent's bits
                self._buf, self._pos, self._pid = np.empty(0, dtype=np.uint64), 0, os.getpid()
            if self._pos + size > self._buf.size:
                self._buf, self._pos = self._read(self._BUFFER_WORDS), 0
            out = self._buf[self._pos : self._pos + size]
            self._pos += size
            return out

    def __repr__(self) -> str:
        return "secure_randomness()"


@final
class _SeededRandomness(Randomness):
    """Deterministic PCG64 stream for tests and simulations (not cryptographic)."""

    __slots__ = ("_bitgen", "_seed")

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._bitgen = np.random.PCG64(seed)

    def _words(self, size: int) -> np.ndarray:
        out: np.ndarray = self._bitgen.random_raw(size)
        return out

    def fork(self, *key: int | str) -> Randomness:
        digest = hashlib.sha256(repr((self._seed, *key)).encode("utf-8")).digest()
        return _SeededRandomness(int.from_bytes(digest[:16], "big"))

    def __repr__(self) -> str:
        return f"simulation_randomness(seed={self._seed})"


_SECURE: Final = _OsRandomness()


def secure_randomness() -> Randomness:
    """The OS's cryptographically secure generator; the only one real releases accept."""
    return _SECURE


def simulation_randomness(seed: int) -> Randomness:
    """A reproducible generator for tests and simulations; refused by :func:`require_secure`.

    >>> rng = simulation_randomness(7)
    >>> rng.secure
    False
    >>> int(rng.integers(10, 3).max()) < 10
    True
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(f"seed must be a non-negative int, got {seed!r}")
    return _SeededRandomness(int(seed))


def require_secure(rng: Randomness, what: str) -> None:
    """Raise :class:`~dpcr.errors.InsecureRandomnessError` unless ``rng`` is the OS generator.

    ``what`` names the operation that needs real randomness (it appears in the message).
    """
    if isinstance(rng, _OsRandomness) and rng.secure:
        return
    raise InsecureRandomnessError(
        f"{what} makes a real release and needs secure randomness, but got {rng!r} "
        "(a seeded or custom generator is for tests and simulations only); pass "
        "dpcr.noise.secure_randomness() instead"
    )
