"""Basic composition (Σ ε_i, Σ δ_i) and advanced composition with an optimised split."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpcr.accounting._accountant_base import (
    _REL,
    Accountant,
    Leaf,
    Multiset,
    _exact_epsilon,
    _pure_parameters,
    _up,
)
from dpcr.accounting.composition import round_up


class BasicAccountant(Accountant):
    """Σ ε_i and Σ δ_i."""

    name = "basic"

    def _supports_leaf(self, e: Leaf) -> bool:
        return _pure_parameters(e) is not None

    def _sums(self, items: Multiset) -> tuple[float, float]:
        eps = sum((_exact_epsilon(e) * c for e, c in items), Fraction(0))
        dlt = sum((Fraction(_pure_parameters(e)[1]) * c for e, c in items), Fraction(0))  # type: ignore[index]
        return round_up(eps), round_up(dlt)

    def _epsilon(self, items: Multiset, delta: float) -> float:
        eps, dlt = self._sums(items)
        return eps if dlt <= delta else math.inf

    def _delta(self, items: Multiset, epsilon: float) -> float:
        eps, dlt = self._sums(items)
        return min(1.0, dlt) if eps <= epsilon else 1.0


class AdvancedAccountant(BasicAccountant):
    """Advanced composition (erratum 4) with an optimised split against basic composition."""

    name = "advanced"

    def _epsilon(self, items: Multiset, delta: float) -> float:
        basic, dlt = self._sums(items)
        slack = delta - dlt * (1 + _REL)
        if slack <= 0:
            return basic if dlt <= delta else math.inf
        values = [_pure_parameters(e) for e, _ in items]
        firsts = np.asarray([v[0] if v else 0.0 for v in values], dtype=np.float64)
        eps: np.ndarray = np.sort(np.repeat(firsts, [c for _, c in items]))[::-1]
        # prefix j (largest ε) by basic composition, the rest by advanced composition
        head = np.concatenate([[0.0], np.cumsum(eps)])
        sq = np.concatenate([np.cumsum((eps**2)[::-1])[::-1], [0.0]])
        lin = np.concatenate([np.cumsum((eps * np.expm1(eps))[::-1])[::-1], [0.0]])
        total = head + np.sqrt(2 * math.log(1 / slack) * sq) + lin
        return min(basic, _up(float(np.min(total))))
