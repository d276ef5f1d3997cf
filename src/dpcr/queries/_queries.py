"""The query types :class:`Count`, :class:`Sum`, :class:`Histogram` and :class:`Events` and
their sensitivities (see :mod:`dpcr.queries`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType
from typing import Any, ClassVar, Self

from dpcr._sql import num
from dpcr.errors import ConfigError
from dpcr.queries._kind import Scalar, TableReader, sensitivity_of_range

#: Every op of a changelog mutation: a query whose value any of them can change.
_ALL_OPS = frozenset({"insert", "update", "delete"})
#: The ops that create or remove a row: all a count of every row changes at.
_ROW_OPS = frozenset({"insert", "delete"})


def _check_name(name: str) -> None:
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError(f"query name {name!r} must be non-empty letters, digits, '_' or '-'")


def _freeze_where(
    where: Mapping[str, Scalar | list[Scalar]] | None,
) -> Mapping[str, tuple[Scalar, ...]]:
    out: dict[str, tuple[Scalar, ...]] = {}
    for column, value in (where or {}).items():
        values = tuple(value) if isinstance(value, list | tuple) else (value,)
        if not values:
            raise ConfigError(f"where.{column}: give at least one value")
        for v in values:
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(
                    f"where.{column}: {v!r} is not a finite number; rows with NaN or infinite "
                    "values count as missing and match no where clause"
                )
        out[column] = values
    return MappingProxyType(out)


class _OneCount:
    """What every count shares: one key, sensitivity 1, its integers in the statistic's units."""

    __slots__ = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return ("",)

    @property
    def l1_sensitivity(self) -> Fraction:
        return Fraction(1)

    @property
    def l2_sensitivity_squared(self) -> Fraction:
        return Fraction(1)

    @property
    def unit_scale(self) -> Fraction:
        """Released integers are multiplied by this to get the statistic's units."""
        return Fraction(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Count(_OneCount):
    kind: ClassVar[str] = "count"

    name: str
    where: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_name(self.name)
        object.__setattr__(self, "where", _freeze_where(self.where))  # type: ignore[arg-type]

    @classmethod
    def from_toml(cls, table: TableReader, *, name: str, where: dict[str, Any]) -> Count:
        return cls(name=name, where=where)

    def touched_by(self) -> frozenset[str]:
        """The ops whose mutations can change this query's per-interval value: a count of every
        row only inserts and deletes (an update leaves the row counted); with ``where``, an
        update may move a row in or out of it, so all three."""
        return _ALL_OPS if self.where else _ROW_OPS

    def describe(self) -> str:
        return "count of live rows" + _where_text(self.where)


@dataclass(frozen=True, slots=True, kw_only=True)
class Exhausted(Count):
    """The number of privacy units whose mutations bounding has started to drop: each unit adds
    1 in the interval of its first mutation that is not kept (the running value is the units
    exhausted so far). A count of sensitivity 1 that one unit touches in one interval only, so
    its noise is calibrated as any count's under the constraint (docs/privacy.md, section 10);
    it takes no ``where``."""

    kind: ClassVar[str] = "exhausted"

    def __post_init__(self) -> None:
        Count.__post_init__(self)
        if self.where:
            raise ConfigError(
                f"query {self.name!r}: an exhausted query counts units, not rows; remove where"
            )

    def touched_by(self) -> frozenset[str]:
        """Any op: a unit's first dropped mutation may be of any op."""
        return _ALL_OPS

    def describe(self) -> str:
        return "units whose mutations are being dropped (bounding exhausted)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Sum:
    """The sum of ``column`` clamped to [``lower``, ``upper``] and rounded to the grid ``grid``
    (released as integer steps of ``grid``) over the live rows matching ``where``. The kinds
    that sum another function of one clamped number subclass it and change
    :meth:`steps_sql`, :attr:`steps_range`, :attr:`unit_scale` and :meth:`describe`
    (:class:`dpcr.queries.SumSquares`): the engines treat every :class:`Sum` alike."""

    kind: ClassVar[str] = "sum"

    name: str
    column: str
    lower: float
    upper: float
    grid: float = 1.0
    where: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not self.column:
            raise ConfigError(f"query {self.name!r}: sum needs a column")
        for label in ("lower", "upper", "grid"):
            value = getattr(self, label)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not -1e300 < value < 1e300  # NaN, ±inf and integers past float's range
            ):
                raise ConfigError(
                    f"query {self.name!r}: {label} must be a finite number, got {value!r}"
                )
        if not self.lower <= self.upper:
            raise ConfigError(
                f"query {self.name!r}: lower {self.lower} must be <= upper {self.upper}"
            )
        if self.grid <= 0:
            raise ConfigError(f"query {self.name!r}: grid must be > 0, got {self.grid}")
        if max(abs(self.lower), abs(self.upper)) > 1e15 or (
            (max(self.upper, 0) - min(self.lower, 0)) / self.grid > 2**50
        ):
            raise ConfigError(
                f"query {self.name!r}: bounds must be within ±1e15 and (upper - lower) / grid "
                f"at most 2^50 (exact integer noise), got lower={self.lower}, "
                f"upper={self.upper}, grid={self.grid}; use a coarser grid"
            )
        for label in ("lower", "upper"):
            steps = _exact(getattr(self, label)) / _exact(self.grid)
            if steps.denominator != 1:
                raise ConfigError(
                    f"query {self.name!r}: {label} = {getattr(self, label)} is not a multiple of "
                    f"grid = {self.grid}; choose bounds on the grid"
                )
        object.__setattr__(self, "where", _freeze_where(self.where))  # type: ignore[arg-type]

    @property
    def keys(self) -> tuple[str, ...]:
        return ("",)

    @property
    def lower_steps(self) -> int:
        return int(_exact(self.lower) / _exact(self.grid))

    @property
    def upper_steps(self) -> int:
        return int(_exact(self.upper) / _exact(self.grid))

    @property
    def steps_range(self) -> tuple[int, int]:
        """Every row's f lies in [a, b] (integer steps)."""
        return self.lower_steps, self.upper_steps

    def steps_sql(self, number: str) -> str:
        """f from a finite DOUBLE ``number``: round(clamp(x) / grid); the bounds are on the
        grid, so the result is in [lower_steps, upper_steps]. (On the grid 1 the division is
        left out: x / 1.0 is x.)"""
        clamped = f"least(greatest({number}, {num(self.lower)}), {num(self.upper)})"
        scaled = clamped if self.grid == 1 else f"{clamped} / {num(self.grid)}"
        return f"CAST(round({scaled}) AS BIGINT)"

    @classmethod
    def from_toml(cls, table: TableReader, *, name: str, where: dict[str, Any]) -> Self:
        """A ``[[query]]`` table; with ``by = "column"`` (kind ``sum`` only) a
        :class:`GroupedSum`, which reads its keys too."""
        by = table.pop("by", types=(str,)) if cls is Sum and "by" in table else None
        values: dict[str, Any] = {
            "name": name,
            "column": table.pop("column", types=(str,)),
            "lower": table.pop("lower", types=(int, float)),
            "upper": table.pop("upper", types=(int, float)),
            "grid": table.pop("grid", 1.0, types=(int, float)),
            "where": where,
        }
        if by is None:
            return cls(**values)
        keys = table.pop("keys", None, types=(list,))
        grouped = GroupedSum(
            **values, by=by, categories=tuple(str(k) for k in keys or ()),
            unknown=table.pop("unknown", None, types=(str,)),
            open=table.pop("open", False, types=(bool,)),
            keys_from=table.pop("keys_from", None, types=(str,)),
        )  # fmt: skip
        return grouped  # type: ignore[return-value]  # (a Sum; kind "sum" reads both)

    @property
    def l1_sensitivity(self) -> Fraction:
        """max(b, 0) − min(a, 0) in grid steps, [a, b] = :attr:`steps_range` (erratum 3)."""
        return sensitivity_of_range(*self.steps_range)

    @property
    def l2_sensitivity_squared(self) -> Fraction:
        return self.l1_sensitivity**2

    @property
    def unit_scale(self) -> Fraction:
        return _exact(self.grid)

    def touched_by(self) -> frozenset[str]:
        """All three ops: an update may change the summed value or the ``where``."""
        return _ALL_OPS

    def describe(self) -> str:
        return (
            f"sum of {self.column} clamped to [{self.lower}, {self.upper}] on grid {self.grid}"
            + _where_text(self.where)
        )


