"""The DuckDB engine's open histograms against a plain-Python reference: the candidate keys
(every key a kept row holds, with the first interval one holds it in) and each key's change
per interval, with a unit's change dropped when its L1 norm exceeds 2 (a unit column)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcr.engines.base import open_columns
from dpcr.engines.duckdb import aggregate
from dpcr.queries import Count, Histogram
from engines.test_duckdb_engine import CONSTRAINTS, TIMES, bounded, changelogs, make_table

OPEN = Histogram(name="k", column="k", keys=("b",), open=True)
OPEN_WHERE = Histogram(name="k_x", column="k", open=True, where={"cls": ["x"]})


def reference(
    mutations: list[dict[str, Any]],
    q: Histogram,
    constraint: Any,
    times: list[int],
    unit_is_entry: bool,
) -> tuple[dict[str, int], dict[str, Any]]:
    """(candidate key -> first interval, key -> change per interval)."""
    kept, _ = bounded(mutations, constraint, times)

    def key_of(row: dict[str, Any] | None) -> str | None:
        if row is None or not all(row.get(c) in v for c, v in q.where.items()):
            return None
        value = row.get(q.column)
        return None if value is None else str(value)

    first: dict[str, int] = {}
    prev: dict[tuple[str, str], str | None] = {}
    per_unit: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for m in kept:
        iv = next(i for i, t in enumerate(times) if m["ts"] <= t) + 1
        new = key_of(m["after"])
        old = prev.get((m["unit"], m["entry"]))
        prev[(m["unit"], m["entry"])] = new
        if new is not None:
            first[new] = min(iv, first.get(new, iv))
            per_unit[(m["unit"], iv)][new] += 1
        if old is not None:
            per_unit[(m["unit"], iv)][old] -= 1
    values: dict[str, Any] = defaultdict(lambda: np.zeros(len(times), dtype=np.int64))
    for (_u, iv), changes in per_unit.items():
        if not unit_is_entry and sum(abs(d) for d in changes.values()) > 2:
            continue
        for key, d in changes.items():
            values[key][iv - 1] += d
    return first, values


@pytest.mark.parametrize("unit_is_entry", [True, False])
@given(data=st.data())
@settings(max_examples=40, deadline=None)
def test_open_histograms_match_the_reference(unit_is_entry: bool, data: st.DataObject) -> None:
    mutations = data.draw(changelogs(unit_is_entry))
    constraint = data.draw(st.sampled_from(CONSTRAINTS))
    times = data.draw(st.sampled_from(TIMES))
    queries = (Count(name="live"), OPEN, OPEN_WHERE)
    agg = aggregate(make_table(mutations), table="changelog", queries=queries,
                    constraint=constraint, release_times=times, first_interval=1,
                    unit_is_entry=unit_is_entry)  # fmt: skip
    for q in (OPEN, OPEN_WHERE):
        first, values = reference(mutations, q, constraint, times, unit_is_entry)
        assert agg.candidates[q.name] == first
        assert list(agg.candidates[q.name].values()) == sorted(first.values())
        columns = open_columns(q, agg.candidates[q.name])
        assert columns[: len(q.keys)] == q.keys
        assert agg.values[q.name].shape == (len(times), len(columns))
        for j, key in enumerate(columns):
            expected = values.get(key, np.zeros(len(times), dtype=np.int64))
            np.testing.assert_array_equal(agg.values[q.name][:, j], expected, err_msg=key)
