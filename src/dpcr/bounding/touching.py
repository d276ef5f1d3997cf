"""How many of one privacy unit's kept mutations can change one query.

A query's value changes only at the mutations of the ops it is *touched by*
(:meth:`dpcr.queries.Count.touched_by`): a count of all rows at inserts and deletes, a
statistic of a mutable column at all three. A unit's loss through one query is the
composition of the releases *those* mutations touch (paper Thm 2.2 applied per query), so the
constraint that matters for the query is "at most ``k_q`` touching mutations", where ``k_q`` is
the most mutations of those ops one valid history of the unit can keep:

* **at most k, the unit is one entry**: the history is ``insert (update*) delete insert …``
  (the entry alternates between live and deleted), at most ``k`` long;
* **at most k, a unit of several entries** (a unit column): any interleaving of such entry
  histories, at most ``k`` mutations in all (every delete follows its entry's insert);
* **per-op limits** (:class:`~dpcr.bounding.state_machine.OpLimits`: each entry inserted once,
  deleted at most ``deletes`` times, at most ``updates`` updates), the unit one entry: the
  insert, updates and the delete within those limits and ``k``; a unit of several entries: as
  at most k;
* **a state machine (§4.3.1), the unit is one entry**: one insert into an initial state, moves
  and stays along a path of composite states (each stay within its allowance), and a delete
  from a terminal state; the count is the machine's ``k`` computed with weight 1 on the
  touching ops and 0 on the others (the same path analysis as the machine's ``k``);
* anything else (a time bound; a state machine whose unit holds several entries): every kept
  mutation may touch the query, as for a query touched by all ops.

A query of the live rows (count, sum, histogram) that reads only columns the per-op limits
declare ``immutable`` is not changed by an update (the engines drop an update that changes an
immutable column), so it counts inserts and deletes only.

:func:`touching_count` computes ``k_q``; :func:`query_constraint` turns a constraint into the
at-most-``k_q`` constraint the plan's participation is computed under (each class of a
hybrid its own; ``k_q`` is at least 1 there, so a class that cannot touch the query is
counted once rather than not at all). Both are checked against a brute force over histories
in tests/bounding/test_touching.py.

>>> touching_count(AtMostK(k=4), frozenset({"insert", "delete"}), unit_is_entry=True)
4
>>> touching_count(AtMostK(k=4), frozenset({"insert"}), unit_is_entry=True)
2
>>> m = StateMachine(column="status", initial=("active",), transitions=("active -> cancelled",),
...                  terminal=(), allowance={"active": 2})
>>> m.k, touching_count(m, frozenset({"insert", "delete"}), unit_is_entry=True)
(4, 1)
"""

from __future__ import annotations

from collections.abc import Iterable

from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid, SimpleConstraint, TimeBounded
from dpcr.bounding.state_machine import OpLimits, StateMachine
from dpcr.errors import ConfigError

__all__ = ["ALL_OPS", "OPS", "query_constraint", "touching_count"]

#: The ops of a changelog mutation.
OPS = ("insert", "update", "delete")
#: Every op: a query whose value any mutation can change.
ALL_OPS = frozenset(OPS)


def _weights(ops: Iterable[str]) -> tuple[int, int, int]:
    ops = frozenset(ops)
    unknown = ops - ALL_OPS
    if unknown:
        raise ConfigError(f"ops must be among {list(OPS)}, got {sorted(unknown)}")
    return tuple(int(op in ops) for op in OPS)  # type: ignore[return-value]


def _entry_at_most_k(k: int, wi: int, wu: int, wd: int) -> int:
    """One entry, at most ``k`` mutations: ``c`` inserts, ``d`` in ``{c - 1, c}`` deletes, the
    rest updates. The value is linear in (c, d), so its maximum is at an extreme ``c``."""
    best = 0
    top = (k + 1) // 2
    for c in {1, 2, top - 1, top}:
        for d in (c - 1, c):
            if c < 1 or d < 0 or c + d > k:
                continue
            best = max(best, wi * c + wd * d + wu * (k - c - d))
    return best


