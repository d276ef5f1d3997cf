"""The per-unit guarantee of a release made in layers, and the one privacy filter.

Every release plan publishes *mechanism instances* (a disjoint interval, a tree node, a window, a
whole factorization vector), each carrying one (composed) event, grouped in layers. How one privacy
unit meets them is the plan's :class:`Participation`, per class of the constraint: at most
``counts[l]`` instances of layer ``l``, and optionally (layer 0 of a disjoint release under a time
bound) one of a list of *runs* of consecutive instances (:func:`dpcr.plans.counts.reachable_runs`).
The plan computes these from its filters; accounting only composes.

A unit's loss is the composition of the instances it touches (generalized parallel composition,
paper Thm 2.2); the guarantee is the worst class (Thm 4.10). Per layer:

* the unit can meet all of them: their composition, exact;
* the instances are alike (same multiset of leaf mechanisms): ``count``-fold self-composition of
  one of them, exact;
* otherwise every split of ``count`` over the kinds of instance is composed exactly and the worst
  taken; past 256 candidates, the sum of the ``count`` largest values of each additive part of
  the cost (pure ε, zCDP ρ), stated as one pure-DP and one zCDP event -- an upper bound on every
  ``count``-subset;
* with runs and unlike instances: every maximal run is composed exactly and the worst taken.

The layers' parts, ``extra`` events every unit meets (alert rules) and a ``tail`` (the layers of an
open-ended tree not yet listed) are composed into one event whose stated guarantee
(:func:`~dpcr.accounting.accountants.stated_guarantee`: pure compositions by basic composition,
anything else by the tightest correct method) is the unit's.

>>> from fractions import Fraction
>>> from dpcr.accounting.events import DiscreteLaplaceEvent
>>> e = DiscreteLaplaceEvent(scale=Fraction(10), sensitivity=Fraction(1))     # ε = 0.1 each
>>> layered_guarantee([[e] * 8, [e] * 4], {"all": Participation(counts=(2, 2))}, delta=0.0)[0]
Guarantee(epsilon=0.4, delta=0.0, rho=0.02, method='basic')
>>> guard = PrivacyFilter(epsilon_budget=0.3, delta_budget=0.0)
>>> guard.check([[e] * 6], {"all": Participation(counts=(3,))}).epsilon   # any 3 of 6
0.30000000000000004
>>> guard.check([[e] * 6], {"all": Participation(counts=(4,))})
Traceback (most recent call last):
  ...
dpcr.errors.BudgetExhaustedError: these releases would bring the per-unit guarantee to ε = 0.4 ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import cast

from dpcr._lastused import LastUsed
from dpcr.accounting.composition import Guarantee, PrivacyCost, cost_of, round_up, worst_guarantee
from dpcr.accounting.events import (
    ComposedEvent,
    DpEvent,
    PureDpEvent,
    SelfComposedEvent,
    ZcdpEvent,
    exact_key,
)
from dpcr.errors import BudgetExhaustedError, ConfigError

__all__ = [
    "Participation",
    "PrivacyFilter",
    "PrivacyOdometer",
    "check_budget",
    "class_guarantee",
    "layered_guarantee",
    "tail_event",
    "with_selection",
]

_FIX = (
    "raise the budget, add more noise per release (a larger scale or sigma2), release fewer "
    "statistics per interval, or tighten the constraint (smaller k or bound)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Participation:
    """How one privacy unit of a class meets a layered release.

    ``counts[l]``: the most instances of layer ``l`` its kept mutations touch. ``runs``: when
    given, the layer-0 instances it touches are among one of these runs ``(i, j)`` (0-based,
    inclusive) of consecutive instances -- a refinement that is exact for unlike instances.
    """

    counts: tuple[int, ...]
    runs: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "counts", tuple(int(n) for n in self.counts))
        if any(n < 0 for n in self.counts):
            raise ConfigError(f"participation counts must be >= 0, got {self.counts}")
        if self.runs is not None:
            object.__setattr__(self, "runs", tuple((int(i), int(j)) for i, j in self.runs))

    @property
    def total(self) -> int:
        """The most instances the unit touches, over all layers."""
        return sum(self.counts)


def check_budget(epsilon_budget: float, delta_budget: float) -> None:
    """A budget is a finite ε > 0 and a δ in [0, 1); anything else is a ConfigError."""
    eps = epsilon_budget
    if (
        isinstance(eps, bool)
        or not isinstance(eps, int | float)
        or not (math.isfinite(eps) and eps > 0)
    ):
        raise ConfigError(f"epsilon_budget must be a finite number > 0, got {eps!r}")
    d = delta_budget
    if isinstance(d, bool) or not isinstance(d, int | float) or not 0 <= d < 1:
        raise ConfigError(f"delta_budget must be a number in [0, 1), got {d!r}; e.g. 1e-6")


def tail_event(*, share: Fraction, epsilon: Fraction | None = None,
               rho: Fraction | None = None) -> DpEvent:
    """An upper bound on layers that spend together at most ``share`` of ``epsilon`` (pure) or of
    ``rho`` (zCDP): one pure-DP or zCDP event of that size."""
    # exact rationals (cost_of reads them exactly), so shares that sum to the budget compose to
    # exactly the budget
    if epsilon is not None:
        return PureDpEvent(epsilon=cast(float, Fraction(epsilon) * share))
    if rho is not None:
        return ZcdpEvent(rho=cast(float, Fraction(rho) * share))
    raise ConfigError("a tail needs epsilon or rho")


def _signature(event: DpEvent) -> frozenset[tuple[object, int]]:
    from dpcr.accounting.accountants import flatten

    return frozenset(flatten(event).items())


def _top_bound(costs: Sequence[PrivacyCost], n: int) -> list[DpEvent]:
    """One pure and one zCDP event bounding every ``n``-subset of unlike instances."""
    eps = sum(sorted((c.pure_epsilon for c in costs), reverse=True)[:n], Fraction(0))
    rho = sum(sorted((c.rho for c in costs), reverse=True)[:n], Fraction(0))
    out: list[DpEvent] = []
    if eps > 0:
        out.append(PureDpEvent(epsilon=round_up(eps)))
    if rho > 0:
        out.append(ZcdpEvent(rho=round_up(rho)))
    return out


#: Most candidate compositions composed exactly for one class; beyond, the top-count bound.
_MAX_CANDIDATES = 256


def _count_vectors(sizes: Sequence[int], m: int) -> list[tuple[int, ...]]:
    """Every (c_g) with sum m and 0 <= c_g <= sizes[g], or [] when there are more than
    ``_MAX_CANDIDATES`` of them."""
    out: list[tuple[int, ...]] = []

    def walk(g: int, left: int, prefix: tuple[int, ...]) -> bool:
        if g == len(sizes) - 1:
            if left <= sizes[g]:
                out.append((*prefix, left))
            return len(out) <= _MAX_CANDIDATES
        rest = sum(sizes[g + 1 :])
        for c in range(max(0, left - rest), min(sizes[g], left) + 1):
            if not walk(g + 1, left - c, (*prefix, c)):
                return False
        return True

    return out if walk(0, m, ()) else []


def _distinct(events: Sequence[DpEvent]) -> list[DpEvent]:
    """The distinct objects of ``events`` (a plan repeats one event object per instance)."""
    if events and list(events).count(events[0]) == len(events):
        # every instance is that object or an equal one (list.count compares identity first:
        # a layer's instances, one object, take microseconds): one kind, validated alike
        return [events[0]]
    return list({id(e): e for e in events}.values())


def _kinds(events: Sequence[DpEvent]) -> tuple[list[int], list[DpEvent]]:
    """Instances grouped by kind (alike = the same multiset of leaf mechanisms): the kind of
    each instance, and one instance of each kind. Each distinct object is flattened once."""
    distinct = _distinct(events)
    if len(distinct) == 1:  # (a layer's instances share one event object: one kind)
        return [0] * len(events), distinct
    signature_of = {id(e): _signature(e) for e in distinct}
    index: dict[frozenset[tuple[object, int]], int] = {}
    kind_of: list[int] = []
    first: list[DpEvent] = []
    for e in events:
        k = index.setdefault(signature_of[id(e)], len(index))
        if k == len(first):
            first.append(e)
        kind_of.append(k)
    return kind_of, first


def _layer_parts(events: Sequence[DpEvent], n: int) -> list[list[DpEvent]]:
    """Candidate compositions of the instances one unit of count ``n`` meets in one layer; the
    worst of them is the unit's (every ``n``-subset is one of them, or is bounded by the only
    candidate)."""
    m = min(n, len(events))
    if m == 0:
        return [[]]
    kind_of, first = _kinds(events)
    sizes = [kind_of.count(k) for k in range(len(first))]
    if m == len(events):  # the unit may meet every instance: their exact composition
        return [[SelfComposedEvent(event=e, count=n) for e, n in zip(first, sizes, strict=True)]]
    if len(first) == 1:
        return [[SelfComposedEvent(event=first[0], count=m)]]
    vectors = _count_vectors(sizes, m)
    if not vectors:
        return [_top_bound([cost_of(e) for e in events], m)]
    return [
        [SelfComposedEvent(event=first[k], count=c) for k, c in enumerate(v) if c]
        for v in vectors
    ]


def _run_candidates(events: Sequence[DpEvent], runs: Sequence[tuple[int, int]]) -> list[DpEvent]:
    """Per maximal run (as a count vector over kinds of instance), its exact composition."""
    group, first = _kinds(events)
    vectors: set[tuple[int, ...]] = set()
    n = len(events)
    for i, j in runs:
        if i >= n:
            continue
        counts = [0] * len(first)
        for g in group[i : min(j, n - 1) + 1]:
            counts[g] += 1
        vectors.add(tuple(counts))
    maximal = [
        v for v in vectors
        if not any(o != v and all(a <= b for a, b in zip(v, o, strict=True)) for o in vectors)
    ]
    return [
        ComposedEvent(
            events=tuple(SelfComposedEvent(event=first[g], count=c) for g, c in enumerate(v) if c)
        )
        for v in maximal
    ]


def class_guarantee(
    layer_events: Sequence[Sequence[DpEvent]],
    participation: Participation,
    *,
    delta: float,
    extra: Sequence[DpEvent] = (),
    tail: DpEvent | None = None,
) -> Guarantee:
    """The stated guarantee of the worst unit of one class (see the module docstring)."""
    from dpcr.accounting.accountants import stated_guarantee

    for events in layer_events:
        for e in _distinct(events):
            _cost(e)  # validates every event before anything is composed
    if len(participation.counts) < len(layer_events) and any(
        layer_events[i] for i in range(len(participation.counts), len(layer_events))
    ):
        raise ConfigError(
            f"{len(participation.counts)} layer counts for {len(layer_events)} layers of events"
        )
    common: list[DpEvent] = list(extra) + ([tail] if tail is not None else [])
    candidates: list[list[DpEvent]] = [[]]
    for layer, events in enumerate(layer_events):
        n = participation.counts[layer] if layer < len(participation.counts) else 0
        parts: list[list[DpEvent]]
        if layer == 0 and participation.runs is not None and len(_kinds(events)[1]) > 1:
            parts = [[c] for c in _run_candidates(events, participation.runs)] or [[]]
        else:
            parts = _layer_parts(events, n)
        if len(candidates) * len(parts) > _MAX_CANDIDATES:
            parts = [_top_bound([cost_of(e) for e in events], min(n, len(events)))]
        candidates = [c + p for c in candidates for p in parts]
    guarantees = [
        stated_guarantee(ComposedEvent(events=tuple(c + common)), delta=delta) for c in candidates
    ]
    return worst_guarantee(guarantees)


def layered_guarantee(
    layer_events: Sequence[Sequence[DpEvent]],
    participation: Mapping[str, Participation],
    *,
    delta: float,
    extra: Sequence[DpEvent] = (),
    tail: DpEvent | None = None,
) -> tuple[Guarantee, dict[str, Guarantee]]:
    """The guarantee (worst class) and each class's."""
    if not participation:
        raise ConfigError("no constraint class to account for")
    per_class = {
        name: class_guarantee(layer_events, p, delta=delta, extra=extra, tail=tail)
        for name, p in participation.items()
    }
    return worst_guarantee(list(per_class.values())), per_class


