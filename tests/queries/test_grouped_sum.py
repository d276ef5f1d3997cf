"""A grouped sum (``kind = "sum"`` with ``by``): its TOML, and the sensitivity it states checked
by brute force over one interval's histories through the DuckDB engine.

Every history of one entry (the unit) over a small alphabet -- a state before the interval (no
row, or a row of key A, B or an undeclared key with the least value, the greatest, 0 or a
missing one) and one to three mutations inside it -- is aggregated by the engine, each history
alone in its own pair of intervals; the worst L1 and L2² of an interval's change vector equal
the stated ones exactly. With a unit owning two entries, the engine's clamp keeps every unit's
change within the stated L1 (and so its L2² within L1²)."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpcr.bounding.constraints import AtMostK
from dpcr.changelog import JsonlSource
from dpcr.engines.base import AggregateRequest
from dpcr.engines.duckdb import DuckDBEngine
from dpcr.errors import ConfigError
from dpcr.queries import QUERY_KINDS, GroupedSum, Sum, grouped_bounds
from dpcr.tomltable import TomlTable

T0 = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
HOUR = 3_600_000_000


def read(**table: Any) -> Any:
    t = TomlTable({"column": "v", "lower": 0, "upper": 10, **table}, "query")
    q = QUERY_KINDS[table.pop("kind", "sum")].from_toml(t, name="g", where=t.pop("where", {}))
    t.done()
    return q


def test_a_sum_with_by_is_a_grouped_sum() -> None:
    q = read(by="plan", keys=["gold", "free"], unknown="other")
    assert isinstance(q, GroupedSum) and q.keys == ("gold", "free", "other")
    assert type(read()) is Sum
    assert "by plan over 3 keys" in q.describe()
    opened = read(by="plan", open=True, keys_from="plans")
    assert opened.open and opened.keys == () and "'plans' publishes" in opened.describe()


def test_every_key_a_grouped_sum_reads_is_a_parameter_of_its_python_value() -> None:
    """As tests/queries/test_kinds.py checks for each kind's example (a plain sum); ``keys``
    is ``categories`` in Python, the name a histogram's value keeps them under."""
    import inspect

    table = TomlTable({"column": "v", "lower": 0, "upper": 10, "by": "plan", "open": True,
                       "keys_from": "h"}, "query")  # fmt: skip
    assert isinstance(QUERY_KINDS["sum"].from_toml(table, name="g", where={}), GroupedSum)
    assert set(table.asked) <= set(inspect.signature(GroupedSum).parameters) | {"keys"}
    assert {"by", "keys", "unknown", "open", "keys_from"} <= set(table.asked)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"by": "plan"}, "declare the keys"),
        ({"by": "plan", "open": True}, "name it in keys_from"),
        ({"by": "plan", "keys": ["a"], "keys_from": "h"}, "keys_from needs open"),
        ({"by": "plan", "open": True, "keys_from": "h", "unknown": "drop"}, "no meaning"),
        ({"by": "plan", "keys": ["a"], "unknown": "error"}, "unknown must be"),
        ({"by": "plan", "keys": ["a", "a"]}, "distinct"),
        ({"kind": "sum_squares", "by": "plan", "keys": ["a"]}, "unknown key"),
        ({"by": "plan", "keys": [str(k) for k in range(9000)], "upper": 2**49}, "below 2"),
    ],
)
def test_a_grouped_sum_that_cannot_be_released_is_refused_in_one_line(
    table: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        read(**table)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("lo", "hi", "l1", "l2sq"),
    [(0, 10, 20, 200), (-4, 0, 8, 32), (-4, 10, 20, 200), (-10, 10, 20, 400), (0, 0, 0, 0)],
)
def test_the_closed_form(lo: int, hi: int, l1: int, l2sq: int) -> None:
    assert grouped_bounds(lo, hi) == (Fraction(l1), Fraction(l2sq))


#: Each state: no row, or (key, value); the key "Z" is not declared, None is a missing value.
def _states(q: GroupedSum) -> list[tuple[str, Any] | None]:
    values = [q.lower, q.upper, 0, None, q.upper + 5]  # (beyond the bound: clamped)
    return [None] + [(k, v) for k in ("A", "B", "Z") for v in values]


def _row(state: tuple[str, Any], owner: str) -> dict[str, Any]:
    key, value = state
    return {"plan": key, "owner": owner, **({} if value is None else {"v": value})}


def _histories(q: GroupedSum, steps: int) -> list[list[tuple[str, Any] | None]]:
    """Every sequence of states: the one before the interval, then ``steps`` more (a plain
    history: consecutive states differ, and only a live entry is updated or deleted)."""
    states = _states(q)
    out = []
    for seq in itertools.product(states, repeat=steps + 1):
        if all(a != b for a, b in itertools.pairwise(seq)):
            out.append(list(seq))
    return out


