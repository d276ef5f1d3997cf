"""Per-entry bounding in the local model: each client makes its own history obey the constraint.

An entry's history, as the protocol sees it, is its state at the end of every period (null = d
before insertion and after deletion); a *change* is a period whose end state differs from the
previous one (the first non-null state is the insertion). Several mutations within one period
are one change (only the period's end state is ever reported), so an entry may mutate any number
of times within a period.

* at most K (``AtMostK(k=K)``): the first K changes are kept;
* B-time-bounded (``TimeBounded(bound=B)``, B in periods): the changes in periods ``x .. x + B``
  are kept, x the insertion period. Every history whose mutations lie within B period lengths of
  its insertion is kept whole (a mutation at most B periods after one in period x is in a
  period at most x + B).

A change the constraint does not allow is *dropped*: the entry keeps its last kept state from
then on (freeze, as ``on_exhausted = "freeze"`` in the central model), and every later change is
dropped too. Whether a change is kept depends only on the entry's own earlier states, so a
client applies the rule as periods close.

>>> import numpy as np
>>> from dpcr.bounding.constraints import AtMostK, TimeBounded
>>> states = np.array([[2, 0, 1, 0, 2, 2]])          # d = 2: null, then 0 → 1 → 0 → null
>>> kept = bound_states(states, AtMostK(k=2), domain=2)
>>> kept.states.tolist(), kept.dropped.tolist()
([[2, 0, 1, 1, 1, 1]], [2])
>>> bound_states(states, TimeBounded(bound=2), domain=2).states.tolist()
[[2, 0, 1, 0, 0, 0]]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpcr.bounding.constraints import AtMostK, TimeBounded
from dpcr.errors import ConfigError

__all__ = ["BoundedStates", "bound_states"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundedStates:
    """The kept states (same shape as the input) and, per entry, the number of changes dropped."""

    states: np.ndarray
    dropped: np.ndarray


def bound_states(
    states: np.ndarray, constraint: AtMostK | TimeBounded, *, domain: int
) -> BoundedStates:
    """Apply ``constraint`` (time unit: one period) to every row of ``states`` (n, T) with values
    in ``0 .. domain - 1`` and null = ``domain`` (each row starts from null before period 0)."""
    states = np.asarray(states, dtype=np.int64)
    if states.ndim != 2 or states.shape[1] < 1:
        raise ConfigError("states must be a 2-d array (entries × periods) with >= 1 period")
    if not isinstance(constraint, AtMostK | TimeBounded):
        raise ConfigError(f"constraint must be AtMostK or TimeBounded, got {constraint!r}")
    if states.size and (states.min() < 0 or states.max() > domain):
        raise ConfigError(f"states must hold values in [0, {domain}] ({domain} = null)")
    n, horizon = states.shape
    null = domain
    prev = np.concatenate([np.full((n, 1), null, dtype=np.int64), states[:, :-1]], axis=1)
    changed = states != prev
    t = np.arange(horizon)[None, :]
    if isinstance(constraint, AtMostK):
        allowed = np.cumsum(changed, axis=1) <= constraint.k
    else:
        first = np.where(changed.any(axis=1), changed.argmax(axis=1), horizon)
        allowed = t <= (first + constraint.bound)[:, None]
    # the first period whose change is not allowed; from it on the state is frozen
    cut_mask = changed & ~allowed
    cut = np.where(cut_mask.any(axis=1), cut_mask.argmax(axis=1), horizon)
    frozen = t >= cut[:, None]
    last_kept = np.where(cut > 0, states[np.arange(n), np.maximum(cut - 1, 0)], null)
    kept = np.where(frozen, last_kept[:, None], states)
    dropped = (changed & frozen).sum(axis=1)
    return BoundedStates(states=kept, dropped=dropped)