def _within(value: float, budget: float) -> bool:
    return value <= _budget_bound(repr(float(budget)))


@lru_cache(maxsize=64)
def _budget_bound(budget: str) -> float:
    """The budget written ``budget`` (a float's ``repr``) as a decimal number, rounded up."""
    return round_up(Fraction(budget))


def _fmt(value: float, budget: float) -> tuple[str, str]:
    a, b = f"{value:.6g}", f"{budget:.6g}"
    return (repr(value), repr(budget)) if a == b else (a, b)


def _has_zcdp(events: Sequence[DpEvent]) -> bool:
    """Whether any event has a zCDP part (each distinct event object costed once: a plan's
    nodes share a handful of composed events)."""
    distinct = dict(zip(map(id, events), events, strict=True)).values()
    return any(_cost(e).rho > 0 for e in distinct)


#: The cost of each event :func:`_cost` was asked for, by its :func:`exact_key`: a continual
#: release's filter meets the same few events at every step. The 1,024 used last are kept; an
#: event that is refused leaves nothing.
_COSTS: LastUsed[tuple[object, ...], PrivacyCost] = LastUsed(1024)


def _cost(event: DpEvent) -> PrivacyCost:
    """:func:`cost_of` of ``event`` (raises as it does), remembered by the event's
    :func:`exact_key`."""
    key = exact_key(event)
    if key is None:
        return cost_of(event)
    return _COSTS.made(key, lambda: cost_of(event))


