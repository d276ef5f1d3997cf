"""Alert rules (``[[alerts]]`` in the config) and their sensitivity with respect to neighbouring
changelogs (one entry's whole mutation history added or removed); docs/alerts.md.

A rule watches one ``[[query]]`` statistic, either its exact *running* value (the sum of all
per-interval changes so far) or the change over a *window* of the last w intervals, and feeds one
value per key per new interval to a sparse vector (Sparse, or NumericSparse with ``numeric``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpcr.errors import ConfigError
from dpcr.queries import Count, Events, Histogram, Query, Sum
from dpcr.tomltable import unknown_keys

# The sparse vector is imported by the functions that make one: a release without alerts (every
# configuration reads this module) imports none.
if TYPE_CHECKING:
    from dpcr.svt._accuracy import Accuracy
    from dpcr.svt._sparse import SparseParameters, SparseVector

__all__ = [
    "AlertRule",
    "check_alerts",
    "parse_alerts",
    "rule_accuracy",
    "rule_parameters",
    "rule_sensitivity",
]

WHAT = ("running", "window")
#: The most ⊤ answers a rule may allow (beyond, a rule is a release, not an alert).
MAX_CUTOFF = 10**6
#: The largest |threshold| (statistic's units), as for a sum's bounds.
MAX_THRESHOLD = 1e15


def _number(value: object) -> bool:
    """A TOML or Python number (not a boolean: ``true`` is no threshold)."""
    return isinstance(value, int | float) and not isinstance(value, bool)

ACCURACY_BETA = 0.05
OPEN_ENDED_INTERVALS = 365  # accuracy horizon reported for an open-ended plan


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertRule:
    """One ``[[alerts]]`` table: alert when ``statistic`` (``what`` = running value, or change over
    the last ``window`` intervals) crosses ``threshold`` (in the statistic's units), at most
    ``cutoff`` times, for a budget of (``epsilon``, ``delta``) on top of the release's."""

    name: str
    statistic: str
    what: str
    threshold: float
    cutoff: int
    epsilon: float
    delta: float = 0.0
    window: int | None = None
    numeric: bool = False

    def __post_init__(self) -> None:
        where = f"alert {self.name!r}"
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"alert name must be letters, digits, '_' or '-', got {self.name!r}")
        if self.what not in WHAT:
            raise ConfigError(f"{where}: what must be 'running' or 'window', got {self.what!r}")
        if self.what == "window":
            if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
                raise ConfigError(
                    f"{where}: what = 'window' needs window = W (intervals, >= 1), "
                    f"got {self.window!r}"
                )
        elif self.window is not None:
            raise ConfigError(f"{where}: window is only for what = 'window'")
        if (
            isinstance(self.cutoff, bool)
            or not isinstance(self.cutoff, int)
            or not 1 <= self.cutoff <= MAX_CUTOFF
        ):
            raise ConfigError(
                f"{where}: cutoff must be an integer from 1 to {MAX_CUTOFF:,}, got {self.cutoff!r}"
            )
        if not (_number(self.epsilon) and 0 < self.epsilon < 1e6):
            raise ConfigError(
                f"{where}: epsilon must be a number in (0, 1e6), got {self.epsilon!r}"
            )
        if not (_number(self.delta) and 0 <= self.delta < 1):
            raise ConfigError(f"{where}: delta must be a number in [0, 1), got {self.delta!r}")
        if not (_number(self.threshold) and -MAX_THRESHOLD <= self.threshold <= MAX_THRESHOLD):
            raise ConfigError(
                f"{where}: threshold must be a number from -1e15 to 1e15 (in the statistic's "
                f"units), got {self.threshold!r}"
            )

    def describe(self) -> str:
        what = "running value" if self.what == "running" else f"change over {self.window} intervals"
        kind = "NumericSparse" if self.numeric else "Sparse"
        return f"{kind}: {self.statistic} {what} ≥ {self.threshold}, cutoff {self.cutoff}"


_KEYS = {
    "name",
    "statistic",
    "what",
    "window",
    "threshold",
    "cutoff",
    "epsilon",
    "delta",
    "numeric",
}


