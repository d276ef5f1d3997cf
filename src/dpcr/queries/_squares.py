"""The clamped sum of squares: a new linear kind in one module (see :mod:`dpcr.queries._kind`)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

from dpcr.errors import ConfigError
from dpcr.queries._queries import Sum, _exact, _where_text

#: The largest |f| in steps: released integers stay exact (as a sum's (upper - lower) / grid).
_MAX_STEPS = 2**50


@dataclass(frozen=True, slots=True, kw_only=True)
class SumSquares(Sum):
    """Σ x² over the live rows matching ``where``, x = ``column`` clamped to [``lower``,
    ``upper``] and rounded to the grid ``grid`` exactly as :class:`Sum` rounds it (so with the
    sum and a count of the same rows it gives the variance of the same values; missing,
    non-numeric, NaN and infinite values count as 0). Released in integer steps of grid²: with
    x = k·grid, f = k².

    With k ∈ [a, b] = [lower/grid, upper/grid], f = k² ∈ [lo, hi] with hi = max(a², b²) and
    lo = 0 when a ≤ 0 ≤ b, else min(a², b²) > 0; f(null) = 0, so one entry's change of one
    interval lies in [−hi, hi] and the sensitivity is max(hi, 0) − min(lo, 0) = hi
    (erratum 3: not hi − lo)."""

    kind: ClassVar[str] = "sum_squares"

    def __post_init__(self) -> None:
        Sum.__post_init__(self)
        if self.steps_range[1] > _MAX_STEPS:
            raise ConfigError(
                f"query {self.name!r}: max(lower², upper²) / grid² must be at most 2^50 (exact "
                f"integer noise), got lower={self.lower}, upper={self.upper}, "
                f"grid={self.grid}; use a coarser grid or narrower bounds"
            )

    @property
    def steps_range(self) -> tuple[int, int]:
        a, b = self.lower_steps, self.upper_steps
        lo = 0 if a <= 0 <= b else min(a * a, b * b)
        return lo, max(a * a, b * b)

    def steps_sql(self, number: str) -> str:
        k = Sum.steps_sql(self, number)
        return f"({k} * {k})"

    @property
    def unit_scale(self) -> Fraction:
        return _exact(self.grid) ** 2

    def describe(self) -> str:
        return (
            f"sum of squares of {self.column} clamped to [{self.lower}, {self.upper}] on grid "
            f"{self.grid}" + _where_text(self.where)
        )
