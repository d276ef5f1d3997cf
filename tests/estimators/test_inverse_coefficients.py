"""``1/c'(x)`` for short factorizations without scipy.signal, bit for bit what ``lfilter`` gives
(published rows and intervals are unchanged; `dpcr plan` skips a 0.35 s import)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import signal

import dpcr
from dpcr.estimators.factorization import NUMPY_LIMIT, inverse_coefficients
from dpcr.plans.factorization_plan import integer_sqrt_coefficients


def _sets() -> list[tuple[str, list[int]]]:
    rnd = random.Random(7)
    out: list[tuple[str, list[int]]] = []
    for n in (1, 2, 3, 7, 64, 300, NUMPY_LIMIT):
        out.append((f"sqrt-{n}", integer_sqrt_coefficients(n, scale=1 << 20)))
        rescaled = dpcr.FactorizationRelease(
            start="2025-01-01", period="1d", horizon=n, factorization="rescaled"
        )
        out.append((f"rescaled-{n}", rescaled.coefficients()))
        blt = dpcr.FactorizationRelease(
            start="2025-01-01", period="1d", horizon=None, factorization="blt"
        )
        out.append((f"blt-{n}", blt.coefficients_upto(n)))
        out.append((f"random-{n}", sorted((rnd.randint(1, 10**7) for _ in range(n)), reverse=True)))
    return out


@pytest.mark.parametrize(("name", "coeffs"), _sets(), ids=lambda x: x if isinstance(x, str) else "")
def test_numpy_inverse_is_lfilters_bit_for_bit(name: str, coeffs: list[int]) -> None:
    n = len(coeffs)
    impulse = np.zeros(n)
    impulse[0] = 1.0
    reference = signal.lfilter([1.0], np.asarray(coeffs, dtype=np.float64), impulse)
    assert np.array_equal(inverse_coefficients(coeffs), reference)
