"""The FFT window of the interval computation is the length scipy would pick, without scipy."""

from __future__ import annotations

from scipy.fft import next_fast_len

from dpcr.mechanisms._intervals import _fast_len


def test_fft_lengths_are_scipys() -> None:
    assert all(_fast_len(n) == next_fast_len(n, real=True) for n in range(1, 70_000))
    assert all(_fast_len(n) == next_fast_len(n, real=True) for n in range(131_000, 140_000))
