"""Neighbouring changelogs under a unit column: removing one unit changes nothing of any other.

The neighbouring relation (docs/privacy.md, section 8): a record belongs to the units named by
its own rows -- ``after[col]`` for an insert, ``before[col]`` for a delete, both for an update --
and an update that changes the unit column is a delete in the old unit plus an insert in the new
one. The neighbour of a raw changelog without unit U drops U's records; an update from U to V
keeps only its V half (an insert), one from V to U only its V half (a delete). Then, for every
other unit, the validated canonical rows, the bounding decisions and the contributions are the
same, and the per-interval totals differ by exactly U's own (bounded) contribution.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid, TimeBounded
from dpcr.bounding.state_machine import OpLimits, StateMachine
from dpcr.changelog import JsonlSource, load
from dpcr.engines.base import Aggregates
from dpcr.engines.duckdb import aggregate, unit_state
from dpcr.queries import Count, Events, Histogram, Query, Sum

Record = dict[str, Any]
RIDERS = ("u0", "u1", "u2")
QUERIES: tuple[Query, ...] = (
    Count(name="n"),
    Sum(name="v", column="v", lower=0, upper=10),
    Histogram(name="k", column="k", categories=("a", "b")),
    Events(name="new_a", op="insert", where={"k": "a"}),
    Events(name="a_to_b", op="update", before={"k": "a"}, where={"k": "b"}),
    Events(name="gone", op="delete"),
)
MACHINE = StateMachine(
    column="s",
    initial=("new",),
    transitions=("new -> used",),
    terminal=("new", "used"),
    allowance={"new": 1, "used": 2},
)
CONSTRAINTS: list[Constraint] = [
    AtMostK(k=2),
    TimeBounded(bound=8),
    MACHINE,
    Hybrid(column="cls", classes={"x": AtMostK(k=1), "y": MACHINE}, default=TimeBounded(bound=5)),
    OpLimits(limit=3, deletes=1),
]
TIMES = [10, 20, 30]


def _row(draw: st.DrawFn, entry: str, rider: str | None) -> Record:
    row: Record = {
        "id": entry,
        "v": draw(st.one_of(st.integers(-2, 12), st.just("NaN"))),
        "k": draw(st.sampled_from("abz")),
        "s": draw(st.sampled_from(["new", "used"])),
        "cls": draw(st.sampled_from("xyw")),
    }
    if rider is not None:
        row["rider"] = rider
    return row


@st.composite
def raw_changelogs(draw: st.DrawFn) -> list[Record]:
    """Coherent histories whose tickets change owner, plus records that break the rules
    (missing before rows, missing units, repeated seqs, moves of entries another unit holds)."""
    records: list[Record] = []
    seq = 0
    entries = [f"t{e}" for e in range(draw(st.integers(1, 4)))]
    for entry in entries:
        rider = draw(st.sampled_from(RIDERS))
        row: Record | None = None
        for ts in sorted(draw(st.lists(st.integers(0, 30), min_size=1, max_size=6))):
            seq += 1
            op = "insert" if row is None else draw(st.sampled_from(["update", "update", "delete"]))
            after = None
            if op != "delete":
                if op == "update" and draw(st.booleans()):
                    rider = draw(st.sampled_from(RIDERS))
                after = _row(draw, entry, rider)
            records.append(
                {"entry": entry, "ts": ts, "seq": seq, "op": op, "before": row, "after": after}
            )
            row = after
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["insert", "update", "delete"]))
        entry = draw(st.sampled_from(entries))
        rider = st.one_of(st.sampled_from(RIDERS), st.none())
        before = None if op == "insert" or draw(st.booleans()) else _row(draw, entry, draw(rider))
        after = None if op == "delete" else _row(draw, entry, draw(rider))
        record = {"entry": entry, "ts": draw(st.integers(0, 30)), "op": op, "before": before,
                  "after": after}  # fmt: skip
        seq_ = draw(st.one_of(st.none(), st.integers(1, seq)))
        if seq_ is not None:
            record["seq"] = seq_
        records.append(record)
    return draw(st.permutations(records))


def units_of(record: Record) -> tuple[str | None, str | None]:
    """(unit charged with the removal, unit charged with the addition), from the record alone."""
    before, after = record["before"], record["after"]
    b = before.get("rider") if isinstance(before, dict) else None
    a = after.get("rider") if isinstance(after, dict) else None
    if record["op"] == "insert":
        return None, a
    if record["op"] == "delete":
        return b, None
    return (b, a) if b and a else (None, None)  # an update needs both (else it is rejected)


def without(records: list[Record], unit: str) -> list[Record | str]:
    """The raw neighbour without ``unit``; a blank line keeps the record numbers."""
    out: list[Record | str] = []
    for r in records:
        b, a = units_of(r)
        if r["op"] == "update" and b != a and unit in (b, a):
            if b == unit:
                out.append({**r, "op": "insert", "before": None})
            else:
                out.append({**r, "op": "delete", "after": None})
        elif unit in (b, a):
            out.append("")
        else:
            out.append(r)
    return out


def _load(tmp: Path, name: str, records: list[Record] | list[Record | str]) -> Any:
    path = tmp / f"{name}.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    con = duckdb.connect()
    load(JsonlSource(path=path), con, unit_column="rider", on_error="quarantine",
         quarantine_path=tmp / f"{name}.q.jsonl")  # fmt: skip
    return con


def _aggregate(con: Any, constraint: Constraint, table: str = "changelog") -> Aggregates:
    return aggregate(con, table=table, queries=QUERIES, constraint=constraint,
                     release_times=TIMES, first_interval=1, unit_is_entry=False)  # fmt: skip


def _rows(con: Any, sql: str, unit: str) -> list[tuple[Any, ...]]:
    return con.execute(sql, [unit]).fetchall()  # type: ignore[no-any-return]


CANONICAL = (
    "SELECT record, unit, entry, ts, seq, op, before::VARCHAR, after::VARCHAR FROM changelog "
    "WHERE unit <> ? ORDER BY ts, seq, record, unit"
)
BOUNDED = (
    "SELECT record, unit, entry, kept, reason FROM _dpcr_bounded WHERE unit <> ? "
    "ORDER BY record, unit"
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_removing_a_unit_changes_no_other_unit(data: st.DataObject) -> None:
    records = data.draw(raw_changelogs())
    constraint = data.draw(st.sampled_from(CONSTRAINTS))
    units = sorted({u for r in records for u in units_of(r) if u})
    if not units:
        return
    unit = data.draw(st.sampled_from(units))
    with tempfile.TemporaryDirectory() as tmp:
        full = _load(Path(tmp), "full", records)
        neighbour = _load(Path(tmp), "neighbour", without(records, unit))
    # Validation: every other unit's canonical rows are the same.
    assert _rows(full, CANONICAL, unit) == _rows(neighbour, CANONICAL, unit)
    # Bounding: every other unit keeps and drops the same mutations.
    agg_full, agg_neighbour = _aggregate(full, constraint), _aggregate(neighbour, constraint)
    assert _rows(full, BOUNDED, unit) == _rows(neighbour, BOUNDED, unit)
    others = [s for s in unit_state(full) if s[0] != unit]
    assert others == unit_state(neighbour)
    # Aggregation: the totals differ by the unit's own contribution, within the sensitivity.
    full.execute("CREATE TABLE only_unit AS SELECT * FROM changelog WHERE unit = ?", [unit])
    own = _aggregate(full, constraint, table="only_unit")
    for q in QUERIES:
        diff = agg_full.values[q.name] - agg_neighbour.values[q.name]
        np.testing.assert_array_equal(diff, own.values[q.name], err_msg=q.name)
        assert np.abs(diff).sum(axis=1).max() <= q.l1_sensitivity, q.name


def test_tickets_moved_to_other_riders_cost_the_mover_at_most_k() -> None:
    """At most 1 mutation per unit, weekly counts. Rider A buys 8 tickets in week 1 and moves
    them to riders B1..B8 in week 2. Each move is A's delete plus B_i's insert, so the pair
    with and without A differs by A's one kept mutation -- not by 8, as when the moves were
    charged to B_i and validated against A's inserts."""
    week = 7 * 86_400
    log: list[Record] = []
    for i in range(1, 9):
        ticket = {"id": f"t{i}", "rider": "A"}
        log.append({"entry": f"t{i}", "ts": i, "seq": i, "op": "insert", "before": None,
                    "after": ticket})  # fmt: skip
    for i in range(1, 9):
        ticket = {"id": f"t{i}", "rider": "A"}
        log.append({"entry": f"t{i}", "ts": week + i, "seq": 8 + i, "op": "update",
                    "before": ticket, "after": {**ticket, "rider": f"B{i}"}})  # fmt: skip
    times = [week * 1_000_000, 2 * week * 1_000_000]

    def weekly(records: list[Record] | list[Record | str]) -> np.ndarray:
        with tempfile.TemporaryDirectory() as tmp:
            con = _load(Path(tmp), "c", records)
        agg = aggregate(con, table="changelog", queries=(Count(name="n"),),
                        constraint=AtMostK(k=1), release_times=times, first_interval=1,
                        unit_is_entry=False)  # fmt: skip
        return agg.values["n"][:, 0]

    with_a, without_a = weekly(log), weekly(without(log, "A"))
    assert with_a.tolist() == [1, 8]  # A's first insert; then B1..B8 each insert one ticket
    assert without_a.tolist() == [0, 8]
    assert np.abs(with_a - without_a).sum() <= 1  # k = 1: one kept mutation, one interval
