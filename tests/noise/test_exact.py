"""Exactness of the fast samplers, checked against independent high-precision arithmetic.

The fast samplers invert exact boundaries: a value k has probability b_{k+1} - b_k exactly, where
b_i is decided bit by bit. These tests recompute every boundary with Python's ``decimal`` (whose
exp is correctly rounded) at 120 digits and check that the stored 64-bit floors are right, then
drive the tie-breaking path (a word equal to a stored floor) with scripted words, and test the
rarely used tail samplers and fallbacks statistically.
"""

from __future__ import annotations

import math
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcr.noise import (
    Randomness,
    _fast,
    categorical,
    discrete_gaussian,
    discrete_laplace,
    simulation_randomness,
)
from dpcr.noise._exact import exp_neg, exp_neg_powers
from dpcr.noise._tables import InversionTable

from ._stats import binning, gaussian_pmf, goodness_of_fit

getcontext().prec = 120
TWO64 = Decimal(2) ** 64


def dexp(x: Fraction) -> Decimal:
    return (-(Decimal(x.numerator) / Decimal(x.denominator))).exp()


class Scripted(Randomness):
    """Returns the given words in order, then seeded random words (a test double)."""

    def __init__(self, words: list[int]) -> None:
        self.words = list(words)
        self.rest = simulation_randomness(99)

    def _words(self, size: int) -> np.ndarray:
        head = [self.words.pop(0) for _ in range(min(size, len(self.words)))]
        tail = self.rest.uniform_uint64(size - len(head)).tolist()
        return np.array(head + tail, dtype=np.uint64)


# --- rigorous exp bounds -----------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    num=st.integers(0, 10**15),
    den=st.integers(1, 10**12),
    prec=st.sampled_from([0, 1, 64, 150, 300]),
)
def test_exp_neg_bounds_contain_the_value(num: int, den: int, prec: int) -> None:
    num = num % (3000 * den + 1)  # keep the 120-digit value meaningful
    lo, hi = exp_neg(num, den, prec)
    exact = dexp(Fraction(num, den)) * Decimal(2) ** prec
    assert Decimal(lo) <= exact <= Decimal(hi)
    assert hi - lo <= 2


def test_exp_neg_powers() -> None:
    lo, hi = exp_neg_powers(5, 3, 2000, 200)
    for k in (0, 1, 2, 999, 2000):
        exact = dexp(Fraction(5 * k, 3)) * Decimal(2) ** 200
        assert Decimal(lo[k]) <= exact <= Decimal(hi[k])
        assert hi[k] - lo[k] < 2**20


# --- every stored floor is floor(b_i 2**64) -------------------------------------------------------


def check_floors(table: InversionTable, exact: list[Decimal]) -> None:
    assert len(exact) == table.m
    for i, b in enumerate(exact):
        scaled = b * TWO64
        f = int(scaled)  # floor for positive numbers
        assert scaled - f > Decimal(10) ** -40  # not within rounding reach of an integer
        assert int(table.floors[i]) == f, i


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(7, 3), Fraction(100), Fraction(2048)])
def test_abs_laplace_table_is_exact(scale: Fraction) -> None:
    plan = _fast._laplace_plan(scale)
    assert plan.low_bits == 0
    q = dexp(1 / scale)
    exact = [1 - 2 * q**k / (1 + q) for k in range(1, plan.table.m + 1)]
    check_floors(plan.table, exact)


@pytest.mark.parametrize("scale", [Fraction(10**4), Fraction(10**9, 7), Fraction(2049)])
def test_digit_laplace_tables_are_exact(scale: Fraction) -> None:
    plan = _fast._laplace_plan(scale)
    assert plan.low_bits > 0
    big_q = dexp(2**plan.low_bits / scale)
    check_floors(plan.table, [1 - big_q**h for h in range(1, plan.table.m + 1)])
    for digit in plan.digits:
        r = dexp(2**digit.shift / scale)
        size = digit.table.m + 1
        check_floors(digit.table, [(1 - r**i) / (1 - r**size) for i in range(1, size)])


