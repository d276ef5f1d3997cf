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


def test_secure_randomness_reads_os_entropy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The release generator's bits are exactly what os.urandom returned."""
    import os

    from dpcr.noise import discrete_laplace

    calls: list[int] = []
    real = os.urandom

    def recording(n: int) -> bytes:
        calls.append(n)
        return real(n)

    def pattern(n: int) -> bytes:
        calls.append(n)
        return bytes(range(8)) * (n // 8)

    monkeypatch.setattr(os, "urandom", pattern)
    words = secure_randomness().uniform_uint64(4096)
    assert calls == [8 * 4096]
    assert np.all(words == np.frombuffer(bytes(range(8)), dtype=np.uint64)[0])
    monkeypatch.setattr(os, "urandom", recording)
    calls.clear()
    discrete_laplace(3, size=100_000, rng=secure_randomness())
    assert sum(calls) >= 8 * 100_000  # at least one OS word per sample


@pytest.mark.parametrize("high", [6, 3 * 2**60])
def test_integers_are_uniform(high: int) -> None:
    # Chi-square on 6 equal cells, df = 5: critical value chi2.isf(1e-8, 5) = 45.8 (see _stats).
    from ._stats import critical_value

    n = 120_000
    x = simulation_randomness(21).integers(high, n)
    cells = np.bincount(x // (high // 6), minlength=6)
    stat = float(np.sum((cells - n / 6) ** 2 / (n / 6)))
    assert stat < critical_value(5)
