"""Behaviour of AboveThreshold / Sparse / NumericSparse: halting, state, parameters, randomness,
agreement of the implementation with the exact output distribution, accuracy by simulation."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import binom, chi2

from dpcr.errors import ConfigError
from dpcr.noise import simulation_randomness
from dpcr.svt import (
    HALTED,
    SparseState,
    SparseVector,
    above_threshold,
    accuracy,
    lecture_alpha,
    numeric_sparse,
    sparse,
)
from dpcr.svt.audit import output_distribution

# Statistical checks fail falsely with probability <= 1e-6 each (critical values below).
FALSE_FAILURE = 1e-6


def test_scales_follow_the_lecture() -> None:
    p = sparse(threshold=0, cutoff=3, epsilon=Fraction(1, 2)).parameters
    assert p.threshold_scale == 12 and p.query_scale == 24  # σ = 2c/ε
    assert p.epsilon == pytest.approx(0.5) and p.delta == 0
    p = sparse(threshold=0, cutoff=4, epsilon=1, delta=1e-6, sensitivity=3).parameters
    assert p.threshold_scale >= 3 * math.sqrt(32 * 4 * math.log(1e6))
    assert p.epsilon <= 1 and p.delta == 0  # for small c basic composition is already tighter
    p = sparse(threshold=0, cutoff=1000, epsilon=1, delta=1e-6).parameters
    assert 0.5 < p.epsilon <= 0.52 and p.delta == pytest.approx(1e-6)  # ε/2 + cε'(e^ε' − 1)
    n = numeric_sparse(threshold=0, cutoff=2, epsilon=Fraction(9, 10)).parameters
    assert n.threshold_scale == Fraction(2 * 2) / Fraction(8, 10)  # ε₁ = 8ε/9
    assert n.value_scale == Fraction(2 * 2) / Fraction(2, 10)  # ε₂ = 2ε/9
    assert n.epsilon == pytest.approx(0.9)
    n = numeric_sparse(threshold=0, cutoff=2, epsilon=1, delta=1e-6).parameters
    eps2 = 2 / (math.sqrt(512) + 1)  # erratum 5: ε₂ = 2ε/(√512 + 1)
    assert float(n.value_scale) == pytest.approx(math.sqrt(64 * math.log(2e6)) / eps2, rel=1e-3)
    assert n.epsilon <= 1 and n.delta <= 1e-6


def test_refusals() -> None:
    with pytest.raises(ConfigError, match="cutoff"):
        sparse(threshold=0, cutoff=0, epsilon=1)
    with pytest.raises(ConfigError, match="epsilon"):
        sparse(threshold=0, cutoff=1, epsilon=0)
    with pytest.raises(ConfigError, match="exceeds epsilon"):
        sparse(threshold=0, cutoff=100, epsilon=200, delta=0.1)
    with pytest.raises(ConfigError, match="integer"):
        above_threshold(threshold=0, epsilon=1).release(
            np.array([0.5]), rng=simulation_randomness(0)
        )


def test_halts_at_cutoff_and_resumes_from_state() -> None:
    rng = simulation_randomness(1)
    svt = sparse(threshold=0, cutoff=3, epsilon=10)
    values = np.array([-1000, 1000, -1000, 1000, 1000, 1000, 1000])
    first = svt.release(values[:2], rng=rng)
    assert first.answers.tolist() == [0, 1]
    saved = svt.state
    assert saved.count == 1 and saved.answered == 2 and saved.threshold_noise is None
    resumed = SparseVector(parameters=svt.parameters, state=saved)
    rest = resumed.release(values[2:], rng=rng)
    assert rest.answers.tolist() == [0, 1, 1, HALTED, HALTED]
    assert resumed.halted and resumed.state.answered == 5
    assert resumed.release(values, rng=rng).answers.tolist() == [HALTED] * 7


def test_threshold_noise_is_kept_between_batches() -> None:
    rng = simulation_randomness(2)
    svt = above_threshold(threshold=0, epsilon=Fraction(1, 100))
    svt.release(np.array([-(10**9)]), rng=rng)
    rho = svt.state.threshold_noise
    assert rho is not None
    svt.release(np.array([-(10**9)] * 3), rng=rng)
    assert svt.state == SparseState(threshold_noise=rho, count=0, answered=4)


def test_numeric_values_only_on_top() -> None:
    svt = numeric_sparse(threshold=0, cutoff=2, epsilon=100)
    out = svt.release(np.array([-500, 500, -500, 700]), rng=simulation_randomness(3))
    assert out.answers.tolist() == [0, 1, 0, 1]
    assert out.values[[0, 2]].tolist() == [0, 0]
    assert abs(out.values[1] - 500) < 20 and abs(out.values[3] - 700) < 20


def test_implementation_matches_exact_distribution() -> None:
    """Sparse(c = 2) run 20 000 times agrees with the exact output law (chi-square)."""
    svt0 = sparse(threshold=1, cutoff=2, epsilon=4)  # σ_T = 1, σ_Q = 2
    params = svt0.parameters
    f = (0, 2, 1, 3)
    p = math.exp(-1 / float(params.threshold_scale))
    q = math.exp(-1 / float(params.query_scale))
    exact = output_distribution("sparse", f, threshold=1, p=p, q=q, cutoff=2, cut=200)
    rng = simulation_randomness(4)
    runs = 20_000
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(runs):
        svt = SparseVector(parameters=params)
        ans = svt.release(np.array(f), rng=rng).answers
        key = tuple(int(a) for a in ans if a != HALTED)
        counts[key] = counts.get(key, 0) + 1
    assert set(counts) <= {o for o, _ in exact}
    expected = {o: lo * runs for (o, _), (lo, _) in exact.items()}
    # pool outputs with expected count < 50 into one bin
    small = [o for o, e in expected.items() if e < 50]
    stat, bins = 0.0, 0
    for o, e in expected.items():
        if o not in small:
            stat += (counts.get(o, 0) - e) ** 2 / e
            bins += 1
    e_small = sum(expected[o] for o in small)
    if e_small > 0:
        stat += (sum(counts.get(o, 0) for o in small) - e_small) ** 2 / max(e_small, 1e-300)
        bins += 1
    assert stat <= chi2.isf(FALSE_FAILURE, bins - 1), (stat, counts, expected)


def test_accuracy_formula() -> None:
    p = above_threshold(threshold=0, epsilon=1).parameters
    acc = accuracy(p, queries=1000, beta=0.05)
    # within the lecture's Theorem 3.24 bound (+2 for integer rounding)
    assert acc.alpha <= lecture_alpha(epsilon=1, queries=1000, beta=0.05) + 2
    assert accuracy(p, queries=10, beta=0.05).alpha < acc.alpha


def _violations(svt_factory, values: np.ndarray, alpha: int, runs: int, alpha_value=None) -> int:
    rng = simulation_randomness(5)
    bad = 0
    for _ in range(runs):
        svt = svt_factory()
        out = svt.release(values, rng=rng)
        a = out.answers
        top, bottom = a == 1, a == 0
        wrong = bool(np.any(values[top] < svt.parameters.threshold - alpha)) or bool(
            np.any(values[bottom] > svt.parameters.threshold + alpha)
        )
        if alpha_value is not None:
            wrong = wrong or bool(np.any(np.abs(out.values[top] - values[top]) > alpha_value))
        bad += wrong
    return bad


def _critical(runs: int, beta: float) -> int:
    """Largest count X with P[Bin(runs, β) ≥ X] > FALSE_FAILURE: if the true violation rate is
    at most β (the theorem), more violations than this happen with probability ≤ 1e-6."""
    return int(binom.isf(FALSE_FAILURE, runs, beta))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["above_threshold", "sparse", "numeric"])
def test_accuracy_by_simulation(kind: str) -> None:
    """10^4 runs on the hardest stream: every query just outside ±α, so any wrong answer
    counts; the violation fraction must stay below β."""
    runs, k, beta, threshold = 10_000, 100, 0.05, 0
    if kind == "above_threshold":

        def factory() -> SparseVector:
            return above_threshold(threshold=threshold, epsilon=1)
    elif kind == "sparse":

        def factory() -> SparseVector:
            return sparse(threshold=threshold, cutoff=4, epsilon=1)
    else:

        def factory() -> SparseVector:
            return numeric_sparse(threshold=threshold, cutoff=4, epsilon=1)

    acc = accuracy(factory().parameters, queries=k, beta=beta)
    cutoff = factory().parameters.cutoff
    values = np.full(k, threshold - acc.alpha - 1, dtype=np.int64)
    high = np.linspace(k // cutoff - 1, k - 1, cutoff).astype(int)
    values[high] = threshold + acc.alpha + 1
    bad = _violations(factory, values, acc.alpha, runs, acc.alpha_value)
    assert bad <= _critical(runs, beta), (bad, acc)