@dataclass(frozen=True, slots=True, kw_only=True)
class PrivacyFilter:
    """Refuses any release that would make the per-unit guarantee exceed the budget.

    Holds configuration only; :meth:`check` is called with every released and about-to-be
    released event BEFORE any value is drawn or written, and raises (changing nothing) when over
    budget. The budget is read as the decimal number written (``0.3`` is 3/10) and compared with
    the stated guarantee, rounded up to a float.
    """

    epsilon_budget: float
    delta_budget: float

    def __post_init__(self) -> None:
        check_budget(self.epsilon_budget, self.delta_budget)

    def check(
        self,
        layer_events: Sequence[Sequence[DpEvent]],
        participation: Mapping[str, Participation],
        *,
        extra: Sequence[DpEvent] = (),
        tail: DpEvent | None = None,
        what: str = "these releases",
    ) -> Guarantee:
        everything = [e for events in layer_events for e in events] + list(extra)
        if tail is not None:
            everything.append(tail)
        if self.delta_budget == 0 and _has_zcdp(everything):
            raise BudgetExhaustedError(
                f"{what}: Gaussian (zCDP) releases need a delta budget > 0; set privacy.delta "
                "(e.g. 1e-6) or use Laplace noise"
            )
        g, _ = layered_guarantee(
            layer_events, participation, delta=self.delta_budget, extra=extra, tail=tail
        )
        if not (_within(g.epsilon, self.epsilon_budget) and _within(g.delta, self.delta_budget)):
            eps, budget = _fmt(g.epsilon, self.epsilon_budget)
            raise BudgetExhaustedError(
                f"{what} would bring the per-unit guarantee to ε = {eps} (δ = {g.delta:.3g}), "
                f"over the budget ε = {budget} (δ = {self.delta_budget:.3g}); nothing was "
                f"released. To fix: {_FIX}"
            )
        return g


