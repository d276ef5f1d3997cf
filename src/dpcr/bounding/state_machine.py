"""At most k mutations, with k derived from an entry's lifecycle (paper section 4.3.1).

A :class:`StateMachine` names each row's *state* (from one column: the value itself, a value →
state mapping, or numeric buckets such as 0 / 1 / 2 / "3+"), the *initial* states an entry may be
inserted in, the allowed *transitions*, and the *terminal* states it may be deleted from.

Composite states and k
----------------------
Cycles are collapsed into their strongly connected components (SCCs, *composite states*); the
condensation is a DAG. A mutation of the changelog is one of

* the insert (null → an initial state),
* a transition between composite states (along an allowed edge),
* a mutation that stays inside one composite state: an allowed move between two states of a cycle,
  or an update that leaves the state unchanged (it is still a changelog mutation and touches a
  query interval, so it must be paid for),
* the delete (a terminal state → null).

Stays are bounded explicitly: composite state ``C`` allows ``allowance(C)`` of them (default 0, so
they are dropped; a cyclic composite state must declare its allowance). An entry's history walks a
path ``C_1 → … → C_m`` of the condensation (it can never return to a composite state it left), so
its number of mutations is at most

    sum over the path of (1 + allowance(C_i))  +  [C_m holds a terminal state]

and ``k`` is the largest value over paths starting at a composite state that holds an initial
state. The paper's longest path is the case where every allowance is 0. ``k`` is an upper bound on
every valid history; :func:`longest_history` is its brute-force check.

A :class:`StateMachine` *is* an :class:`~dpcr.bounding.constraints.AtMostK` (subclass) with that
``k``: every privacy count that holds for at-most-k holds for it, because the engine keeps a
unit's mutations only while they follow the machine **and** the unit has kept at most ``k``.

>>> ticket = StateMachine(
...     column="status",
...     initial=("issued",),
...     transitions=("issued -> activated -> used", "issued -> expired", "used -> expired"),
...     terminal=("expired",),
... )
>>> ticket.k
5
>>> ticket.path_description()
'insert → issued → activated → used → expired → delete'
>>> sub = StateMachine(
...     column="status",
...     initial=("active",),
...     transitions=("active -> paused -> active", "active -> cancelled", "paused -> cancelled"),
...     terminal=("cancelled",),
...     allowance={"active": 4},
... )
>>> sub.k, sub.path_description()
(7, 'insert → {active, paused} (+4 within) → cancelled → delete')
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dpcr.bounding.constraints import AtMostK
from dpcr.errors import ConfigError

__all__ = ["StateMachine", "derived_ks", "longest_history", "parse_transitions"]


def parse_transitions(
    items: Iterable[str | tuple[str, str] | list[str]],
) -> tuple[tuple[str, str], ...]:
    """Edges from ``"a -> b -> c"`` chains (or ``(a, b)`` pairs), in order, without duplicates.

    >>> parse_transitions(["a -> b -> c", ("c", "d")])
    (('a', 'b'), ('b', 'c'), ('c', 'd'))
    """
    out: list[tuple[str, str]] = []
    for item in items:
        if isinstance(item, str):
            names = [s.strip() for s in item.split("->")]
        elif isinstance(item, tuple | list) and len(item) == 2:
            names = [str(item[0]).strip(), str(item[1]).strip()]
        else:
            raise ConfigError(f"a transition is 'a -> b' (or a chain 'a -> b -> c'), got {item!r}")
        if len(names) < 2 or any(not n for n in names):
            raise ConfigError(f"a transition is 'a -> b' (or a chain 'a -> b -> c'), got {item!r}")
        for edge in itertools.pairwise(names):
            if edge not in out:
                out.append(edge)
    return tuple(out)


def _sccs(states: tuple[str, ...], edges: tuple[tuple[str, str], ...]) -> list[tuple[str, ...]]:
    """Strongly connected components (Kosaraju, iterative), in topological order of the DAG."""
    succ: dict[str, list[str]] = {s: [] for s in states}
    pred: dict[str, list[str]] = {s: [] for s in states}
    for a, b in edges:
        succ[a].append(b)
        pred[b].append(a)
    order: list[str] = []
    seen: set[str] = set()
    for root in states:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(succ[root]))]
        while stack:
            node, it = stack[-1]
            nxt = next((n for n in it if n not in seen), None)
            if nxt is None:
                stack.pop()
                order.append(node)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(succ[nxt])))
    comps: list[tuple[str, ...]] = []
    assigned: set[str] = set()
    for root in reversed(order):  # decreasing finish time: sources of the condensation first
        if root in assigned:
            continue
        comp, todo = [], [root]
        assigned.add(root)
        while todo:
            node = todo.pop()
            comp.append(node)
            for p in pred[node]:
                if p not in assigned:
                    assigned.add(p)
                    todo.append(p)
        comps.append(tuple(sorted(comp, key=states.index)))
    return comps


@dataclass(frozen=True, slots=True, kw_only=True)
class StateMachine(AtMostK):
    """An entry's lifecycle; ``k`` (not an argument) is derived, see the module docstring.

    ``values`` maps a column value to a state (values not listed are unknown states, and a mutation
    into an unknown state is dropped); ``buckets`` maps a state to the lower bound of a numeric
    bucket (a finite number belongs to the bucket with the largest lower bound <= it; NaN and
    ±inf belong to none). Without either, the column's value (as text) is the state.
    ``allowance`` gives, keyed by any one state of a composite state, how many mutations may stay
    inside that composite state.
    """

    column: str
    initial: tuple[str, ...]
    transitions: tuple[tuple[str, str], ...]
    terminal: tuple[str, ...]
    values: Mapping[str, str] | None = None
    buckets: Mapping[str, float] | None = None
    allowance: Mapping[str, int] = field(default_factory=dict)
    k: int = field(init=False, default=0)
    states: tuple[str, ...] = field(init=False, default=())
    composites: tuple[tuple[str, ...], ...] = field(init=False, default=())
    path: tuple[tuple[str, ...], ...] = field(init=False, default=(), compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise ConfigError("state machine needs the column that holds the state")
        set_ = object.__setattr__
        set_(self, "initial", tuple(self.initial))
        set_(self, "terminal", tuple(self.terminal))
        set_(self, "transitions", parse_transitions(self.transitions))
        if not self.initial:
            raise ConfigError("state machine needs at least one initial state (where inserts go)")
        if self.values is not None and self.buckets is not None:
            raise ConfigError("state machine: give values (value -> state) or buckets, not both")
        states: list[str] = []

        def add(s: object, what: str) -> None:
            if not isinstance(s, str) or not s:
                raise ConfigError(f"state machine: {what} must be state names, got {s!r}")
            if s not in states:
                states.append(s)

        for s in self.initial:
            add(s, "initial")
        for a, b in self.transitions:
            add(a, "transitions")
            add(b, "transitions")
            if a == b:
                raise ConfigError(
                    f"state machine: transition {a} -> {a} stays in one state; an update that "
                    f"keeps the state is always allowed within the allowance of its composite "
                    f"state, so declare allowance = {{ {a} = N }} instead"
                )
        for s in self.terminal:
            add(s, "terminal")
        if self.values is not None:
            if not self.values:
                raise ConfigError("state machine: values (value -> state) is empty")
            for v, s in self.values.items():
                if not isinstance(v, str):
                    raise ConfigError(f"state machine: values keys must be text, got {v!r}")
                add(s, "values targets")
            set_(self, "values", MappingProxyType(dict(self.values)))
        if self.buckets is not None:
            if not self.buckets:
                raise ConfigError("state machine: buckets (state -> lower bound) is empty")
            bounds: dict[str, float] = {}
            for s, lo in self.buckets.items():
                add(s, "bucket names")
                if (
                    isinstance(lo, bool)
                    or not isinstance(lo, int | float)
                    or not (-1e300 < lo < 1e300 or lo == float("-inf"))  # NaN, +inf, huge
                ):
                    raise ConfigError(
                        f"state machine: bucket {s!r} needs a numeric lower bound (finite, or "
                        f"-inf for the lowest bucket), got {lo!r}"
                    )
                bounds[s] = float(lo)
            if len(set(bounds.values())) != len(bounds):
                raise ConfigError("state machine: two buckets have the same lower bound")
            set_(
                self, "buckets", MappingProxyType(dict(sorted(bounds.items(), key=lambda x: x[1])))
            )
        set_(self, "states", tuple(states))
        comps = _sccs(self.states, self.transitions)
        set_(self, "composites", tuple(comps))
        allowance: dict[str, int] = {}
        owner: dict[int, str] = {}
        for s, n in dict(self.allowance).items():
            if s not in states:
                raise ConfigError(
                    f"state machine: allowance names {s!r}, which is not a state; states are "
                    f"{list(states)}"
                )
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ConfigError(f"state machine: allowance of {s!r} must be an integer >= 0")
            c = self.composite_of(s)
            if c in owner:
                raise ConfigError(
                    f"state machine: {owner[c]!r} and {s!r} are in the same composite state "
                    f"{{{', '.join(comps[c])}}}; give its allowance once"
                )
            owner[c] = s
            allowance[s] = n
        set_(self, "allowance", MappingProxyType(allowance))
        for c, comp in enumerate(comps):
            if len(comp) > 1 and c not in owner:
                raise ConfigError(
                    f"state machine: states {', '.join(comp)} form a cycle (one composite state) "
                    f"in which an entry could mutate without bound; declare how many mutations "
                    f"may stay inside it, e.g. allowance = {{ {comp[0]} = 10 }} (0 drops them)"
                )
        k, path = self._longest()
        set_(self, "k", k)
        set_(self, "path", path)
        AtMostK.__post_init__(self)

    # -- structure --------------------------------------------------------------------------

    def composite_of(self, state: str) -> int:
        """Index of the composite state (in :attr:`composites`, topological order) of ``state``."""
        for i, comp in enumerate(self.composites):
            if state in comp:
                return i
        raise ConfigError(f"{state!r} is not a state of this machine")

    def composite_allowance(self, index: int) -> int:
        return sum(n for s, n in self.allowance.items() if self.composite_of(s) == index)

    def allows(self, before: str | None, after: str | None) -> bool:
        """Whether a mutation from state ``before`` (None: not yet inserted) to ``after`` (None:
        deleted) is allowed, ignoring allowances (see :meth:`stays`)."""
        if before is None:
            return after is not None and after in self.initial
        if after is None:
            return before in self.terminal
        if before not in self.states or after not in self.states:
            return False
        return before == after or (before, after) in self.transitions

    def stays(self, before: str, after: str) -> bool:
        """Whether a mutation from ``before`` to ``after`` stays in one composite state."""
        return self.composite_of(before) == self.composite_of(after)

    def state_of(self, value: Any) -> str | None:
        """The state of a row whose column holds ``value`` (None: unknown state)."""
        if self.buckets is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None
            if not math.isfinite(value):  # NaN and ±inf are in no bucket
                return None
            found = None
            for s, lo in self.buckets.items():
                if value >= lo:
                    found = s
            return found
        if value is None:
            return None
        text = value if isinstance(value, str) else _json_text(value)
        if self.values is not None:
            return self.values.get(text)
        return text if text in self.states else None

    def _longest(self) -> tuple[int, tuple[tuple[str, ...], ...]]:
        comps = self.composites
        n = len(comps)
        index = {s: i for i, comp in enumerate(comps) for s in comp}
        succ: list[set[int]] = [set() for _ in range(n)]
        for a, b in self.transitions:
            if index[a] != index[b]:
                succ[index[a]].add(index[b])
        best = [0] * n
        nxt: list[int | None] = [None] * n
        for c in reversed(range(n)):  # successors come later in topological order
            weight = 1 + self.composite_allowance(c)
            tail = 1 if any(s in self.terminal for s in comps[c]) else 0
            choice = None
            for d in sorted(succ[c]):
                if best[d] > tail:
                    tail, choice = best[d], d
            best[c], nxt[c] = weight + tail, choice
        starts = sorted({index[s] for s in self.initial})
        start = max(starts, key=lambda c: best[c])
        path: list[tuple[str, ...]] = []
        cur: int | None = start
        while cur is not None:
            path.append(comps[cur])
            cur = nxt[cur]
        return best[start], tuple(path)

    def deletes_at_end(self) -> bool:
        """Whether the attaining path ends with the delete."""
        return any(s in self.terminal for s in self.path[-1])

    def path_description(self) -> str:
        """The path that attains ``k``: insert, composite states (with their allowances), delete."""
        parts = ["insert"]
        for comp in self.path:
            name = comp[0] if len(comp) == 1 else "{" + ", ".join(comp) + "}"
            extra = self.composite_allowance(self.composite_of(comp[0]))
            parts.append(f"{name} (+{extra} within)" if extra else name)
        if self.deletes_at_end():
            parts.append("delete")
        return " → ".join(parts)

    def describe(self) -> str:
        return (
            f"state machine on {self.column}: at most {self.k} mutations "
            f"({self.path_description()})"
        )


#: The one state of an :class:`OpLimits` lifecycle: the entry is live.
LIVE = "live"


@dataclass(frozen=True, slots=True, kw_only=True)
class OpLimits(StateMachine):
    """At most ``limit`` mutations per unit, and per entry at most one insert, at most
    ``deletes`` (0 or 1) deletes and at most ``updates`` updates (None: as many as ``limit``
    leaves): ``[constraint] at_most_k = 4, inserts = 1, deletes = 1``.

    A state machine with one state, :data:`LIVE`, for every row (it reads no column): the insert
    enters it, an update stays in it (``updates`` stays allowed), the delete leaves it when
    ``deletes`` is 1. So the engines enforce it as every state machine: a unit keeps its
    mutations while each entry follows the lifecycle and the unit has kept at most ``limit``;
    an insert after the entry's delete is dropped as ``state_transition``, a delete when
    ``deletes = 0`` likewise, an update past ``updates`` as ``state_allowance``. ``k`` is
    ``limit``, or less when the lifecycle allows fewer mutations.

    ``immutable`` columns: the state is their values instead (:meth:`state_of_row`), any state
    may be inserted and deleted, and an update that changes one of them moves to another state,
    which is dropped as ``state_transition`` (with every later mutation of the unit).

    >>> OpLimits(limit=4, deletes=1).k, OpLimits(limit=4, deletes=0, updates=1).k
    (4, 2)
    """

    limit: int
    inserts: int = 1
    deletes: int = 1
    updates: int | None = None
    immutable: tuple[str, ...] = ()
    column: str = "(every row)"
    initial: tuple[str, ...] = (LIVE,)
    transitions: tuple[tuple[str, str], ...] = ()
    terminal: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        AtMostK(k=self.limit)  # the same check of k
        if self.inserts != 1 or isinstance(self.inserts, bool):
            raise ConfigError(
                f"inserts must be 1 (each entry inserted once; an entry inserted again after "
                f"its delete is a new entry to the lifecycle and is dropped), got "
                f"{self.inserts!r}; remove inserts to allow re-inserts"
            )
        if self.deletes not in (0, 1) or isinstance(self.deletes, bool):
            raise ConfigError(f"deletes must be 0 or 1 (per entry), got {self.deletes!r}")
        updates = self.updates
        if updates is not None and (
            isinstance(updates, bool) or not isinstance(updates, int) or updates < 0
        ):
            raise ConfigError(f"updates must be an integer >= 0 (per entry), got {updates!r}")
        immutable = tuple(self.immutable)
        if not all(isinstance(c, str) and c for c in immutable) or len(set(immutable)) < len(
            immutable
        ):
            raise ConfigError(f"immutable must be distinct column names, got {self.immutable!r}")
        stays = self.limit - 1 if updates is None else min(updates, self.limit - 1)
        set_ = object.__setattr__
        set_(self, "immutable", immutable)
        set_(self, "column", "(every row)")
        set_(self, "initial", (LIVE,))
        set_(self, "transitions", ())
        set_(self, "terminal", (LIVE,) if self.deletes else ())
        set_(self, "values", None)
        set_(self, "buckets", None)
        set_(self, "allowance", {LIVE: stays})
        StateMachine.__post_init__(self)
        set_(self, "k", min(self.k, self.limit))

    def state_of(self, value: Any) -> str | None:
        """Every live row is in :data:`LIVE` (no column is read; with ``immutable`` columns
        see :meth:`state_of_row`)."""
        return LIVE

    def composite_of(self, state: str) -> int:
        """Every live state (with ``immutable`` columns: every tuple of their values) is in
        the one composite state 0."""
        return 0

    def allows(self, before: str | None, after: str | None) -> bool:
        """An insert into any state, a delete from any (when ``deletes`` is 1), an update that
        keeps the state (a stay, within the allowance): no move between two states."""
        if before is None:
            return after is not None
        if after is None:
            return bool(self.deletes)
        return before == after

    def state_of_row(self, row: Mapping[str, Any] | None) -> str | None:
        """The state of a row: None when deleted; :data:`LIVE`, or with ``immutable`` columns
        their values as a compact JSON array (the text the engines compare: an update that
        changes one of them is a move between two states, which the lifecycle does not
        allow)."""
        if row is None:
            return None
        if not self.immutable:
            return LIVE
        import json

        return json.dumps([row.get(c) for c in self.immutable], separators=(",", ":"))

    def path_description(self) -> str:
        parts = ["insert"]
        stays = self.composite_allowance(0)
        if stays:
            parts.append(f"{min(stays, self.k - 1 - (1 if self.deletes else 0))} updates")
        if self.deletes and self.k > 1:
            parts.append("delete")
        return " → ".join(parts)

    def describe(self) -> str:
        per_entry = ["inserted once", "deleted at most once" if self.deletes else "never deleted"]
        if self.updates is not None:
            per_entry.append(f"at most {self.updates} updates")
        if self.immutable:
            per_entry.append(f"{', '.join(self.immutable)} never changed")
        return f"at most {self.limit} mutations; each entry {', '.join(per_entry)}"


def _json_text(value: Any) -> str:
    """The text DuckDB's json_extract_string gives for a JSON scalar (1 -> '1', true -> 'true')."""
    import json

    return json.dumps(value)


