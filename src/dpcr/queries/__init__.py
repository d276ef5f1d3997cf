"""Linear queries over the live rows, released as per-interval changes (ΔLQ, paper 2.9, 4.4.1).

A linear query is Σ_rows f(row). Released per interval is its change: for each mutation of an
entry, f(after) − f(previous state), with f(null) = 0 for an absent row. With f bounded to
[a, b], one entry's change over an interval lies in [lo − hi, hi − lo] with lo = min(a, 0) and
hi = max(b, 0), so the sensitivity is hi − lo = max(b, 0) − min(a, 0) (not |b − a|: the source
paper's value is right only when a ≤ 0 ≤ b).

* :class:`Count` -- f(row) = 1 if the row matches ``where`` else 0. L1 = L2 = 1.
* :class:`Sum` -- f(row) = clamp(row[column], lower, upper) on a grid of step ``grid`` (released
  as integers k meaning k·grid); missing, non-numeric, NaN and infinite values count as 0.
* :class:`Exhausted` -- a count of the privacy units whose mutations bounding drops, each by the
  interval of its first dropped mutation (the visible size of bounding bias). L1 = L2 = 1.
* :class:`Histogram` -- one count per key of ``column``: f(row) = e_key. An entry moving from one
  key to another changes two bins: L1 = 2, L2 = √2. A value outside the keys counts nothing by
  default (``unknown = "drop"``; ``"other"`` adds a key for them, ``"error"`` stops).

* :class:`GroupedSum` -- ``kind = "sum"`` with ``by``: one clamped sum per key of ``by``. A
  row's value may move to another key: L1 = max(2M, hi − lo), L2² = max(2M², (hi − lo)²) with
  M = max(|lo|, |hi|) (:func:`grouped_bounds`).
* :class:`SumSquares` -- f(row) = x² with x the clamped, grid-rounded value a :class:`Sum` of
  the same column reads (released in steps of grid²). L1 = max(a², b²) in steps (erratum 3).

Event queries count mutations instead of tracking live rows:

* :class:`Events` -- the number of kept mutations of one ``op`` (insert, update or delete) whose
  row matches ``where`` (an update's row after; ``before`` filters its row before) in each
  interval; each unit counts at most once per base interval. L1 = L2 = 1.

Numbers are read as JSON numbers (or numeric text); NaN and ±inf count as missing: a sum adds 0
for them and they match no ``where`` clause.

Every kind implements :class:`QueryKind` (its keys, sensitivities, the ops that change it, its
grid, its description, its TOML), and :data:`QUERY_KINDS` maps each TOML ``kind`` to it: a new
kind is a module and an entry there (with its contract test in tests/queries/).
:data:`DERIVED_KINDS` holds the statistics computed from released values only (post-processing:
:class:`Mean`, :class:`Variance`), which take the ``[[query]]`` tables of their kinds too.
"""

from dpcr.queries._kind import DerivedKind, NumberContribution, QueryKind
from dpcr.queries._kind import Scalar as Scalar
from dpcr.queries._moments import Mean, Variance
from dpcr.queries._queries import (
    EVENT_OPS,
    MAX_KEYS,
    Count,
    Events,
    Exhausted,
    GroupedSum,
    Histogram,
    Query,
    Sum,
    grouped_bounds,
)
from dpcr.queries._squares import SumSquares

#: Each ``[[query]]`` ``kind`` of the TOML and the type that reads it (``from_toml``).
QUERY_KINDS: dict[str, type[Count | Sum | Histogram | Events]] = {
    k.kind: k for k in (Count, Sum, SumSquares, Histogram, Events, Exhausted)
}
#: Each ``[[query]]`` ``kind`` computed from other queries' released values (post-processing).
DERIVED_KINDS: dict[str, type[Mean | Variance]] = {k.kind: k for k in (Mean, Variance)}


def has_open_keys(query: object) -> bool:
    """Whether ``query`` has open keys (an open histogram or grouped sum): its values have a
    column per candidate key, and the engines' f of a row is text."""
    return isinstance(query, Histogram | GroupedSum) and query.open

__all__ = [
    "DERIVED_KINDS", "EVENT_OPS", "MAX_KEYS", "QUERY_KINDS", "Count", "DerivedKind", "Events",
    "Exhausted", "GroupedSum", "Histogram", "Mean", "NumberContribution", "Query", "QueryKind",
    "Sum", "SumSquares", "Variance", "grouped_bounds", "has_open_keys",
]  # fmt: skip
