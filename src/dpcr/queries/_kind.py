"""What a query kind provides (:class:`QueryKind`), and what a kind that sums a number column
provides to the engines (:class:`NumberContribution`).

A query is Σ_rows f(row) over the live rows of the bounded changelog, released as its change per
interval (ΔLQ, paper Def 4.5, 4.4.1). A kind says:

* its ``keys`` (one value per key per interval);
* its sensitivity per touched release under the changelog relation: ``l1_sensitivity`` and
  ``l2_sensitivity_squared`` bound, in released integer steps, how far one entry's change of one
  interval can move the released vector. With f ∈ [a, b] per key and f(null) = 0 (an absent
  row), one entry's change over an interval telescopes to f(last) − f(first) ∈ [lo − hi, hi − lo]
  with lo = min(a, 0) and hi = max(b, 0): the sensitivity is hi − lo = max(b, 0) − min(a, 0)
  (erratum 3; |b − a| only when a ≤ 0 ≤ b);
* ``touched_by()``: the changelog ops whose mutations can change the per-interval value (the
  participation of a unit is counted over those only);
* ``unit_scale``: released integers times this are the statistic's units (a grid);
* ``describe()``: one line for plans and reports;
* ``from_toml``: how it is read from a ``[[query]]`` table (``kind = "..."``).

The engines (DuckDB, and Spark, which runs DuckDB's per-record SQL) aggregate f per state: a
kind that reads one number column gives f as an SQL expression over that number
(:class:`NumberContribution`); the change between the states before and after a mutation is then
f(after) − f(before), summed per interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

Scalar = str | int | float | bool


class TableReader(Protocol):
    """A TOML table read key by key (:class:`dpcr.tomltable.TomlTable`)."""

    where: str

    def pop(self, key: str, default: Any = ..., *, types: tuple[type, ...] | None = None) -> Any:
        """The value of ``key`` (``default`` when absent; missing without one is an error)."""
        ...

    def __contains__(self, key: str) -> bool:
        """Whether the table holds ``key`` (not yet consumed)."""
        ...


@runtime_checkable
class QueryKind(Protocol):
    """A query kind (module docstring): every query a release takes implements this."""

    #: the TOML name (``kind = "..."``)
    kind: ClassVar[str]

    @property
    def name(self) -> str: ...

    @property
    def keys(self) -> tuple[str, ...]: ...

    @property
    def l1_sensitivity(self) -> Fraction: ...

    @property
    def l2_sensitivity_squared(self) -> Fraction: ...

    @property
    def unit_scale(self) -> Fraction: ...

    def touched_by(self) -> frozenset[str]: ...

    def describe(self) -> str: ...


class NumberContribution(Protocol):
    """A one-key kind whose f reads the number in ``column`` of the row after (when the row
    matches ``where``; a missing, non-numeric, NaN or infinite value counts as 0 and is
    reported as ``non_numeric``)."""

    column: str
    where: Mapping[str, tuple[Scalar, ...]]

    @property
    def steps_range(self) -> tuple[int, int]:
        """(a, b): every value of :meth:`steps_sql` lies in [a, b] (integer steps)."""
        ...

    def steps_sql(self, number: str) -> str:
        """SQL (DuckDB's dialect) of f as a BIGINT in [a, b] from ``number``, a finite DOUBLE
        column (never NULL here)."""
        ...


def sensitivity_of_range(lower: int, upper: int) -> Fraction:
    """The L1 (and L2) sensitivity of one interval's change of a one-key f ∈ [lower, upper]
    with f(null) = 0: max(upper, 0) − min(lower, 0) (erratum 3)."""
    return Fraction(max(upper, 0) - min(lower, 0))


class DerivedKind(Protocol):
    """A statistic computed from the released values of other queries only (post-processing:
    no data, no noise, no privacy cost). Per reporting interval it reads the running estimates
    and their noise stds of the queries it names (``inputs``, one key each) and gives its value
    and an approximate std (the delta method over the independent noise of its inputs)."""

    kind: ClassVar[str]

    @property
    def name(self) -> str: ...

    @property
    def inputs(self) -> tuple[str, ...]:
        """The names of the released queries it reads, in :meth:`combine`'s order."""
        ...

    def check(self, queries: Mapping[str, QueryKind], plan_kind: str) -> None:
        """Raise :class:`~dpcr.errors.ConfigError` unless ``queries`` (by name) hold inputs
        of the kinds it needs under a plan of ``plan_kind``."""
        ...

    def combine(
        self, inputs: Sequence[Any], values: Sequence[np.ndarray], stds: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(value, std) per interval from the input queries (as :meth:`check` accepted them),
        their estimates and their stds (arrays alike, in the statistic's units)."""
        ...

    def value_range(self, inputs: Sequence[Any]) -> tuple[float, float]:
        """Where the exact value lies, from the inputs' declarations (values and intervals are
        cut to it: post-processing too)."""
        ...

    def describe(self) -> str: ...