class PrivacyOdometer:
    """The per-unit loss of the instances released so far.

    ``record(layer, *events)`` adds instances of ``layer`` (validated first; a rejected event
    changes nothing) and returns None; ``guarantee()`` reports the loss so far at ``delta``.
    """

    __slots__ = ("_delta", "_layers", "_participation")

    def __init__(self, *, participation: Mapping[str, Participation], delta: float) -> None:
        if not participation:
            raise ConfigError("no constraint class to account for")
        if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 <= delta < 1:
            raise ConfigError(f"delta must be a number in [0, 1), got {delta!r}")
        self._participation = dict(participation)
        self._delta = float(delta)
        self._layers: list[tuple[DpEvent, ...]] = []

    @property
    def released(self) -> tuple[tuple[DpEvent, ...], ...]:
        """The events recorded so far, per layer."""
        return tuple(self._layers)

    def record(self, layer: int, *events: DpEvent) -> None:
        if layer < 0:
            raise ConfigError(f"layer must be >= 0, got {layer}")
        for event in events:
            cost_of(event)
        if self._delta == 0 and _has_zcdp(events):
            raise ConfigError(
                "Gaussian (zCDP) events need delta > 0 to report (ε, δ); create the odometer "
                "with delta (e.g. 1e-6)"
            )
        while len(self._layers) <= layer:
            self._layers.append(())
        self._layers[layer] = self._layers[layer] + tuple(events)

    def guarantee(self) -> Guarantee:
        return layered_guarantee(self._layers, self._participation, delta=self._delta)[0]

    def __repr__(self) -> str:
        sizes = [len(x) for x in self._layers]
        return f"PrivacyOdometer(delta={self._delta!r}, instances per layer={sizes})"


def with_selection(guarantee: Guarantee, selection_delta: float) -> Guarantee:
    """The guarantee of a release whose open keys are selected by thresholding its own noisy
    values, from the guarantee of the same release over the keys the neighbour without the unit
    also holds, ``(ε, δ₁)``, and the probability ``δ₂`` that any key only the unit holds is ever
    published: ``(ε, δ₁ + e^ε·δ₂)`` (docs/privacy.md, section 12; ρ is dropped: a δ part is not
    zCDP). ``selection_delta`` 0 returns ``guarantee`` unchanged.

    >>> g = Guarantee(epsilon=1.0, delta=0.0, rho=None, method="basic")
    >>> with_selection(g, 1e-7).describe()
    '(ε = 1, δ = 2.72e-07)-DP [basic+selection]'
    """
    if not selection_delta:
        return guarantee
    if not 0 < selection_delta < 1:
        raise ConfigError(f"selection delta must be in (0, 1), got {selection_delta!r}")
    # e^ε and the sum rounded up (1e-12 relative covers math.exp's and the sum's rounding)
    delta = (guarantee.delta + math.exp(guarantee.epsilon) * selection_delta) * (1 + 1e-12)
    return Guarantee(epsilon=guarantee.epsilon, delta=min(1.0, delta), rho=None,
                     method=f"{guarantee.method}+selection")