#: What a histogram does with a value outside its keys (see :class:`Histogram`).
UNKNOWN_KEYS = ("drop", "other", "error")
#: The largest code of a grouped sum's (key, value) pair (:attr:`GroupedSum.code_width`).
_MAX_CODE = 2**62


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupedSum(Sum):
    """The clamped sum of ``column`` (as :class:`Sum`) per key of the column ``by``: one sum
    per key, "revenue by plan". ``kind = "sum"`` with ``by``; ``keys`` as a histogram's
    (``categories``), ``unknown`` ``"drop"`` (the default) or ``"other"``.

    ``open = True``: a key not declared is published when the open :class:`Histogram`
    ``keys_from`` (same ``column`` as ``by``, same ``where`` and declared keys) publishes it,
    and from the same interval: the sum follows that histogram's key selection, a
    post-processing of its release (docs/privacy.md, section 12b).

    With f ∈ [lo, hi] = [min(a, 0), max(b, 0)] per row (a missing number counts 0), one entry's
    change of one interval is −v₀·e(k₀) + v₁·e(k₁) for its first and last states: L1 =
    max(2M, hi − lo) and L2² = max(2M², (hi − lo)²), M = max(−lo, hi) (:func:`grouped_bounds`).
    """

    by: str
    categories: tuple[str, ...] = ()
    unknown: str | None = None
    open: bool = False
    keys_from: str | None = None

    def __post_init__(self) -> None:
        Sum.__post_init__(self)
        name = self.name
        if not self.by:
            raise ConfigError(f"query {name!r}: by names the column to group the sum by")
        cats = tuple(str(k) for k in self.categories)
        object.__setattr__(self, "categories", cats)
        if len(set(cats)) != len(cats) or len(cats) > MAX_KEYS:
            raise ConfigError(f"query {name!r}: keys must be distinct, at most {MAX_KEYS:,}")
        if self.open:
            if self.unknown is not None:
                raise ConfigError(f"query {name!r}: unknown has no meaning with open = true; "
                                  "remove unknown")  # fmt: skip
            if not self.keys_from:
                raise ConfigError(
                    f"query {name!r}: an open grouped sum publishes the keys an open histogram "
                    f"of {self.by!r} publishes: declare one (kind = \"histogram\", column = "
                    f"{self.by!r}, open = true, the same where) and name it in keys_from"
                )
        else:
            if self.keys_from is not None:
                raise ConfigError(f"query {name!r}: keys_from needs open = true")
            if not cats:
                raise ConfigError(f"query {name!r}: declare the keys of {self.by!r} "
                                  "(keys = [...]), or set open = true")  # fmt: skip
            if self.unknown not in (None, "drop", "other"):
                raise ConfigError(
                    f"query {name!r}: unknown must be 'drop' (values of {self.by!r} outside "
                    f"the keys add nothing) or 'other' (they add to the key 'other'), got "
                    f"{self.unknown!r}"
                )
            if self.unknown == "other" and "other" in cats:
                raise ConfigError(f"query {name!r}: 'other' is reserved when unknown = 'other'")
        if (len(cats) + 1) * self.code_width > _MAX_CODE:
            raise ConfigError(
                f"query {name!r}: keys × (upper − lower) / grid must stay below 2^62; use a "
                "coarser grid or fewer keys"
            )

    @property
    def keys(self) -> tuple[str, ...]:
        return self.categories + (("other",) if self.unknown == "other" else ())

    @property
    def value_range(self) -> tuple[int, int]:
        """[lo, hi] = [min(a, 0), max(b, 0)]: every value a row adds to its key (steps)."""
        a, b = self.steps_range
        return min(a, 0), max(b, 0)

    @property
    def code_width(self) -> int:
        """The engines' code of a row holding key number j with value v is j·W + (v − lo)."""
        lo, hi = self.value_range
        return hi - lo + 1

    @property
    def l1_sensitivity(self) -> Fraction:
        return grouped_bounds(*self.value_range)[0]

    @property
    def l2_sensitivity_squared(self) -> Fraction:
        return grouped_bounds(*self.value_range)[1]

    def describe(self) -> str:
        keys = (f"the keys that {self.keys_from!r} publishes" if self.open
                else f"{len(self.keys)} keys")  # fmt: skip
        return (
            f"sum of {self.column} clamped to [{self.lower}, {self.upper}] on grid {self.grid} "
            f"by {self.by} over {keys}" + _where_text(self.where)
        )


