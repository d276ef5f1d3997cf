"""Composition of privacy events and conversion to an (ε, δ) guarantee.

Every event reduces to an additive :class:`PrivacyCost` with three exact (``Fraction``) parts:

* ``pure_epsilon`` -- Σ ε of the pure-DP events (basic composition: k mechanisms that are ε_i-DP
  compose to (Σ ε_i)-DP);
* ``pure_rho`` -- Σ ε²/2 of the same pure events (an ε-DP mechanism is ε²/2-zCDP, Bun & Steinke
  2016, Prop. 3.3);
* ``rho`` -- Σ ρ of the zCDP events (discrete Gaussian: ρ = Δ₂² / (2σ²); zCDP composes by sums).

A cost becomes an (ε, δ) guarantee by the better of two routes, both sound:

(a) everything as zCDP: ρ_total = pure_rho + rho, converted to (ε, δ);
(b) pure part by basic composition plus the zCDP part converted: ε = pure_epsilon + ε_zCDP(rho, δ)
    (δ = 0 when there is no zCDP part).

ρ-zCDP to (ε, δ): Canonne, Kamath & Steinke 2020 (Prop. 12 / Cor. 13): a ρ-zCDP mechanism is
(ε, δ)-DP for ``δ = inf_{α>1} exp((α−1)(αρ−ε)) / (α−1) · (1−1/α)^α``. Solving for ε at a fixed α
gives ``ε(α) = αρ + log(1 − 1/α) + (log(1/δ) − log α) / (α − 1)``, and ``ε = inf_α ε(α)``. Every
α gives a valid ε, so a numerical search can only err towards reporting more than the infimum,
never less; the search always includes ``α = 1 + sqrt(log(1/δ)/ρ)``, where ε(α) is at most the
classical ``ρ + 2 sqrt(ρ log(1/δ))``. A few ulps of upward margin cover floating-point rounding.
The α searched form a fixed grid, so the result is exactly monotone in ρ and in δ.

>>> g = epsilon_of(DiscreteLaplaceEvent(scale=Fraction(10), sensitivity=Fraction(1)), delta=0.0)
>>> g.epsilon, g.delta, g.method
(0.1, 0.0, 'basic')
>>> g = epsilon_of(ZcdpEvent(rho=0.5), delta=1e-6)
>>> round(g.epsilon, 3), g.method
(5.222, 'zcdp')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dpcr.accounting.events import (
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
from dpcr.errors import ConfigError, UnsupportedEventError

__all__ = [
    "Guarantee",
    "PrivacyCost",
    "basic_composition",
    "compose",
    "cost_of",
    "epsilon_of",
    "guarantee_of_cost",
    "worst_guarantee",
    "zcdp_composition",
    "zcdp_delta",
    "zcdp_epsilon",
    "zcdp_rho",
]

_ZERO = Fraction(0)
# relative margin added to floating-point conversions so rounding never under-reports
_MARGIN = 16 * 2.0**-52


def round_up(value: Fraction) -> float:
    """The smallest float >= ``value``."""
    out = float(value)
    if Fraction(out) < value:
        out = math.nextafter(out, math.inf)
    return out


def _exact(value: float, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be finite and >= 0, got {value!r}")
    return Fraction(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrivacyCost:
    """Additive summary of a composition (exact rationals); see the module docstring."""

    pure_epsilon: Fraction = _ZERO
    pure_rho: Fraction = _ZERO
    rho: Fraction = _ZERO

    def __add__(self, other: PrivacyCost) -> PrivacyCost:
        return PrivacyCost(
            pure_epsilon=self.pure_epsilon + other.pure_epsilon,
            pure_rho=self.pure_rho + other.pure_rho,
            rho=self.rho + other.rho,
        )

    def __sub__(self, other: PrivacyCost) -> PrivacyCost:
        return PrivacyCost(
            pure_epsilon=self.pure_epsilon - other.pure_epsilon,
            pure_rho=self.pure_rho - other.pure_rho,
            rho=self.rho - other.rho,
        )

    def times(self, count: int) -> PrivacyCost:
        """``count``-fold composition."""
        return PrivacyCost(
            pure_epsilon=self.pure_epsilon * count,
            pure_rho=self.pure_rho * count,
            rho=self.rho * count,
        )

    def dominates(self, other: PrivacyCost) -> bool:
        """True when every part is >= the other's (so its guarantee is at least as large)."""
        return (
            self.pure_epsilon >= other.pure_epsilon
            and self.pure_rho >= other.pure_rho
            and self.rho >= other.rho
        )

    @property
    def is_zero(self) -> bool:
        return self.pure_epsilon == 0 and self.pure_rho == 0 and self.rho == 0

    @property
    def total_rho(self) -> Fraction:
        """ρ of the whole composition as zCDP (pure parts as ε²/2)."""
        return self.pure_rho + self.rho

    @staticmethod
    def pure(epsilon: Fraction) -> PrivacyCost:
        return PrivacyCost(pure_epsilon=epsilon, pure_rho=epsilon * epsilon / 2)

    @staticmethod
    def zcdp(rho: Fraction) -> PrivacyCost:
        return PrivacyCost(rho=rho)