def parse_alerts(raw: Any, queries: Sequence[Query], unit: str | None) -> tuple[AlertRule, ...]:
    """Parse the ``[[alerts]]`` array; every rule is checked against the queries and the unit."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("declare alert rules as [[alerts]] tables")
    rules: list[AlertRule] = []
    for i, item in enumerate(raw, start=1):
        if not isinstance(item, Mapping):
            raise ConfigError(f"[[alerts]] #{i} must be a table")
        unknown = sorted(set(item) - _KEYS)
        if unknown:
            raise ConfigError(unknown_keys(f"[[alerts]] #{i}", unknown, _KEYS))
        for key in ("name", "statistic", "what", "threshold", "cutoff", "epsilon"):
            if key not in item:
                raise ConfigError(f"[[alerts]] #{i} is missing the key {key!r}")
        numeric = item.get("numeric", False)
        if not isinstance(numeric, bool):
            raise ConfigError(f"[[alerts]] #{i}: numeric must be true or false")
        for key in ("name", "statistic", "what"):
            if not isinstance(item[key], str):
                raise ConfigError(
                    f"[[alerts]] #{i}: {key} must be text (in quotes), got {item[key]!r}"
                )
        rule = AlertRule(
            name=item["name"],
            statistic=item["statistic"],
            what=item["what"],
            window=item.get("window"),
            threshold=item["threshold"],
            cutoff=item["cutoff"],
            epsilon=item["epsilon"],
            delta=item.get("delta", 0.0),
            numeric=numeric,
        )
        rules.append(rule)
    check_alerts(rules, queries, unit)
    return tuple(rules)


def check_alerts(rules: Sequence[AlertRule], queries: Sequence[Query], unit: str | None) -> None:
    """Every rule watches a declared statistic with a bounded sensitivity; names are distinct.
    Refused before any data is read."""
    for rule in rules:
        if not isinstance(rule, AlertRule):
            raise ConfigError(f"alerts must be dpcr.AlertRule values, got {rule!r}")
        if getattr(_query(rule, queries), "open", False):
            raise ConfigError(
                f"alert {rule.name!r}: statistic {rule.statistic!r} has open keys (an open "
                "histogram or grouped sum), which are not known in advance; watch a query "
                "with declared keys"
            )
        rule_sensitivity(rule, queries, unit)
    names = [r.name for r in rules]
    if len(set(names)) != len(names):
        raise ConfigError(f"alert names must be distinct, got {names}")


def _query(rule: AlertRule, queries: Sequence[Query]) -> Query:
    for q in queries:
        if q.name == rule.statistic:
            return q
    raise ConfigError(
        f"alert {rule.name!r}: statistic {rule.statistic!r} is not a [[query]] name "
        f"(have {[q.name for q in queries]})"
    )


def rule_sensitivity(rule: AlertRule, queries: Sequence[Query], unit: str | None) -> int:
    """Bound on |f(D) − f(D')| for every value the rule feeds to the sparse vector, in the query's
    integer steps, for changelogs D, D' differing in one entry's whole history.

    One entry's contribution to a running value is f(its current kept row) ∈ [min(a,0), max(b,0)]
    (f(null) = 0), so removing it moves the value by at most max(b,0) − min(a,0): 1 for a count
    and for each histogram bin, the clamped range for a sum. A window change is the difference
    of two such contributions, v(t) − v(t−w), which lies in the same interval ±(max(b,0) −
    min(a,0)): the same bound. When the privacy unit is a column other than the entry, one unit
    owns any number of entries over time and its running contribution is a sum over all of them,
    which no constraint on mutations bounds; such rules are refused.
    """
    query = _query(rule, queries)
    if unit is not None:
        raise ConfigError(
            f"alert {rule.name!r}: the privacy unit is the column {unit!r}, not the entry. One "
            f"{unit} can own any number of entries over time, so its contribution to a running "
            "value or window is a sum over all of them and has no bound; the sparse vector's "
            "guarantee needs a bounded sensitivity. Use unit = 'entry' for alerts."
        )
    if isinstance(query, Events):
        raise ConfigError(
            f"alert {rule.name!r}: {query.name!r} is an event query; one unit moves its running "
            "value or window by up to its number of events, which the sparse vector's "
            "sensitivity does not bound. Watch a count, sum or histogram instead"
        )
    if isinstance(query, Count | Histogram):
        return 1
    if isinstance(query, Sum):
        return int(query.l1_sensitivity) or 1
    raise ConfigError(f"alert {rule.name!r}: unsupported statistic kind {type(query).__name__}")


def threshold_steps(rule: AlertRule, query: Query) -> int:
    """The threshold in the query's integer steps: f·grid ≥ T ⇔ f ≥ ⌈T / grid⌉ for integer f."""
    exact = Fraction(Decimal(repr(rule.threshold)))
    return math.ceil(exact / query.unit_scale)


def rule_parameters(rule: AlertRule, queries: Sequence[Query], unit: str | None) -> SparseVector:
    from dpcr.svt._sparse import numeric_sparse, sparse

    query = _query(rule, queries)
    make = numeric_sparse if rule.numeric else sparse
    return make(
        threshold=threshold_steps(rule, query),
        cutoff=rule.cutoff,
        epsilon=rule.epsilon,
        delta=rule.delta,
        sensitivity=rule_sensitivity(rule, queries, unit),
    )


def rule_accuracy(params: SparseParameters, *, queries: int) -> Accuracy:
    from dpcr.svt._accuracy import accuracy

    return accuracy(params, queries=max(1, queries), beta=ACCURACY_BETA)
