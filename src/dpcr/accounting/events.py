"""Privacy events: small frozen descriptions of what a mechanism did.

Every release returns its event, and the accountant composes the event before the value is
published. Each event states the exact distribution it describes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dpcr.errors import ConfigError


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
    ε-DP with ε = sensitivity / scale (pure DP).
    """

    scale: Fraction
    sensitivity: Fraction

    def __post_init__(self) -> None:
        _positive_fraction(self.scale, "scale")
        _positive_fraction(self.sensitivity, "sensitivity")

    @property
    def epsilon(self) -> float:
        return float(self.sensitivity / self.scale)


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscreteGaussianEvent:
    """Discrete Gaussian noise added to an integer query of L2 ``sensitivity``.

    The noise X has P[X = x] ∝ exp(-x² / (2 sigma2)) on the integers; the release is
    ρ-zCDP with ρ = sensitivity² / (2 sigma2) (Canonne, Kamath, Steinke 2020, Thm 14).
    ``sensitivity`` is stored squared as a Fraction (``sensitivity2``) so √2 stays exact.
    """

    sigma2: Fraction
    sensitivity2: Fraction

    def __post_init__(self) -> None:
        _positive_fraction(self.sigma2, "sigma2")
        _positive_fraction(self.sensitivity2, "sensitivity2")

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
    | ComposedEvent
    | SelfComposedEvent
)


def event_to_dict(event: DpEvent) -> dict[str, object]:
    """A JSON-ready description of ``event`` (exact rationals as strings)."""
    if isinstance(event, DiscreteLaplaceEvent):
        return {
            "type": "discrete_laplace",
            "scale": str(event.scale),
            "sensitivity": str(event.sensitivity),
        }
    if isinstance(event, DiscreteGaussianEvent):
        return {
            "type": "discrete_gaussian",
            "sigma2": str(event.sigma2),
            "sensitivity2": str(event.sensitivity2),
        }
    if isinstance(event, PureDpEvent):
        return {"type": "pure_dp", "epsilon": event.epsilon}
    if isinstance(event, ZcdpEvent):
        return {"type": "zcdp", "rho": event.rho}
    if isinstance(event, ComposedEvent):
        return {"type": "composed", "events": [event_to_dict(e) for e in event.events]}
    if isinstance(event, SelfComposedEvent):
        return {"type": "self_composed", "event": event_to_dict(event.event), "count": event.count}
    raise ConfigError(f"cannot serialise event {event!r}")


def event_from_dict(data: dict[str, object]) -> DpEvent:
    kind = data.get("type")
    if kind == "discrete_laplace":
        return DiscreteLaplaceEvent(
            scale=Fraction(str(data["scale"])), sensitivity=Fraction(str(data["sensitivity"]))
        )
    if kind == "discrete_gaussian":
        return DiscreteGaussianEvent(
            sigma2=Fraction(str(data["sigma2"])), sensitivity2=Fraction(str(data["sensitivity2"]))
        )
    if kind == "pure_dp":
        return PureDpEvent(epsilon=float(str(data["epsilon"])))
    if kind == "zcdp":
        return ZcdpEvent(rho=float(str(data["rho"])))
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
