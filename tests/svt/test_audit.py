"""Exact audit: the likelihood ratio of every output on neighbouring query vectors stays within
e^ε for our variant and exceeds it for the broken variants of Lyu, Su, Li (2017)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from dpcr.svt import above_threshold, numeric_sparse, sparse
from dpcr.svt.audit import audit, output_distribution

# Two-sided geometric noise with rational parameters: threshold p = 1/4 (ε_T = ln 4 for Δ = 1),
# query q = 1/2 (σ_Q = 2σ_T, ε for a shift of 2Δ = ln 4): one segment is ln 16-DP.
P, Q = Fraction(1, 4), Fraction(1, 2)
E_EPS = 16  # e^ε of one AboveThreshold segment


def _neighbours(k: int, values: range = range(3)) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [
        (f, tuple(a + d for a, d in zip(f, dd, strict=True)))
        for f in itertools.product(values, repeat=k)
        for dd in itertools.product((-1, 0, 1), repeat=k)
    ]


def test_distribution_sums_to_one() -> None:
    dist = output_distribution("sparse", (0, 2, 1, 3), threshold=1, p=P, q=Q, cutoff=2)
    lower = sum(lo for lo, _ in dist.values())
    upper = sum(hi for _, hi in dist.values())
    assert lower <= 1 <= upper
    assert upper - lower < Fraction(1, 10**15)


def test_above_threshold_exhaustive() -> None:
    result = audit("sparse", _neighbours(3), threshold=1, p=P, q=Q, cutoff=1)
    assert result.certified_max <= E_EPS  # exact rationals: upper_D <= 16 lower_D'
    assert result.witnessed_max > 4  # the check has teeth: the ratio is far from 1


def test_sparse_cutoff_2_exhaustive() -> None:
    result = audit("sparse", _neighbours(4, range(2)), threshold=1, p=P, q=Q, cutoff=2)
    assert result.certified_max <= E_EPS**2


def test_sparse_noise_not_scaled_with_cutoff_is_broken() -> None:
    """Sparse with c = 2 but AboveThreshold's scales (noise not growing with c) is not ln 16-DP."""
    f, g = (2, 2, 0, 2, 2, 0), (3, 3, -1, 3, 3, -1)
    result = audit("sparse", [(f, g)], threshold=1, p=P, q=Q, cutoff=2)
    assert result.witnessed_max > E_EPS


@pytest.mark.parametrize(
    ("variant", "pair"),
    [
        ("no_threshold_noise", ((0,) * 5, (1,) * 5)),
        ("no_halt", ((1, 1, 0, 0, 0), (0, 0, 1, 1, 1))),
        ("numeric_reuses_query_noise", ((1,) * 5, (2,) * 5)),
    ],
)
def test_broken_variants_exceed(
    variant: str, pair: tuple[tuple[int, ...], tuple[int, ...]]
) -> None:
    result = audit(variant, [pair], threshold=1, p=P, q=Q, values=range(-2, 5))
    assert result.witnessed_max > E_EPS, result
    # the same pairs are fine for the correct algorithm
    ok = audit("sparse", [pair], threshold=1, p=P, q=Q)
    assert ok.certified_max <= E_EPS


@pytest.mark.parametrize(
    "svt",
    [
        above_threshold(threshold=1, epsilon=1),
        sparse(threshold=1, cutoff=2, epsilon=Fraction(3, 2)),
        numeric_sparse(threshold=1, cutoff=1, epsilon=2),
        above_threshold(threshold=1, epsilon=1, sensitivity=2),
    ],
    ids=["at", "sparse", "numeric", "sensitivity2"],
)
def test_implementation_scales(svt: object) -> None:
    """The scales the implementation draws with, audited in floating point (cut at |ρ| ≤ 150 σ)."""
    params = svt.parameters  # type: ignore[attr-defined]
    p = math.exp(-1 / float(params.threshold_scale))
    q = math.exp(-1 / float(params.query_scale))
    d = params.sensitivity
    k = 3
    pairs = [
        (f, tuple(a + d * s for a, s in zip(f, dd, strict=True)))
        for f in itertools.product(range(0, 3 * d, d), repeat=k)
        for dd in itertools.product((-1, 0, 1), repeat=k)
    ]
    cut = int(150 * float(params.threshold_scale))
    result = audit("sparse", pairs, threshold=1, p=p, q=q, cutoff=params.cutoff, cut=cut)
    bound = math.exp(float(params.segment_epsilon) * params.cutoff)
    assert result.certified_max <= bound * (1 + 1e-9)
    assert float(params.segment_epsilon) * params.cutoff <= float(params.budget_epsilon) + 1e-12
