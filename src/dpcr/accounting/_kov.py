"""Kairouz-Oh-Viswanath: the exact optimal composition of k (ε, δ)-DP mechanisms."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dpcr.accounting._accountant_base import (
    Multiset,
    _epsilon_from_delta,
    _hockey,
    _pure_parameters,
    _up,
)
from dpcr.accounting._basic import BasicAccountant
from dpcr.accounting.composition import round_up


def _kov_log_terms(k: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """For l = 0..k: log P(l) and the privacy loss (k − 2l)ε of k-fold binary RR with ε."""
    l_ = np.arange(k + 1, dtype=float)
    log_binom = (
        math.lgamma(k + 1)
        - np.array([math.lgamma(x + 1) for x in l_])
        - np.array([math.lgamma(k - x + 1) for x in l_])
    )
    log_norm = k * np.logaddexp(0.0, eps)
    log_p = log_binom + (k - l_) * eps - log_norm
    return log_p, (k - 2 * l_) * eps


def kov_delta(k: int, eps0: float, delta0: float, epsilon: float) -> float:
    """Exact δ(ε) of the optimal composition of k (ε0, δ0)-DP mechanisms (rounded up)."""
    if k == 0 or (eps0 == 0 and delta0 == 0):
        return 0.0
    log_p, loss = _kov_log_terms(k, eps0)
    return _combine_delta(_hockey(log_p, loss, epsilon), 1 - (1 - delta0) ** k)


def _combine_delta(hockey: float, delta_fail: float) -> float:
    # 1 − (1 − δ_fail)(1 − hockey) = δ_fail + hockey − δ_fail·hockey <= δ_fail + hockey
    return min(1.0, _up(hockey + delta_fail))


class KovAccountant(BasicAccountant):
    """Exact optimal composition of k homogeneous (ε, δ) mechanisms (Kairouz-Oh-Viswanath)."""

    name = "optimal"

    def _params(self, items: Multiset) -> tuple[int, float, float]:
        k = sum(c for _, c in items)
        pars = [_pure_parameters(e) for e, _ in items]
        return k, max(p[0] for p in pars), max(p[1] for p in pars)  # type: ignore[index]

    def _epsilon(self, items: Multiset, delta: float) -> float:
        k, eps0, delta0 = self._params(items)
        if 1 - (1 - delta0) ** k > delta:
            return math.inf
        basic, _ = self._sums(items)
        if len(items) > 1:  # heterogeneous: the (max ε, max δ) bound can exceed basic
            return min(basic, self._solve(k, eps0, delta0, delta))
        return self._solve(k, eps0, delta0, delta)

    @staticmethod
    @lru_cache(maxsize=1024)
    def _solve(k: int, eps0: float, delta0: float, delta: float) -> float:
        log_p, loss = _kov_log_terms(k, eps0)
        fail = 1 - (1 - delta0) ** k

        def delta_of(e: float) -> float:
            return _combine_delta(_hockey(log_p, loss, e), fail)

        return min(_epsilon_from_delta(delta_of, delta, k * eps0), round_up(Fraction(eps0) * k))

    def _delta(self, items: Multiset, epsilon: float) -> float:
        k, eps0, delta0 = self._params(items)
        out = kov_delta(k, eps0, delta0, epsilon)
        if len(items) > 1:
            out = min(out, super()._delta(items, epsilon))
        return out