def longest_history(
    machine: StateMachine, *, limit: int | None = None
) -> tuple[int, list[str | None]]:
    """Brute force: the longest valid history (insert, moves, delete) of one entry, and one
    such history as its list of states (``None`` last when it ends with the delete).

    Explores every state sequence with the engine's rules, counting stays per composite state;
    ``limit`` stops exploring at that length (default ``k + 2``, enough to find a violation).
    """
    cap = machine.k + 2 if limit is None else limit
    best: tuple[int, list[str | None]] = (0, [])

    def walk(history: list[str | None], stays: int) -> None:
        nonlocal best
        if len(history) > best[0]:
            best = (len(history), list(history))
        if len(history) >= cap:
            return
        cur = history[-1]
        if cur is None:
            return
        if machine.allows(cur, None):
            walk([*history, None], stays)
        room = machine.composite_allowance(machine.composite_of(cur))
        for nxt in machine.states:
            if not machine.allows(cur, nxt):
                continue
            if machine.stays(cur, nxt):
                if stays < room:
                    walk([*history, nxt], stays + 1)
            else:
                walk([*history, nxt], 0)

    for s in machine.initial:
        walk([s], 0)
    return best


def dropped_moves(machine: StateMachine) -> dict[str, Any]:
    """Data-free: every move the machine drops, and what it allows inside composite states.

    ``transitions``: each ``(from, to)`` pair that is not allowed, with ``"(insert)"`` as the
    from-state of an insert and ``"(delete)"`` as the to-state of a delete (a move between two
    states of one composite state is allowed, within its allowance); ``allowances``: per
    composite state, the stays it allows (further stays are dropped as ``state_allowance``).

    >>> m = StateMachine(column="s", initial=("a",), transitions=("a -> b",), terminal=("b",))
    >>> dropped_moves(m)["transitions"]
    ['(insert) -> b', 'a -> (delete)', 'b -> a']
    """
    starts = ["(insert)", *machine.states]
    ends = [*machine.states, "(delete)"]
    out = []
    for a in starts:
        for b in ends:
            before = None if a == "(insert)" else a
            after = None if b == "(delete)" else b
            if before is None and after is None:
                continue
            if before is not None and after is not None and before == after:
                continue  # a stay: allowed within the allowance
            if not machine.allows(before, after):
                out.append(f"{a} -> {b}")
    allowances = {
        "{" + ", ".join(comp) + "}" if len(comp) > 1 else comp[0]: machine.composite_allowance(i)
        for i, comp in enumerate(machine.composites)
    }
    return {"transitions": out, "allowances": allowances}


def derived_ks(constraint: object) -> dict[str, dict[str, Any]]:
    """For ``dpcr plan``: per class (``"all"`` for a simple constraint, ``"*"`` for a hybrid's
    default) whose constraint is a :class:`StateMachine`, its derived ``k`` and attaining path.

    >>> m = StateMachine(column="s", initial=("a",), transitions=("a -> b",), terminal=("b",))
    >>> derived_ks(m)["all"]["k"], derived_ks(m)["all"]["path"]
    (3, 'insert → a → b → delete')
    """
    from dpcr.bounding.constraints import Hybrid

    classes = constraint.all_classes() if isinstance(constraint, Hybrid) else {"all": constraint}
    return {
        name: {"k": c.k, "path": c.path_description(), "dropped": dropped_moves(c)}
        for name, c in classes.items()
        if isinstance(c, StateMachine)
    }
