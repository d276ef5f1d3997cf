"""Rényi DP: exact per-mechanism curves over a grid of orders, summed and converted to ε."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from dpcr.accounting._accountant_base import _REL, Accountant, Leaf, Multiset, _lattice_pmf, _up
from dpcr.accounting.composition import cost_of, round_up
from dpcr.accounting.events import (
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    ZcdpEvent,
)

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
