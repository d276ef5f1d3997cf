"""Privacy-loss distributions: exact Gaussian and lattice paths, dp-accounting's PLDs otherwise."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

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
from dpcr.accounting.fast_pld import laplace_pld
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
            return e.dimension == 1 and _dg_integer_sensitivity(e) is not None
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
        kind, obj = _pld_object(items)
        if kind == "gaussian":
            return min(1.0, _gaussian_delta(obj, epsilon)) if obj > 0 else 0.0
        if kind == "lattice":
            log_p, loss = obj
            return min(1.0, _hockey(log_p, loss, epsilon))
        return min(1.0, _up(float(obj.get_delta_for_epsilon(epsilon))) + 1e-15)


def _dg_integer_sensitivity(e: DiscreteGaussianEvent) -> int | None:
    s2 = e.sensitivity2
    if s2.denominator != 1:
        return None
    root = math.isqrt(int(s2))
    return root if root * root == s2 else None


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
    return "tree", _pld_tree(items, _discretization(items))


def _discretization(items: Multiset) -> float:
    """Grid width for dp-accounting's PLDs: about 1e-5 of the expected ε, in [1e-5, 1e-2]."""
    rdp_items = [(e, c) for e, c in items if RdpAccountant()._supports_leaf(e)]
    # every 10th order suffices for an estimate (any order gives a valid ε; this only sets h)
    orders = _ORDERS[::10]
    est = rdp_epsilon(RdpAccountant.curve(rdp_items, orders), 1e-6, orders) if rdp_items else 1.0
    est += sum(float(e.epsilon) * c for e, c in items if isinstance(e, ApproxDpEvent))
    if all(isinstance(e, DiscreteGaussianEvent | GaussianEvent) for e, _ in items):
        # every leaf is discretised by connect-the-dots (error second order in h): a 10x
        # coarser grid stays within ~1e-7 relative of the 1e-5 one (tests/accounting)
        return float(min(1e-2, max(1e-5, 1e-4 * est)))
    return float(min(1e-2, max(1e-5, 1e-5 * est)))


def _leaf_pld(e: Leaf, interval: float) -> Any:
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    if isinstance(e, LaplaceEvent):  # vectorised connect-the-dots, ε0 rounded up
        return laplace_pld(round_up(Fraction(e.sensitivity) / Fraction(e.scale)), interval)
    if isinstance(e, GaussianEvent):
        return pld.from_gaussian_mechanism(
            e.sigma, sensitivity=e.sensitivity, value_discretization_interval=interval
        )
    if isinstance(e, DiscreteLaplaceEvent) and e.dimension == 1 and e.sensitivity.denominator == 1:
        return pld.from_discrete_laplace_mechanism(
            float(1 / e.scale),
            sensitivity=int(e.sensitivity),
            value_discretization_interval=interval,
        )
    if isinstance(e, DiscreteGaussianEvent):
        return _discrete_gaussian_pld(e, interval)
    if isinstance(e, RandomizedResponseEvent):
        k = e.buckets
        p = k / (math.exp(e.epsilon) + k - 1)
        return pld.from_randomized_response(p, k, value_discretization_interval=interval)
    pars = _pure_parameters(e)
    if pars is None:
        raise UnsupportedEventError(f"no PLD for {e!r}")
    return pld.from_privacy_parameters(
        common.DifferentialPrivacyParameters(pars[0], pars[1]),
        value_discretization_interval=interval,
    )


def _discrete_gaussian_pld(e: DiscreteGaussianEvent, interval: float) -> Any:
    """Pessimistic PLD of the discrete Gaussian with integer sensitivity d, vectorised.

    With X ~ N_Z(0, σ²) the loss at output x is ((x − d)² − x²)/(2σ²) = (d² − 2dx)/(2σ²) (the
    normalising constants cancel). Masses on |x| <= m (m ≈ 11.8σ + d) are divided by the partial
    normaliser (so they are over-estimates), each atom is split between its two neighbouring
    grid points (connect the dots, see the code; dominating, error second order in h), and the mass
    beyond m, bounded by 2(e^{−(m+1)²/2σ²} + σ√(2π) Q((m+1)/σ)) / Z_partial, goes to infinite
    loss. The mechanism is symmetric, so one direction describes both.
    (dp-accounting's ``from_discrete_gaussian_mechanism`` does the same in a Python loop, 7 s
    for σ ≈ 1.6e5.)
    """
    from dp_accounting.pld import privacy_loss_distribution as pld
    from scipy.special import ndtr

    d = _dg_integer_sensitivity(e)
    if d is None:
        raise UnsupportedEventError(f"no PLD for {e!r}: sensitivity must be an integer")
    s2 = float(e.sigma2)
    s = math.sqrt(s2)
    m = math.ceil(11.8 * s) + d + 1
    x = np.arange(-m, m + 1, dtype=np.float64)
    w = np.exp(-x * x / (2 * s2))
    z_part = float(np.sum(w)) * (1 - 1e-12)
    tail = 2 * (
        math.exp(-((m + 1) ** 2) / (2 * s2))
        + s * math.sqrt(2 * math.pi) * float(ndtr(-(m + 1) / s))
    )
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
    rounded = {int(i) + lo: float(masses[i]) for i in keep}
    return pld.PrivacyLossDistribution.create_from_rounded_probability(
        rounded, _up(tail / z_part) + 1e-300, interval, pessimistic_estimate=True
    )


def _pld_tree(items: Multiset, interval: float) -> Any:
    plds = []
    for e, c in items:
        if isinstance(e, GaussianEvent):
            continue
        p = _leaf_pld(e, interval)
        plds.append(p.self_compose(c) if c > 1 else p)
    mu = _gaussian_mu([(e, c) for e, c in items if isinstance(e, GaussianEvent)])
    if mu > 0:  # σ = 1/μ rounded down: the leaf's μ is at least the composed one
        sigma = math.nextafter(1 / mu, 0.0)
        plds.append(_leaf_pld(GaussianEvent(sigma=sigma), interval))
    while len(plds) > 1:  # balanced tree: sizes grow together, so FFTs stay small
        nxt = [plds[i].compose(plds[i + 1]) for i in range(0, len(plds) - 1, 2)]
        if len(plds) % 2:
            nxt.append(plds[-1])
        plds = nxt
    return plds[0]


@lru_cache(maxsize=1024)
def _pld_epsilon(items: Multiset, delta: float) -> float:
    kind, obj = _pld_object(items)
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
