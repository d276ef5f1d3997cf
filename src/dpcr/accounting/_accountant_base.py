"""The accountant base class, event flattening and helpers shared by several methods.

:class:`Accountant` holds a multiset of leaf events; each subclass supplies its method's
``_supports_leaf``, ``_epsilon`` and (optionally) ``_delta``. The loss-distribution helpers
(:func:`_hockey`, :func:`_epsilon_from_delta`, :func:`_lattice_pmf`) serve the optimal, Rényi
and PLD methods.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from dpcr.accounting.composition import round_up
from dpcr.accounting.events import (
    ApproxDpEvent,
    ComposedEvent,
    DiscreteLaplaceEvent,
    DpEvent,
    LaplaceEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
)
from dpcr.errors import ConfigError, UnsupportedEventError

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


# --- loss distributions (optimal composition, Rényi DP, PLD) ---------------------------------


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
