"""The DuckDB bounding/aggregation engine against a plain-Python reference of the same rules."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid, TimeBounded
from dpcr.engines.duckdb import aggregate, unit_state
from dpcr.errors import ChangelogError
from dpcr.queries import Count, Histogram, Query, Sum
from engines.helpers import append_mutation

Mutation = dict[str, Any]

QUERIES: tuple[Query, ...] = (
    Count(name="live"),
    Count(name="live_ab", where={"k": ["a", "b"]}),
    Sum(name="v", column="v", lower=0, upper=10),
    Sum(name="neg", column="v", lower=-4, upper=-1),
    Histogram(name="k", column="k", categories=("a", "b", "c"), unknown="other"),
)


def make_table(mutations: list[Mutation]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE changelog (record BIGINT, unit VARCHAR, entry VARCHAR, ts BIGINT, "
        "seq BIGINT, op VARCHAR, before JSON, after JSON)"
    )
    if not mutations:
        return con
    con.executemany(
        "INSERT INTO changelog VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                m["record"],
                m["unit"],
                m["entry"],
                m["ts"],
                m["seq"],
                m["op"],
                None if m["before"] is None else json.dumps(m["before"]),
                None if m["after"] is None else json.dumps(m["after"]),
            )
            for m in mutations
        ],
    )
    return con


def f_value(q: Query, row: dict[str, Any] | None) -> int:
    """f(row) for the reference; histograms give the key index or -1."""

    def matches() -> bool:
        return all(row is not None and row.get(c) in v for c, v in q.where.items())

    if isinstance(q, Count):
        return int(row is not None and matches())
    if isinstance(q, Sum):
        if row is None or not matches():
            return 0
        x = row.get(q.column)
        if not isinstance(x, int | float):
            return 0
        return round(min(max(x, q.lower), q.upper) / q.grid)
    if row is None or not matches():
        return -1
    key = row.get(q.column)
    return q.categories.index(key) if key in q.categories else len(q.categories)


def bounded(
    mutations: list[Mutation], constraint: Constraint, times: list[int]
) -> tuple[list[Mutation], dict[str, int]]:
    """The reference's bounding (at most k, time-bounded, hybrid by the first row's class) of
    the mutations up to the last release time: the kept ones, and the dropped per reason."""
    ordered = sorted(mutations, key=lambda m: (m["ts"], m["seq"], m["entry"], m["record"]))
    ordered = [m for m in ordered if times and m["ts"] <= times[-1]]
    rank: dict[str, int] = defaultdict(int)
    first: dict[str, tuple[int, str]] = {}
    kept = []
    dropped: dict[str, int] = defaultdict(int)
    for m in ordered:
        u = m["unit"]
        rank[u] += 1
        if u not in first:
            cls = ""
            if isinstance(constraint, Hybrid):
                cls = str((m["after"] or {}).get(constraint.column, ""))
            first[u] = (m["ts"], cls)
        c: Any = constraint
        if isinstance(constraint, Hybrid):
            c = constraint.classes.get(first[u][1], constraint.default)
        if c is None:
            dropped["unknown_class"] += 1
            continue
        if isinstance(c, AtMostK):
            ok, reason = rank[u] <= c.k, "at_most_k"
        else:
            ok, reason = m["ts"] - first[u][0] <= c.bound, "time_bounded"
        if ok:
            kept.append(m)
        else:
            dropped[reason] += 1
    return kept, dropped


def reference(
    mutations: list[Mutation],
    queries: tuple[Query, ...],
    constraint: Constraint,
    times: list[int],
    unit_is_entry: bool,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    kept, dropped = bounded(mutations, constraint, times)
    out = {q.name: np.zeros((len(times), len(q.keys)), dtype=np.int64) for q in queries}
    for q in queries:
        prev: dict[tuple[str, str], int] = {}
        per_unit: dict[tuple[str, int], np.ndarray] = defaultdict(
            lambda: np.zeros(len(q.keys), dtype=np.int64)  # noqa: B023
        )
        for m in kept:
            iv = next(i for i, t in enumerate(times) if m["ts"] <= t)
            f_new = f_value(q, m["after"])
            key = (m["unit"], m["entry"])
            f_old = prev.get(key, -1 if isinstance(q, Histogram) else 0)
            prev[key] = f_new
            vec = per_unit[(m["unit"], iv)]
            if isinstance(q, Histogram):
                if f_new >= 0:
                    vec[f_new] += 1
                if f_old >= 0:
                    vec[f_old] -= 1
            else:
                vec[0] += f_new - f_old
        for (_u, iv), vec in per_unit.items():
            if not unit_is_entry:
                bound = int(q.l1_sensitivity)
                if isinstance(q, Histogram):
                    if np.abs(vec).sum() > 2:
                        continue
                else:
                    vec = np.clip(vec, -bound, bound)
            out[q.name][iv] += vec
    return out, dict(dropped)


@st.composite
def changelogs(draw: st.DrawFn, unit_is_entry: bool) -> list[Mutation]:
    """Canonical tables as :func:`dpcr.changelog.load` writes them. With a unit column an entry
    may move to another unit: the update arrives as a delete in the old unit and an insert in the
    new one, with the same record, ts and seq."""
    mutations: list[Mutation] = []
    n_entries = draw(st.integers(1, 6))
    seq = 0
    for e in range(n_entries):
        entry = f"e{e}"
        unit = entry if unit_is_entry else f"u{draw(st.integers(0, 2))}"
        times = sorted(draw(st.lists(st.integers(0, 40), min_size=1, max_size=7)))
        row = None
        for j, ts in enumerate(times):
            seq += 1
            if row is None:
                op = "insert"
            elif j == len(times) - 1 and draw(st.booleans()):
                op = "delete"
            else:
                op = "update"
            after = None
            if op != "delete":
                after = {
                    "v": draw(st.one_of(st.integers(-6, 14), st.just("n/a"))),
                    "k": draw(st.sampled_from(["a", "b", "c", "z"])),
                    "cls": draw(st.sampled_from(["x", "y", "w"])) if row is None else row["cls"],
                }
            base = {"record": seq, "entry": entry, "ts": ts, "seq": seq}
            new_unit = unit
            if op == "update" and not unit_is_entry and draw(st.integers(0, 3)) == 0:
                new_unit = f"u{draw(st.integers(0, 2))}"
            append_mutation(mutations, base, unit=unit, new_unit=new_unit, op=op, row=row,
                            after=after)
            unit = new_unit
            row = after
            if op == "delete":
                row = None
    # Arrival order is not time order.
    return draw(st.permutations(mutations))


CONSTRAINTS: list[Constraint] = [
    AtMostK(k=1),
    AtMostK(k=3),
    TimeBounded(bound=0),
    TimeBounded(bound=7),
    Hybrid(column="cls", classes={"x": AtMostK(k=2), "y": TimeBounded(bound=5)}),
    Hybrid(column="cls", classes={"x": AtMostK(k=2)}, default=TimeBounded(bound=12)),
]
TIMES = [[10, 20, 30, 40], [5, 6, 25], [40]]


@pytest.mark.parametrize("unit_is_entry", [True, False])
@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_engine_matches_reference(unit_is_entry: bool, data: st.DataObject) -> None:
    mutations = data.draw(changelogs(unit_is_entry))
    constraint = data.draw(st.sampled_from(CONSTRAINTS))
    times = data.draw(st.sampled_from(TIMES))
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
    expected, dropped = reference(mutations, QUERIES, constraint, times, unit_is_entry)
    for q in QUERIES:
        np.testing.assert_array_equal(agg.values[q.name], expected[q.name], err_msg=q.name)
    assert agg.report.dropped == dropped
    assert agg.report.kept + sum(dropped.values()) == agg.report.mutations


@given(data=st.data())
@settings(max_examples=40, deadline=None)
def test_bounding_one_unit_is_independent_of_other_units(data: st.DataObject) -> None:
    mutations = data.draw(changelogs(unit_is_entry=False))
    constraint = data.draw(st.sampled_from(CONSTRAINTS))
    units = sorted({m["unit"] for m in mutations})
    target = units[0]
    alone = [m for m in mutations if m["unit"] == target]

    def kept_of(ms: list[Mutation]) -> tuple[int, int]:
        con = make_table(ms)
        aggregate(
            con,
            table="changelog",
            queries=QUERIES[:1],
            constraint=constraint,
            release_times=[100],
            first_interval=1,
            unit_is_entry=False,
        )
        state = {u: (k, d) for u, _c, _f, k, d in unit_state(con)}
        return state[target]

    assert kept_of(mutations) == kept_of(alone)


def test_sensitivity_holds_per_entry_and_interval() -> None:
    """An entry flipping a value many times in one interval moves the total by <= sensitivity."""
    rows = [{"v": 10 if i % 2 else 0, "k": "a" if i % 2 else "b", "cls": "x"} for i in range(9)]
    mutations = [
        {
            "record": i + 1,
            "unit": "e",
            "entry": "e",
            "ts": 1 + i,
            "seq": i + 1,
            "op": "insert" if i == 0 else "update",
            "before": None if i == 0 else rows[i - 1],
            "after": rows[i],
        }
        for i in range(9)
    ]
    agg = aggregate(
        make_table(mutations),
        table="changelog",
        queries=QUERIES,
        constraint=AtMostK(k=9),
        release_times=[100],
        first_interval=1,
        unit_is_entry=True,
    )
    assert abs(agg.values["v"][0, 0]) <= QUERIES[2].l1_sensitivity
    assert np.abs(agg.values["k"][0]).sum() <= 2


def test_first_interval_skips_released_but_keeps_state() -> None:
    mutations = [
        {
            "record": 1,
            "unit": "e",
            "entry": "e",
            "ts": 5,
            "seq": 1,
            "op": "insert",
            "before": None,
            "after": {"v": 4, "k": "a"},
        },
        {
            "record": 2,
            "unit": "e",
            "entry": "e",
            "ts": 15,
            "seq": 2,
            "op": "update",
            "before": {"v": 4, "k": "a"},
            "after": {"v": 9, "k": "b"},
        },
    ]
    agg = aggregate(
        make_table(mutations),
        table="changelog",
        queries=QUERIES,
        constraint=AtMostK(k=5),
        release_times=[10, 20],
        first_interval=2,
        unit_is_entry=True,
    )
    assert agg.values["v"].tolist() == [[5]]
    assert agg.values["k"].tolist() == [[-1, 1, 0, 0]]


def _one_row(after: dict[str, Any], **kw: Any) -> list[Mutation]:
    row = {"record": 7, "unit": "e", "entry": "e", "ts": 5, "seq": 1, "op": "insert",
           "before": None, "after": after}  # fmt: skip
    return [{**row, **kw}]


def test_unknown_histogram_values_are_dropped_and_counted_by_default() -> None:
    """One unit's odd value cannot stop a release: it counts nothing and is reported."""
    mutations = [
        *_one_row({"k": "zz"}),
        *_one_row({"k": "a"}, record=8, entry="f", unit="f", seq=2),
        {**_one_row({"k": "a"})[0], "record": 9, "ts": 15, "seq": 3, "op": "update",
         "before": {"k": "zz"}},
        {**_one_row({"k": "zz"})[0], "record": 10, "ts": 25, "seq": 4, "op": "update",
         "before": {"k": "a"}},
    ]  # fmt: skip
    q = Histogram(name="h", column="k", categories=("a", "b"))
    assert q.unknown == "drop"
    agg = aggregate(
        make_table(mutations),
        table="changelog",
        queries=(q,),
        constraint=AtMostK(k=5),
        release_times=[10, 20, 30],
        first_interval=1,
        unit_is_entry=True,
    )
    # e: zz (nothing), then a (+1 at a), then zz again (-1 at a); f: a.
    assert agg.values["h"].tolist() == [[1, 0], [1, 0], [-1, 0]]
    assert agg.report.unknown_keys == {"h": 2}


