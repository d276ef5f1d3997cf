"""Validation of exact (rational) sampler parameters."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dpcr.errors import ConfigError


def positive_fraction(value: object, name: str) -> Fraction:
    """``value`` as a positive Fraction; ints are accepted, floats refused (they are inexact)."""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a positive Fraction or int, got {value!r}")
    if isinstance(value, float | np.floating):
        raise ConfigError(
            f"{name} must be exact: pass fractions.Fraction (e.g. Fraction({value!r}) or "
            f"Fraction('{value!r}') for the decimal you mean), not the float {value!r}"
        )
    if isinstance(value, int | np.integer):
        value = Fraction(int(value))
    if not isinstance(value, Fraction):
        raise ConfigError(
            f"{name} must be a positive Fraction or int, got {type(value).__name__} {value!r}"
        )
    if value <= 0:
        raise ConfigError(f"{name} must be > 0, got {value}")
    return value


def sample_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
        raise ConfigError(f"size must be a non-negative int, got {size!r}")
    return int(size)
