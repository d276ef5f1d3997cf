"""Mean and variance of a clamped column, as post-processing of released sums.

With N the released count of the live rows, S the released clamped sum of a column over the
same rows and Q the released clamped sum of its squares (:class:`~dpcr.queries.SumSquares`,
same column, bounds, grid and ``where``), per reporting interval:

    mean = S / N,    variance = Q / N − (S / N)²  (the population variance),

the mean cut to the values' range [min(lower, 0), max(upper, 0)] and the variance to [0, a
quarter of that range squared] (where the exact ones lie).

They read released values only (no data, no new noise, no privacy cost), so they inherit the
release's guarantee. Their std is the delta method's over the independent noise of N, S and Q
(first order: an approximation, poor when N is not large against its own std); it depends on
the released values, so it is published as an approximate 95 % interval, value ± 1.96 std (no
proven coverage), and the std columns are empty. Rows with a missing or non-numeric value count
in N and add 0 to S and Q, as in the sums (a ``where`` on the rows that have the value avoids
that). An interval whose released N is not positive has no value (NaN).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from dpcr.errors import ConfigError
from dpcr.queries._kind import QueryKind, TableReader
from dpcr.queries._queries import Count, Sum, _check_name
from dpcr.queries._squares import SumSquares


def _input(
    name: str, role: str, wanted: type[Count | Sum], queries: Mapping[str, QueryKind], ref: str
) -> Any:
    q = queries.get(ref)
    if q is None or type(q) is not wanted:
        raise ConfigError(
            f"query {name!r}: {role} = {ref!r} must name a {wanted.kind!r} query declared in "
            f"this release, got {'none' if q is None else repr(q.kind)}"
        )
    return q


def _same_rows(name: str, count: Count, total: Sum) -> None:
    if dict(count.where) != dict(total.where):
        raise ConfigError(
            f"query {name!r}: the count {count.name!r} and the sum {total.name!r} must have "
            "the same where (the mean is over the rows both read)"
        )


def _running(name: str, plan_kind: str) -> None:
    if plan_kind == "window":
        raise ConfigError(
            f"query {name!r}: a mean or variance is of the live rows (running values); a "
            "window plan releases changes over windows. Use another plan or remove it"
        )


def _value_range(total: Sum) -> tuple[float, float]:
    """Every row's value lies in [min(lower, 0), max(upper, 0)] (a missing one counts 0): so
    does their mean, and their variance is at most a quarter of the range squared
    (Popoviciu)."""
    return float(min(total.lower, 0)), float(max(total.upper, 0))


def _positive(n: np.ndarray) -> np.ndarray:
    return np.where(n > 0, n, np.nan)


@dataclass(frozen=True, slots=True, kw_only=True)
class Mean:
    """The mean S / N of a clamped column: ``sum`` names its :class:`Sum`, ``count`` a count
    of the same rows (module docstring)."""

    kind: ClassVar[str] = "mean"

    name: str
    count: str
    sum: str

    def __post_init__(self) -> None:
        _check_name(self.name)

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.count, self.sum)

    def check(self, queries: Mapping[str, QueryKind], plan_kind: str) -> None:
        _running(self.name, plan_kind)
        count = _input(self.name, "count", Count, queries, self.count)
        _same_rows(self.name, count, _input(self.name, "sum", Sum, queries, self.sum))

    def combine(
        self, inputs: Sequence[Any], values: Sequence[np.ndarray], stds: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        (n, s), (sd_n, sd_s) = values, stds
        n = _positive(n)
        return s / n, np.hypot(sd_s / n, s * sd_n / n**2)

    def value_range(self, inputs: Sequence[Any]) -> tuple[float, float]:
        return _value_range(inputs[1])

    def describe(self) -> str:
        return (
            f"mean {self.sum} / {self.count} "
            "(post-processing; approximate 95 % interval by the delta method)"
        )

    @classmethod
    def from_toml(cls, table: TableReader, *, name: str) -> Self:
        return cls(
            name=name,
            count=table.pop("count", types=(str,)),
            sum=table.pop("sum", types=(str,)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Variance:
    """The population variance Q / N − (S / N)² of a clamped column: ``sum`` names its
    :class:`Sum`, ``sum_squares`` the :class:`SumSquares` of the same column, bounds, grid and
    rows, ``count`` a count of those rows (module docstring)."""

    kind: ClassVar[str] = "variance"

    name: str
    count: str
    sum: str
    sum_squares: str

    def __post_init__(self) -> None:
        _check_name(self.name)

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.count, self.sum, self.sum_squares)

    def check(self, queries: Mapping[str, QueryKind], plan_kind: str) -> None:
        _running(self.name, plan_kind)
        count = _input(self.name, "count", Count, queries, self.count)
        total = _input(self.name, "sum", Sum, queries, self.sum)
        _same_rows(self.name, count, total)
        squares = _input(self.name, "sum_squares", SumSquares, queries, self.sum_squares)
        same = ("column", "lower", "upper", "grid", "where")
        if any(getattr(squares, a) != getattr(total, a) for a in same):
            raise ConfigError(
                f"query {self.name!r}: the sum of squares {squares.name!r} must read the "
                f"column, lower, upper, grid and where of the sum {total.name!r}"
            )

    def combine(
        self, inputs: Sequence[Any], values: Sequence[np.ndarray], stds: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        (n, s, q), (sd_n, sd_s, sd_q) = values, stds
        n = _positive(n)
        mean = s / n
        # ∂V/∂N = −Q/N² + 2S²/N³, ∂V/∂S = −2S/N², ∂V/∂Q = 1/N
        d_n = -q / n**2 + 2 * s**2 / n**3
        std = np.sqrt((d_n * sd_n) ** 2 + (2 * mean / n * sd_s) ** 2 + (sd_q / n) ** 2)
        return q / n - mean**2, std

    def value_range(self, inputs: Sequence[Any]) -> tuple[float, float]:
        lo, hi = _value_range(inputs[1])
        return 0.0, (hi - lo) ** 2 / 4

    def describe(self) -> str:
        return (
            f"variance {self.sum_squares} / {self.count} - ({self.sum} / {self.count})^2 "
            "(post-processing; approximate 95 % interval by the delta method)"
        )

    @classmethod
    def from_toml(cls, table: TableReader, *, name: str) -> Self:
        return cls(
            name=name,
            count=table.pop("count", types=(str,)),
            sum=table.pop("sum", types=(str,)),
            sum_squares=table.pop("sum_squares", types=(str,)),
        )