def test_unknown_histogram_key_is_an_error_when_asked() -> None:
    q = Histogram(name="h", column="k", categories=("a",), unknown="error")
    with pytest.raises(ChangelogError, match=r"record 7.*'k'.*'zz'.*unknown = 'error'") as info:
        aggregate(
            make_table(_one_row({"k": "zz"})),
            table="changelog",
            queries=(q,),
            constraint=AtMostK(k=1),
            release_times=[10],
            first_interval=1,
            unit_is_entry=True,
        )
    assert (info.value.record, info.value.reason) == (7, "unknown_key")


def test_nan_and_infinite_sum_values_count_as_missing() -> None:
    mutations = [
        *_one_row({"v": "NaN"}),
        *_one_row({"v": "Infinity"}, record=8, entry="f", unit="f", seq=2),
        *_one_row({"v": -1e400}, record=9, entry="g", unit="g", seq=3),
        *_one_row({"v": 3}, record=10, entry="h", unit="h", seq=4),
    ]
    agg = aggregate(
        make_table(mutations),
        table="changelog",
        queries=(Sum(name="v", column="v", lower=0, upper=10), Count(name="n", where={"v": 3})),
        constraint=AtMostK(k=1),
        release_times=[10],
        first_interval=1,
        unit_is_entry=True,
    )
    assert agg.values["v"].tolist() == [[3]]  # not 10 + 10 + 0 + 3
    assert agg.values["n"].tolist() == [[1]]
    assert agg.report.non_numeric == {"v": 3}