@pytest.mark.parametrize(
    "sigma2", [Fraction(1, 2), Fraction(10), Fraction(1000, 7), Fraction(10**4)], ids=str
)
def test_abs_gaussian_table_is_exact(sigma2: Fraction) -> None:
    table = _fast._gaussian_table(sigma2)
    assert table is not None
    reach = int(40 * math.sqrt(sigma2)) + 40
    w = [dexp(Fraction(j * j) / (2 * sigma2)) for j in range(reach)]
    z = 1 + 2 * sum(w[1:])
    partial = [Decimal(1)]
    for j in range(1, table.m):
        partial.append(partial[-1] + 2 * w[j])
    check_floors(table, [a / z for a in partial])


# --- ties: a word equal to a stored floor is resolved with more bits ---------------------------


@pytest.mark.parametrize("index", [0, 3, 10])
def test_tie_is_resolved_by_further_bits(index: int) -> None:
    sigma2 = Fraction(10)
    table = _fast._gaussian_table(sigma2)
    assert table is not None
    reach = 200
    w = [dexp(Fraction(j * j) / (2 * sigma2)) for j in range(reach)]
    z = 1 + 2 * sum(w[1:])
    b = (1 + 2 * sum(w[1 : index + 1])) / z  # boundary index + 1: P[|X| <= index]
    f128 = int(b * Decimal(2) ** 128)
    f192 = int(b * Decimal(2) ** 192)
    word = int(table.floors[index])
    assert word == f128 >> 64
    low = f128 & (2**64 - 1)
    # u just below the boundary: value index; just above: index + 1.
    assert table.draw(np.array([word], np.uint64), Scripted([low - 1])).tolist() == [index]
    assert table.draw(np.array([word], np.uint64), Scripted([low + 1])).tolist() == [index + 1]
    # Equal in 128 bits too: the third word decides.
    third = f192 & (2**64 - 1)
    below = table.draw(np.array([word], np.uint64), Scripted([low, third - 1]))
    above = table.draw(np.array([word], np.uint64), Scripted([low, third + 1]))
    assert below.tolist() == [index]
    assert above.tolist() == [index + 1]


def test_tie_through_the_public_sampler() -> None:
    sigma2 = Fraction(10)
    table = _fast._gaussian_table(sigma2)
    assert table is not None
    word = int(table.floors[2])  # boundary P[|X| <= 2]
    # next word all ones: u is above the boundary, |X| = 3; sign word 0: positive
    x = discrete_gaussian(sigma2, size=1, rng=Scripted([word, 2**64 - 1, 0]))
    assert x.tolist() == [3]
    x = discrete_gaussian(sigma2, size=1, rng=Scripted([word, 0, 2**64 - 1]))
    assert x.tolist() == [-2]


def test_words_past_the_table_take_the_tail_path() -> None:
    top = 2**64 - 1
    x = discrete_gaussian(Fraction(10), size=1, rng=Scripted([top, top, top]))
    table = _fast._gaussian_table(Fraction(10))
    assert table is not None
    assert abs(int(x[0])) >= table.m
    y = discrete_laplace(Fraction(3), size=1, rng=simulation_randomness(1))
    assert y.shape == (1,)


# --- tail samplers and fallbacks, statistically --------------------------------------------------


def test_gaussian_tail_sampler_matches_the_conditional_law() -> None:
    sigma2, m, n = Fraction(10), 3, 6_000
    tail = _fast._gaussian_tail(sigma2, m, n, simulation_randomness(11))
    assert tail.min() >= m
    pmf = gaussian_pmf(10.0)
    bins = binning(lambda x: np.where(x >= m, pmf(x), 0.0), 0, 60, n, bins=12)
    stat, crit = goodness_of_fit(tail, bins)
    assert stat < crit


def test_laplace_tail_geometric_matches() -> None:
    scale, n = Fraction(3, 2), 100_000
    plan = _fast._laplace_plan(scale)
    g = _fast._geometric_from_abs(plan, n, simulation_randomness(12))
    q = math.exp(-1 / 1.5)
    bins = binning(lambda x: (1 - q) * q ** x.astype(float), 0, 200, n, bins=30)
    stat, crit = goodness_of_fit(g, bins)
    assert stat < crit


