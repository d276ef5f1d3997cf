"""Accountants: one interface, several composition methods, the tightest correct one wins.

Every accountant has ``supports(event)``, ``compose(event, count=1)`` (validates first, then
records; a rejected event changes nothing), ``epsilon(delta)`` and ``delta(epsilon)``. An
accountant composes a *multiset* of leaf events (composed and self-composed events are
flattened), so its answer depends only on which mechanisms ran and how often.

Methods (each sound: it never reports less than the truth; floating-point errors are rounded
towards a larger ε or δ):

* ``basic`` -- Σ ε_i, Σ δ_i.
* ``advanced`` -- Dwork-Rothblum-Vadhan with the ε the lecture notes dropped (ARCHITECTURE.md
  erratum 4): the largest-ε mechanisms composed basically, the rest by
  ``sqrt(2 ln(1/δ') Σ ε_i²) + Σ ε_i (e^ε_i − 1)`` with δ' = δ − Σ δ_i; the split point is
  optimised, so the result is never above basic.
* ``optimal`` -- Kairouz-Oh-Viswanath 2015: the exact optimal composition of k (ε, δ)-DP
  mechanisms, δ_total(ε') = 1 − (1−δ)^k (1 − Σ_l C(k,l) [e^{(k−l)ε} − e^{ε'+lε}]_+ / (1+e^ε)^k).
  Heterogeneous (ε_i, δ_i) are bounded by (max ε, max δ) (a valid upper bound).
* ``rdp`` -- Rényi DP from the exact per-mechanism curves (Laplace, Gaussian, discrete Laplace,
  randomized response, pure DP as binary RR; discrete Gaussian and zCDP as α·ρ), summed, and
  converted by ε = min_α R(α) + log(1 − 1/α) − (log δ + log α)/(α − 1) (Canonne-Kamath-Steinke
  2020, Prop. 12).
* ``zcdp`` -- exact ε sums and ρ sums (:mod:`dpcr.accounting.composition`).
* ``pld`` -- privacy-loss distributions. Gaussians only: exact (μ² = Σ μ_i², Balle-Wang formula).
  One lattice mechanism (randomized response, pure DP, discrete Laplace with integer
  sensitivity) k times: exact convolution on its loss lattice. Otherwise dp-accounting's
  pessimistic PLDs, one ``self_compose`` per distinct event and a balanced tree of ``compose``.
  (We never use its ``PLDAccountant``, which ignores ``count`` for randomized response.)

Every method here is for a fixed (non-adaptive) list of mechanisms; the privacy filter for
adaptively chosen releases uses running sums (:mod:`dpcr.accounting.filters`).

>>> from dpcr.accounting.events import LaplaceEvent, SelfComposedEvent
>>> g = tightest(SelfComposedEvent(event=LaplaceEvent(scale=10.0), count=1000), delta=1e-6)
>>> g.method, round(g.epsilon, 2)
('pld', 18.95)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from dpcr.accounting.composition import (
    Guarantee,
    PrivacyCost,
    cost_of,
    guarantee_of_cost,
    round_up,
)
from dpcr.accounting.events import (
    ApproxDpEvent,
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    GaussianEvent,
    LaplaceEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
    ZcdpEvent,
)
from dpcr.accounting.fast_pld import laplace_pld
from dpcr.errors import ConfigError, UnsupportedEventError

__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "AdvancedAccountant",
    "BasicAccountant",
    "KovAccountant",
    "PldAccountant",
    "RdpAccountant",
    "ZcdpAccountant",
    "compare",
    "flatten",
    "stated_guarantee",
    "tightest",
]

Leaf = Any  # a non-composite event
Multiset = tuple[tuple[Leaf, int], ...]

_REL = 1e-9  # relative upward margin on computed δ and ε (covers floating-point error)


def flatten(event: DpEvent, count: int = 1) -> Counter[Leaf]:
    """The multiset of leaf events of ``event`` composed ``count`` times."""
    out: Counter[Leaf] = Counter()
    stack: list[tuple[DpEvent, int]] = [(event, count)]
    while stack:
        e, c = stack.pop()
        if c == 0:
            continue
        if isinstance(e, ComposedEvent):
            stack.extend((inner, c) for inner in e.events)
        elif isinstance(e, SelfComposedEvent):
            stack.append((e.event, c * e.count))
        else:
            out[e] += c
    return out


def _canonical(items: Counter[Leaf]) -> Multiset:
    return tuple(sorted(items.items(), key=lambda kv: repr(kv[0])))


def _check_delta(delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 <= delta < 1:
        raise ConfigError(f"delta must be a number in [0, 1), got {delta!r}; e.g. 1e-6")
    return float(delta)


def _check_epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not epsilon >= 0:
        raise ConfigError(f"epsilon must be a number >= 0, got {epsilon!r}")
    return float(epsilon)


def _up(x: float) -> float:
    return x if x == 0 or not math.isfinite(x) else x * (1 + _REL) + 1e-300


def _pure_parameters(e: Leaf) -> tuple[float, float] | None:
    """(ε, δ) of a leaf known to be approximate DP, else None."""
    if isinstance(e, PureDpEvent | RandomizedResponseEvent):
        return float(e.epsilon), 0.0
    if isinstance(e, LaplaceEvent | DiscreteLaplaceEvent):
        return round_up(Fraction(e.sensitivity) / Fraction(e.scale)), 0.0
    if isinstance(e, ApproxDpEvent):
        return float(e.epsilon), float(e.delta)
    return None


def _exact_epsilon(e: Leaf) -> Fraction:
    """ε of a pure or approximate leaf as an exact rational (Laplace: sensitivity / scale)."""
    if isinstance(e, LaplaceEvent | DiscreteLaplaceEvent):
        return Fraction(e.sensitivity) / Fraction(e.scale)
    return Fraction(_pure_parameters(e)[0])  # type: ignore[index]


class Accountant:
    """Base class: a multiset of events and the method's ε(δ) and δ(ε)."""

    name = "base"

    def __init__(self) -> None:
        self._items: Counter[Leaf] = Counter()

    # -- interface --------------------------------------------------------------------------
    def supports(self, event: DpEvent) -> bool:
        try:
            leaves = flatten(event)
        except (TypeError, AttributeError):
            return False
        return all(self._supports_leaf(e) for e in leaves)

    def compose(self, event: DpEvent, count: int = 1) -> None:
        """Record ``event`` ``count`` times; validates first, so a failure changes nothing."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigError(f"count must be an integer >= 0, got {count!r}")
        try:
            leaves = flatten(event, count)
        except (TypeError, AttributeError):
            leaves = None
        if leaves is None or not all(self._supports_leaf(e) for e in leaves):
            raise UnsupportedEventError(
                f"the {self.name} accountant cannot compose {event!r}; use an accountant whose "
                "supports(event) is True (tightest() picks among all)"
            )
        self._items.update(leaves)

    @property
    def ledger(self) -> Multiset:
        """The composed multiset of leaf events (event, count)."""
        return _canonical(self._items)

    def epsilon(self, delta: float) -> float:
        delta = _check_delta(delta)
        if not self._items:
            return 0.0
        return self._epsilon(self.ledger, delta)

    def delta(self, epsilon: float) -> float:
        epsilon = _check_epsilon(epsilon)
        if not self._items:
            return 0.0
        return self._delta(self.ledger, epsilon)

    # -- per method -------------------------------------------------------------------------
    def _supports_leaf(self, e: Leaf) -> bool:
        raise NotImplementedError

    def _epsilon(self, items: Multiset, delta: float) -> float:
        raise NotImplementedError

    def _delta(self, items: Multiset, epsilon: float) -> float:
        """Smallest δ (on a log grid, then bisection) with ε(δ) <= epsilon; an upper bound."""
        if self._epsilon(items, 0.0) <= epsilon:
            return 0.0
        lo, hi = -300.0, math.log(0.999)  # log δ
        if self._epsilon(items, math.exp(hi)) > epsilon:
            return 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if self._epsilon(items, math.exp(mid)) <= epsilon:
                hi = mid
            else:
                lo = mid
        return min(1.0, math.exp(hi))


# --- basic and advanced ------------------------------------------------------------------------


class BasicAccountant(Accountant):
    """Σ ε_i and Σ δ_i."""

    name = "basic"

    def _supports_leaf(self, e: Leaf) -> bool:
        return _pure_parameters(e) is not None

    def _sums(self, items: Multiset) -> tuple[float, float]:
        eps = sum((_exact_epsilon(e) * c for e, c in items), Fraction(0))
        dlt = sum((Fraction(_pure_parameters(e)[1]) * c for e, c in items), Fraction(0))  # type: ignore[index]
        return round_up(eps), round_up(dlt)

    def _epsilon(self, items: Multiset, delta: float) -> float:
        eps, dlt = self._sums(items)
        return eps if dlt <= delta else math.inf

    def _delta(self, items: Multiset, epsilon: float) -> float:
        eps, dlt = self._sums(items)
        return min(1.0, dlt) if eps <= epsilon else 1.0


class AdvancedAccountant(BasicAccountant):
    """Advanced composition (erratum 4) with an optimised split against basic composition."""

    name = "advanced"

    def _epsilon(self, items: Multiset, delta: float) -> float:
        basic, dlt = self._sums(items)
        slack = delta - dlt * (1 + _REL)
        if slack <= 0:
            return basic if dlt <= delta else math.inf
        values = [_pure_parameters(e) for e, _ in items]
        firsts = np.asarray([v[0] if v else 0.0 for v in values], dtype=np.float64)
        eps: np.ndarray = np.sort(np.repeat(firsts, [c for _, c in items]))[::-1]
        # prefix j (largest ε) by basic composition, the rest by advanced composition
        head = np.concatenate([[0.0], np.cumsum(eps)])
        sq = np.concatenate([np.cumsum((eps**2)[::-1])[::-1], [0.0]])
        lin = np.concatenate([np.cumsum((eps * np.expm1(eps))[::-1])[::-1], [0.0]])
        total = head + np.sqrt(2 * math.log(1 / slack) * sq) + lin
        return min(basic, _up(float(np.min(total))))


# --- Kairouz-Oh-Viswanath optimal composition ---------------------------------------------------


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


def _hockey(log_p: np.ndarray, loss: np.ndarray, epsilon: float) -> float:
    """Σ P(l) (1 − e^{ε − loss_l})_+ for a loss distribution given by log masses (rounded up)."""
    mask = loss > epsilon
    if not mask.any():
        return 0.0
    with np.errstate(divide="ignore", under="ignore"):
        terms = log_p[mask] + np.log(-np.expm1(epsilon - loss[mask]))
    top = float(np.max(terms))
    val = math.exp(top) * float(np.sum(np.exp(terms - top)))
    return _up(val) + 1e-300 * len(terms)


def _combine_delta(hockey: float, delta_fail: float) -> float:
    # 1 − (1 − δ_fail)(1 − hockey) = δ_fail + hockey − δ_fail·hockey <= δ_fail + hockey
    return min(1.0, _up(hockey + delta_fail))


def _epsilon_from_delta(delta_of: Callable[[float], float], delta: float, upper: float) -> float:
    """Smallest ε (to ~1e-10 relative, rounded up) with delta_of(ε) <= delta, on [0, upper]."""
    if delta_of(0.0) <= delta:
        return 0.0
    hi = upper
    while delta_of(hi) > delta:
        hi = hi * 2 + 1
        if hi > 1e12:
            return math.inf
    lo = 0.0
    for _ in range(200):
        if hi - lo <= 1e-11 * hi:
            break
        mid = (lo + hi) / 2
        if delta_of(mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


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


# --- zCDP (exact sums) -------------------------------------------------------------------------


def _float_cost(items: Multiset) -> PrivacyCost:
    """Σ of the additive costs in floats, rounded outward: an upper bound on the exact sums.

    Continuous Laplace and Gaussian terms are computed in numpy (each term has at most a few
    ulps of relative error, and ``math.fsum`` rounds the sum correctly), then every part is
    multiplied by 1 + 2^-40, far more than the accumulated relative error; other events use
    their exact cost rounded up.
    """
    up = 1 + 2.0**-40
    eps: list[float] = []
    rho: list[float] = []
    counts_e: list[int] = []
    counts_r: list[int] = []
    pe: list[float] = []
    pr: list[float] = []
    rr: list[float] = []
    for e, c in items:
        if isinstance(e, LaplaceEvent):
            eps.append(e.sensitivity / e.scale)
            counts_e.append(c)
        elif isinstance(e, GaussianEvent):
            rho.append((e.sensitivity / e.sigma) ** 2 / 2)
            counts_r.append(c)
        else:
            cost = cost_of(e).times(c)
            pe.append(round_up(cost.pure_epsilon))
            pr.append(round_up(cost.pure_rho))
            rr.append(round_up(cost.rho))
    if eps:
        ev, cv = np.asarray(eps), np.asarray(counts_e, dtype=float)
        pe.extend((ev * cv).tolist())
        pr.extend((ev * ev * cv / 2).tolist())
    if rho:
        rr.extend((np.asarray(rho) * np.asarray(counts_r, dtype=float)).tolist())
    return PrivacyCost(
        pure_epsilon=Fraction(math.fsum(pe) * up),
        pure_rho=Fraction(math.fsum(pr) * up),
        rho=Fraction(math.fsum(rr) * up),
    )


class ZcdpAccountant(Accountant):
    """Σ ε of pure events and Σ ρ of zCDP events, converted (see :mod:`.composition`)."""

    name = "zcdp"

    def _supports_leaf(self, e: Leaf) -> bool:
        if isinstance(e, LaplaceEvent | GaussianEvent):  # validated on construction
            return True
        try:
            cost_of(e)
        except UnsupportedEventError:
            return False
        return True

    def _guarantee(self, items: Multiset, delta: float) -> Guarantee:
        if len(items) <= 64:  # exact rational sums
            total = PrivacyCost()
            for e, c in items:
                total = total + cost_of(e).times(c)
            return guarantee_of_cost(total, delta=delta)
        return guarantee_of_cost(_float_cost(items), delta=delta)

    def _epsilon(self, items: Multiset, delta: float) -> float:
        try:
            return self._guarantee(items, delta).epsilon
        except ConfigError:  # zCDP part with δ = 0
            return math.inf


# --- Rényi DP ----------------------------------------------------------------------------------

_OUT = 1 + 2.0**-40  # outward factor for float sums and quotients (a few ulps of error)
_ORDERS = 1.0 + np.exp(np.linspace(math.log(1e-4), math.log(1e5), 600))


def _rr_rdp(eps: np.ndarray, buckets: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """RDP of k-ary RR: losses +ε, −ε, 0 with masses e^ε/Z, 1/Z, (k−2)/Z, Z = e^ε + k − 1."""
    e = eps[:, None]
    a = alpha[None, :]
    log_z = np.log(np.exp(e) + buckets[:, None] - 1)
    lp = e - log_z
    lq = -log_z
    l0 = np.log(np.maximum(buckets[:, None] - 2, 1e-300)) - log_z
    lz = np.where(buckets[:, None] > 2, l0, -np.inf)
    terms = np.stack(np.broadcast_arrays(lp + (a - 1) * e, lq - (a - 1) * e, lz + 0 * a), axis=0)
    return np.asarray(np.logaddexp.reduce(terms, axis=0) / (a - 1), dtype=float)


def _laplace_rdp(eps: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Mironov 2017: 1/(α−1) log(α/(2α−1) e^{(α−1)ε} + (α−1)/(2α−1) e^{−αε})."""
    e = eps[:, None]
    a = alpha[None, :]
    t1 = np.log(a / (2 * a - 1)) + (a - 1) * e
    t2 = np.log((a - 1) / (2 * a - 1)) - a * e
    return np.asarray(np.logaddexp(t1, t2) / (a - 1), dtype=float)