def cost_of(event: DpEvent) -> PrivacyCost:
    """The exact additive cost of ``event``; raises :class:`UnsupportedEventError` otherwise."""
    if isinstance(event, DiscreteLaplaceEvent):
        return PrivacyCost.pure(event.sensitivity / event.scale)
    if isinstance(event, PureDpEvent):
        return PrivacyCost.pure(_exact(event.epsilon, "epsilon"))
    if isinstance(event, LaplaceEvent):
        return PrivacyCost.pure(Fraction(event.sensitivity) / Fraction(event.scale))
    if isinstance(event, RandomizedResponseEvent):
        return PrivacyCost.pure(_exact(event.epsilon, "epsilon"))
    if isinstance(event, DiscreteGaussianEvent):
        return PrivacyCost.zcdp(event.sensitivity2 / (2 * event.sigma2))
    if isinstance(event, GaussianEvent):
        return PrivacyCost.zcdp(Fraction(event.sensitivity) ** 2 / (2 * Fraction(event.sigma) ** 2))
    if isinstance(event, ZcdpEvent):
        return PrivacyCost.zcdp(_exact(event.rho, "rho"))
    if isinstance(event, ComposedEvent):
        total = PrivacyCost()
        for inner in event.events:
            total = total + cost_of(inner)
        return total
    if isinstance(event, SelfComposedEvent):
        return cost_of(event.event).times(event.count)
    raise UnsupportedEventError(
        f"cannot account for {event!r} by additive cost (ε sums and zCDP): supported events "
        "are PureDpEvent, DiscreteLaplaceEvent, LaplaceEvent, RandomizedResponseEvent, "
        "DiscreteGaussianEvent, GaussianEvent, ZcdpEvent, ComposedEvent and SelfComposedEvent; "
        "use an accountant from dpcr.accounting.accountants for ApproxDpEvent"
    )


def compose(events: Iterable[DpEvent]) -> ComposedEvent:
    """Sequential composition of ``events`` (validated: every event must be supported)."""
    out = tuple(events)
    for event in out:
        cost_of(event)
    return ComposedEvent(events=out)


def basic_composition(epsilons: Iterable[float]) -> float:
    """Σ ε of pure-DP mechanisms, computed exactly and rounded up."""
    return round_up(sum((_exact(e, "epsilon") for e in epsilons), _ZERO))


def zcdp_composition(rhos: Iterable[float]) -> float:
    """Σ ρ of zCDP mechanisms, computed exactly and rounded up."""
    return round_up(sum((_exact(r, "rho") for r in rhos), _ZERO))


# --- zCDP -> (ε, δ) -----------------------------------------------------------------------------


def _check_delta(delta: float, *, allow_zero: bool = True) -> float:
    if isinstance(delta, bool) or not isinstance(delta, int | float):
        raise ConfigError(f"delta must be a number in [0, 1), got {delta!r}")
    lo_ok = delta >= 0 if allow_zero else delta > 0
    if not (lo_ok and delta < 1):
        need = "[0, 1)" if allow_zero else "(0, 1)"
        raise ConfigError(f"delta must be in {need}, got {delta!r}; a usual choice is 1e-6")
    return float(delta)


def _check_rho(rho: float) -> float:
    if isinstance(rho, bool) or not isinstance(rho, int | float) or not math.isfinite(rho):
        raise ConfigError(f"rho must be a finite number >= 0, got {rho!r}")
    if rho < 0:
        raise ConfigError(f"rho must be >= 0, got {rho!r}")
    return float(rho)


# Orders α searched: α − 1 = exp(u) on a fixed log-spaced grid from about 7e-13 to 1.6e15. A fixed
# grid makes the conversion exactly monotone in ρ and δ (each ε(α) is, and so is a minimum over the
# same α), so a caller that calibrates noise by bisection and then re-checks never flips. The
# spacing (0.0021 in u) costs about 1e-6 relative against the infimum, since ε(u) is flat there.
_ALPHA = 1.0 + np.exp(np.linspace(-28.0, 35.0, 30001))