def _unit_at_most_k(k: int, wi: int, wu: int, wd: int) -> int:
    """Several entries, at most ``k`` mutations: ``i >= 1`` inserts, ``d <= i`` deletes, the rest
    updates (each needs a live entry: ``i >= 1``). Maximum at a vertex of that polytope."""
    candidates = [(k, 0), ((k + 1) // 2, k // 2), (1, 0)] + ([(1, 1)] if k >= 2 else [])
    return max(wi * i + wd * d + wu * (k - i - d) for i, d in candidates)


def _machine(m: StateMachine, wi: int, wu: int, wd: int) -> int:
    """The machine's longest-path analysis (:meth:`StateMachine._longest`) with weight ``wi``
    on the insert, ``wu`` on every move and stay, ``wd`` on the delete."""
    comps = m.composites
    index = {s: i for i, comp in enumerate(comps) for s in comp}
    succ: list[set[int]] = [set() for _ in comps]
    for a, b in m.transitions:
        if index[a] != index[b]:
            succ[index[a]].add(index[b])
    best = [0] * len(comps)  # from entering composite c (entry op not counted) onwards
    for c in reversed(range(len(comps))):
        tail = wd if any(s in m.terminal for s in comps[c]) else 0
        for d in succ[c]:
            tail = max(tail, wu + best[d])
        best[c] = wu * m.composite_allowance(c) + tail
    return wi + max(best[index[s]] for s in m.initial)


def _lifecycle(m: OpLimits, wi: int, wu: int, wd: int) -> int:
    """One entry under per-op limits: the insert, ``u`` updates (at most the allowance) and
    ``d`` deletes (at most ``m.deletes``), ``1 + u + d <= k``."""
    stays = m.composite_allowance(0)
    return max(
        wi + wu * min(stays, m.k - 1 - d) + wd * d for d in range(m.deletes + 1) if 1 + d <= m.k
    )


def touching_count(
    constraint: SimpleConstraint, ops: Iterable[str], *, unit_is_entry: bool
) -> int | None:
    """The most mutations of ``ops`` one unit under ``constraint`` keeps (module docstring);
    None when the constraint does not bound it below what it bounds for all ops (a time
    bound, or a state machine over a unit of several entries)."""
    wi, wu, wd = _weights(ops)
    if isinstance(constraint, OpLimits) and unit_is_entry:
        return _lifecycle(constraint, wi, wu, wd)
    if isinstance(constraint, OpLimits):  # several entries: any at-most-k interleaving bounds it
        return _unit_at_most_k(constraint.k, wi, wu, wd)
    if isinstance(constraint, StateMachine):
        return _machine(constraint, wi, wu, wd) if unit_is_entry else None
    if isinstance(constraint, AtMostK):
        count = _entry_at_most_k if unit_is_entry else _unit_at_most_k
        return count(constraint.k, wi, wu, wd)
    if isinstance(constraint, TimeBounded):
        return None
    raise ConfigError(f"unsupported constraint {constraint!r}")


def _simple(
    con: SimpleConstraint, ops: frozenset[str], unit_is_entry: bool, reads: frozenset[str] | None
) -> SimpleConstraint:
    if isinstance(con, OpLimits) and reads is not None and reads <= frozenset(con.immutable):
        ops = ops - {"update"}  # an update keeps every column the query reads
    n = touching_count(con, ops, unit_is_entry=unit_is_entry)
    if n is None or (n >= con.k if isinstance(con, AtMostK) else False):
        return con
    return AtMostK(k=max(1, n))


def query_constraint(
    constraint: Constraint,
    ops: Iterable[str],
    *,
    unit_is_entry: bool,
    reads: Iterable[str] | None = None,
) -> Constraint:
    """The constraint a query touched by ``ops`` is accounted under: each class's at-most-k
    (or state machine) replaced by at most ``max(1, k_q)`` (:func:`touching_count`) when that
    is smaller; any other class unchanged. ``constraint`` itself when nothing is smaller.

    ``reads``: the columns of the row a query of the live rows reads (None for any other
    query): when a class's per-op limits declare all of them immutable, an update cannot
    change the query, so only its other ops count."""
    ops = frozenset(ops)
    cols = None if reads is None else frozenset(reads)
    if isinstance(constraint, Hybrid):
        classes = {n: _simple(c, ops, unit_is_entry, cols) for n, c in constraint.classes.items()}
        default = (
            None
            if constraint.default is None
            else _simple(constraint.default, ops, unit_is_entry, cols)
        )
        if dict(constraint.classes) == classes and default == constraint.default:
            return constraint
        return Hybrid(column=constraint.column, classes=classes, default=default)
    return _simple(constraint, ops, unit_is_entry, cols)