def _discrete_laplace_rdp(e: DiscreteLaplaceEvent, alpha: np.ndarray) -> np.ndarray:
    pmf = _lattice_pmf(e)
    if pmf is None:  # non-integer sensitivity: ε-DP, dominated by binary RR
        eps = np.array([float(e.sensitivity / e.scale)])
        return np.asarray(_rr_rdp(eps, np.array([2.0]), alpha)[0], dtype=float)
    log_p, loss = pmf
    terms = log_p[:, None] + (alpha[None, :] - 1) * loss[:, None]
    return np.asarray(np.logaddexp.reduce(terms, axis=0) / (alpha - 1), dtype=float)


class RdpAccountant(Accountant):
    """Rényi DP curves summed over the events, then converted to (ε, δ)."""

    name = "rdp"

    def _supports_leaf(self, e: Leaf) -> bool:
        return isinstance(
            e,
            PureDpEvent
            | LaplaceEvent
            | DiscreteLaplaceEvent
            | RandomizedResponseEvent
            | GaussianEvent
            | DiscreteGaussianEvent
            | ZcdpEvent,
        )

    @staticmethod
    def curve(items: Iterable[tuple[Leaf, int]], orders: np.ndarray = _ORDERS) -> np.ndarray:
        """Σ count · RDP(α) over ``orders`` (default ``_ORDERS``; vectorised per event type)."""
        total = np.zeros_like(orders)
        rr_eps: list[float] = []
        rr_k: list[float] = []
        rr_c: list[int] = []
        lap_eps: list[float] = []
        lap_c: list[int] = []
        rhos: list[float] = []
        for e, c in items:
            # floats rounded outward (RDP grows with ε and ρ): a few ulps, covered by 2^-40
            if isinstance(e, GaussianEvent):
                rhos.append((e.sensitivity / e.sigma) ** 2 / 2 * c * _OUT)
            elif isinstance(e, DiscreteGaussianEvent | ZcdpEvent):
                rhos.append(round_up(cost_of(e).rho * c))
            elif isinstance(e, LaplaceEvent):
                lap_eps.append(e.sensitivity / e.scale * _OUT)
                lap_c.append(c)
            elif isinstance(e, RandomizedResponseEvent | PureDpEvent):
                if e.epsilon > 0:
                    rr_eps.append(float(e.epsilon))
                    rr_k.append(float(getattr(e, "buckets", 2)))
                    rr_c.append(c)
            elif isinstance(e, DiscreteLaplaceEvent) and e.dimension == 1:
                total += c * _discrete_laplace_rdp(e, orders)
            elif isinstance(e, DiscreteLaplaceEvent):
                # a vector release: only its pure ε is known; binary RR bounds any ε-DP pair
                rr_eps.append(float(round_up(e.sensitivity / e.scale)))
                rr_k.append(2.0)
                rr_c.append(c)
        rho = math.fsum(rhos) * _OUT
        if lap_eps:
            total += np.asarray(lap_c, float) @ _laplace_rdp(np.asarray(lap_eps), orders)
        if rr_eps:
            total += np.asarray(rr_c, float) @ _rr_rdp(np.asarray(rr_eps), np.asarray(rr_k), orders)
        return np.asarray(total + rho * orders, dtype=float)

    def _epsilon(self, items: Multiset, delta: float) -> float:
        if delta == 0:
            return math.inf
        if len(items) <= 64:
            return rdp_epsilon(self.curve(items), delta)
        # many distinct events: every 10th order first, then all orders around the best one.
        # Each order's RDP is exact, so any order gives a valid ε; this only risks missing a
        # slightly better order far from the coarse optimum (never under-reports).
        coarse = _ORDERS[::10]
        coarse_curve = self.curve(items, coarse)
        best = int(np.argmin(_rdp_to_eps(coarse_curve, delta, coarse)))
        fine = _ORDERS[max(0, 10 * best - 12) : 10 * best + 13]
        return min(
            rdp_epsilon(coarse_curve, delta, coarse),
            rdp_epsilon(self.curve(items, fine), delta, fine),
        )


