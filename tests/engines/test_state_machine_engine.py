"""State-machine bounding in the DuckDB engine against a plain-Python reference of the rules."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid
from dpcr.bounding.state_machine import OpLimits, StateMachine
from dpcr.engines.duckdb import aggregate, unit_state
from engines.helpers import append_mutation

from .test_duckdb_engine import QUERIES, Mutation, make_table, reference

TICKET = StateMachine(
    column="s",
    initial=("issued",),
    transitions=("issued -> active -> used -> expired", "issued -> expired", "active -> expired"),
    terminal=("expired",),
    values={"issued": "issued", "active": "active", "used": "used", "expired": "expired"},
)
SUBSCRIPTION = StateMachine(
    column="s",
    initial=("trial", "active"),
    transitions=("trial -> active -> paused -> active", "active -> gone", "paused -> gone"),
    terminal=("gone",),
    allowance={"active": 2},
)
COUNTER = StateMachine(
    column="n",
    initial=("0",),
    transitions=("0 -> 1 -> 2 -> 3+",),
    terminal=("0", "1", "2", "3+"),
    buckets={"0": 0, "1": 1, "2": 2, "3+": 3},
    allowance={"3+": 1, "1": 1},
)
MACHINES = [TICKET, SUBSCRIPTION, COUNTER]
CONSTRAINTS: list[Constraint] = [
    *MACHINES,
    Hybrid(column="cls", classes={"x": TICKET, "y": AtMostK(k=2)}, default=SUBSCRIPTION),
    Hybrid(column="cls", classes={"x": COUNTER, "w": TICKET}),
    OpLimits(limit=4, deletes=1, updates=2),
    OpLimits(limit=3, deletes=0),
    OpLimits(limit=4, deletes=1, immutable=("k",)),  # an update changing k is dropped
    Hybrid(column="cls", classes={"x": OpLimits(limit=2), "y": TICKET}),
]
TIMES = [[10, 20, 30, 40], [5, 6, 25], [40]]
SM_REASONS = ("state_transition", "state_allowance", "unknown_state")


def machine_for(constraint: Constraint, first_row: dict[str, Any] | None) -> Any:
    if isinstance(constraint, Hybrid):
        return constraint.classes.get(str((first_row or {}).get("cls", "")), constraint.default)
    return constraint


def reference_keep(
    mutations: list[Mutation], constraint: Constraint, times: list[int],
    moves: dict[str, dict[str, int]] | None = None,
) -> tuple[list[Mutation], dict[str, int]]:
    """Per unit in (ts, seq) order: keep while the mutations follow the machine and rank <= k.
    ``moves`` receives the dropped mutations of machine classes per reason and per move (the
    state of the entry's previous mutation, kept or not, to the mutation's own)."""
    ordered = sorted(mutations, key=lambda m: (m["ts"], m["seq"], m["entry"], m["record"]))
    ordered = [m for m in ordered if m["ts"] <= times[-1]]
    machine: dict[str, Any] = {}
    rank: dict[str, int] = defaultdict(int)
    stopped: dict[str, str] = {}
    prev: dict[tuple[str, str], str | None] = {}  # everything per entry is per (unit, entry)
    seen: dict[tuple[str, str], int] = defaultdict(int)
    stays: dict[tuple[str, str], int] = defaultdict(int)
    kept: list[Mutation] = []
    dropped: dict[str, int] = defaultdict(int)
    raw: dict[tuple[str, str], str | None] = {}
    for m in ordered:
        u, e = m["unit"], (m["unit"], m["entry"])
        if u not in machine:
            machine[u] = machine_for(constraint, m["after"])
        c = machine[u]
        rank[u] += 1
        seen[e] += 1
        move = None
        if isinstance(c, StateMachine):
            state = state_of(c, m["after"])
            to = "(deleted)" if m["after"] is None else state or "(unknown)"
            move = f"{raw.get(e) or '(none)'} -> {to}"
            raw[e] = state
        if c is None:
            dropped["unknown_class"] += 1
            continue
        if u not in stopped and rank[u] > c.k:
            stopped[u] = "at_most_k"
        if u not in stopped and isinstance(c, StateMachine):
            reason, prev[e] = step(c, m, prev.get(e), seen[e], stays, e)
            if reason:
                stopped[u] = reason
        if u in stopped:
            dropped[stopped[u]] += 1
            if moves is not None and move is not None:
                per = moves.setdefault(stopped[u], {})
                per[move] = per.get(move, 0) + 1
            continue
        kept.append(m)
    return kept, dict(dropped)


def state_of(c: StateMachine, row: dict[str, Any] | None) -> str | None:
    """The state of a row (None: deleted or unknown); per-op limits: from the whole row."""
    if isinstance(c, OpLimits):
        return c.state_of_row(row)
    return None if row is None else c.state_of(row.get(c.column))


def step(
    c: StateMachine,
    m: Mutation,
    before: str | None,
    nth: int,
    stays: dict[tuple[str, str], int],
    e: tuple[str, str],
) -> tuple[str | None, str | None]:
    """One mutation of entry ``e``: (the failure, if any; the entry's new state)."""
    after = state_of(c, m["after"])
    if m["after"] is not None and after is None:
        return "unknown_state", after
    if nth == 1 and before is None:
        ok = after is not None and c.allows(None, after)
    elif before is None:
        ok = False  # after a delete (or an unknown state): no second insert
    else:
        ok = c.allows(before, after)
    if not ok:
        return "state_transition", after
    if before is not None and after is not None and c.stays(before, after):
        stays[e] += 1
        if stays[e] > c.composite_allowance(c.composite_of(after)):
            return "state_allowance", after
    else:
        stays[e] = 0
    return None, after


@st.composite
def changelogs(draw: st.DrawFn, constraint: Constraint, unit_is_entry: bool) -> list[Mutation]:
    """Entries that mostly follow their machine, sometimes not (bad moves, unknown values).
    With a unit column an entry sometimes moves to another unit: a delete in the old unit and an
    insert in the new one, with the same record, ts and seq."""
    mutations: list[Mutation] = []
    seq = 0
    for e in range(draw(st.integers(1, 5))):
        entry = f"e{e}"
        unit = entry if unit_is_entry else f"u{draw(st.integers(0, 2))}"
        cls = draw(st.sampled_from(["x", "y", "w"]))
        c = machine_for(constraint, {"cls": cls})
        m = c if isinstance(c, StateMachine) else TICKET
        times = sorted(draw(st.lists(st.integers(0, 45), min_size=1, max_size=8)))
        row: dict[str, Any] | None = None
        state: str | None = None
        for ts in times:
            seq += 1
            follow = draw(st.integers(0, 9)) < 8
            if follow:
                options: list[str | None] = (
                    list(m.initial)
                    if state is None and row is None
                    else [s for s in m.states if state is not None and m.allows(state, s)]
                )
                if state is not None and m.allows(state, None):
                    options.append(None)
                nxt = draw(st.sampled_from(options)) if options else None
            else:
                nxt = draw(st.sampled_from([*m.states, None, "bogus"]))
            if nxt is None:
                after = None
            else:
                k = row["k"] if row is not None and draw(st.integers(0, 3)) else "a"
                after = {"cls": cls, "v": draw(st.integers(0, 9)),
                         "k": k if draw(st.integers(0, 4)) else "b"}  # fmt: skip
                after[m.column] = value_of(m, nxt)
            if after is None and row is None:
                continue  # a delete of nothing is not a valid mutation
            base = {"record": seq, "entry": entry, "ts": ts, "seq": seq}
            op = "delete" if after is None else ("insert" if row is None else "update")
            new_unit = unit
            if op == "update" and not unit_is_entry and draw(st.integers(0, 4)) == 0:
                new_unit = f"u{draw(st.integers(0, 2))}"
            append_mutation(mutations, base, unit=unit, new_unit=new_unit, op=op, row=row,
                            after=after)
            unit = new_unit
            row, state = after, nxt
            if after is None:
                break
    return draw(st.permutations(mutations))


def value_of(m: StateMachine, state: str) -> Any:
    if state == "bogus":
        return "bogus"
    if m.buckets is not None:
        lo = m.buckets[state]
        return int(lo) + (2 if state == "3+" else 0)
    if m.values is not None:
        return next(v for v, s in m.values.items() if s == state)
    return state


def run(mutations: list[Mutation], constraint: Constraint, times: list[int], unit_is_entry: bool):
    con = make_table(mutations)
    agg = aggregate(
        con,
        table="changelog",
        queries=QUERIES,
        constraint=constraint,
        release_times=times,
        first_interval=1,
        unit_is_entry=unit_is_entry,
    )
    kept = set(con.execute("SELECT record, unit FROM _dpcr_bounded WHERE kept").fetchall())
    return con, agg, kept


@pytest.mark.parametrize("unit_is_entry", [True, False])
@given(data=st.data())
@settings(max_examples=20, deadline=None)
def test_engine_matches_reference(unit_is_entry: bool, data: st.DataObject) -> None:
    constraint = data.draw(st.sampled_from(CONSTRAINTS))
    mutations = data.draw(changelogs(constraint, unit_is_entry))
    times = data.draw(st.sampled_from(TIMES))
    if not mutations:
        return
    _con, agg, kept = run(mutations, constraint, times, unit_is_entry)
    moves: dict[str, dict[str, int]] = {}
    ref_kept, dropped = reference_keep(mutations, constraint, times, moves)
    assert kept == {(m["record"], m["unit"]) for m in ref_kept}
    assert agg.report.dropped == dropped
    assert agg.report.dropped_moves == moves
    expected, _ = reference(ref_kept, QUERIES, AtMostK(k=10**6), times, unit_is_entry)
    for q in QUERIES:
        np.testing.assert_array_equal(agg.values[q.name], expected[q.name], err_msg=q.name)


@pytest.mark.parametrize("unit_is_entry", [True, False])
@given(data=st.data())
@settings(max_examples=20, deadline=None)
def test_bounded_changelog_follows_the_machine(unit_is_entry: bool, data: st.DataObject) -> None:
    """Kept mutations: a prefix of each unit, a valid history per entry, at most k per unit."""
    constraint = data.draw(st.sampled_from(CONSTRAINTS))
    mutations = data.draw(changelogs(constraint, unit_is_entry))
    if not mutations:
        return
    _con, _agg, kept = run(mutations, constraint, [100], unit_is_entry)
    ordered = sorted(mutations, key=lambda m: (m["ts"], m["seq"], m["entry"], m["record"]))
    by_unit: dict[str, list[Mutation]] = defaultdict(list)
    for m in ordered:
        by_unit[m["unit"]].append(m)
    for ms in by_unit.values():
        flags = [(m["record"], m["unit"]) in kept for m in ms]
        assert flags == sorted(flags, reverse=True)  # prefix
        c = machine_for(constraint, ms[0]["after"])
        if not isinstance(c, StateMachine):
            continue
        assert sum(flags) <= c.k
        histories: dict[tuple[str, str], list[str | None]] = defaultdict(list)
        for m, k in zip(ms, flags, strict=True):
            if k:
                s = None if m["after"] is None else c.state_of(m["after"].get(c.column))
                histories[(m["unit"], m["entry"])].append(s)
        for h in histories.values():
            assert_valid(c, h)


def assert_valid(c: StateMachine, history: list[str | None]) -> None:
    assert history[0] in c.initial
    stays = 0
    for before, after in itertools.pairwise(history):
        assert before is not None, "a mutation after the delete was kept"
        assert c.allows(before, after), (before, after)
        if after is not None and c.stays(before, after):
            stays += 1
            assert stays <= c.composite_allowance(c.composite_of(after))
        else:
            stays = 0


@given(data=st.data())
@settings(max_examples=15, deadline=None)
def test_bounding_one_unit_is_independent_of_other_units(data: st.DataObject) -> None:
    constraint = data.draw(st.sampled_from(CONSTRAINTS))
    mutations = data.draw(changelogs(constraint, unit_is_entry=False))
    if not mutations:
        return
    target = sorted({m["unit"] for m in mutations})[0]
    alone = [m for m in mutations if m["unit"] == target]

    def state_of(ms: list[Mutation]) -> tuple[int, int]:
        con, _agg, _kept = run(ms, constraint, [100], unit_is_entry=False)
        return {u: (k, d) for u, _c, _f, k, d in unit_state(con)}[target]

    assert state_of(mutations) == state_of(alone)


def test_drop_reasons_on_a_hand_written_changelog() -> None:
    def mut(record: int, entry: str, ts: int, s: Any) -> Mutation:
        after = None if s is None else {"s": s, "cls": "x", "v": 1, "k": "a"}
        return {
            "record": record,
            "unit": entry,
            "entry": entry,
            "ts": ts,
            "seq": record,
            "op": "update",
            "before": None,
            "after": after,
        }

    log = [
        # a: a full valid ticket life (5 mutations)
        mut(1, "a", 1, "issued"),
        mut(2, "a", 2, "active"),
        mut(3, "a", 3, "used"),
        mut(4, "a", 4, "expired"),
        mut(5, "a", 5, None),
        # b: used before active -> transition; the rest of b goes with it
        mut(6, "b", 1, "issued"),
        mut(7, "b", 2, "used"),
        mut(8, "b", 3, "expired"),
        # c: an update that keeps the state (allowance 0) -> allowance
        mut(9, "c", 1, "issued"),
        mut(10, "c", 2, "issued"),
        # d: unknown state
        mut(11, "d", 1, "issued"),
        mut(12, "d", 2, "lost"),
        # e: deleted while active (not terminal)
        mut(13, "e", 1, "issued"),
        mut(14, "e", 2, "active"),
        mut(15, "e", 3, None),
    ]
    _con, agg, kept = run(log, TICKET, [100], unit_is_entry=True)
    assert {r for r, _u in kept} == {1, 2, 3, 4, 5, 6, 9, 11, 13, 14}
    assert agg.report.dropped == {"state_transition": 3, "state_allowance": 1, "unknown_state": 1}
    assert agg.report.dropped_moves == {
        "state_allowance": {"issued -> issued": 1},
        "state_transition": {"active -> (deleted)": 1, "issued -> used": 1, "used -> expired": 1},
        "unknown_state": {"issued -> (unknown)": 1},
    }


def test_per_op_limits_and_immutable_columns_on_a_hand_written_changelog() -> None:
    """``at_most_k = 4, inserts = 1, deletes = 1, immutable = ["k"]``: a second insert, a
    delete past the limit and an update that changes k are dropped with the rest of the unit;
    the count of k = a then changes at inserts and deletes only."""

    def mut(record: int, entry: str, ts: int, op: str, k: str | None) -> Mutation:
        after = None if k is None else {"cls": "x", "v": record % 10, "k": k}
        return {"record": record, "unit": entry, "entry": entry, "ts": ts, "seq": record,
                "op": op, "before": None, "after": after}  # fmt: skip

    log = [
        mut(1, "a", 1, "insert", "a"), mut(2, "a", 2, "update", "a"),
        mut(3, "a", 3, "delete", None),
        mut(4, "a", 4, "insert", "a"),  # a second insert: dropped
        mut(5, "b", 1, "insert", "a"), mut(6, "b", 2, "update", "a"),
        mut(7, "b", 3, "update", "b"),  # k changes: dropped, and b's later mutations
        mut(8, "b", 4, "update", "b"),
        mut(9, "c", 1, "insert", "b"), mut(10, "c", 2, "update", "b"),
        mut(11, "c", 3, "update", "b"), mut(12, "c", 4, "update", "b"),
        mut(13, "c", 5, "update", "b"),  # the 5th mutation: past k
    ]  # fmt: skip
    limits = OpLimits(limit=4, deletes=1, immutable=("k",))
    _con, agg, kept = run(log, limits, [100], unit_is_entry=True)
    assert {r for r, _u in kept} == {1, 2, 3, 5, 6, 9, 10, 11, 12}
    assert agg.report.dropped == {"state_transition": 3, "at_most_k": 1}
    assert agg.report.dropped_moves["state_transition"] == {
        "(none) -> [\"a\"]": 1, "[\"a\"] -> [\"b\"]": 1, "[\"b\"] -> [\"b\"]": 1,
    }  # fmt: skip


def test_unit_with_several_entries_shares_k() -> None:
    rows = []
    for i, e in enumerate(["a", "b"]):
        for j, s in enumerate(["issued", "active", "used", "expired", None]):
            r = 1 + 5 * i + j
            after = None if s is None else {"s": s, "cls": "x", "v": 1, "k": "a"}
            rows.append(
                {
                    "record": r,
                    "unit": "u",
                    "entry": e,
                    "ts": r,
                    "seq": r,
                    "op": "update",
                    "before": None,
                    "after": after,
                }
            )
    _con, agg, kept = run(rows, TICKET, [100], unit_is_entry=False)
    assert TICKET.k == 5 and {r for r, _u in kept} == {1, 2, 3, 4, 5}
    assert agg.report.dropped == {"at_most_k": 5}
