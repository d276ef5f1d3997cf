"""Privacy-loss distributions: exact Gaussian and lattice paths, grid PLDs otherwise.

Grid PLDs (:class:`~dpcr.accounting._grid.GridPld`) are built here for discrete Gaussian,
Laplace and pure/approximate DP leaves (vectorised; no dp-accounting import on those paths) and
taken from dp-accounting for the other leaves (continuous Gaussian, discrete Laplace, randomized
response); composition is the grid core's.

A discrete Gaussian with one coordinate and an integer sensitivity has its own (grid) PLD. Any
other discrete Gaussian (a vector, or a sensitivity that is not an integer) is replaced by its
continuous surrogate and the result corrected by the coupling's γ
(:mod:`dpcr.accounting._dg_coupling`): ε = ε'(δ e^{−γ}) + 2γ, δ(ε) = e^γ δ'(ε − 2γ)."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from dpcr.accounting import _dg_coupling
from dpcr.accounting._accountant_base import (
    _REL,
    Accountant,
    Leaf,
    Multiset,
    _epsilon_from_delta,
    _hockey,
    _lattice_pmf,
    _pure_parameters,
    _up,
)
from dpcr.accounting._dg_coupling import _dg_exact, _dg_integer_sensitivity, _surrogates
from dpcr.accounting._grid import GridPld, GridTooLarge
from dpcr.accounting._rdp import _ORDERS, RdpAccountant, rdp_epsilon
from dpcr.accounting.composition import round_up
from dpcr.accounting.events import (
    ApproxDpEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    PureDpEvent,
    RandomizedResponseEvent,
)
from dpcr.accounting.fast_pld import laplace_pmf
from dpcr.errors import UnsupportedEventError


def _lattice_unit(e: Leaf) -> tuple[float, np.ndarray, np.ndarray] | None:
    """(unit, integer loss indices, masses) for exact lattice convolution, or None."""
    pmf = _lattice_pmf(e)
    if pmf is None:
        return None
    log_p, loss = pmf
    if isinstance(e, DiscreteLaplaceEvent):
        unit = 2 * float(1 / e.scale)
        idx = np.rint((loss - loss.min()) / unit).astype(np.int64)
    else:
        unit = float(loss.max()) if loss.max() > 0 else 1.0
        idx = np.rint((loss - loss.min()) / unit).astype(np.int64)
    masses = np.zeros(int(idx.max()) + 1)
    np.add.at(masses, idx, np.exp(log_p))
    return unit, masses, np.array([loss.min()])


def _lattice_compose(masses: np.ndarray, k: int) -> np.ndarray:
    """k-fold self-convolution by squaring with direct (non-FFT) convolution: every term is
    non-negative, so the relative error is at most a few hundred ulps."""
    result = np.array([1.0])
    base = masses / masses.sum() if abs(masses.sum() - 1) > 1e-12 else masses
    while k:
        if k & 1:
            result = np.convolve(result, base)
        k >>= 1
        if k:
            base = np.convolve(base, base)
            base[base < 1e-320] = 0.0
        result[result < 1e-320] = 0.0
    return result


def _gaussian_delta(mu: float, epsilon: float) -> float:
    """Exact δ(ε) of the Gaussian mechanism with μ = Δ/σ (Balle & Wang 2018), rounded up."""
    from scipy.special import log_ndtr

    a = float(log_ndtr(mu / 2 - epsilon / mu))
    b = epsilon + float(log_ndtr(-mu / 2 - epsilon / mu))
    if b >= a:
        return 0.0 if a < -700 else _up(math.exp(a) * 1e-9)
    val = math.exp(a) * -math.expm1(b - a)
    return _up(val * (1 + 1e-9)) + 1e-17


class PldAccountant(Accountant):
    """Privacy-loss distributions (see the module docstring for the exact and tree paths)."""

    name = "pld"

    def _supports_leaf(self, e: Leaf) -> bool:
        if isinstance(e, DiscreteGaussianEvent):
            return _dg_exact(e) or _dg_coupling.supported(e)
        return isinstance(
            e,
            PureDpEvent
            | ApproxDpEvent
            | LaplaceEvent
            | DiscreteLaplaceEvent
            | RandomizedResponseEvent
            | GaussianEvent,
        )

    def _epsilon(self, items: Multiset, delta: float) -> float:
        return _pld_epsilon(items, delta)

    def _delta(self, items: Multiset, epsilon: float) -> float:
        plain, gamma = _surrogates(items)
        if gamma == 0:
            return _plain_delta(plain, epsilon)
        if not _only_gaussians(plain):
            # Continuous surrogates composed with other mechanisms would need dp-accounting's
            # grid PLD of each (a tenth of a second apiece, inside every calibration search):
            # such a composition is left to the other methods (1.0: the trivial bound).
            return 1.0
        # the coupling's corollary: δ(ε) <= e^γ δ'(ε − 2γ), ε − 2γ rounded down
        shifted = math.nextafter(epsilon - 2 * gamma, -math.inf)
        if shifted < 0:
            return 1.0
        return min(1.0, _up(_plain_delta(plain, shifted) * math.exp(gamma)))


def _only_gaussians(items: Multiset) -> bool:
    return all(isinstance(e, GaussianEvent) for e, _ in items)


def _plain_delta(items: Multiset, epsilon: float) -> float:
    """δ(ε) of a multiset without coupled discrete Gaussians (:func:`_surrogates`)."""
    kind, obj = _pld_object(items)
    if kind == "gaussian":
        return min(1.0, _gaussian_delta(obj, epsilon)) if obj > 0 else 0.0
    if kind == "lattice":
        log_p, loss = obj
        return min(1.0, _hockey(log_p, loss, epsilon))
    if kind == "unbounded":
        return 1.0  # not applicable (see PLD_MAX_POINTS): the trivial bound
    return min(1.0, _up(float(obj.get_delta_for_epsilon(epsilon))) + 1e-15)


def _gaussian_mu(gauss: list[tuple[Leaf, int]]) -> float:
    """An upper bound on μ = sqrt(Σ c (Δ/σ)²) of composed Gaussians (they compose exactly).

    Up to 64 distinct Gaussians: exact rational sum rounded up. More: float terms (each within
    a few ulps), summed exactly by ``math.fsum`` and multiplied by 1 + 2^-40 (rational sums of
    thousands of distinct floats take seconds). The square root is rounded up one ulp.
    """
    if not gauss:
        return 0.0
    if len(gauss) <= 64:
        mu2 = round_up(
            sum(
                (Fraction(e.sensitivity) ** 2 / Fraction(e.sigma) ** 2 * c for e, c in gauss),
                Fraction(0),
            )
        )
    else:
        mu2 = math.fsum((e.sensitivity / e.sigma) ** 2 * c for e, c in gauss) * (1 + 2.0**-40)
    return math.nextafter(math.sqrt(mu2), math.inf) if mu2 > 0 else 0.0


@lru_cache(maxsize=256)
def _pld_object(items: Multiset) -> tuple[str, Any]:
    gauss = [(e, c) for e, c in items if isinstance(e, GaussianEvent)]
    others = [(e, c) for e, c in items if not isinstance(e, GaussianEvent)]
    if not others:
        return "gaussian", _gaussian_mu(gauss)
    if not gauss and len(others) == 1:
        e, c = others[0]
        lat = _lattice_unit(e)
        if lat is not None and not isinstance(e, ApproxDpEvent):
            unit, masses, lo = lat
            composed = _lattice_compose(masses, c)
            idx = np.nonzero(composed)[0]
            loss = (lo[0] * c) + idx * unit
            with np.errstate(divide="ignore"):
                log_c = np.log(composed[idx])
                return "lattice", (log_c + 4 * _REL * np.abs(log_c), loss)
    interval = _discretization(items)
    if any(_leaf_points(e, interval) > PLD_MAX_POINTS for e, _ in items):
        return "unbounded", None
    try:
        return "tree", _pld_tree(items, interval)
    except GridTooLarge:
        return "unbounded", None


#: The most grid points one leaf's PLD may have. Beyond (a sensitivity far above the noise:
#: a loss range of millions of grid steps) no PLD is built: the PLD method does not apply, and
#: the guarantee comes from the other methods (zCDP, Rényi DP, ...), each an upper bound.
PLD_MAX_POINTS = 1 << 21
#: Discrete Laplace above this integer sensitivity is accounted as pure ε = sensitivity/scale
#: (dominated by binary randomized response); dp-accounting's exact PLD loops over it.
DL_MAX_SENSITIVITY = 10**4


def _leaf_points(e: Leaf, interval: float) -> float:
    """About how many grid points (of width ``interval``) the leaf's PLD has."""
    if isinstance(e, DiscreteGaussianEvent):
        d = _dg_integer_sensitivity(e) or 1
        s2 = float(e.sigma2)
        return 2 * d * _dg_support(d, s2) / (s2 * interval)
    if isinstance(e, DiscreteLaplaceEvent) and e.sensitivity > DL_MAX_SENSITIVITY:
        return 0.0  # accounted as pure ε: three points
    if isinstance(e, LaplaceEvent | DiscreteLaplaceEvent):
        return 2 * float(Fraction(e.sensitivity) / Fraction(e.scale)) / interval
    return 0.0  # randomized response, pure and approximate DP: three points