def test_report_counts_kept_rows_without_a_number_or_key_only() -> None:
    """The per-query counts of the bounding report (sums' rows without a number, histograms'
    rows outside the keys) count kept rows alone, each query its own, from one scan of the
    bounded rows: a unit of two entries, at most 2 mutations, whose dropped rows lack both."""
    rows = [({"v": 3, "k": "a"}, "x"), ({"v": "n/a", "k": "zz"}, "y"),
            ({"v": "n/a", "k": "zz"}, "x"), ({"k": "zz"}, "y")]  # fmt: skip
    mutations = [
        {"record": 7 + i, "unit": "u", "entry": entry, "ts": 5 + i, "seq": 1 + i,
         "op": "insert" if i < 2 else "update", "before": None if i < 2 else rows[i - 2][0],
         "after": after}
        for i, (after, entry) in enumerate(rows)
    ]  # fmt: skip
    queries = (Sum(name="v", column="v", lower=0, upper=10),
               Histogram(name="h", column="k", categories=("a", "b")),
               Sum(name="w", column="v", lower=0, upper=1),
               Histogram(name="g", column="k", categories=("zz",)))  # fmt: skip
    agg = aggregate(
        make_table(mutations), table="changelog", queries=queries, constraint=AtMostK(k=2),
        release_times=[10, 20], first_interval=1, unit_is_entry=False,
    )  # fmt: skip
    assert (agg.report.kept, agg.report.dropped) == (2, {"at_most_k": 2})
    assert agg.report.non_numeric == {"v": 1, "w": 1}
    assert agg.report.unknown_keys == {"h": 1, "g": 1}  # (g: the kept "a" is no key of it)


