"""Event queries (:class:`dpcr.queries.Events`) on the DuckDB engine against a plain-Python
reference: per interval, the kept mutations of one op whose rows match, each unit counted at
most once per base interval (the rest clamped and reported)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcr.bounding.constraints import AtMostK, Constraint
from dpcr.engines.duckdb import aggregate
from dpcr.errors import ConfigError
from dpcr.queries import Count, Events, Query
from engines.test_duckdb_engine import CONSTRAINTS, TIMES, bounded, changelogs, make_table

Mutation = dict[str, Any]

EVENTS: tuple[Events, ...] = (
    Events(name="ins", op="insert"),
    Events(name="ins_ab", op="insert", where={"k": ["a", "b"]}),
    Events(name="upd", op="update"),
    Events(name="upd_a_b", op="update", before={"k": "a"}, where={"k": "b"}),
    Events(name="upd_v3", op="update", where={"v": 3}),
    Events(name="upd_from_a", op="update", before={"k": ["a", "z"]}),
    Events(name="del", op="delete"),
    Events(name="del_c", op="delete", where={"k": "c"}),
)
QUERIES: tuple[Query, ...] = (Count(name="live"), *EVENTS)


def _matches(where: Any, row: dict[str, Any] | None) -> bool:
    return row is not None and all(row.get(c) in v for c, v in where.items())


def is_event(
    q: Events, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> bool:
    """Whether a mutation (``op``, the row before it as the bounded history has it, the row
    after) is one ``q`` counts."""
    if op != q.op:
        return False
    if op == "delete":
        return _matches(q.where, before)
    return _matches(q.where, after) and (op == "insert" or _matches(q.before, before))


def reference(
    mutations: list[Mutation], constraint: Constraint, times: list[int]
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Per event query, the clamped counts per interval, and the clamped unit-intervals."""
    kept, _ = bounded(mutations, constraint, times)
    out: dict[str, np.ndarray] = {}
    clamped: dict[str, int] = {}
    for q in EVENTS:
        state: dict[tuple[str, str], dict[str, Any] | None] = {}
        per_unit: dict[tuple[str, int], int] = defaultdict(int)
        for m in kept:
            key = (m["unit"], m["entry"])
            iv = next(i for i, t in enumerate(times) if m["ts"] <= t)
            if is_event(q, m["op"], state.get(key), m["after"]):
                per_unit[(m["unit"], iv)] += 1
            state[key] = m["after"]
        values = np.zeros((len(times), 1), dtype=np.int64)
        for (_u, iv), n in per_unit.items():
            values[iv, 0] += min(n, 1)
        out[q.name] = values
        if over := sum(1 for n in per_unit.values() if n > 1):
            clamped[q.name] = over
    return out, clamped


@pytest.mark.parametrize("unit_is_entry", [True, False])
@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_event_queries_match_the_reference(unit_is_entry: bool, data: st.DataObject) -> None:
    mutations = data.draw(changelogs(unit_is_entry))
    constraint = data.draw(st.sampled_from(CONSTRAINTS))
    times = data.draw(st.sampled_from(TIMES))
    agg = aggregate(con=make_table(mutations), table="changelog", queries=QUERIES,
                    constraint=constraint, release_times=times, first_interval=1,
                    unit_is_entry=unit_is_entry)  # fmt: skip
    expected, clamped = reference(mutations, constraint, times)
    for q in EVENTS:
        np.testing.assert_array_equal(agg.values[q.name], expected[q.name], err_msg=q.name)
    events = {k: v for k, v in agg.report.clamped.items() if k != "live"}
    assert events == clamped


def _history(ops: list[tuple[int, str, dict[str, Any] | None]]) -> list[Mutation]:
    out, row = [], None
    for i, (ts, op, after) in enumerate(ops, start=1):
        out.append({"record": i, "unit": "e", "entry": "e", "ts": ts, "seq": i, "op": op,
                    "before": row, "after": after})  # fmt: skip
        row = after
    return out


