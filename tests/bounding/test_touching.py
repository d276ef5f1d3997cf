"""Per-query participation against a brute force over unit histories.

For random constraints (at most k, per-op limits, state machines; the unit one entry or
several) and random queries (each kind's ``touched_by``, and random op sets as event queries
have), the participation dpcr accounts a query under -- the plan's per-layer count under
:func:`dpcr.bounding.touching.query_constraint` -- equals the most releases (per layer) whose
value one valid unit history can change through that query, found by enumerating histories and
the intervals their mutations fall in. (Cyclic state machines: an upper bound, as their k.)
"""

from __future__ import annotations

import itertools
import random
from functools import cache

import pytest

from dpcr.bounding.constraints import AtMostK, Hybrid, SimpleConstraint
from dpcr.bounding.state_machine import OpLimits, StateMachine
from dpcr.bounding.touching import ALL_OPS, query_constraint, touching_count
from dpcr.plans.tree import layer_counts
from dpcr.queries import Count, Exhausted, Histogram, Sum

N = 4  # base intervals (DCR releases; the leaves of a binary tree of 3 layers)
HEIGHT = 3


def _valid_entry(ops: tuple[str, ...]) -> bool:
    live = False
    for op in ops:
        if (op == "insert" and live) or (op != "insert" and not live):
            return False
        live = op != "delete"
    return True


@cache
def _entry_histories(k: int) -> tuple[tuple[str, ...], ...]:
    """Every op sequence of one entry (insert, updates, delete, insert, ...) up to length k."""
    return tuple(
        h
        for n in range(1, k + 1)
        for h in itertools.product(("insert", "update", "delete"), repeat=n)
        if _valid_entry(h)
    )


@cache
def _unit_histories(k: int) -> tuple[tuple[str, ...], ...]:
    """Every op sequence of a unit of several entries up to length k (the entries' histories
    interleaved)."""
    out: set[tuple[str, ...]] = set()

    def walk(ops: tuple[str, ...], live: int, dead: int) -> None:
        out.add(ops)
        if len(ops) == k:
            return
        walk((*ops, "insert"), live + 1, dead)  # a new entry (or a deleted one again)
        if live:
            walk((*ops, "update"), live, dead)
            walk((*ops, "delete"), live - 1, dead + 1)

    walk((), 0, 0)
    out.discard(())
    return tuple(out)


def _machine_histories(m: StateMachine, cap: int) -> list[tuple[str, ...]]:
    """Every valid history of one entry under ``m`` (engine rules), as ops."""
    out: list[tuple[str, ...]] = []

    def walk(ops: tuple[str, ...], cur: str | None, stays: int) -> None:
        out.append(ops)
        if len(ops) >= cap or cur is None:
            return
        if m.allows(cur, None):
            walk((*ops, "delete"), None, stays)
        room = m.composite_allowance(m.composite_of(cur))
        for nxt in m.states:
            if not m.allows(cur, nxt):
                continue
            if m.stays(cur, nxt):
                if stays < room:
                    walk((*ops, "update"), nxt, stays + 1)
            else:
                walk((*ops, "update"), nxt, 0)

    for s in m.initial:
        walk(("insert",), s, 0)
    return out


def _histories(con: SimpleConstraint, unit_is_entry: bool) -> list[tuple[str, ...]]:
    if isinstance(con, OpLimits):  # per-op limits per entry
        if not unit_is_entry:  # several entries: any at-most-k history bounds them
            return list(_unit_histories(con.k))
        updates = con.k if con.updates is None else con.updates
        return [
            h
            for h in _entry_histories(con.k)
            if h.count("insert") <= 1
            and h.count("delete") <= con.deletes
            and h.count("update") <= updates
        ]
    if isinstance(con, StateMachine):
        hs = _machine_histories(con, con.k + 1)
        if not unit_is_entry:  # several entries: any at-most-k history of the unit
            hs = list(_unit_histories(con.k))
        return [h for h in hs if len(h) <= con.k]
    return list((_entry_histories if unit_is_entry else _unit_histories)(con.k))