def _discretization(items: Multiset) -> float:
    """Grid width: about 1e-4 of the expected ε when every leaf is discretised by
    connect-the-dots, 1e-5 otherwise, in [1e-9, 1e-2] (relative to ε down to ε = 1e-5: a grid
    coarse against ε makes the stated ε a staircase in the noise, which the calibration's search
    then has to climb)."""
    rdp_items = [(e, c) for e, c in items if RdpAccountant()._supports_leaf(e)]
    # every 10th order suffices for an estimate (any order gives a valid ε; this only sets h)
    orders = _ORDERS[::10]
    est = rdp_epsilon(RdpAccountant.curve(rdp_items, orders), 1e-6, orders) if rdp_items else 1.0
    est += sum(float(e.epsilon) * c for e, c in items if isinstance(e, ApproxDpEvent))
    if all(isinstance(e, _CONNECT_THE_DOTS) for e, _ in items):
        # every leaf is discretised by connect-the-dots (error second order in h): a 10x
        # coarser grid stays within ~1e-7 relative of the 1e-5 one (tests/accounting)
        return float(min(1e-2, max(1e-9, 1e-4 * est)))
    return float(min(1e-2, max(1e-9, 1e-5 * est)))


#: Leaves whose grid PLD is made by connect-the-dots (error second order in the grid width).
_CONNECT_THE_DOTS = (
    DiscreteGaussianEvent,
    GaussianEvent,
    LaplaceEvent,
    PureDpEvent,
    ApproxDpEvent,
)


