from __future__ import annotations

import numpy as np
import pytest

from dpcr.errors import ConfigError, InsecureRandomnessError
from dpcr.noise import Randomness, require_secure, secure_randomness, simulation_randomness


def test_secure_randomness_is_secure_and_accepted() -> None:
    rng = secure_randomness()
    assert rng.secure is True
    require_secure(rng, "test release")  # does not raise


def test_simulation_randomness_is_refused_with_a_fix() -> None:
    rng = simulation_randomness(3)
    assert rng.secure is False
    with pytest.raises(InsecureRandomnessError, match="the tree release") as info:
        require_secure(rng, "the tree release")
    assert "secure_randomness()" in str(info.value)


def test_custom_randomness_claiming_security_is_refused() -> None:
    class Liar(Randomness):
        @property
        def secure(self) -> bool:
            return True

        def _words(self, size: int) -> np.ndarray:
            return np.zeros(size, dtype=np.uint64)

    with pytest.raises(InsecureRandomnessError):
        require_secure(Liar(), "release")


def test_simulation_is_reproducible() -> None:
    a = simulation_randomness(42).uniform_uint64(100)
    b = simulation_randomness(42).uniform_uint64(100)
    c = simulation_randomness(43).uniform_uint64(100)
    assert a.dtype == np.uint64
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_secure_words_differ_and_are_writable() -> None:
    rng = secure_randomness()
    a, b = rng.uniform_uint64(8), rng.uniform_uint64(8)
    assert not np.array_equal(a, b)
    a[0] = 1  # writable
    big = rng.uniform_uint64(100_000)
    # Each bit position is set about half of the time (binomial sd = 158; 10 sd margin).
    bits = np.unpackbits(big.view(np.uint8)).reshape(-1, 64).sum(axis=0).astype(np.int64)
    assert np.all(np.abs(bits - 50_000) < 1_600)


@pytest.mark.parametrize("high", [1, 2, 3, 7, 10, 2**31 - 1, 2**40 + 5, 2**62])
def test_integers_range(high: int) -> None:
    for rng in (simulation_randomness(1), secure_randomness()):
        x = rng.integers(high, 5_000)
        assert x.dtype == np.int64
        assert x.shape == (5_000,)
        assert x.min() >= 0
        assert x.max() < high


@pytest.mark.parametrize("bad", [0, -1, 2**62 + 1, 2.0, True])
def test_integers_rejects_bad_high(bad: object) -> None:
    with pytest.raises(ConfigError):
        simulation_randomness(1).integers(bad, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 1.5, "3"])
def test_bad_size_and_seed(bad: object) -> None:
    with pytest.raises(ConfigError):
        simulation_randomness(1).uniform_uint64(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        simulation_randomness(bad)  # type: ignore[arg-type]


def test_secure_randomness_after_fork_differs() -> None:
    import os

    rng = secure_randomness()
    rng.uniform_uint64(3)  # fill the small-request buffer
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.write(write, rng.uniform_uint64(4).tobytes())
        os._exit(0)
    os.waitpid(pid, 0)
    child = np.frombuffer(os.read(read, 32), dtype=np.uint64)
    parent = rng.uniform_uint64(4)
    os.close(read)
    os.close(write)
    assert not np.array_equal(child, parent)