def _iso(micros: int) -> str:
    return datetime.fromtimestamp(micros / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _lines(entry: str, owner: str, seq: list[Any], base: int, counter: list[int]) -> list[str]:
    """JSONL records of ``seq``: the first state (if a row) at hour 1 of interval ``base``,
    the later ones at hours 1, 2, ... of interval ``base + 1``."""
    out = []
    for n, (before, after) in enumerate(itertools.pairwise([None, *seq])):
        if before is None and after is None:
            continue
        op = "insert" if before is None else "delete" if after is None else "update"
        ts = T0 + (base if n == 0 else base + 1) * 24 * HOUR + (n + 1) * HOUR
        counter[0] += 1
        out.append(json.dumps({
            "entry": entry, "ts": _iso(ts), "seq": counter[0], "op": op,
            "before": None if before is None else _row(before, owner),
            "after": None if after is None else _row(after, owner),
        }))  # fmt: skip
    return out


def _aggregate(tmp: Path, q: GroupedSum, lines: list[str], intervals: int, *,
               owner: bool) -> Any:  # fmt: skip
    path = tmp / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    kw: dict[str, Any] = {"unit_column": "owner", "unit_is_entry": False} if owner else {}
    request = AggregateRequest(
        source=JsonlSource(path=path),
        queries=[q],
        constraint=AtMostK(k=8),
        release_times=[T0 + 24 * HOUR * i for i in range(1, intervals + 1)],
        first_interval=1,
        clock=T0 + 24 * HOUR * intervals,
        **kw,
    )
    return DuckDBEngine().aggregate(request).aggregates


GROUPED = [
    GroupedSum(name="g", column="v", lower=lower, upper=upper, grid=0.5, by="plan",
               categories=("A", "B"))
    for lower, upper in ((0, 10), (2, 10), (-4, 10), (-4, -1))
]  # fmt: skip


@pytest.mark.parametrize("q", GROUPED, ids=lambda q: f"[{q.lower},{q.upper}]")
def test_the_stated_sensitivity_is_the_worst_change_of_one_entry_in_one_interval(
    tmp_path: Path, q: GroupedSum
) -> None:
    histories = _histories(q, 1) + _histories(q, 2)
    histories += _histories(q, 3)[::13]  # (a sample of the longer ones)
    lines: list[str] = []
    counter = [0]
    for h, seq in enumerate(histories):
        lines += _lines(f"e{h}", f"e{h}", seq, 2 * h, counter)
    agg = _aggregate(tmp_path, q, lines, 2 * len(histories), owner=False)
    change = agg.values["g"][1::2]  # (each history's interval of mutations)
    l1 = np.abs(change).sum(axis=1).max()
    l2sq = (change.astype(object) ** 2).sum(axis=1).max()
    assert (l1, l2sq) == (q.l1_sensitivity, q.l2_sensitivity_squared)
    assert agg.report.unknown_keys["g"] > 0 and agg.report.non_numeric["g"] > 0


def test_a_unit_owning_entries_is_clamped_to_the_stated_l1(tmp_path: Path) -> None:
    """Two entries of one owner move value between keys in one interval (up to 4M unclamped):
    the engine leaves out the unit-intervals above L1 = 2M and counts them."""
    q = GROUPED[0]
    states = [s for s in _states(q) if s is None or s[0] != "Z"]
    pairs = [(a, b) for a in states for b in states if a != b]
    lines: list[str] = []
    counter = [0]
    for h, ((a0, a1), (b0, b1)) in enumerate(itertools.product(pairs[::5], pairs[::7])):
        lines += _lines(f"x{h}", f"u{h}", [a0, a1], 2 * h, counter)
        lines += _lines(f"y{h}", f"u{h}", [b0, b1], 2 * h, counter)
    intervals = 2 * len(pairs[::5]) * len(pairs[::7])
    agg = _aggregate(tmp_path, q, lines, intervals, owner=True)
    change = agg.values["g"][1::2]
    assert np.abs(change).sum(axis=1).max() == q.l1_sensitivity
    assert agg.report.clamped["g"] > 0


def test_an_alert_watches_each_key_of_a_declared_grouped_sum_and_refuses_open_keys() -> None:
    """One entry's contribution to one key's running value lies in [lo, hi], so removing it
    moves that value, or a window's change, by at most hi − lo <= 2M: the rule's sensitivity
    (2M) is a bound; an open grouped sum is refused as an open histogram is."""
    from dpcr.svt.rules import AlertRule, check_alerts, rule_sensitivity

    q = GROUPED[2]  # [-4, 10] on grid 0.5: lo = -8, hi = 20 steps, 2M = 40
    rule = AlertRule(name="big", statistic="g", what="running", threshold=50, cutoff=1,
                     epsilon=1.0)  # fmt: skip
    lo, hi = q.value_range
    assert rule_sensitivity(rule, [q], None) == q.l1_sensitivity == 40 >= hi - lo
    opened = GroupedSum(name="g", column="v", lower=0, upper=1, by="plan", open=True,
                        keys_from="h")  # fmt: skip
    with pytest.raises(ConfigError, match="has open keys"):
        check_alerts([rule], [opened], None)


def test_the_spark_engine_takes_a_grouped_sum(tmp_path: Path) -> None:
    """Its checks before any work pass a grouped sum (the engines' results are compared in
    tests/engines/test_spark_grouped.py)."""
    pytest.importorskip("pyspark")
    from dpcr.engines.spark import refuse_bounding_options

    request = AggregateRequest(
        source=JsonlSource(path=tmp_path / "none.jsonl"), queries=GROUPED,
        constraint=AtMostK(k=1), release_times=[T0 + HOUR], first_interval=1, clock=T0 + HOUR,
    )  # fmt: skip
    refuse_bounding_options(request)