def _from_dp_accounting(pld: Any) -> GridPld:
    """dp-accounting's (symmetric) PLD as a :class:`GridPld`: the same masses."""
    pmf = pld._pmf_remove.to_dense_pmf()
    return GridPld(
        h=float(pmf._discretization),
        lo=int(pmf._lower_loss),
        probs=np.asarray(pmf._probs, dtype=np.float64),
        infinity=float(pmf._infinity_mass),
    )


def _dp_accounting_leaf(e: Leaf, interval: float) -> GridPld | None:
    """dp-accounting's PLD of a continuous Gaussian, a discrete Laplace (integer sensitivity up
    to :data:`DL_MAX_SENSITIVITY`) or randomized response; None for any other leaf (imported
    only here: about 0.45 s)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    if isinstance(e, GaussianEvent):
        return _from_dp_accounting(
            pld.from_gaussian_mechanism(
                e.sigma, sensitivity=e.sensitivity, value_discretization_interval=interval
            )
        )
    if (
        isinstance(e, DiscreteLaplaceEvent)
        and e.dimension == 1
        and e.sensitivity.denominator == 1
        and e.sensitivity <= DL_MAX_SENSITIVITY
    ):
        return _from_dp_accounting(
            pld.from_discrete_laplace_mechanism(
                float(1 / e.scale),
                sensitivity=int(e.sensitivity),
                value_discretization_interval=interval,
            )
        )
    if isinstance(e, RandomizedResponseEvent):
        k = e.buckets
        p = k / (math.exp(e.epsilon) + k - 1)
        return _from_dp_accounting(
            pld.from_randomized_response(p, k, value_discretization_interval=interval)
        )
    return None


@lru_cache(maxsize=512)
def _composed_leaf(e: Leaf, count: int, interval: float) -> GridPld:
    """``count``-fold self-composition of one leaf's PLD (remembered: the classes of a hybrid
    constraint and the steps of a calibration compose the same leaves)."""
    leaf = _leaf_pld(e, interval)
    return leaf.self_compose(count) if count > 1 else leaf


def _leaf_pld(e: Leaf, interval: float) -> GridPld:
    """The pessimistic PLD of one leaf on the grid ``interval``: built here for discrete
    Gaussian, Laplace and pure/approximate DP, taken from dp-accounting for the rest."""
    if isinstance(e, DiscreteGaussianEvent):
        return _discrete_gaussian_pld(e, interval)
    if isinstance(e, LaplaceEvent):  # vectorised connect-the-dots, ε0 rounded up
        lo, probs = laplace_pmf(round_up(Fraction(e.sensitivity) / Fraction(e.scale)), interval)
        return GridPld(h=interval, lo=lo, probs=probs, infinity=0.0)
    if isinstance(e, GaussianEvent | DiscreteLaplaceEvent | RandomizedResponseEvent):
        leaf = _dp_accounting_leaf(e, interval)
        if leaf is not None:
            return leaf
    pars = _pure_parameters(e)
    if pars is None:
        raise UnsupportedEventError(f"no PLD for {e!r}")
    eps, delta = pars
    # an (ε, δ)-DP pair is dominated by: loss ε with mass (1 − δ)/(1 + e^{−ε}), −ε with
    # (1 − δ)/(1 + e^{ε}), +∞ with δ (dp-accounting's from_privacy_parameters); each atom is
    # split between its two grid neighbours (connect the dots, as for the discrete Gaussian)
    masses: dict[int, float] = {}
    for loss, mass in (
        (eps, (1 - delta) / (1 + math.exp(-eps))),
        (-eps, (1 - delta) / (1 + math.exp(eps))),
    ):
        i = math.floor(loss / interval)
        u = min(interval, max(0.0, loss - i * interval + 1e-14 * (abs(loss) + interval)))
        up = mass * (math.expm1(-u) / math.expm1(-interval))
        masses[i] = masses.get(i, 0.0) + (mass - up)
        masses[i + 1] = masses.get(i + 1, 0.0) + up
    return GridPld.from_masses(interval, masses, delta)


#: The most atoms (integers x with |x| <= m) the fine discrete Gaussian PLD enumerates; beyond
#: (huge σ or sensitivity), :func:`_coarse_discrete_gaussian_pmf`, whose work is proportional to
#: the number of grid points (about 23.6 Δ/(σ h)) and not to σ.
DG_MAX_ATOMS = 1 << 17


def _dg_support(d: int, s2: float) -> int:
    """m: the fine and coarse PLDs describe the atoms |x| <= m; the rest is infinite loss."""
    return math.ceil(11.8 * math.sqrt(s2)) + d + 1


def _ndtr(z: np.ndarray) -> np.ndarray:
    """Φ(z) = erfc(−z/√2)/2 (``math.erfc``, within a few ulps; no scipy import on the plan's
    path)."""
    out: np.ndarray = np.array([0.5 * math.erfc(-float(v) / math.sqrt(2)) for v in z.ravel()])
    return out.reshape(z.shape)


def _dg_tail(m: int, s2: float) -> float:
    """An upper bound on Σ_{|x| > m} e^{−x²/2σ²}: twice (the first term + the integral)."""
    s = math.sqrt(s2)
    return 2 * (
        math.exp(-((m + 1) ** 2) / (2 * s2))
        + s * math.sqrt(2 * math.pi) * 0.5 * math.erfc((m + 1) / s / math.sqrt(2))
    )


def _discrete_gaussian_pld(e: DiscreteGaussianEvent, interval: float) -> GridPld:
    """Pessimistic PLD of the discrete Gaussian with integer sensitivity d, vectorised: the fine
    one below, or :func:`_coarse_discrete_gaussian_pmf` beyond :data:`DG_MAX_ATOMS` atoms.

    With X ~ N_Z(0, σ²) the loss at output x is ((x − d)² − x²)/(2σ²) = (d² − 2dx)/(2σ²) (the
    normalising constants cancel). Masses on |x| <= m (m ≈ 11.8σ + d) are divided by the partial
    normaliser (so they are over-estimates), each atom is split between its two neighbouring
    grid points (connect the dots, see the code; dominating, error second order in h), and the mass
    beyond m, bounded by 2(e^{−(m+1)²/2σ²} + σ√(2π) Q((m+1)/σ)) / Z_partial, goes to infinite
    loss. The mechanism is symmetric, so one direction describes both.
    (dp-accounting's ``from_discrete_gaussian_mechanism`` does the same in a Python loop, 7 s
    for σ ≈ 1.6e5.)
    """
    d = _dg_integer_sensitivity(e)
    if d is None:
        raise UnsupportedEventError(f"no PLD for {e!r}: sensitivity must be an integer")
    s2 = float(e.sigma2)
    m = _dg_support(d, s2)
    if 2 * m + 1 > DG_MAX_ATOMS:
        lo_index, coarse, infinity = _coarse_discrete_gaussian_pmf(d, e.sigma2, interval)
        return GridPld(h=interval, lo=lo_index, probs=coarse, infinity=infinity)
    x = np.arange(-m, m + 1, dtype=np.float64)
    w = np.exp(-x * x / (2 * s2))
    z_part = float(np.sum(w)) * (1 - 1e-12)
    tail = _dg_tail(m, s2)
    probs = w / z_part * (1 + 1e-12)
    loss = (d * d - 2 * d * x) / (2 * s2)
    # connect the dots per atom: mass p at loss ℓ = t_i + u (0 <= u <= h) is split into
    # b = p·expm1(−u)/expm1(−h) on t_{i+1} and p − b on t_i. Both the P-mass (p) and the
    # Q-mass (p e^{−ℓ}) are preserved, so the original pair is a post-processing (merging two
    # outputs) of the split one, which therefore dominates it; the error is second order in h.
    # u is rounded up by far more than its float error (a larger u moves mass up).
    idx = np.floor(loss / interval).astype(np.int64)
    u = loss - idx * interval + 1e-14 * (np.abs(loss) + interval)
    u = np.clip(u, 0.0, interval)
    up = probs * (np.expm1(-u) / math.expm1(-interval))
    lo = int(idx.min())
    n = int(idx.max()) - lo + 2
    masses = np.bincount(idx - lo, weights=probs - up, minlength=n)
    masses += np.bincount(idx - lo + 1, weights=up, minlength=n)
    keep = np.nonzero(masses)[0]
    first, last = int(keep[0]), int(keep[-1])
    return GridPld(
        h=interval,
        lo=lo + first,
        probs=masses[first : last + 1],
        infinity=_up(tail / z_part) + 1e-300,
    )


def _gauss_sum_bounds(a: np.ndarray, b: np.ndarray, s2: float) -> tuple[np.ndarray, np.ndarray]:
    """Upper and lower bounds on Σ_{x=a}^{b} w(x), w(x) = e^{−x²/2σ²}, for integer arrays
    a <= b (as floats), each within a small relative error of the sum.

    Midpoint Euler–Maclaurin: Σ_{x=a}^{b} w(x) = ∫_α^β w − (w'(β) − w'(α))/24 + E with
    α = a − ½, β = b + ½, n = b − a + 1 and |E| <= n M₄ (1/1920 + 1/576), M₄ the largest |w⁗|
    on [α, β] (Taylor: ∫_{x−½}^{x+½} w = w(x) + w''(x)/24 + R with |R| <= M₄/1920, and
    Σ w''(x) = w'(β) − w'(α) + R' with |R'| <= n M₄/24). With t = y/σ,
    |w⁗(y)| = |t⁴ − 6t² + 3| e^{−t²/2}/σ⁴ <= g(t)/σ⁴, g(t) = (t⁴ + 6t² + 3) e^{−t²/2}, and
    g <= 7.01 everywhere and is decreasing in |t| for |t| >= 1.5, so M₄ is bounded from the
    point of [α, β] nearest 0. The integral: on a narrow range (n <= σ/100) Simpson's rule
    (n/6)(w(α) + 4w((α+β)/2) + w(β)), within n⁵ M₄/2880, a product of exponentials (no
    cancellation; floating-point margin (1e-13 + 1e-15 t²) of its size); on a wide one
    σ√(2π)(Φ(β/σ) − Φ(α/σ)) from the tails on the side away from 0, with (1e-13 + 1e-15 t²) of
    each tail as its floating-point margin (a tail's relative error from rounding its argument
    is about t² 1e-16, and :func:`_ndtr` adds a few ulps)."""

    s = math.sqrt(s2)
    root = s * math.sqrt(2 * math.pi)
    lo, hi = a - 0.5, b + 0.5
    n = b - a + 1

    def w(y: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.exp(-(y * y) / (2 * s2))
        return out

    w_lo, w_hi = w(lo), w(hi)
    correction = (hi * w_hi - lo * w_lo) / (24 * s2)  # −(w'(β) − w'(α))/24
    near = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(np.abs(lo), np.abs(hi))) / s
    far = np.maximum(np.abs(lo), np.abs(hi)) / s
    g = np.where(near < 1.5, 7.01, (near**4 + 6 * near**2 + 3) * np.exp(-(near**2) / 2))
    m4 = g / (s2 * s2)
    narrow = n <= s / 100
    simpson = n / 6 * (w_lo + 4 * w((lo + hi) / 2) + w_hi)
    # Φ from the tail away from 0, only where the range is wide (few buckets)
    right = lo >= 0
    t_lo, t_hi = np.zeros_like(lo), np.zeros_like(hi)
    wide = np.nonzero(~narrow)[0]
    t_lo[wide] = _ndtr(np.where(right, -lo, lo)[wide] / s)
    t_hi[wide] = _ndtr(np.where(right, -hi, hi)[wide] / s)
    tails = root * np.where(right, t_lo - t_hi, t_hi - t_lo)
    integral = np.where(narrow, simpson, tails)
    err = n * m4 * (1 / 1920 + 1 / 576) + np.where(narrow, n**5 * m4 / 2880, 0.0)
    fp = (
        np.where(
            narrow,
            (1e-13 + 1e-15 * far * far) * (simpson + np.abs(correction)),
            (1e-13 + 1e-15 * far * far) * (root * (t_lo + t_hi) + np.abs(correction)),
        )
        + 1e-300
    )
    est = integral + correction
    return est + err + fp, np.maximum(est - err - fp, 0.0)


def _coarse_discrete_gaussian_pmf(
    d: int, sigma2: Fraction, h: float
) -> tuple[int, np.ndarray, float]:
    """(lowest grid index, masses, infinity mass) of a pessimistic PLD of the discrete Gaussian
    (integer sensitivity d) on the grid i·h, with work proportional to the number of grid
    points (about 23.6 d/(σh)) instead of the number of atoms (about 23.6σ).

    Why it dominates the mechanism (its δ(ε) is never below the true one, alone or composed).
    The loss at output x is ℓ(x) = (d² − 2dx)/(2σ²), decreasing in x. Bucket i holds the
    integers x in [c_i, c_{i−1} − 1], c_i = ⌈d/2 − σ²ih/d + τ_i⌉ (kept nonincreasing in i),
    with τ_i far above the floating-point error of the float value: every atom of bucket i has
    ℓ(x) <= ih, and ℓ(x) > (i−1)h except, where d/2 − σ²(i−1)h/d lies within τ_{i−1} of an
    integer, at most one atom just below (by at most 2dτ_{i−1}/σ²).
    The fine PLD splits each atom p at t_{i−1} + u between t_{i−1} and t_i (connect the dots,
    P- and Q-masses preserved: a dominating pair); summed over the bucket, the split puts
    B_i = (P_i − e^{t_{i−1}} Q_i)/(1 − e^{−h}) on t_i and A_i = P_i − B_i on t_{i−1}, with P_i the
    bucket's P-mass and Q_i = Σ p(x) e^{−ℓ(x)} = Σ_x w(x − d)/Z its Q-mass. Here P_i and Q_i are
    bounded above and below (:func:`_gauss_sum_bounds`; the normaliser Z = Σ_x w(x) =
    σ√(2π) Σ_k e^{−2π²σ²k²} lies in [σ√(2π), σ√(2π)(1 + 3e^{−2π²σ²})] by Poisson summation), and
    A_i and B_i are replaced by upper bounds (a larger mass at a loss only raises δ(ε), alone and
    in any composition: the hockey stick is linear in the masses with nonnegative weights). The
    atom just below t_{i−1} (x = c_{i−1} − 1) makes the true split's B at most
    p(x) (e^{2dτ/σ²} − 1)/(1 − e^{−h}) larger (p(x) <= w(x)/(σ√(2π))): added there. Where
    t_{i−1} > 600 (e^t would overflow) the bucket's whole P-mass bound goes to t_i (rounding
    up, also dominating). Atoms with |x| > m go to infinite loss
    (:func:`_dg_tail` / (σ√(2π))). The bounds are within about 50/σ⁴ + 1e-13 of each sum,
    relative (σ is in the thousands here), so the result is the fine PLD's up to about 1e-9 of
    each mass.
    """
    s2 = float(sigma2)
    s = math.sqrt(s2)
    m = _dg_support(d, s2)
    root = s * math.sqrt(2 * math.pi)
    z_over = 1 + 3 * math.exp(-2 * math.pi**2 * s2)  # Z / (σ√(2π)) is at most this

    def loss(x: float) -> float:
        return (d * d - 2 * d * x) / (2 * s2)

    # bucket indices: from the atom x = m (lowest loss) to x = −m (highest), spares each side
    i_lo = math.floor(loss(m) / h) - 1
    i_hi = math.ceil(loss(-m) / h) + 1
    idx = np.arange(i_lo - 1, i_hi + 1, dtype=np.float64)
    y = d / 2 - (s2 / d) * (idx * h)
    tau = 1e-11 * (d / 2 + np.abs((s2 / d) * (idx * h))) + 1e-9
    c = np.clip(np.minimum.accumulate(np.ceil(y + tau)), -m, m + 1)
    a, b = c[1:], c[:-1] - 1  # bucket idx[1:][j] holds the integers a_j .. b_j
    full = b >= a
    a, b = np.where(full, a, 0.0), np.where(full, b, 0.0)
    p_hi, p_lo = _gauss_sum_bounds(a, b, s2)
    q_hi, q_lo = _gauss_sum_bounds(a - d, b - d, s2)
    p_hi, p_lo = p_hi / root, p_lo / (root * z_over)
    q_hi, q_lo = q_hi / root, q_lo / (root * z_over)
    t_prev = (idx[1:] - 1) * h
    em = -math.expm1(-h)
    split = full & (t_prev <= 600)
    et = np.exp(np.minimum(t_prev, 600.0))
    fp = 1e-13 * (p_hi + et * q_hi) / em
    # the atom just below t_{i−1}, where one can be (y within τ of an integer at c_{i−1})
    unsure = np.ceil(y - tau) != np.ceil(y + tau)
    below = np.where(
        unsure[:-1],
        np.exp(-(b * b) / (2 * s2)) * np.expm1(2 * d * tau[:-1] / s2) / (root * em),
        0.0,
    )
    upper = np.where(split, np.maximum((p_hi - et * q_lo) / em, 0.0) + fp + below, p_hi)
    lower = np.where(split, np.maximum((et * q_hi - math.exp(-h) * p_lo) / em, 0.0) + fp, 0.0)
    upper, lower = np.where(full, upper, 0.0), np.where(full, lower, 0.0)
    # bucket j (index idx[j + 1]) puts `lower` on its index − 1 and `upper` on its index
    masses = np.zeros(len(upper) + 1)
    masses[1:] += upper
    masses[:-1] += lower
    infinity = min(1.0, _dg_tail(m, s2) / root * (1 + 1e-9) + 1e-300)
    first = int(idx[1]) - 1
    nz = np.nonzero(masses)[0]
    return first + int(nz[0]), masses[int(nz[0]) : int(nz[-1]) + 1], infinity


def _pld_tree(items: Multiset, interval: float) -> GridPld:
    """Each leaf self-composed, then a balanced tree of compositions (sizes grow together, so
    FFTs stay small). Raises :class:`GridTooLarge` past
    :data:`~dpcr.accounting._grid.MAX_POINTS`."""
    plds = [_composed_leaf(e, c, interval) for e, c in items if not isinstance(e, GaussianEvent)]
    mu = _gaussian_mu([(e, c) for e, c in items if isinstance(e, GaussianEvent)])
    if mu > 0:  # σ = 1/μ rounded down: the leaf's μ is at least the composed one
        sigma = math.nextafter(1 / mu, 0.0)
        plds.append(_leaf_pld(GaussianEvent(sigma=sigma), interval))
    while len(plds) > 1:
        nxt = [plds[i].compose(plds[i + 1]) for i in range(0, len(plds) - 1, 2)]
        if len(plds) % 2:
            nxt.append(plds[-1])
        plds = nxt
    return plds[0]


@lru_cache(maxsize=1024)
def _pld_epsilon(items: Multiset, delta: float) -> float:
    plain, gamma = _surrogates(items)
    if gamma == 0:
        return _plain_epsilon(plain, delta)
    if not _only_gaussians(plain):
        return math.inf  # (not applied: the surrogates with other mechanisms, see _delta)
    # the coupling's corollary: (ε' + 2γ, e^γ δ') with δ' = δ e^{−γ}, rounded down
    eps = _plain_epsilon(plain, math.nextafter(delta * math.exp(-gamma), 0.0))
    return eps if not math.isfinite(eps) else math.nextafter(eps + 2 * gamma, math.inf)


def _plain_epsilon(items: Multiset, delta: float) -> float:
    """ε(δ) of a multiset without coupled discrete Gaussians (:func:`_surrogates`)."""
    kind, obj = _pld_object(items)
    if kind == "unbounded":
        return math.inf  # not applicable (see PLD_MAX_POINTS)
    if kind == "gaussian":
        if obj == 0:
            return 0.0
        return _epsilon_from_delta(lambda e: _gaussian_delta(obj, e), delta, obj * obj)
    if kind == "lattice":
        log_p, loss = obj
        return _epsilon_from_delta(lambda e: _hockey(log_p, loss, e), delta, float(loss.max()))
    # dp-accounting's pessimistic PLD: its ε is an upper bound; add a relative margin
    eps = float(obj.get_epsilon_for_delta(delta))
    return _up(max(0.0, eps) * (1 + 1e-9))
