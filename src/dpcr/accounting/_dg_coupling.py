"""The discrete Gaussian mechanism, in any dimension and for any L2 sensitivity, accounted as a
continuous Gaussian: a proven coupling.

**Theorem.** Let σ² > τ² > 0, s² = σ² − τ², and let K be the Markov kernel from ℝ to ℤ

    K(y, z) = e^{−(z − y)²/2τ²} / Θ_τ(y),    Θ_x(y) = Σ_{n ∈ ℤ} e^{−(n − y)²/2x²}

(a discrete Gaussian of variance parameter τ² centred at y). Let P be the law of K(Y, ·) for
Y ~ N(0, s²) and p the discrete Gaussian N_ℤ(0, σ²). Then for every integer z

    e^{−γ₁} <= P(z) / p(z) <= e^{γ₁},   γ₁ = log(1 + ε_σ) − log(1 − ε_τ),
    ε_x = 2 Σ_{k>=1} e^{−2π²x²k²} <= 2 e^{−a} / (1 − e^{−3a}),  a = 2π²x²  (needs ε_τ < 1).

*Proof.* With g(z) = e^{−z²/2σ²}/(σ√(2π)): (i) by Poisson summation
Θ_x(y) = x√(2π) (1 + 2 Σ_{k>=1} e^{−2π²x²k²} cos 2πky), so Θ_x(y) / (x√(2π)) lies in
[1 − ε_x, 1 + ε_x] (and the tail bound uses k² >= 1 + 3(k − 1)). (ii) The N(0, s²) and N(0, τ²)
densities convolve to the N(0, σ²) density, so ∫ φ_s(y) e^{−(z−y)²/2τ²} / (τ√(2π)) dy = g(z), and
by (i) P(z) lies in [g(z)/(1 + ε_τ), g(z)/(1 − ε_τ)]. (iii) p(z) = e^{−z²/2σ²} / Θ_σ(0) lies in
[g(z)/(1 + ε_σ), g(z)]. Dividing gives the bounds. ∎

K commutes with integer shifts (K(y + n, z + n) = K(y, z)), so for an integer-valued query q
(every query dpcr perturbs is one) applying K to each coordinate of q(x) + N(0, s² I_d) gives
q(x) + Z with Z ~ P^{⊗d}: a post-processing of the continuous Gaussian mechanism whose output law
is within a factor e^{d γ₁} of the discrete Gaussian mechanism's, at every point and every x.
The continuous Gaussian mechanism in d dimensions with L2 sensitivity Δ has exactly the privacy
profile of the one-dimensional Gaussian with μ = Δ/s (rotation invariance; Balle & Wang 2018).

Only the coordinates on which two neighbours' means differ matter: the others carry the same
noise law in both worlds, independent of the rest, and drop out of every hockey-stick
divergence. So d, the event's ``dimension``, need only bound that number of coordinates (an
open-ended BLT: m·L, not its unbounded length).

**Corollary (composition).** Replace every discrete Gaussian leaf (σ², Δ², dimension d, used c
times) of a composition by a continuous Gaussian of standard deviation s and sensitivity Δ (its
*surrogate*), and let γ = Σ c d γ₁. If the surrogate composition M' is (ε', δ')-DP, the real one
M is (ε' + 2γ, e^γ δ')-DP: for every set S of outputs and neighbours x, x',
Pr[M(x) ∈ S] <= e^γ Pr[M'(x) ∈ S] <= e^γ (e^{ε'} Pr[M'(x') ∈ S] + δ')
<= e^{ε' + 2γ} Pr[M(x') ∈ S] + e^γ δ'.

τ is free: a larger τ makes γ₁ smaller (exponentially in τ²) and s smaller.
:func:`surrogate` picks τ² on a grid to minimise the first-order cost of both (for a
factorization's σ in the millions, 1 − s/σ and γ are both below 1e-12; for σ = 6, s/σ = 0.993
and γ = 3e-4).
``tests/accounting/test_dg_coupling.py`` checks the ratio bound against P computed by
quadrature and the corollary against the exact δ of discrete Gaussian pairs summed over every
output.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from functools import lru_cache

from dpcr.accounting._accountant_base import Leaf, Multiset, _canonical
from dpcr.accounting.events import DiscreteGaussianEvent, GaussianEvent
from dpcr.errors import UnsupportedEventError

__all__ = ["TAU2_GRID", "ratio_bound", "supported", "surrogate", "theta_excess"]

#: The values of τ² tried (1/8 to 4 in steps of 1/16); below 1/8, ε_τ approaches 1.
TAU2_GRID = tuple(Fraction(j, 16) for j in range(2, 65))
_OUT = 1 + 1e-12  # outward factor on float evaluations of γ (each within a few ulps)


def theta_excess(x2: float) -> float:
    """An upper bound on ε_x = 2 Σ_{k>=1} e^{−2π²x²k²} (``x2`` = x²), rounded outward."""
    a = 2 * math.pi**2 * x2
    return 2 * math.exp(-a) / -math.expm1(-3 * a) * _OUT


def ratio_bound(sigma2: float, tau2: float) -> float:
    """γ₁ = log(1 + ε_σ) − log(1 − ε_τ), rounded up; inf when ε_τ >= 1/2 (τ too small)."""
    e_tau = theta_excess(tau2)
    if e_tau >= 0.5:
        return math.inf
    return (math.log1p(theta_excess(sigma2)) - math.log1p(-e_tau)) * _OUT + 1e-300


@lru_cache(maxsize=4096)
def _tau2(sigma2: Fraction, copies: int) -> Fraction | None:
    """τ² minimising τ²/(2σ²) + 2·copies·γ₁ (the first-order cost of each side, in ε near 1)
    over :data:`TAU2_GRID` below σ², or None when no grid value is below σ²."""
    best: tuple[float, Fraction] | None = None
    s2 = float(sigma2)
    for t2 in TAU2_GRID:
        if t2 >= sigma2:
            break
        cost = float(t2) / (2 * s2) + 2 * copies * ratio_bound(s2, float(t2))
        if best is None or cost < best[0]:
            best = (cost, t2)
    return None if best is None or not math.isfinite(best[0]) else best[1]


def _sqrt_down(x: Fraction) -> float:
    """The largest float whose square is at most ``x`` (x > 0), or a float just below it."""
    r = math.sqrt(float(x))
    while Fraction(r) ** 2 > x:
        r = math.nextafter(r, 0.0)
    return r


def _sqrt_up(x: Fraction) -> float:
    r = math.sqrt(float(x))
    while Fraction(r) ** 2 < x:
        r = math.nextafter(r, math.inf)
    return r


def supported(e: DiscreteGaussianEvent) -> bool:
    """Whether some τ² of the grid is below σ² (the coupling applies)."""
    return e.sigma2 > TAU2_GRID[0]


@lru_cache(maxsize=4096)
def surrogate(e: DiscreteGaussianEvent, count: int) -> tuple[GaussianEvent, float] | None:
    """The continuous surrogate of ``count`` uses of ``e`` and their γ = count·d·γ₁ (module
    docstring), or None when σ² is too small. The surrogate's ``sigma`` is rounded down and its
    ``sensitivity`` up, so its μ is at least √(Δ²/s²)."""
    copies = count * e.dimension
    t2 = _tau2(e.sigma2, copies)
    if t2 is None:
        return None
    gamma = copies * ratio_bound(float(e.sigma2), float(t2)) * _OUT
    gauss = GaussianEvent(sigma=_sqrt_down(e.sigma2 - t2), sensitivity=_sqrt_up(e.sensitivity2))
    return gauss, gamma


def _dg_integer_sensitivity(e: DiscreteGaussianEvent) -> int | None:
    """The sensitivity of ``e`` when it is an integer, else None."""
    s2 = e.sensitivity2
    if s2.denominator != 1:
        return None
    root = math.isqrt(int(s2))
    return root if root * root == s2 else None


def _dg_exact(e: DiscreteGaussianEvent) -> bool:
    """Whether the discrete Gaussian's own PLD describes ``e`` (one coordinate, integer
    sensitivity); any other discrete Gaussian is accounted by its continuous surrogate."""
    return e.dimension == 1 and _dg_integer_sensitivity(e) is not None


@lru_cache(maxsize=1024)
def _surrogates(items: Multiset) -> tuple[Multiset, float]:
    """``items`` with every discrete Gaussian that :func:`_dg_exact` does not cover replaced by
    its continuous surrogate, and the sum of their γ (0.0 when nothing was replaced: then
    ``items`` is returned unchanged). Raises :class:`UnsupportedEventError` for a σ² too small
    for any τ² of the grid."""
    out: Counter[Leaf] = Counter()
    gamma = 0.0
    # Once one discrete Gaussian needs its surrogate, all of them take theirs (where σ² allows):
    # a composition of Gaussians alone has the closed form; one mixing a continuous Gaussian
    # with discrete grid PLDs costs a tenth of a second per leaf.
    coupled = any(isinstance(e, DiscreteGaussianEvent) and not _dg_exact(e) for e, _ in items)
    for e, c in items:
        if isinstance(e, DiscreteGaussianEvent) and (
            not _dg_exact(e) or (coupled and supported(e))
        ):
            pair = surrogate(e, c)
            if pair is None:
                raise UnsupportedEventError(f"no surrogate for {e!r}: sigma2 is too small")
            out[pair[0]] += c
            gamma += pair[1]
        else:
            out[e] += c
    if gamma == 0:
        return items, 0.0
    return _canonical(out), gamma * _OUT
