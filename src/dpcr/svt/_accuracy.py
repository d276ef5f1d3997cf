"""(α, β)-accuracy of the sparse vector with exact discrete Laplace noise.

Definition (Dwork-Roth 3.9): every ⊤ has f_i ≥ T − α, every ⊥ has f_i ≤ T + α (and, for a
NumericSparse ⊤, |released − f_i| ≤ α_value). If every threshold noise |ρ| ≤ a and every query
noise |ν_i| ≤ b then both hold with α = a + b (f + ν ≥ T + ρ gives f ≥ T − a − b, and likewise
for ⊥). For discrete Laplace of scale s, P[|X| > t] = 2p^{t+1}/(1+p) with p = e^{-1/s}
(≤ e^{-t/s}), so by a union bound over the ≤ c threshold draws and the k query draws we take the
least integers a, b with c·P[|ρ| > a] ≤ β/2 and k·P[|ν| > b] ≤ β/2. For AboveThreshold
(c = 1, s_T = 2/ε, s_Q = 4/ε) this is at most ⌈2 ln(2/β)/ε⌉ + ⌈4 ln(2k/β)/ε⌉, within 2 of the
lecture's 8(ln k + ln(2/β))/ε and usually well below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dpcr.errors import ConfigError
from dpcr.svt._sparse import SparseParameters

__all__ = ["Accuracy", "accuracy", "discrete_laplace_tail", "lecture_alpha"]


def discrete_laplace_tail(scale: Fraction, t: int) -> float:
    """P[|X| > t] for X ~ DLap(scale), t ≥ 0: 2 p^{t+1} / (1 + p), p = exp(-1/scale)."""
    log_p = -1 / float(scale)
    return 2 * math.exp((t + 1) * log_p) / (1 + math.exp(log_p))


def _least_t(scale: Fraction, draws: int, budget: float) -> int:
    """Least integer t ≥ 0 with draws · P[|X| > t] ≤ budget."""
    if draws == 0:
        return 0
    # Start from the continuous bound t = s ln(draws/budget) and walk down while it still holds.
    t = max(0, math.ceil(float(scale) * math.log(draws / budget)))
    while t > 0 and draws * discrete_laplace_tail(scale, t - 1) <= budget:
        t -= 1
    while draws * discrete_laplace_tail(scale, t) > budget:
        t += 1
    return t


@dataclass(frozen=True, slots=True, kw_only=True)
class Accuracy:
    """With probability ≥ 1 − β over k queries: ⊤ ⇒ f ≥ T − α, ⊥ ⇒ f ≤ T + α, and each released
    NumericSparse value is within ``alpha_value`` of f (in query units, i.e. grid steps)."""

    alpha: int
    beta: float
    queries: int
    alpha_value: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "alpha": self.alpha,
            "beta": self.beta,
            "queries": self.queries,
            "alpha_value": self.alpha_value,
        }


def accuracy(parameters: SparseParameters, *, queries: int, beta: float) -> Accuracy:
    """The (α, β) guarantee of ``parameters`` over ``queries`` queries (see module docstring).

    For NumericSparse β is split in three (threshold, query, value noise)."""
    if isinstance(queries, bool) or not isinstance(queries, int) or queries < 1:
        raise ConfigError(f"queries must be an integer >= 1, got {queries!r}")
    if not 0 < beta < 1:
        raise ConfigError(f"beta must be in (0, 1), got {beta!r}")
    numeric = parameters.value_scale is not None
    share = beta / 3 if numeric else beta / 2
    c = min(parameters.cutoff, queries)
    a = _least_t(parameters.threshold_scale, c, share)
    b = _least_t(parameters.query_scale, queries, share)
    v = None
    if parameters.value_scale is not None:
        v = _least_t(parameters.value_scale, c, share)
    return Accuracy(alpha=a + b, beta=beta, queries=queries, alpha_value=v)


def lecture_alpha(*, epsilon: float, queries: int, beta: float) -> float:
    """Theorem 3.24's α = 8(ln k + ln(2/β))/ε for AboveThreshold with sensitivity 1."""
    return 8 * (math.log(queries) + math.log(2 / beta)) / epsilon