def _epsilon_at(alpha: np.ndarray, rho: float, log_inv_delta: float) -> np.ndarray:
    """ε(α) with an upward margin for floating-point error (each entry a valid ε)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        a_rho = alpha * rho
        log_term = np.log1p(-1.0 / alpha)
        tail = (log_inv_delta - np.log(alpha)) / (alpha - 1.0)
        eps = a_rho + log_term + tail
        margin = _MARGIN * (np.abs(a_rho) + np.abs(log_term) + np.abs(tail)) + 1e-300
        out = np.asarray(eps + margin, dtype=float)
    out[~np.isfinite(out)] = np.inf
    return out


_COARSE = 64  # every 64th order first, then every order within 256 of the best


def _grid_min(rho: float, log_inv_delta: float) -> float:
    """min over the grid :data:`_ALPHA` of :func:`_epsilon_at`, evaluating about 1,000 of its
    30,001 orders. ε(α) is unimodal in α > 1: its derivative ρ − (log(1/δ) − log α)/(α − 1)² is
    increasing while log α < log(1/δ) and positive beyond. So the coarse minimum (every 64th
    order) lies within 64 orders of the grid's minimum, and every order within 256 of it is
    evaluated; orders outside that window exceed the window's minimum by far more than the
    floating-point error of the values (ε is flat only near its minimum)."""
    coarse = _epsilon_at(_ALPHA[::_COARSE], rho, log_inv_delta)
    centre = int(np.argmin(coarse)) * _COARSE
    lo, hi = max(0, centre - 4 * _COARSE), min(_ALPHA.size, centre + 4 * _COARSE + 1)
    return float(np.min(_epsilon_at(_ALPHA[lo:hi], rho, log_inv_delta)))


@lru_cache(maxsize=4096)
def zcdp_epsilon(rho: float, delta: float) -> float:
    """Smallest ε found such that ρ-zCDP implies (ε, δ)-DP (Canonne-Kamath-Steinke 2020, Cor. 13).

    Never below the true infimum; never above ``ρ + 2 sqrt(ρ log(1/δ))``.

    >>> zcdp_epsilon(0.0, 1e-6)
    0.0
    >>> 0 < zcdp_epsilon(1.0, 1e-6) <= 1.0 + 2 * math.sqrt(math.log(1e6))
    True
    """
    rho = _check_rho(rho)
    delta = _check_delta(delta, allow_zero=False)
    if rho == 0:
        return 0.0
    log_inv_delta = -math.log(delta)
    best = _grid_min(rho, log_inv_delta)
    # the classical α = 1 + sqrt(log(1/δ)/ρ) gives at most ρ + 2 sqrt(ρ log(1/δ)); inside the grid's
    # range a grid point beats it, beyond (absurd ρ) evaluate it so that bound still holds
    classical = math.sqrt(log_inv_delta / rho)
    if not 1e-12 <= classical <= 1e15:
        best = min(best, float(_epsilon_at(np.array([1.0 + classical]), rho, log_inv_delta)[0]))
    # ε(α) <= 0 means δ(α, ε=0) < δ already, so (0, δ)-DP holds
    return max(0.0, best)


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The largest ρ (to about 1e-12, rounded down) whose zCDP conversion (ρ-zCDP to (ε, δ),
    :func:`~dpcr.accounting.composition.zcdp_epsilon`) is within ``epsilon`` at ``delta``.

    The conversion is the minimum over a fixed grid of orders α of
    ``αρ + log(1 − 1/α) + (log(1/δ) − log α)/(α − 1)`` plus a relative margin, each term linear
    in ρ: the largest ρ is the maximum over α of the ρ at which that order's term reaches
    ``epsilon``, found in one vectorised pass and then checked (and lowered by a few ulps if
    float rounding put it a hair over)."""

    def within(rho: float) -> bool:
        return zcdp_epsilon(rho, delta) <= epsilon

    log_inv_delta = -math.log(delta)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_term = np.log1p(-1.0 / _ALPHA)
        tail = (log_inv_delta - np.log(_ALPHA)) / (_ALPHA - 1.0)
        room = epsilon - log_term - tail - _MARGIN * (np.abs(log_term) + np.abs(tail)) - 1e-300
        rho = room / (_ALPHA * (1 + _MARGIN))
    rho = rho[np.isfinite(rho)]
    best = float(np.max(rho)) if rho.size else 0.0
    if best > 0:
        for _ in range(64):
            if within(best):
                return best
            best = math.nextafter(best, 0.0) * (1 - 2.0**-50)
    return _bisect_zcdp(epsilon, delta, within)