def _brute(con: SimpleConstraint, ops: frozenset[str], unit_is_entry: bool) -> list[int]:
    """Per layer of a binary tree over N base intervals (layer 0: the DCR releases), the most
    nodes whose value one history changes through a query touched by ``ops``."""
    best = [0] * HEIGHT
    seen: set[int] = set()
    for h in _histories(con, unit_is_entry):
        m = sum(op in ops for op in h)
        if m in seen:  # the intervals of touching mutations are free: only their number matters
            continue
        seen.add(m)
        for times in itertools.combinations_with_replacement(range(N), m):
            for layer in range(HEIGHT):
                nodes = {t // 2**layer for t in times if (t // 2**layer + 1) * 2**layer <= N}
                best[layer] = max(best[layer], len(nodes))
    return best


def _random_machine(rng: random.Random, *, acyclic: bool) -> StateMachine:
    n = rng.randint(1, 4)
    names = [f"s{i}" for i in range(n)]
    pairs = [(a, b) for a in names for b in names if a != b and (not acyclic or a < b)]
    edges = rng.sample(pairs, rng.randint(0, min(len(pairs), 5)))
    initial = rng.sample(names, rng.randint(1, min(2, n)))
    terminal = rng.sample(names, rng.randint(0, n))
    probe = StateMachine(
        column="s",
        initial=tuple(initial),
        transitions=tuple(edges),
        terminal=tuple(terminal),
        allowance={c[0]: 0 for c in _cycles(names, edges)},
    )
    allowance = {
        c[0]: rng.randint(0, 2) for c in probe.composites if len(c) > 1 or rng.random() < 0.5
    }
    return StateMachine(
        column="s",
        initial=tuple(initial),
        transitions=tuple(edges),
        terminal=tuple(terminal),
        allowance=allowance,
    )


def _cycles(names: list[str], edges: list[tuple[str, str]]) -> list[tuple[str, ...]]:
    from dpcr.bounding.state_machine import _sccs

    return [c for c in _sccs(tuple(names), tuple(edges)) if len(c) > 1]


def _random_simple(rng: random.Random) -> SimpleConstraint:
    if rng.random() < 0.25:
        return OpLimits(
            limit=rng.randint(1, 6),
            deletes=rng.randint(0, 1),
            updates=rng.choice([None, 0, 1, 2, 3]),
        )
    if rng.random() < 0.4:
        return AtMostK(k=rng.randint(1, 6))
    m = _random_machine(rng, acyclic=rng.random() < 0.7)
    return m if m.k <= 7 else AtMostK(k=rng.randint(1, 6))


def _random_ops(rng: random.Random) -> frozenset[str]:
    queries = [
        Count(name="all"),
        Count(name="active", where={"status": "active"}),
        Exhausted(name="ex"),
        Sum(name="mrr", column="amount", lower=0, upper=10),
        Histogram(name="plans", column="plan", categories=("a", "b")),
    ]
    if rng.random() < 0.6:
        return rng.choice(queries).touched_by()
    return frozenset(rng.sample(sorted(ALL_OPS), rng.randint(1, 3)))  # event queries


def _tree_counts(con: SimpleConstraint | Hybrid) -> dict[str, list[int]]:
    return layer_counts(con, base=1, c=2, height=HEIGHT, base_intervals=N)


def test_query_kinds_touched_by() -> None:
    assert Count(name="c").touched_by() == {"insert", "delete"}
    assert Count(name="c", where={"x": 1}).touched_by() == ALL_OPS
    assert Exhausted(name="e").touched_by() == ALL_OPS
    assert Sum(name="s", column="x", lower=0, upper=1).touched_by() == ALL_OPS
    assert Histogram(name="h", column="x", categories=("a",)).touched_by() == ALL_OPS


@pytest.mark.parametrize("seed", range(4))
def test_participation_per_query_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    checked = 0
    while checked < 80:
        unit_is_entry = rng.random() < 0.7
        con = _random_simple(rng)
        ops = _random_ops(rng)
        brute = _brute(con, ops, unit_is_entry)
        reduced = query_constraint(con, ops, unit_is_entry=unit_is_entry)
        got = _tree_counts(reduced)["all"]
        exact = (
            not isinstance(con, StateMachine)
            or (unit_is_entry and all(len(c) == 1 for c in con.composites))
            or (isinstance(con, OpLimits) and unit_is_entry)
        )
        if exact:
            # a query no history can change is counted as at most 1 mutation
            expected = brute if any(brute) else _tree_counts(AtMostK(k=1))["all"]
            assert got == expected, (con, ops, unit_is_entry)
        else:
            assert all(g >= b for g, b in zip(got, brute, strict=True)), (con, ops)
        # never above what the query would be accounted today (all ops)
        assert all(g <= a for g, a in zip(got, _tree_counts(con)["all"], strict=True))
        checked += 1


def test_per_op_limits() -> None:
    """``inserts = 1, deletes = 1`` at k = 4: a count of every row changes at most twice; a
    never-deleting app (``deletes = 0``) once; the updates keep what k leaves them."""
    rows = frozenset({"insert", "delete"})
    assert touching_count(OpLimits(limit=4), rows, unit_is_entry=True) == 2
    assert touching_count(OpLimits(limit=4, deletes=0), rows, unit_is_entry=True) == 1
    assert touching_count(OpLimits(limit=4), {"update"}, unit_is_entry=True) == 3
    assert touching_count(OpLimits(limit=4, updates=1), ALL_OPS, unit_is_entry=True) == 3
    assert query_constraint(OpLimits(limit=4), rows, unit_is_entry=True) == AtMostK(k=2)
    assert query_constraint(OpLimits(limit=4), rows, unit_is_entry=False) == OpLimits(limit=4)


def test_immutable_columns() -> None:
    """A statistic of the live rows that reads only immutable columns counts inserts and
    deletes only; one that reads a mutable column, or an event query (reads None), all ops."""
    limits = OpLimits(limit=4, immutable=("plan", "region"))
    assert query_constraint(limits, ALL_OPS, unit_is_entry=True, reads={"plan"}) == AtMostK(k=2)
    both = {"plan", "region"}
    assert query_constraint(limits, ALL_OPS, unit_is_entry=True, reads=both) == AtMostK(k=2)
    assert query_constraint(limits, ALL_OPS, unit_is_entry=True, reads={"plan", "amount"}) is (
        limits
    )
    assert query_constraint(limits, ALL_OPS, unit_is_entry=True, reads=None) is limits
    assert query_constraint(OpLimits(limit=4), ALL_OPS, unit_is_entry=True, reads=set()) == (
        AtMostK(k=2)  # a count of every row reads no column
    )
    assert query_constraint(AtMostK(k=4), ALL_OPS, unit_is_entry=True, reads={"plan"}) == (
        AtMostK(k=4)  # no immutable columns without per-op limits
    )


def test_hybrid_reduces_each_class() -> None:
    machine = StateMachine(
        column="status",
        initial=("active",),
        transitions=("active -> cancelled",),
        terminal=(),
        allowance={"active": 2},
    )
    con = Hybrid(column="kind", classes={"m": machine, "k": AtMostK(k=4)}, default=AtMostK(k=3))
    reduced = query_constraint(con, {"insert", "delete"}, unit_is_entry=True)
    assert isinstance(reduced, Hybrid)
    assert reduced.classes["m"] == AtMostK(k=1)
    assert reduced.classes["k"] == con.classes["k"]  # insert, delete, insert, delete: 4
    assert query_constraint(con, ALL_OPS, unit_is_entry=True) is con
    assert touching_count(machine, {"update"}, unit_is_entry=True) == 3
    assert touching_count(machine, {"insert"}, unit_is_entry=False) is None