def test_missing_columns_names_every_column_no_row_has() -> None:
    mutations = [
        *_one_row({"v": 1, "zone": "A"}),
        {**_one_row({})[0], "record": 8, "ts": 6, "seq": 2, "op": "delete",
         "before": {"v": 1, "zone": "A", "status": None}, "after": None},
    ]  # fmt: skip
    from dpcr.bounding.state_machine import StateMachine
    from dpcr.engines.checks import missing_columns

    machine = StateMachine(column="status", initial=("a",), transitions=(), terminal=("a",))
    queries: tuple[Query, ...] = (
        Sum(name="v", column="v", lower=0, upper=10, where={"zone": "A", "kind": "x"}),
        Histogram(name="h", column="colour", categories=("red",)),
        Count(name="n", where={"kind": "y"}),
    )
    con = make_table(mutations)
    constraint = Hybrid(column="cls", classes={"x": machine, "y": AtMostK(k=1)})
    assert missing_columns(con, table="changelog", queries=queries, constraint=constraint) == [
        "kind", "colour", "cls"
    ]  # fmt: skip
    assert missing_columns(con, table="changelog", queries=(), constraint=machine) == []
    assert missing_columns(
        con, table="changelog", queries=queries[:1], constraint=AtMostK(k=1)
    ) == ["kind"]
    empty = make_table([])
    assert missing_columns(empty, table="changelog", queries=queries[:1], constraint=machine) == [
        "v", "zone", "kind", "status"
    ]  # fmt: skip