def _rdp_to_eps(curve: np.ndarray, delta: float, a: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        eps = curve * (1 + 4 * _REL) + np.log1p(-1 / a) - (math.log(delta) + np.log(a)) / (a - 1)
    eps[~np.isfinite(eps)] = np.inf
    return np.asarray(eps, dtype=float)


def rdp_epsilon(curve: np.ndarray, delta: float, orders: np.ndarray = _ORDERS) -> float:
    """ε from an RDP curve over ``orders`` (Canonne-Kamath-Steinke 2020, Prop. 12), rounded up."""
    a = orders
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        eps = curve * (1 + 4 * _REL) + np.log1p(-1 / a) - (math.log(delta) + np.log(a)) / (a - 1)
    eps[~np.isfinite(eps)] = np.inf
    return _up(max(0.0, float(np.min(eps))))


# --- privacy-loss distributions ------------------------------------------------------------


def _lattice_pmf(e: Leaf) -> tuple[np.ndarray, np.ndarray] | None:
    """(log masses, losses) of a symmetric mechanism whose loss takes finitely many values on a
    lattice with integer multiples of a unit, or None. The remove and add directions have the
    same loss distribution for these (symmetric) mechanisms."""
    if isinstance(e, PureDpEvent):  # ε-DP is dominated by binary randomized response
        e = RandomizedResponseEvent(epsilon=e.epsilon, buckets=2) if e.epsilon > 0 else None
        if e is None:
            return np.array([0.0]), np.array([0.0])
    if isinstance(e, RandomizedResponseEvent):
        eps, k = float(e.epsilon), e.buckets
        log_z = math.log(math.exp(eps) + k - 1) if eps < 700 else eps
        logs = [eps - log_z, -log_z]
        losses = [eps, -eps]
        if k > 2:
            logs.append(math.log(k - 2) - log_z)
            losses.append(0.0)
        return np.array(logs), np.array(losses)
    if isinstance(e, DiscreteLaplaceEvent):
        if e.dimension != 1 or e.sensitivity.denominator != 1 or e.sensitivity > 1000:
            return None
        d = int(e.sensitivity)
        a = float(1 / e.scale)  # P[X = x] ∝ exp(−a|x|)
        # X ~ DL: P[X=x] = (1−q)/(1+q) q^|x|, q = e^{−a}; loss(x) = a(|x−d| − |x|) for noise x
        log_c = math.log(-math.expm1(-a)) - math.log1p(math.exp(-a))
        logs = [log_c - math.log(-math.expm1(-a))]  # P[X <= 0] = c / (1 − q)
        losses = [a * d]
        for x in range(1, d):
            logs.append(log_c - a * x)
            losses.append(a * (d - 2 * x))
        logs.append(log_c - a * d - math.log(-math.expm1(-a)))  # P[X >= d]
        losses.append(-a * d)
        return np.array(logs), np.array(losses)
    return None


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
    if (
        isinstance(e, DiscreteLaplaceEvent)
        and e.dimension == 1
        and e.sensitivity.denominator == 1
    ):
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


# --- all methods -------------------------------------------------------------------------------

ACCOUNTANTS: Mapping[str, type[Accountant]] = {
    "basic": BasicAccountant,
    "advanced": AdvancedAccountant,
    "optimal": KovAccountant,
    "zcdp": ZcdpAccountant,
    "rdp": RdpAccountant,
    "pld": PldAccountant,
}


def compare(event: DpEvent, *, delta: float) -> dict[str, float | None]:
    """ε at ``delta`` of ``event`` under every method (None where a method does not apply)."""
    return dict(_compare(_canonical(flatten(event)), _check_delta(delta)))


@lru_cache(maxsize=4096)
def _compare(items: Multiset, delta: float) -> tuple[tuple[str, float | None], ...]:
    out: list[tuple[str, float | None]] = []
    for name, cls in ACCOUNTANTS.items():
        acc = cls()
        if not all(acc._supports_leaf(e) for e, _ in items):
            out.append((name, None))
            continue
        if name == "pld" and delta == 0:
            out.append((name, None))  # PLD ε at δ = 0 is the basic one; leave it to basic
            continue
        eps = acc._epsilon(items, delta) if items else 0.0
        out.append((name, eps if math.isfinite(eps) else None))
    return tuple(out)


def tightest(event: DpEvent, *, delta: float) -> Guarantee:
    """The smallest ε over every method that supports ``event`` (each is an upper bound)."""
    delta = _check_delta(delta)
    items = _canonical(flatten(event))
    if not items:
        return Guarantee(epsilon=0.0, delta=0.0, rho=0.0, method="none")
    results = [(eps, name) for name, eps in _compare(items, delta) if eps is not None]
    if not results:
        raise UnsupportedEventError(
            f"no accountant supports {event!r} at delta = {delta}; Gaussian-type events need "
            "delta > 0"
        )
    eps, name = min(results, key=lambda r: r[0])  # ties: the simplest method (listed first)
    rho = _rho_of(items)
    pure = all(_pure_parameters(e) is not None and _pure_parameters(e)[1] == 0 for e, _ in items)  # type: ignore[index]
    return Guarantee(
        epsilon=eps, delta=0.0 if (pure and name in ("basic",)) else delta, rho=rho, method=name
    )


def stated_guarantee(event: DpEvent, *, delta: float) -> Guarantee:
    """The guarantee dpcr states for ``event`` (``plan``, the filter and the odometer all use it).

    * Only pure events (Laplace, discrete Laplace, randomized response, pure DP): pure
      (Σ ε_i)-DP with δ = 0 by basic composition, which is exact for pure ε. A tighter ε at a
      δ > 0 exists (``tightest``, usually PLD) and ``dpcr account`` shows it, but dpcr states
      the pure guarantee, which is what Laplace noise is calibrated to.
    * Otherwise: :func:`tightest` at ``delta`` (needs ``delta > 0``).

    >>> from fractions import Fraction
    >>> from dpcr.accounting.events import DiscreteLaplaceEvent
    >>> lap = DiscreteLaplaceEvent(scale=Fraction(10), sensitivity=Fraction(1))
    >>> stated_guarantee(SelfComposedEvent(event=lap, count=3), delta=1e-6).describe()
    '(ε = 0.3, δ = 0)-DP, 0.015-zCDP [basic]'
    """
    delta = _check_delta(delta)
    items = _canonical(flatten(event))
    if not items:
        return Guarantee(epsilon=0.0, delta=0.0, rho=0.0, method="none")
    pars = [_pure_parameters(e) for e, _ in items]
    if all(p is not None and p[1] == 0 for p in pars):
        total = sum((cost_of(e).pure_epsilon * c for e, c in items), Fraction(0))  # exact
        return Guarantee(epsilon=round_up(total), delta=0.0, rho=_rho_of(items), method="basic")
    if delta == 0:
        return guarantee_of_cost(cost_of(event), delta=delta)  # raises: zCDP needs δ > 0
    return tightest(event, delta=delta)


def _rho_of(items: Multiset) -> float | None:
    """ρ of the composition as zCDP, rounded up (float sums rounded outward past 64 items)."""
    try:
        if len(items) > 64:
            return round_up(_float_cost(items).total_rho)
        return round_up(sum((cost_of(e).total_rho * c for e, c in items), Fraction(0)))
    except UnsupportedEventError:
        return None
