"""The columnar engine against plain-Python references of the same rules."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcr.engines import columnar
from dpcr.engines.columnar import bound_first_k, mutation_stats
from dpcr.errors import ChangelogError, ConfigError

# ------------------------------------------------------------------------------------ references


def reference_first_k(entry: list[object], ts: list[int], k: int) -> list[bool]:
    """Walk the rows in (ts, position) order, counting per entry."""
    seen: dict[object, int] = defaultdict(int)
    kept = [False] * len(entry)
    for i in sorted(range(len(entry)), key=lambda i: (ts[i], i)):
        if seen[entry[i]] < k:
            kept[i] = True
        seen[entry[i]] += 1
    return kept


def reference_stats(
    kept: list[bool],
    ts: list[int],
    old: list[float],
    new: list[float],
    *,
    start: int,
    period: int,
    intervals: int,
    clamp: int,
) -> tuple[list[int], list[int]]:
    counts = [0] * intervals
    sums = [0] * intervals
    for keep, t, o, w in zip(kept, ts, old, new, strict=True):
        if not keep:
            continue
        i = (t - start) // period
        change = (0.0 if math.isnan(w) else w) - (0.0 if math.isnan(o) else o)
        counts[i] += 1
        sums[i] += round(max(-clamp, min(clamp, change)))  # round(): ties to even, like np.rint
    return counts, sums


# ------------------------------------------------------------------------------------ strategies

small_ids = st.integers(min_value=-3, max_value=5)
sparse_ids = st.sampled_from([-(2**62), -7, 0, 10**12, 2**62])
tied_ts = st.integers(min_value=0, max_value=6)  # few values: many ties
wide_ts = st.integers(min_value=-(10**15), max_value=10**15)


@st.composite
def changelogs(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    n = draw(st.integers(min_value=0, max_value=60))
    ids = draw(st.lists(draw(st.sampled_from([small_ids, sparse_ids])), min_size=n, max_size=n))
    ts = draw(st.lists(draw(st.sampled_from([tied_ts, wide_ts])), min_size=n, max_size=n))
    if draw(st.booleans()):
        ts.sort()  # the sorted fast path, still with ties
    return ids, ts


# -------------------------------------------------------------------------------------- bounding


@settings(max_examples=400, deadline=None)
@given(changelogs(), st.integers(min_value=1, max_value=12))
def test_bound_first_k_matches_reference(log: tuple[list[int], list[int]], k: int) -> None:
    ids, ts = log
    got = bound_first_k(np.array(ids, dtype=np.int64), np.array(ts, dtype=np.int64), k)
    assert got.dtype == np.bool_
    assert got.tolist() == reference_first_k(list(ids), ts, k)


@settings(max_examples=100, deadline=None)
@given(changelogs(), st.integers(min_value=1, max_value=4))
def test_bound_first_k_string_and_unsigned_ids(log: tuple[list[int], list[int]], k: int) -> None:
    ids, ts = log
    expected = reference_first_k(list(ids), ts, k)
    as_str = np.array([f"e{i}" for i in ids], dtype=str)
    assert bound_first_k(as_str, np.array(ts, dtype=np.int64), k).tolist() == expected
    as_uint = np.array([i + 2**62 for i in ids], dtype=np.uint64)
    assert bound_first_k(as_uint, np.array(ts, dtype=np.int64), k).tolist() == expected


@settings(max_examples=100, deadline=None)
@given(changelogs(), changelogs(), st.integers(min_value=1, max_value=4))
def test_bounding_one_entry_ignores_other_entries(
    log: tuple[list[int], list[int]], other: tuple[list[int], list[int]], k: int
) -> None:
    """Adding another entry's mutations anywhere changes nothing for the first entry's rows."""
    ids, ts = log
    mine = [i for i, e in enumerate(ids) if e == 0]
    merged_ids = [0] * len(mine) + [e + 100 for e in other[0]]
    merged_ts = [ts[i] for i in mine] + other[1]
    my_ts = np.array(merged_ts[: len(mine)], dtype=np.int64)
    alone = bound_first_k(np.zeros(len(mine), dtype=np.int64), my_ts, k)
    together = bound_first_k(
        np.array(merged_ids, dtype=np.int64), np.array(merged_ts, dtype=np.int64), k
    )
    assert together[: len(mine)].tolist() == alone.tolist()
    assert int(alone.sum()) == min(k, len(mine))


def test_sort_and_pass_strategies_agree() -> None:
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 50, 2000)
    for k in (1, 2, 3, 9, 40):
        passes = columnar._first_k_by_passes(codes, 50, k)
        by_sort = columnar._first_k_by_sort(codes, k)
        assert np.array_equal(passes, by_sort)


def test_time_order_is_stable_argsort() -> None:
    rng = np.random.default_rng(4)
    ts = rng.integers(0, 30, 5000)  # heavy ties
    assert np.array_equal(columnar._time_order(ts), np.argsort(ts, kind="stable"))


def test_bound_first_k_larger_input_unsorted_and_sorted() -> None:
    rng = np.random.default_rng(5)
    n = 20_000
    entry = rng.integers(0, 3000, n)
    ts = rng.integers(0, 5000, n)
    expected = reference_first_k(entry.tolist(), ts.tolist(), 3)
    assert bound_first_k(entry, ts, 3).tolist() == expected
    order = np.argsort(ts, kind="stable")
    assert bound_first_k(entry[order], ts[order], 3).tolist() == [expected[i] for i in order]


def test_bound_first_k_does_not_modify_inputs() -> None:
    entry = np.array([5, 6, 5, 5], dtype=np.intp)
    ts = np.array([3, 2, 1, 0], dtype=np.int64)
    before = entry.copy(), ts.copy()
    bound_first_k(entry, ts, 1)
    assert np.array_equal(entry, before[0]) and np.array_equal(ts, before[1])


def test_bound_first_k_edge_cases() -> None:
    assert bound_first_k(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 3).size == 0
    assert bound_first_k([1, 1, 1], [0, 0, 0], 5).tolist() == [True] * 3
    assert bound_first_k([1, 1, 1], [2, 1, 0], 1).tolist() == [False, False, True]


@pytest.mark.parametrize(
    ("entry", "ts", "k", "message"),
    [
        ([1, 2], [0], 1, "equal lengths"),
        ([1, 2], [0.5, 1.0], 1, "ts must hold integers"),
        ([[1, 2]], [[0, 1]], 1, "1-D"),
        ([1, 2], [0, 1], 0, "k must be an integer >= 1"),
        ([1, 2], [0, 1], True, "k must be an integer >= 1"),
    ],
)
def test_bound_first_k_rejects(entry: object, ts: object, k: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        bound_first_k(entry, ts, k)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------- aggregation

values = st.one_of(
    st.just(math.nan),
    st.floats(min_value=0, max_value=100),
    st.sampled_from([0.5, 1.5, 2.5, -0.5]),  # rounding ties
    st.floats(min_value=-1e6, max_value=1e6),  # beyond the clamp
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(min_value=0, max_value=99), values, values),
        max_size=50,
    ),
    st.integers(min_value=1, max_value=30),
    st.integers(min_value=1, max_value=150),
)
def test_mutation_stats_matches_reference(
    rows: list[tuple[bool, int, float, float]], period: int, clamp: int
) -> None:
    kept = [r[0] for r in rows]
    ts = [r[1] + 1000 for r in rows]
    old = [r[2] for r in rows]
    new = [r[3] for r in rows]
    intervals = 100 // period + 1
    got = mutation_stats(
        np.array(kept, dtype=bool),
        np.array(ts, dtype=np.int64),
        np.array(old),
        np.array(new),
        start=1000,
        period=period,
        intervals=intervals,
        clamp=clamp,
    )
    counts, sums = reference_stats(
        kept, ts, old, new, start=1000, period=period, intervals=intervals, clamp=clamp
    )
    assert got.counts.dtype == np.int64 and got.sums.dtype == np.int64
    assert got.counts.tolist() == counts
    assert got.sums.tolist() == sums
    assert (got.start, got.period, got.clamp, got.intervals) == (1000, period, clamp, intervals)


def test_mutation_stats_large_sums_stay_exact() -> None:
    n = 100_000
    ts = np.zeros(n, dtype=np.int64)
    stats = mutation_stats(
        np.ones(n, dtype=bool), ts, np.full(n, np.nan), np.full(n, 1e12),
        start=0, period=1, intervals=1, clamp=10**11,
    )  # clamp·n = 1e16 > 2**53: the integer path
    assert stats.sums.tolist() == [10**11 * n]


def test_mutation_stats_rejects_rows_outside_horizon() -> None:
    with pytest.raises(ChangelogError, match="row 2: ts 30 is outside") as info:
        mutation_stats(
            np.array([True, False, True]), np.array([0, 99, 30]), np.zeros(3), np.ones(3),
            start=0, period=10, intervals=3, clamp=1,
        )
    assert (info.value.record, info.value.field, info.value.reason) == (3, "ts", "outside_horizon")
    # dropped rows may lie anywhere
    stats = mutation_stats(
        np.array([True, False]), np.array([5, -99]), np.zeros(2), np.ones(2),
        start=0, period=10, intervals=1, clamp=1,
    )
    assert stats.counts.tolist() == [1]


def test_mutation_stats_rejects_infinite_values() -> None:
    with pytest.raises(ChangelogError, match="row 1") as info:
        mutation_stats(
            np.array([True, True]), np.array([0, 1]), np.array([0.0, math.inf]),
            np.array([1.0, 2.0]), start=0, period=10, intervals=1, clamp=1,
        )
    assert info.value.field == "old"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"period": 0}, "period must be an integer >= 1"),
        ({"intervals": 0}, "intervals must be an integer >= 1"),
        ({"clamp": 0.5}, "clamp must be an integer >= 1"),
        ({"start": 1.0}, "start must be an integer"),
    ],
)
def test_mutation_stats_rejects_parameters(kwargs: dict[str, object], message: str) -> None:
    params: dict[str, object] = {"start": 0, "period": 1, "intervals": 1, "clamp": 1}
    params.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        mutation_stats(np.array([True]), np.array([0]), np.zeros(1), np.ones(1), **params)  # type: ignore[arg-type]


def test_mutation_stats_needs_a_boolean_mask() -> None:
    with pytest.raises(ConfigError, match="boolean mask"):
        mutation_stats(
            np.array([1]), np.array([0]), np.zeros(1), np.ones(1),
            start=0, period=1, intervals=1, clamp=1,
        )
