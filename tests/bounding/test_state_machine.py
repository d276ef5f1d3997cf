"""StateMachine: SCC condensation, derived k and its path, against brute force."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcr.bounding.constraints import AtMostK, Hybrid
from dpcr.bounding.state_machine import StateMachine, longest_history
from dpcr.errors import ConfigError
from dpcr.plans.counts import max_affected, max_affected_by_class
from dpcr.plans.dcr import DisjointRelease

TICKET = StateMachine(
    column="status",
    initial=("issued",),
    transitions=(
        "issued -> activated -> used1 -> used2 -> used3 -> expired",
        "issued -> expired",
        "activated -> expired",
        "used1 -> expired",
        "used2 -> expired",
    ),
    terminal=("expired",),
)
SUBSCRIPTION = StateMachine(
    column="status",
    initial=("trial", "active"),
    transitions=(
        "trial -> active -> paused -> active",
        "active -> cancelled",
        "paused -> cancelled",
    ),
    terminal=("cancelled",),
    allowance={"paused": 6},
)
COUNTER = StateMachine(
    column="uses",
    initial=("0",),
    transitions=("0 -> 1 -> 2 -> 3+",),
    terminal=("0", "1", "2", "3+"),
    buckets={"0": 0, "1": 1, "2": 2, "3+": 3},
    allowance={"3+": 4},
)


def test_ticket_k_and_path() -> None:
    assert TICKET.k == 7
    assert TICKET.path_description() == (
        "insert → issued → activated → used1 → used2 → used3 → expired → delete"
    )
    assert isinstance(TICKET, AtMostK)


def test_cycle_collapses_into_one_composite_state() -> None:
    assert ("active", "paused") in SUBSCRIPTION.composites
    # insert (trial), → {active, paused} + 6 stays, → cancelled, delete
    assert SUBSCRIPTION.k == 1 + 1 + 6 + 1 + 1
    assert "{active, paused} (+6 within)" in SUBSCRIPTION.path_description()


def test_counter_buckets() -> None:
    assert [COUNTER.state_of(x) for x in (0, 1, 2, 3, 17, 2.5, -1, "3", None)] == [
        "0",
        "1",
        "2",
        "3+",
        "3+",
        "2",
        None,
        None,
        None,
    ]
    assert COUNTER.k == 4 + 4 + 1


def test_values_mapping_and_identity() -> None:
    m = StateMachine(
        column="s",
        initial=("open",),
        transitions=("open -> closed",),
        terminal=("closed",),
        values={"new": "open", "in_progress": "open", "done": "closed"},
    )
    assert [m.state_of(v) for v in ("new", "in_progress", "done", "open", 3)] == [
        "open",
        "open",
        "closed",
        None,
        None,
    ]
    assert TICKET.state_of("used1") == "used1" and TICKET.state_of("nope") is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial": ()}, "initial"),
        ({"transitions": ("a -> a",)}, "allowance"),
        ({"transitions": ("a -> b -> a",)}, "cycle"),
        ({"transitions": ("a -> b -> a",), "allowance": {"a": 1, "b": 2}}, "same composite"),
        ({"allowance": {"zz": 1}}, "not a state"),
        ({"allowance": {"a": -1}}, ">= 0"),
        ({"transitions": ("a ->",)}, "transition"),
        ({"values": {"x": "a"}, "buckets": {"a": 0}}, "not both"),
        ({"buckets": {"a": 0, "b": 0}}, "same lower bound"),
        ({"column": ""}, "column"),
    ],
)
def test_invalid_machines_say_what_to_fix(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {
        "column": "s",
        "initial": ("a",),
        "transitions": ("a -> b",),
        "terminal": ("b",),
    }
    with pytest.raises(ConfigError, match=message):
        StateMachine(**{**base, **kwargs})  # type: ignore[arg-type]


def test_cycle_with_zero_allowance_drops_moves_inside() -> None:
    m = StateMachine(
        column="s",
        initial=("a",),
        transitions=("a -> b -> a", "b -> c"),
        terminal=("c",),
        allowance={"a": 0},
    )
    assert m.k == 3
    # brute force: a -> b would stay inside {a, b}: not possible, so the exit b -> c is unreachable
    assert longest_history(m)[0] == 1


# -- brute-force oracle over random small machines ----------------------------------------------


@st.composite
def machines(draw: st.DrawFn) -> StateMachine:
    n = draw(st.integers(1, 5))
    names = [f"s{i}" for i in range(n)]
    edges = draw(
        st.lists(
            st.tuples(st.sampled_from(names), st.sampled_from(names)).filter(
                lambda e: e[0] != e[1]
            ),
            max_size=8,
            unique=True,
        )
    )
    initial = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
    terminal = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
    probe = StateMachine(
        column="s",
        initial=tuple(initial),
        transitions=tuple(edges),
        terminal=tuple(terminal),
        allowance={comp[0]: 0 for comp in _cyclic(names, edges)},
    )
    allowance = {
        comp[0]: draw(st.integers(0, 2))
        for comp in probe.composites
        if draw(st.booleans()) or len(comp) > 1
    }
    return StateMachine(
        column="s",
        initial=tuple(initial),
        transitions=tuple(edges),
        terminal=tuple(terminal),
        allowance=allowance,
    )


def _cyclic(names: list[str], edges: list[tuple[str, str]]) -> list[tuple[str, ...]]:
    from dpcr.bounding.state_machine import _sccs

    return [c for c in _sccs(tuple(names), tuple(edges)) if len(c) > 1]


def _all_histories(m: StateMachine, cap: int) -> list[list[str | None]]:
    """Every valid history up to length ``cap`` (engine rules), by plain enumeration."""
    out: list[list[str | None]] = []

    def valid(h: list[str | None]) -> bool:
        prev: str | None = None
        stays = 0
        for i, s in enumerate(h):
            if i and prev is None:
                return False  # after the delete
            if not m.allows(prev, s):
                return False
            if prev is not None and s is not None and m.stays(prev, s):
                stays += 1
                if stays > m.composite_allowance(m.composite_of(s)):
                    return False
            elif s is not None:
                stays = 0
            prev = s
        return True

    alphabet: list[str | None] = [*m.states, None]
    for length in range(1, cap + 1):
        for h in itertools.product(alphabet, repeat=length):
            if valid(list(h)):
                out.append(list(h))
    return out


@settings(max_examples=60, deadline=None)
@given(machines())
def test_derived_k_bounds_every_valid_history(m: StateMachine) -> None:
    longest, history = longest_history(m)
    assert longest <= m.k
    if all(len(c) == 1 for c in m.composites):
        # acyclic: stays are updates that keep the state, always possible, so k is attained
        assert longest == m.k
    assert len(history) == longest


@settings(max_examples=25, deadline=None)
@given(machines().filter(lambda m: len(m.states) <= 3 and m.k <= 5))
def test_enumeration_agrees_with_search(m: StateMachine) -> None:
    histories = _all_histories(m, m.k + 1)
    assert max(len(h) for h in histories) == longest_history(m)[0] <= m.k


@settings(max_examples=25, deadline=None)
@given(machines().filter(lambda m: m.k <= 6), st.integers(1, 5))
def test_affected_releases_within_the_plan_guarantee(m: StateMachine, n: int) -> None:
    """Every valid history, at every placement of its mutations on n disjoint intervals (times
    non-decreasing), touches at most max_affected releases."""
    plan = DisjointRelease(times=tuple(10 * (i + 1) for i in range(n)))
    bound = max_affected(plan, m)
    assert bound == min(m.k, n)
    longest = longest_history(m)[0]
    worst = 0
    for length in range(1, longest + 1):
        for placement in itertools.combinations_with_replacement(range(n), length):
            worst = max(worst, len(set(placement)))
    assert worst <= bound
    assert worst == min(longest, n)


def test_hybrid_of_state_machines_counts_each_class() -> None:
    h = Hybrid(column="kind", classes={"ticket": TICKET, "sub": SUBSCRIPTION}, default=AtMostK(k=2))
    plan = DisjointRelease(start=0, period=10)
    assert max_affected_by_class(plan, h) == {"ticket": 7, "sub": 10, "*": 2}
    assert max_affected(plan, h) == 10
    assert "state machine on status" in h.describe()
