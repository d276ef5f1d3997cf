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