def grouped_bounds(lo: int, hi: int) -> tuple[Fraction, Fraction]:
    """(L1, L2²) of one entry's change of one interval of a grouped sum whose rows add values
    in [lo, hi] (lo <= 0 <= hi, 0 for no row) to their key: the first state's value leaves its
    key and the last state's enters its own. Different keys: |v₀| + |v₁| <= 2M and v₀² + v₁²
    <= 2M² (M = max(−lo, hi), both reached); one key: |v₁ − v₀| <= hi − lo."""
    m, width = max(-lo, hi), hi - lo
    return Fraction(max(2 * m, width)), Fraction(max(2 * m * m, width * width))
#: The most keys a release declares, over all its queries (a count or a sum is one key). Every
#: interval releases, stores and publishes one value per key, and a run rebuilds every published
#: row (intervals × keys): at this limit a run takes about 17 s and 250 MB for two daily
#: intervals on 2 cores (docs/config.md).
MAX_KEYS = 10_000


@dataclass(frozen=True, slots=True, kw_only=True, init=False)
class Histogram:
    """One count per key of ``column``.

    ``unknown`` says what a row whose value is not among the keys contributes:

    * ``"drop"`` (the default) -- nothing, as if it did not match ``where``; such mutations are
      counted in the bounding report (``unknown_keys``), so one unit's data can never stop a
      release;
    * ``"other"`` -- one more key, ``"other"``, collects them;
    * ``"error"`` -- the aggregation raises :class:`~dpcr.errors.ChangelogError` naming the
      record: for development, to find keys missing from the configuration. One unit's record
      then stops the whole release, so do not use it in production.

    ``open = True``: the keys are not all known in advance. Every value of ``column`` that a
    kept row matching ``where`` holds is a *candidate* key with its own continual counter; a
    key not among ``keys`` (which may then be empty) is published from the first reporting
    interval whose noisy running estimate reaches the threshold ``dpcr plan`` states, and at
    every later one (docs/privacy.md). ``unknown`` has no meaning then: it is refused.
    """

    kind: ClassVar[str] = "histogram"

    name: str
    column: str
    categories: tuple[str, ...]
    unknown: str = "drop"
    where: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)
    open: bool = False

    def __init__(
        self, *, name: str, column: str, keys: Iterable[str] | None = None,
        unknown: str | None = None, where: Mapping[str, Any] | None = None,
        categories: Iterable[str] | None = None, open: bool = False,
    ) -> None:  # fmt: skip
        """``keys`` as in the TOML (``categories``, the name the value keeps them under, is
        accepted too); with ``open = True`` they may be left out."""
        if not isinstance(open, bool):
            raise ConfigError(f"query {name!r}: open must be true or false, got {open!r}")
        if keys is not None and categories is not None:
            raise ConfigError(f"query {name!r}: declare the histogram's keys once (keys=[...])")
        given = keys if keys is not None else categories
        if given is None and not open:
            raise ConfigError(
                f"query {name!r}: declare the histogram's keys (keys = [...]), or set open = "
                "true to publish the keys that appear in the data"
            )
        if open and unknown is not None:
            raise ConfigError(
                f"query {name!r}: unknown has no meaning with open = true (every value is a "
                "candidate key); remove unknown"
            )
        unknown = "drop" if unknown is None else unknown
        for attr, value in (("name", name), ("column", column), ("unknown", unknown),
                            ("categories", tuple(given or ())), ("where", where or {}),
                            ("open", open)):  # fmt: skip
            object.__setattr__(self, attr, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not self.column:
            raise ConfigError(f"query {self.name!r}: histogram needs a column")
        if len(self.categories) > MAX_KEYS:
            raise ConfigError(
                f"query {self.name!r}: {len(self.categories):,} keys, more than {MAX_KEYS:,}; "
                "group the values into fewer keys (or release them in several configurations)"
            )
        cats = tuple(str(k) for k in self.categories)
        if not cats and not self.open:
            raise ConfigError(f"query {self.name!r}: declare the histogram's keys (keys = [...])")
        if len(set(cats)) != len(cats):
            raise ConfigError(f"query {self.name!r}: histogram keys must be distinct")
        if self.unknown not in UNKNOWN_KEYS:
            raise ConfigError(
                f"query {self.name!r}: unknown must be 'drop' (values outside the keys count "
                "nothing), 'other' (they count under the key 'other') or 'error' (development "
                f"only: the release stops at the first one), got {self.unknown!r}"
            )
        if self.unknown == "other" and "other" in cats:
            raise ConfigError(f"query {self.name!r}: 'other' is reserved when unknown = 'other'")
        object.__setattr__(self, "categories", cats)
        object.__setattr__(self, "where", _freeze_where(self.where))  # type: ignore[arg-type]

    @classmethod
    def from_toml(cls, table: TableReader, *, name: str, where: dict[str, Any]) -> Histogram:
        is_open = table.pop("open", False, types=(bool,))
        keys = table.pop("keys", None, types=(list,))
        return cls(
            name=name,
            column=table.pop("column", types=(str,)),
            keys=None if keys is None else tuple(str(k) for k in keys),
            unknown=table.pop("unknown", None, types=(str,)),
            where=where,
            open=is_open,
        )

    @property
    def keys(self) -> tuple[str, ...]:
        """The declared keys (and ``"other"``); an open histogram's candidate keys come from
        the data (:attr:`open`)."""
        return self.categories + (("other",) if self.unknown == "other" else ())

    @property
    def l1_sensitivity(self) -> Fraction:
        return Fraction(2)

    @property
    def l2_sensitivity_squared(self) -> Fraction:
        return Fraction(2)

    @property
    def unit_scale(self) -> Fraction:
        return Fraction(1)

    def touched_by(self) -> frozenset[str]:
        """All three ops: an update may move a row to another key or across ``where``."""
        return _ALL_OPS

    def describe(self) -> str:
        if self.open:
            declared = f" ({len(self.keys)} declared)" if self.keys else ""
            return (f"histogram of {self.column} over the keys that appear{declared}"
                    + _where_text(self.where))  # fmt: skip
        return f"histogram of {self.column} over {len(self.keys)} keys" + _where_text(self.where)


#: The operations an :class:`Events` query counts (a changelog mutation's ``op``).
EVENT_OPS = ("insert", "update", "delete")


@dataclass(frozen=True, slots=True, kw_only=True)
class Events(_OneCount):
    """The number of kept mutations of one operation ``op`` in each interval (its running value:
    how many there have been): "new sign-ups" (``op = "insert"``), "cancellations"
    (``op = "update"``, ``before = {status: active}``, ``where = {status: cancelled}``).

    ``where`` filters the row the event is about: the row inserted, the row after an update,
    the row deleted. ``before`` (updates only) filters the row before the update. Rows are the
    bounded history's: an update moving an entry to another unit (a unit column) is a delete in
    the old unit and an insert in the new one; a unit retired (``on_exhausted = "retire"``)
    deletes its entries.

    One mutation adds 1 to one interval. A unit counts at most once per base interval (its
    further events there are clamped and reported, like a unit column's changes), so the
    change of one base interval has sensitivity 1 and the mutations of ``op`` alone can change
    it (:meth:`touched_by`)."""

    kind: ClassVar[str] = "events"

    name: str
    op: str
    where: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)
    before: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if self.op not in EVENT_OPS:
            raise ConfigError(
                f"query {self.name!r}: op must be one of {list(EVENT_OPS)} (the mutations "
                f"to count), got {self.op!r}"
            )
        if self.before and self.op != "update":
            raise ConfigError(
                f"query {self.name!r}: before filters the row before an update; an {self.op} "
                f"has one row, which where filters: move the filter to where"
            )
        object.__setattr__(self, "where", _freeze_where(self.where))  # type: ignore[arg-type]
        object.__setattr__(self, "before", _freeze_where(self.before))  # type: ignore[arg-type]

    @classmethod
    def from_toml(cls, table: TableReader, *, name: str, where: dict[str, Any]) -> Events:
        return cls(
            name=name,
            op=table.pop("op", types=(str,)),
            where=where,
            before=table.pop("before", {}, types=(dict,)),
        )

    @property
    def row_filters(
        self,
    ) -> tuple[Mapping[str, tuple[Scalar, ...]], Mapping[str, tuple[Scalar, ...]]]:
        """(filter of the row before, filter of the row after) the counted mutation: an insert
        has no row before, a delete no row after (an empty filter matches every row)."""
        empty: Mapping[str, tuple[Scalar, ...]] = MappingProxyType({})
        if self.op == "insert":
            return empty, self.where
        if self.op == "delete":
            return self.where, empty
        return self.before, self.where

    def touched_by(self) -> frozenset[str]:
        """The operations whose mutations can change the query's value in an interval."""
        return frozenset({self.op})

    def describe(self) -> str:
        text = f"count of {self.op}s" + _where_text(self.where)
        if self.before:
            text += " (row before:" + _where_text(self.before).removeprefix(" where") + ")"
        return text


Query = Count | Sum | Histogram | Events


def _exact(value: float) -> Fraction:
    """The decimal a user wrote (0.01 means 1/100, not the nearest binary float)."""
    return Fraction(Decimal(repr(value)))


def _where_text(where: Mapping[str, tuple[Scalar, ...]]) -> str:
    if not where:
        return ""
    parts = [f"{c} in {list(v)}" if len(v) > 1 else f"{c} = {v[0]!r}" for c, v in where.items()]
    return " where " + " and ".join(parts)
