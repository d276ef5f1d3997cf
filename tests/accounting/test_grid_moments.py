"""The Chernoff moments of a grid PLD's self-composition: the exponents of the short-grid path
computed once and negated in place give exactly the numbers of ``exp(sign · outer)`` for
each sign (the truncation range, hence every composed PLD, is unchanged)."""

from __future__ import annotations

import numpy as np
import pytest

from dpcr.accounting._grid import _moments


def _reference(p: np.ndarray) -> list[tuple[float, float]]:
    n = p.size
    index = np.arange(n, dtype=np.float64) / n
    j = np.arange(1, 21, dtype=np.float64)
    out: list[tuple[float, float]] = []
    for sign in (1.0, -1.0):
        mgf = p @ np.exp(sign * np.outer(index, j))
        out.extend((sign * float(k) / n, float(m)) for k, m in zip(j, mgf, strict=True))
    return out


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 7457, 12236, 1 << 14])
def test_short_grid_moments_are_bit_identical(n: int) -> None:
    rng = np.random.default_rng(n)
    for p in (rng.random(n), rng.random(n) ** 8, np.exp(-rng.random(n) * 700)):
        p = p / p.sum()
        got = _moments(p)
        assert got == _reference(p)  # (float equality: the same bits)
        assert [o for o, _ in got] == [s * k / n for s in (1.0, -1.0) for k in range(1, 21)]