def test_an_entry_counts_once_per_interval_and_the_rest_is_reported() -> None:
    """Insert, delete, insert and delete again in one interval: one insert and one delete
    there (each clamped once); a cancellation in the next interval counts; the live count
    telescopes as before."""
    a, b = {"s": "active"}, {"s": "cancelled"}
    log = _history(
        [
            (1, "insert", a),
            (2, "delete", None),
            (3, "insert", a),
            (4, "delete", None),
            (11, "insert", a),
            (12, "update", b),
            (13, "update", a),
            (14, "update", b),
        ]
    )
    queries = (Count(name="live"), Events(name="signups", op="insert"),
               Events(name="gone", op="delete"),
               Events(name="cancellations", op="update", before={"s": "active"},
                      where={"s": "cancelled"}))  # fmt: skip
    agg = aggregate(make_table(log), table="changelog", queries=queries, constraint=AtMostK(k=9),
                    release_times=[10, 20], first_interval=1, unit_is_entry=True)  # fmt: skip
    got = {q.name: agg.values[q.name][:, 0].tolist() for q in queries}
    assert got == {"live": [0, 1], "signups": [1, 1], "gone": [1, 0], "cancellations": [0, 1]}
    assert agg.report.clamped == {"signups": 1, "gone": 1, "cancellations": 1}


def test_events_validate_their_fields() -> None:
    with pytest.raises(ConfigError, match="op must be one of"):
        Events(name="x", op="upsert")
    with pytest.raises(ConfigError, match="before filters the row before an update"):
        Events(name="x", op="insert", before={"s": "a"})
    q = Events(name="c", op="update", before={"s": "active"}, where={"s": ["cancelled"]})
    assert q.touched_by() == frozenset({"update"})
    assert q.describe() == "count of updates where s = 'cancelled' (row before: s = 'active')"
    assert Events(name="d", op="delete").touched_by() == frozenset({"delete"})


def test_alerts_on_event_queries_are_refused(tmp_path: Any) -> None:
    import dpcr

    with pytest.raises(ConfigError, match="is an event query"):
        dpcr.ContinualRelease(
            source=dpcr.sources.Jsonl(path=tmp_path / "log.jsonl"),
            constraint=dpcr.AtMostK(k=2),
            plan=dpcr.DisjointRelease(start="2025-01-01", period="1d"),
            queries=[Events(name="signups", op="insert")],
            alerts=[
                dpcr.AlertRule(
                    name="many",
                    statistic="signups",
                    what="running",
                    threshold=10,
                    cutoff=1,
                    epsilon=0.1,
                )
            ],
            budget=dpcr.Budget(epsilon=1.0),
        )


@given(data=st.data())
@settings(max_examples=30, deadline=None)
def test_only_the_ops_an_event_query_is_touched_by_change_it(data: st.DataObject) -> None:
    """Per unit (its rows alone, as a neighbour's difference is), an event query's interval
    changes only where the unit has a kept mutation of an op in ``touched_by()``."""
    unit_is_entry = data.draw(st.booleans())
    mutations = data.draw(changelogs(unit_is_entry))
    constraint = data.draw(st.sampled_from(CONSTRAINTS))
    times = data.draw(st.sampled_from(TIMES))
    for unit in sorted({m["unit"] for m in mutations}):
        own = [m for m in mutations if m["unit"] == unit]
        agg = aggregate(make_table(own), table="changelog", queries=EVENTS,
                        constraint=constraint, release_times=times, first_interval=1,
                        unit_is_entry=unit_is_entry)  # fmt: skip
        kept, _ = bounded(own, constraint, times)
        for q in EVENTS:
            touched = {next(i for i, t in enumerate(times) if m["ts"] <= t)
                       for m in kept if m["op"] in q.touched_by()}  # fmt: skip
            changed = {i for i, v in enumerate(agg.values[q.name][:, 0]) if v}
            assert changed <= touched, (q.name, unit)


def test_a_retirement_is_a_delete_event() -> None:
    """``on_exhausted = "retire"`` at most 2: the insert is kept and the second mutation is
    the retirement, a delete of the entry, which a delete query counts (an update query
    counts nothing: no update is kept)."""
    a = {"s": "active"}
    log = _history([(1, "insert", a), (12, "update", a), (23, "update", a), (24, "update", a)])
    queries = (Events(name="gone", op="delete"), Events(name="upd", op="update"))
    agg = aggregate(make_table(log), table="changelog", queries=queries, constraint=AtMostK(k=2),
                    release_times=[10, 20, 30], first_interval=1, unit_is_entry=True,
                    retire=True)  # fmt: skip
    assert agg.values["gone"][:, 0].tolist() == [0, 1, 0]
    assert agg.values["upd"][:, 0].tolist() == [0, 0, 0]
