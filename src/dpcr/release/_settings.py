"""The value types of a continual release: budget, noise, and the settings of the release.

:class:`ReleaseSettings` holds every setting of a release as a frozen value (the TOML
configuration is a thin translation into it), validated together; the steps of a run read it.
:class:`dpcr.release.ReleaseSettings` (the entry object) adds the operations.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid, TimeBounded
from dpcr.changelog import SourceConfig, check_unit_column
from dpcr.engines import EngineConfig
from dpcr.errors import ConfigError
from dpcr.plans import PLAN_TYPES, ReleasePlan, plan_identity
from dpcr.queries import (
    DERIVED_KINDS,
    MAX_KEYS,
    DerivedKind,
    Exhausted,
    GroupedSum,
    Histogram,
    Query,
)
from dpcr.release._consistency import Consistency, check_consistency
from dpcr.svt.rules import AlertRule

__all__ = [
    "OPERATOR_FOLDER",
    "Budget",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "Noise",
    "ReleaseSettings",
]

#: The operator-only folder inside ``output_dir`` (:mod:`dpcr.release._outputs`).
OPERATOR_FOLDER = "operator"

OnError = Literal["raise", "quarantine"]
#: What the planner minimises per query (:attr:`ReleaseSettings.objective`).
OBJECTIVES = ("worst", "final")
#: progress callback: (stage, done, total)
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """Total privacy budget per privacy unit over the whole (possibly unbounded) release, alert
    rules included."""

    epsilon: float
    delta: float = 0.0
    #: the δ of key selection (δ₂ of docs/privacy.md, section 12) when a query has open keys;
    #: None: the default (:attr:`ReleaseSettings.selection_delta`)
    selection_delta: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.epsilon, bool) or not isinstance(self.epsilon, int | float):
            raise ConfigError(f"privacy.epsilon must be a number, got {self.epsilon!r}")
        if not (1e-6 <= self.epsilon < 1e6):  # (NaN fails; a huge integer too, unconverted)
            raise ConfigError(
                f"privacy.epsilon must be a number in [1e-6, 1e6), got {self.epsilon!r} (below "
                "1e-6 the noise drowns every statistic; above 1e6 there is no privacy to state)"
            )
        if isinstance(self.delta, bool) or not isinstance(self.delta, int | float):
            raise ConfigError(f"privacy.delta must be a number, got {self.delta!r}")
        if not 0 <= self.delta < 1:
            raise ConfigError(f"privacy.delta must be in [0, 1), got {self.delta!r}")
        sel = self.selection_delta
        if sel is not None and (
            isinstance(sel, bool) or not isinstance(sel, int | float) or not 0 < sel < 1
        ):
            raise ConfigError(
                f"privacy.selection_delta must be a number in (0, 1), got {sel!r}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscreteLaplace:
    """Exact discrete Laplace noise (pure ε-DP), calibrated to the plan's budget shares."""

    name: ClassVar[str] = "laplace"


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscreteGaussian:
    """Exact discrete Gaussian noise (zCDP; needs ``Budget.delta > 0``), calibrated so that the
    tightest correct accountant states at most the budget."""

    name: ClassVar[str] = "gaussian"


Noise = DiscreteLaplace | DiscreteGaussian
NOISES: dict[str, Noise] = {"laplace": DiscreteLaplace(), "gaussian": DiscreteGaussian()}


def _quiet(stage: str, done: int, total: int) -> None:
    return None


#: What bounding does with a unit once it drops one of its mutations (docs/privacy.md, section 10).
ON_EXHAUSTED = ("freeze", "retire")


def _query_identity(query: Query) -> str:
    """The text a fingerprint binds for a query. A histogram's ``unknown = "drop"`` (values
    outside the keys contribute nothing) releases exactly what ``"error"`` released when it did
    not stop the run, so both are written as ``"error"``: stores written before "drop" became
    the default keep working."""
    text = repr(query)
    if isinstance(query, Histogram) and not query.open:  # (as before open keys existed)
        text = text.replace(", open=False)", ")", 1)
    if getattr(query, "unknown", None) == "drop":
        text = text.replace("unknown='drop'", "unknown='error'", 1)
    return text