def test_late_records_are_excluded_and_counted() -> None:
    mutations = [
        {
            "record": 1,
            "unit": "e",
            "entry": "e",
            "ts": 5,
            "seq": 1,
            "op": "insert",
            "before": None,
            "after": {"v": 1},
        },
        {
            "record": 2,
            "unit": "f",
            "entry": "f",
            "ts": 8,
            "seq": 2,
            "op": "insert",
            "before": None,
            "after": {"v": 1},
        },
    ]
    agg = aggregate(
        make_table(mutations),
        table="changelog",
        queries=(Count(name="n"),),
        constraint=AtMostK(k=2),
        release_times=[10, 20],
        first_interval=2,
        unit_is_entry=True,
        exclude_late=(1, 10),
    )
    assert agg.report.late == 1
    assert agg.values["n"].tolist() == [[0]]


def test_late_records_are_counted_by_source_record_not_line(tmp_path: Any) -> None:
    """Record numbers count lines; records_seen counts records. A consumed record on line 2 (after
    a blank line) is not late; the new one on line 3 is."""
    from dpcr.changelog import JsonlSource, load

    path = tmp_path / "c.jsonl"
    lines = ["", json.dumps({"entry": "a", "ts": 5, "op": "insert", "after": {"v": 1}}),
             json.dumps({"entry": "b", "ts": 6, "op": "insert", "after": {"v": 1}})]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    con = duckdb.connect()
    load(JsonlSource(path=path), con)
    agg = aggregate(con, table="changelog", queries=(Count(name="n"),), constraint=AtMostK(k=2),
                    release_times=[10 * 10**6, 20 * 10**6], first_interval=1, unit_is_entry=True,
                    exclude_late=(1, 10 * 10**6))  # fmt: skip
    assert agg.report.late == 1
    assert agg.values["n"].tolist() == [[1], [0]]


def test_state_machine_buckets_may_start_at_minus_infinity() -> None:
    """Numbers reach the SQL as exact literals: an infinite bucket bound is a bound, not SQL."""
    from dpcr.bounding.state_machine import StateMachine

    machine = StateMachine(
        column="v", buckets={"low": float("-inf"), "high": 5.0},
        transitions=[("low", "high")], initial=["low", "high"], terminal=["low", "high"],
    )  # fmt: skip
    mutations: list[Mutation] = []
    append_mutation(mutations, {"record": 1, "entry": "e", "ts": 1, "seq": 1}, unit="e",
                    new_unit="e", op="insert", row=None, after={"v": -1e300})  # fmt: skip
    append_mutation(mutations, {"record": 2, "entry": "e", "ts": 2, "seq": 2}, unit="e",
                    new_unit="e", op="update", row={"v": -1e300}, after={"v": 7})  # fmt: skip
    agg = aggregate(make_table(mutations), table="changelog", queries=[Count(name="n")],
                    constraint=machine, release_times=[10], first_interval=1,
                    unit_is_entry=True)  # fmt: skip
    assert agg.report.kept == 2 and agg.report.dropped == {}
