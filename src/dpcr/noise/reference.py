"""Plain-Python scalar oracles and exact PMFs for the samplers in :mod:`dpcr.noise`.

The samplers follow Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential Privacy"
(NeurIPS 2020), Algorithms 1-3, with :class:`fractions.Fraction` parameters and nothing but uniform
integers drawn from a :class:`~dpcr.noise.Randomness`. They are slow (microseconds per sample) and
exist to be obviously correct: tests compare the vectorised samplers against them.

The PMF helpers return floats computed in a numerically careful way (relative error about 1e-15),
which is ample for statistical tests.
"""

from __future__ import annotations

import math
from fractions import Fraction

from dpcr.noise._params import positive_fraction
from dpcr.noise._randomness import Randomness

__all__ = [
    "bernoulli",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_gaussian_normaliser",
    "discrete_gaussian_pmf",
    "discrete_laplace",
    "discrete_laplace_pmf",
    "discrete_laplace_tail",
    "geometric_exp",
    "uniform_below",
]


def uniform_below(high: int, rng: Randomness) -> int:
    """A uniform integer in ``[0, high)`` for any ``high >= 1`` (rejection on whole words)."""
    if high <= 0:
        raise ValueError(f"high must be >= 1, got {high}")
    nbits = (high - 1).bit_length()
    nwords = -(-nbits // 64)
    while True:
        value = 0
        for word in rng.uniform_uint64(nwords).tolist():
            value = (value << 64) | word
        value >>= 64 * nwords - nbits
        if value < high:
            return value


def bernoulli(p: Fraction, rng: Randomness) -> bool:
    """Bernoulli(p) for rational ``0 <= p <= 1``: one uniform integer below the denominator."""
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], got {p}")
    return uniform_below(p.denominator, rng) < p.numerator


def _bernoulli_exp_unit(num: int, den: int, rng: Randomness) -> bool:
    """Bernoulli(exp(-num/den)) for ``0 <= num <= den``: A_k ~ Bernoulli(num/(den k)) for
    k = 1, 2, ... until the first A_K = 0; return ``K`` odd (CKS 2020, Algorithm 1)."""
    k = 1
    while uniform_below(den * k, rng) < num:
        k += 1
    return k % 2 == 1


def bernoulli_exp(gamma: Fraction, rng: Randomness) -> bool:
    """Bernoulli(exp(-gamma)) for rational ``gamma >= 0`` (CKS 2020, Algorithm 1).

    ``floor(gamma)`` draws of Bernoulli(exp(-1)) and one of Bernoulli(exp(floor(gamma) - gamma))
    must all succeed; each is drawn by the ``gamma <= 1`` series method.
    """
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    whole, rest = divmod(gamma.numerator, gamma.denominator)
    for _ in range(whole):
        if not _bernoulli_exp_unit(1, 1, rng):
            return False
    return _bernoulli_exp_unit(rest, gamma.denominator, rng)


def geometric_exp(gamma: Fraction, rng: Randomness) -> int:
    """G with P[G = g] = (1 - e^-gamma) e^(-gamma g), g >= 0, by repeated Bernoulli(exp(-gamma))."""
    g = 0
    gamma = Fraction(gamma)
    while bernoulli_exp(gamma, rng):
        g += 1
    return g


def discrete_laplace(scale: Fraction | int, rng: Randomness) -> int:
    """One draw with P[x] ∝ exp(-|x|/scale) on the integers (CKS 2020, Algorithm 2)."""
    scale = positive_fraction(scale, "scale")
    s, t = scale.numerator, scale.denominator  # scale = s/t; 1/scale = t/s
    while True:
        u = uniform_below(s, rng)
        if not _bernoulli_exp_unit(u, s, rng):
            continue
        v = geometric_exp(Fraction(1), rng)
        y = (u + s * v) // t
        negative = uniform_below(2, rng) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_gaussian(sigma2: Fraction | int, rng: Randomness) -> int:
    """One draw with P[x] ∝ exp(-x²/(2 sigma2)) on the integers (CKS 2020, Algorithm 3)."""
    sigma2 = positive_fraction(sigma2, "sigma2")
    t = math.isqrt(math.floor(sigma2)) + 1  # floor(sigma) + 1
    while True:
        y = discrete_laplace(t, rng)
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if bernoulli_exp(gamma, rng):
            return y


# --- exact PMFs (as floats) ---------------------------------------------------------------------


def discrete_laplace_pmf(x: int, scale: Fraction | int) -> float:
    """P[X = x] = tanh(1/(2 scale)) exp(-|x|/scale)."""
    scale = positive_fraction(scale, "scale")
    inv = 1 / float(scale)
    return math.tanh(inv / 2) * math.exp(-abs(x) * inv)


def discrete_laplace_tail(k: int, scale: Fraction | int) -> float:
    """P[X >= k] for ``k >= 1`` (= P[X <= -k]): exp(-k/scale) / (1 + exp(-1/scale))."""
    scale = positive_fraction(scale, "scale")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    inv = 1 / float(scale)
    return math.exp(-k * inv) / (1 + math.exp(-inv))


def discrete_gaussian_normaliser(sigma2: Fraction | int) -> float:
    """Z = sum over all integers x of exp(-x²/(2 sigma2)), to about 1e-15 relative error."""
    sigma2 = positive_fraction(sigma2, "sigma2")
    s2 = float(sigma2)
    # Terms beyond |x| = 40 sigma + 2 are below exp(-800) relative to the first.
    reach = int(40 * math.sqrt(s2)) + 2
    total = 0.0
    for x in range(reach, 0, -1):  # smallest terms first
        total += math.exp(-x * x / (2 * s2))
    return 1.0 + 2.0 * total


def discrete_gaussian_pmf(x: int, sigma2: Fraction | int) -> float:
    """P[X = x] = exp(-x²/(2 sigma2)) / Z."""
    sigma2 = positive_fraction(sigma2, "sigma2")
    return math.exp(-x * x / (2 * float(sigma2))) / discrete_gaussian_normaliser(sigma2)
