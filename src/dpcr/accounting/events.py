"""Privacy events: small frozen descriptions of what a mechanism did.

Every release returns its event, and the accountant composes the event before the value is
published. Each event states the exact distribution it describes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from fractions import Fraction

from dpcr.errors import ConfigError


def _check_dimension(dimension: int) -> None:
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
        raise ConfigError(f"dimension must be an integer >= 1, got {dimension!r}")


def _positive_fraction(value: Fraction, name: str) -> None:
    if not isinstance(value, Fraction) or value <= 0:
        raise ConfigError(f"{name} must be a positive Fraction, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PureDpEvent:
    """A mechanism that is ``epsilon``-DP (delta = 0); used when only ε is known."""

    epsilon: float

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0 and math.isfinite(self.epsilon)):
            raise ConfigError(f"epsilon must be finite and >= 0, got {self.epsilon!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscreteLaplaceEvent:
    """Discrete Laplace noise added to an integer query of L1 ``sensitivity``.

    The noise X has P[X = x] ∝ exp(-|x| / scale) on the integers, so the release is
    ε-DP with ε = sensitivity / scale (pure DP). ``dimension`` is the number of coordinates
    that get independent noise (a histogram's keys): the exact one-dimensional loss curves
    (PLD, RDP) describe only ``dimension == 1``; pure ε holds for any dimension.
    """

    scale: Fraction
    sensitivity: Fraction
    dimension: int = 1

    def __post_init__(self) -> None:
        _positive_fraction(self.scale, "scale")
        _positive_fraction(self.sensitivity, "sensitivity")
        _check_dimension(self.dimension)

    @property
    def epsilon(self) -> float:
        return float(self.sensitivity / self.scale)


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscreteGaussianEvent:
    """Discrete Gaussian noise added to an integer query of L2 ``sensitivity``.

    The noise X has P[X = x] ∝ exp(-x² / (2 sigma2)) on the integers; the release is
    ρ-zCDP with ρ = sensitivity² / (2 sigma2) (Canonne, Kamath, Steinke 2020, Thm 14).
    ``sensitivity`` is stored squared as a Fraction (``sensitivity2``) so √2 stays exact.
    ``dimension`` bounds the coordinates with independent noise on which two neighbours' values
    can differ (a histogram's keys; coordinates equal in both never matter). ρ is the same for
    any dimension (zCDP composes over coordinates), but the one-dimensional PLD applies only to
    ``dimension == 1`` (the discrete Gaussian is not rotation invariant); a vector is accounted
    through a coupling with the continuous Gaussian (:mod:`dpcr.accounting._dg_coupling`).
    """

    sigma2: Fraction
    sensitivity2: Fraction
    dimension: int = 1

    def __post_init__(self) -> None:
        _positive_fraction(self.sigma2, "sigma2")
        _positive_fraction(self.sensitivity2, "sensitivity2")
        _check_dimension(self.dimension)

    @property
    def rho(self) -> float:
        return float(self.sensitivity2 / (2 * self.sigma2))


@dataclass(frozen=True, slots=True, kw_only=True)
class ZcdpEvent:
    """A mechanism that is ``rho``-zCDP."""

    rho: float

    def __post_init__(self) -> None:
        if not (self.rho >= 0 and math.isfinite(self.rho)):
            raise ConfigError(f"rho must be finite and >= 0, got {self.rho!r}")


def _finite_positive(value: float, name: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float | Fraction)
        or not (math.isfinite(value) and value > 0)
    ):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LaplaceEvent:
    """Continuous Laplace noise with density ∝ exp(-|x| / scale) added to a query of L1
    ``sensitivity``; ε = sensitivity / scale (its exact privacy curve is tighter than ε-DP)."""

    scale: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        _finite_positive(self.scale, "scale")
        _finite_positive(self.sensitivity, "sensitivity")

    @property
    def epsilon(self) -> float:
        return float(Fraction(self.sensitivity) / Fraction(self.scale))


@dataclass(frozen=True, slots=True, kw_only=True)
class GaussianEvent:
    """Continuous Gaussian noise N(0, sigma²) added to a query of L2 ``sensitivity``.

    Its privacy curve is exactly that of μ = sensitivity / sigma (Balle & Wang 2018); it is
    μ²/2-zCDP, and k Gaussians compose to one Gaussian with μ² = Σ μ_i².
    """

    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        _finite_positive(self.sigma, "sigma")
        _finite_positive(self.sensitivity, "sensitivity")

    @property
    def rho(self) -> float:
        return float(Fraction(self.sensitivity) ** 2 / (2 * Fraction(self.sigma) ** 2))


@dataclass(frozen=True, slots=True, kw_only=True)
class RandomizedResponseEvent:
    """k-ary randomized response: report the true value of ``buckets`` possible values with
    probability e^ε / (e^ε + buckets − 1), and each other value with 1 / (e^ε + buckets − 1)."""

    epsilon: float
    buckets: int = 2

    def __post_init__(self) -> None:
        _finite_positive(self.epsilon, "epsilon")
        if isinstance(self.buckets, bool) or not isinstance(self.buckets, int) or self.buckets < 2:
            raise ConfigError(f"buckets must be an integer >= 2, got {self.buckets!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApproxDpEvent:
    """A mechanism known only to be (``epsilon``, ``delta``)-DP."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        if not (
            isinstance(self.epsilon, int | float)
            and self.epsilon >= 0
            and math.isfinite(self.epsilon)
        ):
            raise ConfigError(f"epsilon must be finite and >= 0, got {self.epsilon!r}")
        if not (isinstance(self.delta, int | float) and 0 <= self.delta < 1):
            raise ConfigError(f"delta must be in [0, 1), got {self.delta!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ComposedEvent:
    """Sequential (possibly adaptive) composition of ``events``."""

    events: tuple[DpEvent, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SelfComposedEvent:
    """``event`` composed with itself ``count`` times."""

    event: DpEvent
    count: int

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise ConfigError(f"count must be an integer >= 0, got {self.count!r}")


DpEvent = (
    PureDpEvent
    | DiscreteLaplaceEvent
    | DiscreteGaussianEvent
    | ZcdpEvent
    | LaplaceEvent
    | GaussianEvent
    | RandomizedResponseEvent
    | ApproxDpEvent
    | ComposedEvent
    | SelfComposedEvent
)


def event_to_dict(event: DpEvent) -> dict[str, object]:
    """A JSON-ready description of ``event`` (exact rationals as strings)."""
    if isinstance(event, DiscreteLaplaceEvent):
        out: dict[str, object] = {
            "type": "discrete_laplace",
            "scale": str(event.scale),
            "sensitivity": str(event.sensitivity),
        }
        if event.dimension != 1:
            out["dimension"] = event.dimension
        return out
    if isinstance(event, DiscreteGaussianEvent):
        out = {
            "type": "discrete_gaussian",
            "sigma2": str(event.sigma2),
            "sensitivity2": str(event.sensitivity2),
        }
        if event.dimension != 1:
            out["dimension"] = event.dimension
        return out
    if isinstance(event, PureDpEvent):
        return {"type": "pure_dp", "epsilon": event.epsilon}
    if isinstance(event, ZcdpEvent):
        return {"type": "zcdp", "rho": event.rho}
    if isinstance(event, LaplaceEvent):
        return {"type": "laplace", "scale": event.scale, "sensitivity": event.sensitivity}
    if isinstance(event, GaussianEvent):
        return {"type": "gaussian", "sigma": event.sigma, "sensitivity": event.sensitivity}
    if isinstance(event, RandomizedResponseEvent):
        return {"type": "randomized_response", "epsilon": event.epsilon, "buckets": event.buckets}
    if isinstance(event, ApproxDpEvent):
        return {"type": "approx_dp", "epsilon": event.epsilon, "delta": event.delta}
    if isinstance(event, ComposedEvent):
        return {"type": "composed", "events": [event_to_dict(e) for e in event.events]}
    if isinstance(event, SelfComposedEvent):
        return {"type": "self_composed", "event": event_to_dict(event.event), "count": event.count}
    raise ConfigError(f"cannot serialise event {event!r}")


def event_from_dict(data: dict[str, object]) -> DpEvent:
    kind = data.get("type")
    if kind == "discrete_laplace":
        return DiscreteLaplaceEvent(
            scale=Fraction(str(data["scale"])),
            sensitivity=Fraction(str(data["sensitivity"])),
            dimension=int(str(data.get("dimension", 1))),
        )
    if kind == "discrete_gaussian":
        return DiscreteGaussianEvent(
            sigma2=Fraction(str(data["sigma2"])),
            sensitivity2=Fraction(str(data["sensitivity2"])),
            dimension=int(str(data.get("dimension", 1))),
        )
    if kind == "pure_dp":
        return PureDpEvent(epsilon=float(str(data["epsilon"])))
    if kind == "zcdp":
        return ZcdpEvent(rho=float(str(data["rho"])))
    if kind == "laplace":
        return LaplaceEvent(
            scale=float(str(data["scale"])), sensitivity=float(str(data["sensitivity"]))
        )
    if kind == "gaussian":
        return GaussianEvent(
            sigma=float(str(data["sigma"])), sensitivity=float(str(data["sensitivity"]))
        )
    if kind == "randomized_response":
        return RandomizedResponseEvent(
            epsilon=float(str(data["epsilon"])), buckets=int(str(data["buckets"]))
        )
    if kind == "approx_dp":
        return ApproxDpEvent(epsilon=float(str(data["epsilon"])), delta=float(str(data["delta"])))
    if kind == "composed":
        items = data["events"]
        if not isinstance(items, list):
            raise ConfigError(f"composed event needs a list of events, got {items!r}")
        return ComposedEvent(events=tuple(event_from_dict(e) for e in items))
    if kind == "self_composed":
        inner = data["event"]
        if not isinstance(inner, dict):
            raise ConfigError(f"self-composed event needs an event, got {inner!r}")
        return SelfComposedEvent(event=event_from_dict(inner), count=int(str(data["count"])))
    raise ConfigError(f"unknown event type {kind!r}")


def nearly_equal(a: DpEvent, b: DpEvent, *, rel: float = 1e-9) -> bool:
    """Whether ``a`` and ``b`` are the same mechanism up to a relative ``rel`` in each
    parameter (two dpcr versions may calibrate the same plan a few ulps apart)."""
    return _close(event_to_dict(a), event_to_dict(b), rel)


def at_least_as_noisy(stored: DpEvent, planned: DpEvent, *, rel: float = 1e-9) -> bool:
    """Whether ``stored`` is the mechanism ``planned`` describes (same kind, sensitivity and
    dimension, up to ``rel``) with at least its noise (``sigma2`` or ``scale``): what an
    earlier dpcr calibrated for the same plan when its accounting was looser."""
    if isinstance(stored, DiscreteGaussianEvent) and isinstance(planned, DiscreteGaussianEvent):
        noise = stored.sigma2 >= planned.sigma2 * (1 - Fraction(rel))
        return noise and nearly_equal(
            DiscreteGaussianEvent(sigma2=planned.sigma2, sensitivity2=stored.sensitivity2,
                                  dimension=stored.dimension), planned, rel=rel)
    if isinstance(stored, DiscreteLaplaceEvent) and isinstance(planned, DiscreteLaplaceEvent):
        noise = stored.scale >= planned.scale * (1 - Fraction(rel))
        return noise and nearly_equal(
            DiscreteLaplaceEvent(scale=planned.scale, sensitivity=stored.sensitivity,
                                 dimension=stored.dimension), planned, rel=rel)
    return nearly_equal(stored, planned, rel=rel)


def _close(x: object, y: object, rel: float) -> bool:
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_close(x[k], y[k], rel) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_close(u, v, rel) for u, v in zip(x, y, strict=True))
    if x == y:
        return True
    if isinstance(x, int) or isinstance(y, int):  # dimensions, counts (and bools): exact
        return False
    try:
        fx, fy = Fraction(str(x)), Fraction(str(y))
    except (ValueError, ZeroDivisionError):
        return False
    return abs(fx - fy) <= Fraction(rel) * max(abs(fx), abs(fy))


def exact_key(event: DpEvent) -> tuple[object, ...] | None:
    """A hashable key of ``event`` that two events share only when they are of the same
    classes with the same field values of the same types, spelt alike (``repr``): ``1``,
    ``1.0``, ``True`` and ``Fraction(1)`` give four keys, as do ``0.0`` and ``-0.0``. So a
    result computed from an event's fields holds for every event with its key (the caches of
    :mod:`dpcr.accounting.accountants` and :mod:`dpcr.accounting.guarantee`). None for an
    event of another class (not to be cached)."""
    if type(event) is ComposedEvent:
        parts = tuple(map(exact_key, event.events))
        return None if None in parts else (ComposedEvent, type(event.events), parts)
    if type(event) is SelfComposedEvent:
        inner = exact_key(event.event)
        count = event.count
        return None if inner is None else (SelfComposedEvent, inner, type(count), repr(count))
    names = _LEAF_FIELDS.get(type(event))
    if names is None:
        return None
    return (type(event), *[(type(v), repr(v)) for v in map(event.__getattribute__, names)])


#: The fields of each leaf event class (:func:`exact_key`).
_LEAF_FIELDS: dict[type, tuple[str, ...]] = {
    kind: tuple(f.name for f in fields(kind))
    for kind in (
        PureDpEvent,
        DiscreteLaplaceEvent,
        DiscreteGaussianEvent,
        ZcdpEvent,
        LaplaceEvent,
        GaussianEvent,
        RandomizedResponseEvent,
        ApproxDpEvent,
    )
}
