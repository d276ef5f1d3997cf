"""Constraints on how an entry (or privacy unit) may mutate.

A constraint is enforced on the data (see :mod:`dpcr.bounding`) and, independently, turned into a
privacy count by the plan (how many queries one unit's kept mutations can affect).

* :class:`AtMostK` -- a unit keeps its first ``k`` mutations in (timestamp, sequence) order; the
  insert, every update and the delete each count as one mutation.
* :class:`TimeBounded` -- a unit keeps the mutations whose timestamp is at most ``bound``
  microseconds after its insertion (its first mutation), deletion included.
* :class:`Hybrid` -- the value of ``column`` in a unit's first inserted row picks the constraint
  (paper section 4.6); ``default`` applies to values not listed (``None``: such units are dropped
  and counted under ``unknown_class``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from dpcr.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class AtMostK:
    k: int

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= 10**6:
            raise ConfigError(f"at-most-k needs an integer k from 1 to 10^6, got {self.k!r}")

    def describe(self) -> str:
        return f"at most {self.k} mutations"


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeBounded:
    """Mutations only within ``bound`` microseconds of insertion (inclusive)."""

    bound: int

    if TYPE_CHECKING:  # (a duration string is accepted too; the field holds µs)

        def __init__(self, *, bound: int | str) -> None: ...

    def __post_init__(self) -> None:
        from dpcr.timeutil import as_span

        object.__setattr__(self, "bound", as_span(self.bound, "time bound"))  # "31d" accepted
        if isinstance(self.bound, bool) or not isinstance(self.bound, int) or self.bound < 0:
            raise ConfigError(
                f"time bound must be a duration >= 0 in microseconds, got {self.bound!r}"
            )

    def describe(self) -> str:
        from dpcr.timeutil import format_duration

        return f"mutations within {format_duration(self.bound)} of insertion"


SimpleConstraint = AtMostK | TimeBounded


@dataclass(frozen=True, slots=True, kw_only=True)
class Hybrid:
    column: str
    classes: Mapping[str, SimpleConstraint]
    default: SimpleConstraint | None = None
    _frozen: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.column:
            raise ConfigError("hybrid constraint needs the column that names the entry class")
        if not self.classes:
            raise ConfigError("hybrid constraint needs at least one class")
        for name, constraint in self.classes.items():
            if not isinstance(constraint, AtMostK | TimeBounded):
                raise ConfigError(
                    f"class {name!r}: a hybrid class must be at_most_k or time_bounded, "
                    f"got {constraint!r}"
                )
        object.__setattr__(self, "classes", MappingProxyType(dict(self.classes)))

    def all_classes(self) -> dict[str, SimpleConstraint]:
        """Every class with its constraint; the default (if any) under the name ``"*"``."""
        out: dict[str, SimpleConstraint] = dict(self.classes)
        if self.default is not None:
            out["*"] = self.default
        return out

    def describe(self) -> str:
        parts = [f"{name}: {c.describe()}" for name, c in self.all_classes().items()]
        return f"by {self.column} ({'; '.join(parts)})"


Constraint = AtMostK | TimeBounded | Hybrid
