"""Sparse vector: AboveThreshold, Sparse and NumericSparse with exact discrete Laplace noise.

All queries, thresholds and noises are integers. With threshold noise ρ ~ DLap(σ_T) and query noise
ν_i ~ DLap(σ_Q) (P[X = x] ∝ exp(-|x|/σ) on the integers, exact samplers of :mod:`dpcr.noise`),
query i is answered ⊤ iff f_i + ν_i ≥ T + ρ. After a ⊤ the threshold is re-noised (a fresh ρ) and
the count of ⊤ grows; at ``cutoff`` ⊤ the algorithm halts (Sparse, Dwork-Roth Alg. 2; the lecture's
variant, one of the variants Lyu, Su, Li 2017 prove private). AboveThreshold is Sparse with
cutoff 1. NumericSparse also releases f_i + v_i with fresh noise v_i ~ DLap(σ_V) for each ⊤.

Privacy of one AboveThreshold segment (queries of sensitivity Δ, integers): for any output
⊥^{j-1}⊤ the shift ρ' = ρ + Δ (a bijection of Z, ratio ≤ exp(Δ/σ_T)) keeps every ⊥ and, with
ν_j' = ν_j + 2Δ (ratio ≤ exp(2Δ/σ_Q)), keeps the ⊤; so the segment is (Δ/σ_T + 2Δ/σ_Q)-DP
pointwise. Sparse is the adaptive composition of at most ``cutoff`` segments; docs/alerts.md has
the full argument and :mod:`dpcr.svt.audit` checks it exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Final

import numpy as np

from dpcr.errors import ConfigError
from dpcr.noise import Randomness, discrete_laplace

__all__ = [
    "SparseAnswers",
    "SparseParameters",
    "SparseState",
    "SparseVector",
    "above_threshold",
    "advanced_composition",
    "numeric_sparse",
    "sparse",
]

TOP: Final = 1
BOTTOM: Final = 0
HALTED: Final = -1

# σ is rounded up to a multiple of 1/_GRID (a larger scale only adds privacy).
_GRID: Final = 1024


def _exact(value: float | int | Fraction, name: str) -> Fraction:
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float) and math.isfinite(value):
        return Fraction(Decimal(repr(value)))
    raise ConfigError(f"{name} must be a finite number, got {value!r}")


def _round_up(value: float | Fraction) -> Fraction:
    return Fraction(math.ceil(Fraction(value) * _GRID), _GRID)


def advanced_composition(epsilon: float, count: int, delta_prime: float) -> float:
    """ε of ``count`` adaptively composed ε-DP mechanisms at slack δ' (erratum 4, with the ε):
    ε√(2k ln(1/δ')) + kε(e^ε − 1)."""
    if count == 0:
        return 0.0
    return epsilon * math.sqrt(
        2 * count * math.log(1 / delta_prime)
    ) + count * epsilon * math.expm1(epsilon)


@dataclass(frozen=True, slots=True, kw_only=True)
class SparseParameters:
    """Noise scales and the proven guarantee of one sparse-vector instance.

    ``threshold_scale`` σ_T, ``query_scale`` σ_Q = 2σ_T, ``value_scale`` σ_V (NumericSparse only);
    ``epsilon``/``delta`` is the guarantee actually proven for these (rounded-up) scales, never
    above the configured budget.
    """

    kind: str
    threshold: int
    cutoff: int
    sensitivity: int
    budget_epsilon: Fraction
    budget_delta: float
    threshold_scale: Fraction
    query_scale: Fraction
    value_scale: Fraction | None
    epsilon: float
    delta: float
    method: str

    @property
    def segment_epsilon(self) -> Fraction:
        """Pointwise ε of one AboveThreshold segment: Δ/σ_T + 2Δ/σ_Q."""
        return self.sensitivity / self.threshold_scale + 2 * self.sensitivity / self.query_scale

    def to_dict(self) -> dict[str, object]:
        return {
            "type": "sparse_vector",
            "kind": self.kind,
            "threshold": self.threshold,
            "cutoff": self.cutoff,
            "sensitivity": self.sensitivity,
            "threshold_scale": str(self.threshold_scale),
            "query_scale": str(self.query_scale),
            "value_scale": None if self.value_scale is None else str(self.value_scale),
            "epsilon": self.epsilon,
            "delta": self.delta,
            "method": self.method,
        }


def _part(eps_each: Fraction, count: int, delta_prime: float) -> tuple[float, float, str]:
    """Best of basic and advanced composition of ``count`` mechanisms each ``eps_each``-DP."""
    pure = float(eps_each * count)
    if delta_prime > 0:
        adv = advanced_composition(float(eps_each), count, delta_prime)
        if adv < pure:
            return adv, delta_prime, "advanced"
    return pure, 0.0, "basic"


def _parameters(
    kind: str,
    threshold: int,
    cutoff: int,
    epsilon: float | Fraction,
    delta: float,
    sensitivity: int,
) -> SparseParameters:
    for name, v in (("threshold", threshold), ("cutoff", cutoff), ("sensitivity", sensitivity)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise ConfigError(f"{name} must be an integer, got {v!r}")
    if cutoff < 1:
        raise ConfigError(f"cutoff must be >= 1, got {cutoff}")
    if sensitivity < 1:
        raise ConfigError(f"sensitivity must be an integer >= 1, got {sensitivity}")
    eps = _exact(epsilon, "epsilon")
    if not eps > 0:
        raise ConfigError(f"epsilon must be > 0, got {epsilon!r}")
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 <= delta < 1:
        raise ConfigError(f"delta must be in [0, 1), got {delta!r}")
    c, d = int(cutoff), int(sensitivity)
    value_scale: Fraction | None = None
    if kind == "numeric":
        if delta == 0:
            eps1, eps2 = eps * Fraction(8, 9), eps * Fraction(2, 9)
            sigma_t = Fraction(2 * c * d) / eps1
            value_scale = Fraction(2 * c * d) / eps2
        else:
            root = math.sqrt(512)
            # erratum 5: ε₂ = 2ε/(√512 + 1)
            eps1_f, eps2_f = root / (root + 1) * float(eps), 2 * float(eps) / (root + 1)
            common = d * math.sqrt(32 * c * math.log(2 / delta))
            sigma_t = _round_up(common / eps1_f)
            value_scale = _round_up(common / eps2_f)
    else:
        if delta == 0:
            sigma_t = Fraction(2 * c * d) / eps
        else:
            sigma_t = _round_up(d * math.sqrt(32 * c * math.log(1 / delta)) / float(eps))
    sigma_t = max(sigma_t, Fraction(1, _GRID))
    params = SparseParameters(
        kind=kind,
        threshold=int(threshold),
        cutoff=c,
        sensitivity=d,
        budget_epsilon=eps,
        budget_delta=float(delta),
        threshold_scale=sigma_t,
        query_scale=2 * sigma_t,
        value_scale=value_scale,
        epsilon=0.0,
        delta=0.0,
        method="",
    )
    # The guarantee actually proven for the rounded scales.
    split = delta / 2 if kind == "numeric" else delta
    e1, d1, m1 = _part(params.segment_epsilon, c, split)
    e2, d2, m2 = 0.0, 0.0, ""
    if value_scale is not None:
        e2, d2, m2 = _part(Fraction(d) / value_scale, c, split)
    total_e, total_d = e1 + e2, d1 + d2
    if delta == 0:
        exact = c * params.segment_epsilon + (c * d / value_scale if value_scale else 0)
        if exact > eps:
            raise ConfigError(f"internal: sparse vector calibration exceeds epsilon ({exact})")
        total_e = float(exact)
    elif total_e > float(eps) * (1 + 1e-12):
        raise ConfigError(
            f"sparse vector with delta={delta}, cutoff={c}: the advanced-composition guarantee "
            f"{total_e:.4g} exceeds epsilon={float(eps)} (the δ > 0 calibration needs "
            "ε ≲ 4 ln(1/δ)); use delta = 0 or a smaller epsilon"
        )
    method = m1 if not m2 or m1 == m2 else f"{m1}+{m2}"
    return SparseParameters(
        **{
            **{f: getattr(params, f) for f in params.__dataclass_fields__},
            "epsilon": total_e,
            "delta": total_d,
            "method": f"{method} composition of {c} AboveThreshold segment(s)",
        }
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SparseState:
    """What must survive a restart: the current threshold noise (``None`` until drawn, and after
    a ⊤ until the next query), the number of ⊤ answers and of queries answered."""

    threshold_noise: int | None = None
    count: int = 0
    answered: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SparseAnswers:
    """``answers[i]`` is 1 (⊤), 0 (⊥) or -1 (not answered: halted); ``values[i]`` the noisy value
    released with a ⊤ by NumericSparse (0 elsewhere)."""

    answers: np.ndarray
    values: np.ndarray


def _first_at_least(noisy: np.ndarray, start: int, level: int) -> int:
    """Index of the first ``noisy[i] >= level`` with i >= start, or -1; galloping so a stream
    with many ⊤ costs O(n), not O(n · cutoff)."""
    n, size = noisy.shape[0], 64
    while start < n:
        end = min(n, start + size)
        hits = np.flatnonzero(noisy[start:end] >= level)
        if hits.size:
            return start + int(hits[0])
        start, size = end, size * 2
    return -1


@dataclass(slots=True, kw_only=True)
class SparseVector:
    """A running sparse-vector instance: ``release(values, rng=...)`` answers the next queries.

    The parameters are fixed at construction; ``state`` is the only mutable part and is what a
    store persists (threshold noise is never redrawn for the same segment).

    >>> from dpcr.noise import simulation_randomness
    >>> svt = above_threshold(threshold=100, epsilon=1)
    >>> out = svt.release(np.array([0, 0, 1000, 0]), rng=simulation_randomness(0))
    >>> out.answers.tolist(), svt.halted
    ([0, 0, 1, -1], True)
    """

    parameters: SparseParameters
    state: SparseState = field(default_factory=SparseState)

    @property
    def halted(self) -> bool:
        return self.state.count >= self.parameters.cutoff

    def release(self, values: np.ndarray, *, rng: Randomness) -> SparseAnswers:
        """Answer ``values`` (exact integer query values, in order); updates ``state``."""
        f = np.asarray(values)
        if f.ndim != 1 or (f.size and f.dtype.kind not in "iu"):
            raise ConfigError("sparse vector queries must be a 1-D integer array")
        f = f.astype(np.int64, copy=False)
        n = f.shape[0]
        p = self.parameters
        answers = np.full(n, HALTED, dtype=np.int8)
        out_values = np.zeros(n, dtype=np.int64)
        if n == 0 or self.halted:
            return SparseAnswers(answers=answers, values=out_values)
        # Query noise for the whole batch at once. Draws past the halting point are never used;
        # draws after a ⊤ were compared only to the old threshold, which nobody saw, so they are
        # still fresh and independent of everything released.
        noisy = f + discrete_laplace(p.query_scale, n, rng)
        rho, count, i = self.state.threshold_noise, self.state.count, 0
        tops: list[int] = []
        # Fresh threshold noises are drawn in growing batches and used in order (each draw is
        # independent of everything before it); unused draws are discarded, never released.
        spare: list[int] = []
        batch = 1
        while i < n and count < p.cutoff:
            if rho is None:
                if not spare:
                    size = min(batch, p.cutoff - count)
                    spare = discrete_laplace(p.threshold_scale, size, rng).tolist()[::-1]
                    batch *= 4
                rho = int(spare.pop())
            j = _first_at_least(noisy, i, p.threshold + rho)
            if j < 0:
                answers[i:] = BOTTOM
                i = n
                break
            answers[i:j] = BOTTOM
            answers[j] = TOP
            tops.append(j)
            count, rho, i = count + 1, None, j + 1
        if tops and p.value_scale is not None:
            idx = np.array(tops, dtype=np.int64)
            out_values[idx] = f[idx] + discrete_laplace(p.value_scale, idx.size, rng)
        self.state = SparseState(threshold_noise=rho, count=count, answered=self.state.answered + i)
        return SparseAnswers(answers=answers, values=out_values)


def above_threshold(
    *, threshold: int, epsilon: float | Fraction, sensitivity: int = 1
) -> SparseVector:
    """AboveThreshold (Dwork-Roth Alg. 1): σ_T = 2Δ/ε, σ_Q = 4Δ/ε, halts at the first ⊤; ε-DP."""
    parameters = _parameters("above_threshold", threshold, 1, epsilon, 0.0, sensitivity)
    return SparseVector(parameters=parameters)


def sparse(
    *,
    threshold: int,
    cutoff: int,
    epsilon: float | Fraction,
    delta: float = 0.0,
    sensitivity: int = 1,
) -> SparseVector:
    """Sparse (Alg. 2): σ_T = 2cΔ/ε (δ = 0) or Δ√(32c ln(1/δ))/ε (δ > 0), σ_Q = 2σ_T, fresh
    threshold noise after each ⊤, halts at c ⊤."""
    parameters = _parameters("sparse", threshold, cutoff, epsilon, delta, sensitivity)
    return SparseVector(parameters=parameters)


def numeric_sparse(
    *,
    threshold: int,
    cutoff: int,
    epsilon: float | Fraction,
    delta: float = 0.0,
    sensitivity: int = 1,
) -> SparseVector:
    """NumericSparse (Alg. 3): Sparse at ε₁ and, for each ⊤, f_i + DLap(σ(ε₂)); ε₁ = 8ε/9,
    ε₂ = 2ε/9 (δ = 0) or ε₁ = √512ε/(√512+1), ε₂ = 2ε/(√512+1) with σ(e) = Δ√(32c ln(2/δ))/e."""
    parameters = _parameters("numeric", threshold, cutoff, epsilon, delta, sensitivity)
    return SparseVector(parameters=parameters)