def check_derived(derived: Sequence[DerivedKind], queries: Sequence[Query], plan_kind: str) -> None:
    """Each derived statistic is of a known kind, named apart from every query, and reads
    queries of the kinds it needs (:meth:`~dpcr.queries.DerivedKind.check`)."""
    names = {q.name for q in queries}
    for d in derived:
        if not isinstance(d, tuple(DERIVED_KINDS.values())):
            raise ConfigError(
                f"derived statistics must be {' or '.join(DERIVED_KINDS)} values "
                f"(dpcr.queries), got {d!r}"
            )
        if d.name in names:
            raise ConfigError(f"query names must be distinct, got {d.name!r} twice")
        names.add(d.name)
        d.check({q.name: q for q in queries}, plan_kind)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseSettings:
    """The settings of a continual release: where the changelog comes from, whose privacy is
    protected (``unit``: ``"entry"`` or a column naming the privacy unit), how entries may
    mutate, the plan, the statistics, the budget, the noise and where released values are kept.

    ``queries`` share the budget by ``weights`` (default: equally; ``"auto"``: the planner splits
    it, :mod:`dpcr.release._auto`, and ``split`` says so). ``store`` defaults to
    ``output_dir / "store.sqlite"``. ``on_error``: ``"quarantine"`` (default: a malformed record
    is set aside and counted, so one unit's data can never stop a release) or ``"raise"`` (stop at
    the first malformed record: for developing a source, not for releases). ``until`` (µs, not
    in the future) is the public clock: every interval ending at or before it is closed; without
    it the wall clock at the start of a run. The data never close an interval. ``engine``: where
    the changelog is aggregated (:class:`~dpcr.engines.EngineConfig`; DuckDB by default, Spark
    for changelogs beyond one machine); every engine gives the same results, so it is no part of
    the :meth:`fingerprint`. ``on_exhausted``: ``"freeze"`` (default) keeps a unit whose mutations
    bounding drops in its last kept state; ``"retire"`` removes it from every statistic when its
    history is cut (docs/privacy.md, section 10). ``horizon``: the planning horizon of an
    open-ended release (predictions and the plan = "auto" choice; the chosen plan is what the
    fingerprint binds). ``objective``: what the plan = "auto" choice minimises.
    """

    source: SourceConfig
    constraint: Constraint
    plan: ReleasePlan
    queries: Sequence[Query]
    budget: Budget
    noise: Noise = field(default_factory=DiscreteLaplace)
    unit: str = "entry"
    weights: Sequence[float] | Literal["auto"] | None = None
    output_dir: Path = Path("out")
    store: Path | None = None
    on_error: OnError = "quarantine"
    until: int | None = None
    alerts: Sequence[AlertRule] = ()
    engine: EngineConfig = field(default_factory=EngineConfig)
    on_exhausted: str = "freeze"
    #: planning horizon (base intervals) of an open-ended release: predicted errors and the
    #: auto plan's choice look at this many intervals (None: the default, OPEN_HORIZON)
    horizon: int | None = None
    #: per query name: consistency post-processing (docs/uncertainty.md); part of the
    #: fingerprint, so what was published is never published differently
    consistency: Mapping[str, Consistency] = field(default_factory=dict)
    #: every run warns the operator when bounding drops more than this share of the mutations
    #: (operator diagnostics only: the share is exact, not DP; no part of the fingerprint)
    warn_dropped: float = 0.05
    #: what plan = "auto" minimises (:data:`OBJECTIVES`): each query's worst running-value std
    #: over the horizon ("worst"), or its std at the horizon ("final"); the chosen plan is what
    #: the fingerprint binds
    objective: str = "worst"
    #: statistics computed from the released values of ``queries`` only (post-processing, no
    #: budget: :data:`dpcr.queries.DERIVED_KINDS`), published beside them; part of the
    #: fingerprint, so what was published is never published differently
    derived: Sequence[DerivedKind] = ()
    #: how ``weights`` were set: "given" (by the user, or equal by default) or "auto" (chosen by
    #: the planner for ``weights = "auto"``; the weights themselves are what the fingerprint binds)
    split: str = "given"

    def __post_init__(self) -> None:
        from dpcr.timeutil import as_instant

        queries = tuple(self.queries)
        object.__setattr__(self, "queries", queries)
        object.__setattr__(self, "alerts", tuple(self.alerts))
        if not queries:
            raise ConfigError("declare at least one query")
        for q in queries:
            if not isinstance(q, Query):
                raise ConfigError(
                    f"queries must be Count, Sum, Histogram or Events values, got {q!r}"
                )
        names = [q.name for q in queries]
        if len(set(names)) != len(names):
            raise ConfigError(f"query names must be distinct, got {names}")
        keys = sum(len(q.keys) for q in queries)
        if keys > MAX_KEYS:
            raise ConfigError(
                f"the queries declare {keys:,} keys together, more than {MAX_KEYS:,}; group "
                "values into fewer keys, or split the queries over several configurations"
            )
        if isinstance(self.weights, str):
            raise ConfigError(
                "weights = 'auto' is resolved by dpcr.ContinualRelease (the planner); give "
                "one number per query here"
            )
        if self.split not in ("given", "auto"):
            raise ConfigError(f"split must be 'given' or 'auto', got {self.split!r}")
        weights = (1.0,) * len(queries) if self.weights is None else tuple(self.weights)
        if len(weights) != len(queries) or not all(
            isinstance(w, int | float) and not isinstance(w, bool) and 1e-6 <= w <= 1e6
            for w in weights
        ):
            raise ConfigError(
                f"weights must be one number from 1e-6 to 1e6 per query, got {self.weights!r}"
            )
        object.__setattr__(self, "weights", tuple(float(w) for w in weights))
        if not isinstance(self.plan, tuple(PLAN_TYPES.values())):
            raise ConfigError(
                f"plan must be one of {', '.join(t.__name__ for t in PLAN_TYPES.values())}, "
                f"got {self.plan!r}"
            )
        if not isinstance(self.constraint, AtMostK | TimeBounded | Hybrid):
            raise ConfigError(
                f"constraint must be AtMostK, TimeBounded, a StateMachine or Hybrid, "
                f"got {self.constraint!r}"
            )
        if not isinstance(self.budget, Budget):
            raise ConfigError(f"budget must be a dpcr.Budget, got {self.budget!r}")
        if not isinstance(self.noise, DiscreteLaplace | DiscreteGaussian):
            raise ConfigError(
                f"noise must be dpcr.DiscreteLaplace() or dpcr.DiscreteGaussian(), "
                f"got {self.noise!r}"
            )
        if self.noise.name == "gaussian" and self.budget.delta <= 0:
            raise ConfigError("the gaussian mechanism needs privacy.delta > 0 (e.g. 1e-6)")
        if self.noise.name not in self.plan.mechanisms:
            raise ConfigError(
                f"plan {self.plan.kind!r} adds "
                f"{' or '.join(m.capitalize() for m in self.plan.mechanisms)} noise only: "
                + (
                    "set privacy.mechanism = 'gaussian' and privacy.delta > 0 (e.g. 1e-6), or "
                    "use plan = 'tree' for Laplace"
                    if self.plan.mechanisms == ("gaussian",)
                    else "choose another noise"
                )
            )
        if self.on_error not in ("raise", "quarantine"):
            raise ConfigError(
                f"output.on_error must be one of ['raise', 'quarantine'], got {self.on_error!r}"
            )
        if not isinstance(self.unit, str) or not self.unit:
            raise ConfigError(f"unit must be 'entry' or a column name, got {self.unit!r}")
        if self.unit != "entry":
            check_unit_column(self.unit)  # refused by `dpcr plan`, as by every load path
        object.__setattr__(self, "output_dir", Path(self.output_dir))
        if self.store is not None:
            object.__setattr__(self, "store", Path(self.store))
        if self.until is not None:
            object.__setattr__(self, "until", as_instant(self.until, "until"))
        if not isinstance(self.engine, EngineConfig):
            raise ConfigError(
                f"engine must be a dpcr.engines.EngineConfig (name 'duckdb' or 'spark'), "
                f"got {self.engine!r}"
            )
        if self.on_exhausted not in ON_EXHAUSTED:
            raise ConfigError(
                f"constraint.on_exhausted must be 'freeze' (a unit whose mutations are dropped "
                f"stays in its last kept state) or 'retire' (it leaves every statistic when its "
                f"history is cut; docs/privacy.md, section 10), got {self.on_exhausted!r}"
            )
        if self.objective not in OBJECTIVES:
            raise ConfigError(
                f"release.objective must be 'worst' (the worst running-value std over the "
                f"horizon) or 'final' (the std at the horizon), got {self.objective!r}"
            )
        if self.engine.name == "spark" and (
            self.on_exhausted == "retire" or any(isinstance(q, Exhausted) for q in queries)
        ):
            raise ConfigError(
                'on_exhausted = "retire" and kind = "exhausted" queries run on the DuckDB engine '
                'only; remove [engine] name = "spark"'
            )
        if isinstance(self.warn_dropped, bool) or not isinstance(self.warn_dropped, int | float) \
                or not 0 <= self.warn_dropped <= 1:  # fmt: skip
            raise ConfigError(
                f"constraint.warn_dropped must be a share from 0 to 1 (e.g. 0.05: warn when "
                f"bounding drops more than 5 % of the mutations), got {self.warn_dropped!r}"
            )
        from dpcr.svt.rules import check_alerts

        check_alerts(self.alerts, queries, self.owner)
        object.__setattr__(self, "consistency", dict(self.consistency))
        check_consistency(self.consistency, queries, self.plan.kind)
        object.__setattr__(self, "derived", tuple(self.derived))
        check_derived(self.derived, queries, self.plan.kind)
        self._check_grouped()
        self._check_open_keys()

    def _check_grouped(self) -> None:
        """An open grouped sum follows an open histogram of its ``by`` column with the same
        ``where`` and declared keys (so with the same candidate keys: docs/privacy.md, section
        12b)."""
        grouped = [q for q in self.queries if isinstance(q, GroupedSum)]
        by_name = {q.name: q for q in self.queries}
        for q in grouped:
            if not q.open:
                continue
            h = by_name.get(q.keys_from or "")
            if not (isinstance(h, Histogram) and h.open and h.column == q.by
                    and dict(h.where) == dict(q.where) and h.keys == q.keys):  # fmt: skip
                raise ConfigError(
                    f"query {q.name!r}: keys_from = {q.keys_from!r} must name an open histogram "
                    f"(open = true) of column {q.by!r} with the same where and keys as "
                    f"{q.name!r}"
                )

    def _check_open_keys(self) -> None:
        """Open keys (docs/privacy.md, section 12) need δ > 0, a mutation cap per unit (the
        number of keys one unit alone can create) and a plan with an end (the threshold is set
        over a finite horizon)."""
        open_ = [q.name for q in self.open_queries]
        if not open_:
            return
        first = open_[0]
        if self.budget.delta <= 0:
            raise ConfigError(
                f"query {first!r} has open keys: a key one unit alone holds is published with "
                "probability at most δ, so set privacy.delta > 0 (e.g. 1e-6)"
            )
        classes = (
            self.constraint.all_classes()
            if isinstance(self.constraint, Hybrid)
            else {"all": self.constraint}
        )
        if any(isinstance(c, TimeBounded) for c in classes.values()):
            raise ConfigError(
                f"query {first!r} has open keys: a time bound alone lets one unit create any "
                "number of keys; use a constraint with a mutation cap (k = ...) or a state machine"
            )
        if self.plan.schedule().release_count() is None:
            raise ConfigError(
                f"query {first!r} has open keys: its threshold is set over the plan's releases, "
                "so the plan needs an end (plan end = ...)"
            )
        sel, room = self.selection_delta, self.budget.delta * math.exp(-self.budget.epsilon)
        gaussian = self.noise.name == "gaussian"
        if sel > room or (sel >= room and gaussian):
            raise ConfigError(
                f"privacy.selection_delta = {sel:.3g} leaves no δ for the release: e^ε · "
                f"selection_delta must be below privacy.delta = {self.budget.delta:.3g} "
                f"({'below' if gaussian else 'at most'} {room:.3g} here)"
            )

    # --- derived settings -----------------------------------------------------------------

    @property
    def open_queries(self) -> tuple[Query, ...]:
        """The queries with open keys (a histogram with ``open = true``): keys the data shows
        are published once their noisy running value passes a threshold."""
        return tuple(q for q in self.queries if getattr(q, "open", False))

    @property
    def selecting_queries(self) -> tuple[Query, ...]:
        """The open queries that select their own keys (open histograms); an open grouped sum
        publishes the keys of the histogram it names (``keys_from``) and spends no δ₂."""
        return tuple(q for q in self.open_queries if isinstance(q, Histogram))

    @property
    def selection_delta(self) -> float:
        """δ₂, the probability bound of publishing any key one unit alone holds, over all
        open queries and the whole release (docs/privacy.md, section 12): the budget's
        ``selection_delta``, by default (all but 1e-9 of) δ·e^(-ε) under Laplace noise (whose
        release is pure) and half of it under Gaussian noise; 0 without open queries."""
        if not self.open_queries:
            return 0.0
        given = self.budget.selection_delta
        if given is not None:
            return float(given)
        # (Laplace: all but 1e-9 of it, so that the stated δ, rounded up, stays within budget)
        share = 1 - 1e-9 if self.noise.name == "laplace" else 0.5
        return share * self.budget.delta * math.exp(-self.budget.epsilon)

    @property
    def release_delta(self) -> float:
        """The δ the noise is calibrated to and the privacy filter checks: the budget's δ less
        what key selection can spend, e^ε·δ₂ (the whole release is then (ε, δ₁ + e^ε·δ₂) with
        δ₁ <= this; docs/privacy.md, section 12)."""
        sel = self.selection_delta
        if not sel:
            return float(self.budget.delta)
        if self.noise.name == "laplace" and self.budget.selection_delta is None:
            return 0.0  # (all of δ is the selection's; the Laplace release is pure)
        return max(0.0, float(self.budget.delta) - math.exp(self.budget.epsilon) * sel)

    @property
    def unit_column(self) -> str | None:
        """The column naming the privacy unit, or None when the unit is the entry."""
        return None if self.unit == "entry" else self.unit

    @property
    def owner(self) -> str | None:
        """What names the privacy unit when it may own several entries: the unit column, or the
        source's record-level ``unit`` field; None when the unit is the entry. Such units are
        clamped per base interval and calibrated for it (docs/privacy.md, 7d)."""
        if self.unit_column is not None:
            return self.unit_column
        field_name = getattr(self.source, "unit", None)
        return field_name if isinstance(field_name, str) and field_name else None

    @property
    def query_weights(self) -> tuple[float, ...]:
        """One weight per query (after ``__post_init__`` and any ``"auto"`` split)."""
        w = self.weights
        return tuple(w) if w is not None and not isinstance(w, str) else (1.0,) * len(
            self.queries)

    @property
    def mechanism(self) -> str:
        """``"laplace"`` or ``"gaussian"``."""
        return self.noise.name

    @property
    def store_path(self) -> Path:
        return self.store if self.store is not None else self.output_dir / "store.sqlite"

    @property
    def quarantine_path(self) -> Path:
        """Operator-only (raw records that failed validation), in the operator folder
        (:func:`~dpcr.release._outputs.operator_dir`)."""
        return Path(self.output_dir) / OPERATOR_FOLDER / "quarantine.jsonl"

    def fingerprint(self) -> str:
        """Hash of everything that fixes what a released value means and what it cost.

        A store is bound to one fingerprint: releasing under a changed plan, constraint, query
        set, mechanism or budget into the same store would break the accounting of what is
        already public.
        """
        body: dict[str, Any] = {
            "unit": self.unit_column,
            "constraint": repr(self.constraint),
            "plan": plan_identity(self.plan),
            "queries": [_query_identity(q) for q in self.queries],
            "weights": list(self.weights or ()),
            "mechanism": self.mechanism,
            "budget": [self.budget.epsilon, self.budget.delta]
            + ([] if self.budget.selection_delta is None else [self.budget.selection_delta]),
        }
        if self.alerts:  # absent from older fingerprints, so their stores stay valid
            body["alerts"] = [repr(a) for a in self.alerts]
        if self.on_exhausted != "freeze":  # likewise
            body["on_exhausted"] = self.on_exhausted
        if self.consistency:  # likewise: published values must never change
            body["consistency"] = {k: repr(v) for k, v in sorted(self.consistency.items())}
        if self.derived:  # likewise
            body["derived"] = [repr(d) for d in self.derived]
        text = json.dumps(body, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _at(self, until: object) -> Self:
        """These settings with the public clock at ``until`` (unchanged when None)."""
        from dataclasses import replace

        from dpcr.timeutil import as_instant

        return self if until is None else replace(self, until=as_instant(until, "until"))