def test_high_part_of_digit_plan_is_geometric() -> None:
    scale, n = Fraction(10**4), 100_000
    plan = _fast._laplace_plan(scale)
    h = _fast._high_part(plan.table, n, simulation_randomness(13))
    big_q = math.exp(-(2**plan.low_bits) / 10**4)
    bins = binning(lambda x: (1 - big_q) * big_q ** x.astype(float), 0, 400, n, bins=30)
    stat, crit = goodness_of_fit(h, bins)
    assert stat < crit


def test_cks_fallback_for_huge_sigma2_matches_pmf() -> None:
    sigma2, n = Fraction(50), 5_000
    x = _fast._gaussian_cks(sigma2, n, simulation_randomness(14))
    bins = binning(gaussian_pmf(50.0), -100, 100, n, bins=15)
    stat, crit = goodness_of_fit(x, bins)
    assert stat < crit


def test_huge_sigma2_uses_the_fallback() -> None:
    sigma2 = Fraction(10**11)
    assert _fast._gaussian_table(sigma2) is None
    x = discrete_gaussian(sigma2, size=200, rng=simulation_randomness(15))
    assert x.shape == (200,)
    assert abs(float(np.std(x)) / math.sqrt(1e11) - 1) < 0.3  # 200 draws: sd of sd ~ 5%


def test_extreme_small_parameters() -> None:
    rng = simulation_randomness(16)
    assert not discrete_laplace(Fraction(1, 1000), size=10_000, rng=rng).any()
    assert not discrete_gaussian(Fraction(1, 1000), size=10_000, rng=rng).any()


def test_very_large_scale_laplace_matches_pmf() -> None:
    scale, n = Fraction(10**12, 3), 100_000
    assert len(_fast._laplace_plan(scale).digits) >= 3
    x = discrete_laplace(scale, size=n, rng=simulation_randomness(17))
    ls = float(scale)
    edges = np.array([-5, -2, -1, -0.5, -0.2, -0.05, 0, 0.05, 0.2, 0.5, 1, 2, 5]) * ls
    cdf = np.where(edges < 0, 0.5 * np.exp(edges / ls), 1 - 0.5 * np.exp(-edges / ls))
    masses = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
    observed = np.bincount(np.searchsorted(edges, x, side="left"), minlength=masses.size)
    from ._stats import critical_value

    stat = float(np.sum((observed - masses * n) ** 2 / (masses * n)))
    # continuous approximation: relative error ~ 1/scale, negligible against 1/sqrt(n)
    assert stat < critical_value(masses.size - 1)


# --- categorical: exact rational boundaries ------------------------------------------------------


def test_categorical_dyadic_boundary() -> None:
    half = [Fraction(1, 2), Fraction(1, 2)]
    assert categorical(half, size=1, rng=Scripted([2**63 - 1])).tolist() == [0]
    # u = 1/2 + (later bits) >= 1/2 exactly: index 1, however many zero words follow
    assert categorical(half, size=1, rng=Scripted([2**63, 0, 0, 5])).tolist() == [1]
    assert categorical(half, size=1, rng=Scripted([2**63])).tolist() == [1]


def test_categorical_non_dyadic_tie() -> None:
    third = [Fraction(1, 3), Fraction(2, 3)]
    word = 2**64 // 3  # floor(2**64 / 3)
    low = (2**128 // 3) & (2**64 - 1)
    assert categorical(third, size=1, rng=Scripted([word, low - 1])).tolist() == [0]
    assert categorical(third, size=1, rng=Scripted([word, low + 1])).tolist() == [1]
    # equal in 128 bits: the third word is compared with 0x5555... (bits of 1/3)
    assert categorical(third, size=1, rng=Scripted([word, low, 0])).tolist() == [0]
    assert categorical(third, size=1, rng=Scripted([word, low, 2**64 - 1])).tolist() == [1]


def test_categorical_zero_probabilities() -> None:
    rng = simulation_randomness(18)
    x = categorical([Fraction(0), Fraction(1, 2), Fraction(1, 2), Fraction(0)], size=5000, rng=rng)
    assert set(np.unique(x).tolist()) == {1, 2}
    assert set(categorical([0, 0, 1], size=100, rng=rng).tolist()) == {2}
    assert set(categorical([1, 0, 0], size=100, rng=rng).tolist()) == {0}
