"""Key selection for open keys: the threshold a key's noisy running value must reach before it
is published (docs/privacy.md, section 12).

An open query releases, for every key the data holds, the very per-key counter a declared key
gets; a key not declared is published from the first reporting interval whose published
running value is at least :attr:`KeySelection.threshold`. The threshold is set so that a key
only one unit holds is ever published with probability at most δ₂ (this query's share of
:attr:`~dpcr.release.ReleaseSettings.selection_delta`): one unit alone holds at most ``n_u``
keys and adds at most ``c`` to a key's running value (:func:`unit_reach`), and the running
value's noise ``S_t`` at reporting interval ``t`` of ``T`` is a weighted sum of independent
node noises, so

    P(some key of the unit is published) <= n_u · Σ_t P(S_t >= threshold - c) <= δ₂

with each ``P(S_t >= u)`` bounded by :func:`dpcr.mechanisms.chernoff_tails` (the moment
generating function of discrete Laplace noise, the sub-Gaussian bound of discrete Gaussian
noise: a proven bound at any tail); the threshold is ``c`` plus the least ``u`` that keeps the
sum within ``δ₂ / n_u``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.bounding.constraints import Hybrid
from dpcr.errors import ConfigError
from dpcr.mechanisms import chernoff, chernoff_tails, noise_variance
from dpcr.release._calibrate import Calibration, calibrate
from dpcr.release._uncertainty import noise_terms

if TYPE_CHECKING:
    from dpcr.release._settings import ReleaseSettings

__all__ = ["KeySelection", "key_selections", "unit_reach"]


@dataclass(frozen=True, slots=True, kw_only=True)
class KeySelection:
    """How the keys of one open query are selected.

    A key not declared is published from the first reporting interval whose published running
    value (in released integer steps) is at least ``threshold``, and at every later one.
    ``delta``: this query's share of δ₂ (the probability bound of publishing any key one unit
    alone holds); ``keys_per_unit`` (n_u) and ``count_per_unit`` (c) as in
    :func:`unit_reach`; ``horizon``: the reporting intervals the bound covers."""

    query: str
    threshold: float
    delta: float
    keys_per_unit: int
    count_per_unit: int
    horizon: int
    #: an open grouped sum: the open histogram whose selection it follows (``threshold`` is
    #: that histogram's, in its counts; ``delta`` 0: it spends none of δ₂)
    follows: str | None = None

    def describe(self) -> str:
        if self.follows is not None:
            return (
                f"a key not declared is published when the open histogram {self.follows!r} "
                f"publishes it (its running count reaches {self.threshold:.6g}; no δ of its own)"
            )
        return (
            f"a key not declared is published once its running value reaches "
            f"{self.threshold:.6g} (a key one unit alone holds: probability <= "
            f"{self.delta:.3g} over {self.horizon} releases)"
        )


def unit_reach(settings: ReleaseSettings) -> tuple[int, int]:
    """``(n_u, c)``: the most keys one unit's kept states can hold and the most it adds to one
    key's running value, under the constraint's mutation cap ``k`` (the largest of its
    classes). A kept state is the row before or after a kept mutation: with the entry as the
    unit, the state before its first mutation and one after each, ``k + 1`` keys, and the one
    entry is in one key at a time (``c = 1``); a unit owning several entries may add a state
    before each entry's first mutation, ``2k`` keys, and each of at most ``k`` entries it puts
    in a key adds 1 (``c = k``). A time bound caps no count: refused."""
    constraint = settings.constraint
    classes = constraint.all_classes() if isinstance(constraint, Hybrid) else {"all": constraint}
    ks = [getattr(c, "k", None) for c in classes.values()]
    if any(not isinstance(k, int) for k in ks):
        raise ConfigError(
            "open keys need a mutation cap for every class (k = ... or a state machine): a "
            "time bound alone lets one unit create any number of keys"
        )
    k = max(int(v) for v in ks if v is not None)
    if settings.owner is None:
        return k + 1, 1
    return 2 * k, k


def key_selections(
    settings: ReleaseSettings, cal: Calibration | None = None
) -> dict[str, KeySelection]:
    """Per open query (by name), how its keys are selected; empty without open queries. Reads
    no data: a function of the plan, the calibration and the constraint."""
    opened = settings.selecting_queries
    if not opened:
        return {}
    cal = calibrate(settings) if cal is None else cal
    plan = settings.plan
    horizon = plan.schedule().release_count()
    if not horizon:
        raise ConfigError("open keys need a plan with an end (plan end = ...)")
    n_u, c = unit_reach(settings)
    share = settings.selection_delta / len(opened)
    nodes = sorted(set(plan.due(0, horizon)))
    out: dict[str, KeySelection] = {}
    for q in opened:
        events = {node: _discrete(cal.layers[plan.instance(node)[0]][q.name]) for node in nodes}
        variances = {node: noise_variance(e) for node, e in events.items()}
        reach = _reach(plan, nodes, events, variances, horizon, share / n_u)
        out[q.name] = KeySelection(
            query=q.name,
            threshold=c + reach,
            delta=share,
            keys_per_unit=n_u,
            count_per_unit=c,
            horizon=horizon,
        )
    for q in settings.open_queries:
        lead = getattr(q, "keys_from", None)
        if lead is not None and lead in out:
            out[q.name] = replace(out[lead], query=q.name, delta=0.0, follows=lead)
    return out


def _discrete(event: Any) -> DiscreteLaplaceEvent | DiscreteGaussianEvent:
    if not isinstance(event, DiscreteLaplaceEvent | DiscreteGaussianEvent):
        raise ConfigError(f"open keys need discrete Laplace or Gaussian noise, got {event!r}")
    return event


def _reach(
    plan: Any,
    nodes: list[Any],
    events: dict[Any, Any],
    variances: dict[Any, float],
    horizon: int,
    budget: float,
) -> float:
    """The least u (to 1e-6 relative) with Σ_t P(S_t >= u) <= ``budget`` over the reporting
    intervals, S_t the noise of the published running value, each P bounded by
    :func:`dpcr.mechanisms.chernoff_tails` (rows of equal noise counted once, times their
    number)."""
    distinct, terms_of = noise_terms(plan, nodes, events, variances, horizon, range(horizon))
    rows = Counter(terms_of["estimate"])
    groups = [([(w, distinct[e], c) for w, e, c in terms], n) for terms, n in rows.items()]
    bounds = [(chernoff_tails(terms), n) for terms, n in groups]

    def total(u: float) -> float:
        return sum(n * bound(u) for bound, n in bounds)

    hi = max((chernoff(terms, budget / horizon) for terms, _ in groups), default=0.0)
    if hi <= 0:
        return 0.0
    lo = 0.0  # total(hi) <= budget (each row's tail <= budget / horizon); bisect below it
    while hi - lo > 1e-6 * hi:
        mid = (lo + hi) / 2
        if total(mid) <= budget:
            hi = mid
        else:
            lo = mid
    return hi