def _bisect_zcdp(epsilon: float, delta: float, within: Callable[[float], bool]) -> float:
    """Bisection for :func:`zcdp_rho` (orders beyond the grid: absurd budgets)."""
    lo, hi = 0.0, max(1.0, epsilon)
    while within(hi):
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if within(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return lo


def _log_delta_at(alpha: np.ndarray, rho: float, epsilon: float) -> np.ndarray:
    """log δ(α) at ε, with an upward margin for floating-point error."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        t0 = (alpha - 1.0) * (alpha * rho - epsilon)
        t1 = (alpha - 1.0) * np.log1p(-1.0 / alpha)
        t2 = -np.log(alpha)
        margin = _MARGIN * (np.abs(t0) + np.abs(t1) + np.abs(t2)) + 1e-300
        out = np.asarray(t0 + t1 + t2 + margin, dtype=float)
    out[~np.isfinite(out)] = np.inf
    return out


def zcdp_delta(rho: float, epsilon: float) -> float:
    """Smallest δ found such that ρ-zCDP implies (ε, δ)-DP (Canonne-Kamath-Steinke 2020, Cor. 13).

    >>> zcdp_delta(0.0, 1.0)
    0.0
    >>> 0 < zcdp_delta(0.5, 5.0) < 1e-5
    True
    """
    rho = _check_rho(rho)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not epsilon >= 0:
        raise ConfigError(f"epsilon must be a number >= 0, got {epsilon!r}")
    if rho == 0:
        return 0.0
    log_delta = float(np.min(_log_delta_at(_ALPHA, rho, float(epsilon))))
    return 1.0 if log_delta >= 0 else min(1.0, math.exp(log_delta) * (1.0 + _MARGIN))


# --- guarantees ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Guarantee:
    """An (ε, δ)-DP guarantee, with the zCDP ρ of the same composition when known.

    ``method`` names the composition route: ``"none"`` (nothing released), ``"basic"`` (pure DP,
    δ = 0), ``"zcdp"``, ``"pure-as-zcdp"`` (pure events as ε²/2-zCDP, route a) or
    ``"basic+zcdp"`` (route b).
    """

    epsilon: float
    delta: float
    rho: float | None
    method: str

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0):
            raise ConfigError(f"epsilon must be >= 0, got {self.epsilon!r}")
        if not (0 <= self.delta <= 1):
            raise ConfigError(f"delta must be in [0, 1], got {self.delta!r}")
        if self.rho is not None and not (self.rho >= 0):
            raise ConfigError(f"rho must be >= 0 or None, got {self.rho!r}")

    def describe(self) -> str:
        text = f"(ε = {self.epsilon:.6g}, δ = {self.delta:.3g})-DP"
        if self.rho is not None and self.rho > 0:
            text += f", {self.rho:.6g}-zCDP"
        return f"{text} [{self.method}]"


_NONE = Guarantee(epsilon=0.0, delta=0.0, rho=0.0, method="none")


def guarantee_of_cost(cost: PrivacyCost, *, delta: float) -> Guarantee:
    """The better of the two routes of the module docstring for ``cost`` at ``delta``."""
    delta = _check_delta(delta)
    if cost.is_zero:
        return _NONE
    rho_total = round_up(cost.total_rho)
    if cost.rho > 0 and delta == 0:
        raise ConfigError(
            "zCDP (Gaussian) releases need delta > 0 to state an (ε, δ) guarantee, got "
            "delta = 0; set delta (e.g. 1e-6) or use Laplace noise"
        )
    # route (b): basic composition of the pure part + the zCDP part converted
    if cost.rho == 0:
        best = Guarantee(
            epsilon=round_up(cost.pure_epsilon), delta=0.0, rho=rho_total, method="basic"
        )
    else:
        eps_b = round_up(cost.pure_epsilon + Fraction(zcdp_epsilon(round_up(cost.rho), delta)))
        method = "zcdp" if cost.pure_epsilon == 0 else "basic+zcdp"
        best = Guarantee(epsilon=eps_b, delta=delta, rho=rho_total, method=method)
    # route (a): everything as zCDP
    if delta > 0 and cost.pure_rho > 0:
        eps_a = zcdp_epsilon(rho_total, delta)
        if eps_a < best.epsilon:
            best = Guarantee(epsilon=eps_a, delta=delta, rho=rho_total, method="pure-as-zcdp")
    return best


def epsilon_of(event: DpEvent, *, delta: float) -> Guarantee:
    """The (ε, δ) guarantee of ``event`` (composed as described in the module docstring)."""
    return guarantee_of_cost(cost_of(event), delta=delta)


def worst_guarantee(guarantees: Sequence[Guarantee]) -> Guarantee:
    """A guarantee that every one of ``guarantees`` implies: max ε, max δ, max ρ (Thm 2.2, 4.10).

    The method is that of the guarantee with the largest ε.
    """
    if not guarantees:
        return _NONE
    top = max(guarantees, key=lambda g: (g.epsilon, g.delta))
    rhos = [g.rho for g in guarantees]
    rho = None if any(r is None for r in rhos) else max(r for r in rhos if r is not None)
    return Guarantee(
        epsilon=top.epsilon,
        delta=max(g.delta for g in guarantees),
        rho=rho,
        method=top.method,
    )
