"""The contract every query kind keeps (:class:`dpcr.queries.QueryKind`), checked for each kind
of :data:`dpcr.queries.QUERY_KINDS` through its example (:mod:`queries.kinds`): it reads its
own TOML, declares its keys, grid, ops and description, and the sensitivity it states is the
exact worst case of one entry's change of one interval (erratum 3) -- by brute force over the
SQL the engines run, for the kinds that sum a number column."""

from __future__ import annotations

import itertools
from fractions import Fraction

import duckdb
import pytest

from dpcr.errors import ConfigError
from dpcr.queries import QUERY_KINDS, QueryKind, Sum, SumSquares
from dpcr.tomltable import TomlTable
from queries.kinds import EXAMPLES, example

KINDS = sorted(QUERY_KINDS)


def test_every_registered_kind_has_a_contract_example() -> None:
    assert set(EXAMPLES) == set(QUERY_KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_a_kind_reads_its_own_toml_and_names_itself(kind: str) -> None:
    q = example(kind, "q1")
    assert isinstance(q, QueryKind)
    assert type(q) is QUERY_KINDS[kind] and type(q).kind == kind and q.name == "q1"
    with pytest.raises(ConfigError, match="unknown key"):
        table = TomlTable({**EXAMPLES[kind], "extra": 1}, "query")
        QUERY_KINDS[kind].from_toml(table, name="q1", where=table.pop("where", {}))
        table.done()


@pytest.mark.parametrize("kind", KINDS)
def test_a_kind_declares_keys_grid_ops_and_description(kind: str) -> None:
    q = example(kind)
    assert q.keys and len(set(q.keys)) == len(q.keys)
    assert q.unit_scale > 0
    assert q.touched_by() and q.touched_by() <= {"insert", "update", "delete"}
    assert isinstance(q.describe(), str) and q.describe()
    l1, l2sq = q.l1_sensitivity, q.l2_sensitivity_squared
    assert isinstance(l1, Fraction) and l1 >= 1 and l1.denominator == 1
    # ‖x‖₂ ≤ ‖x‖₁ ≤ √(keys)·‖x‖₂
    assert l2sq <= l1**2 <= len(q.keys) * l2sq


#: Numbers around and beyond the bounds (on and off the grid), and the extremes of a double.
_NUMBERS = [-1e300, -7.3, -4.25, -4, -3.75, -0.26, -0.25, 0, 0.24, 0.25, 0.75, 1, 3.3, 9.75,
            10, 10.2, 11, 1e300]  # fmt: skip


def _f_values(q: Sum, numbers: list[float]) -> list[int]:
    """f of each number, by the SQL the engines run (DuckDB's, which Spark runs too)."""
    rows = duckdb.sql(
        f"SELECT {q.steps_sql('x')} FROM (SELECT unnest(?::DOUBLE[]) AS x, "
        "unnest(range(len(?::DOUBLE[]))) AS i) ORDER BY i",
        params=[numbers, numbers],
    ).fetchall()
    return [int(r[0]) for r in rows]


def _number_kinds() -> list[Sum]:
    """Every registered kind that sums a number column, at its example and at bounds on one
    side of 0 (where the erratum-3 sensitivity differs from |b - a|)."""
    out = []
    for kind, cls in sorted(QUERY_KINDS.items()):
        if issubclass(cls, Sum):
            for lower, upper in ((-4, 10), (2, 10), (-4, -1)):
                out.append(cls(name=kind, column="v", lower=lower, upper=upper, grid=0.5))
    return out


@pytest.mark.parametrize("q", _number_kinds(), ids=repr)
def test_a_number_kinds_sensitivity_is_the_exact_worst_change_of_one_interval(q: Sum) -> None:
    """f of every number lies in ``steps_range``, which it attains; one entry's change of one
    interval telescopes to f(last state) - f(first state), each state a row or no row (f = 0),
    and the largest |change| over every pair of states is the stated L1 (and L2) exactly."""
    fs = _f_values(q, _NUMBERS)
    lo, hi = q.steps_range
    assert min(fs) == lo and max(fs) == hi
    states = [*fs, 0]  # (0: no row, an insert's state before or a delete's after)
    worst = max(abs(b - a) for a, b in itertools.product(states, states))
    assert q.l1_sensitivity == worst
    assert q.l2_sensitivity_squared == worst**2


def test_the_sum_of_squares_squares_the_value_the_sum_reads() -> None:
    """x² of the clamped, grid-rounded x of a :class:`Sum` of the same bounds, in steps of
    grid²: with a count and the sum it gives the variance of the same values."""
    s = Sum(name="s", column="v", lower=-4, upper=10, grid=0.5)
    sq = SumSquares(name="sq", column="v", lower=-4, upper=10, grid=0.5)
    assert _f_values(sq, _NUMBERS) == [k * k for k in _f_values(s, _NUMBERS)]
    assert sq.unit_scale == s.unit_scale**2 == Fraction(1, 4)
    # erratum 3: from [2, 10] the squares lie in [16, 400] steps; the sensitivity is 400, not 384
    assert SumSquares(name="p", column="v", lower=2, upper=10, grid=0.5).l1_sensitivity == 400


def test_a_sum_of_squares_past_exact_integers_is_refused() -> None:
    with pytest.raises(ConfigError, match="2\\^50"):
        SumSquares(name="big", column="v", lower=0, upper=1e8, grid=1)


@pytest.mark.parametrize("kind", KINDS)
def test_every_key_a_kind_reads_is_a_parameter_of_its_python_value(kind: str) -> None:
    """The TOML of a kind and its Python value take the same keys (``where`` included), as
    tests/config/test_python_parity.py checks for the parser's own keys."""
    import inspect

    table = TomlTable(dict(EXAMPLES[kind]), "query")
    QUERY_KINDS[kind].from_toml(table, name=kind, where=table.pop("where", {}))
    parameters = inspect.signature(QUERY_KINDS[kind]).parameters
    assert set(table.asked) <= set(parameters), (kind, table.asked)
