"""Late records across runs: released changes keep telescoping, and runs agree with one run.

A changelog arrives in batches; after each batch a run loads everything so far (leaving out late
records and the frozen (unit, entry)s, as the release loop does) and releases the intervals its
clock has closed. Then

* every (unit, entry)'s released changes sum to f(its last kept state) -- 0 after a kept delete,
  never -1 because a late insert was left out while its delete was counted;
* the released values equal those of one run over the final changelog with the final frozen
  points: the data arriving in several runs changes nothing.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcr.bounding.constraints import AtMostK, Constraint, TimeBounded
from dpcr.changelog import FrozenPoint, JsonlSource, load
from dpcr.engines.duckdb import aggregate
from dpcr.queries import Count, Query, Sum

S = 1_000_000
TIMES = [10 * S, 20 * S, 30 * S, 40 * S, 50 * S]
ENTRIES = ("t0", "t1", "t2", "t3")
RIDERS = ("u0", "u1")
CONSTRAINTS: list[Constraint] = [AtMostK(k=3), AtMostK(k=50), TimeBounded(bound=20 * S)]


@st.composite
def arrivals(draw: st.DrawFn, move: bool) -> list[dict[str, Any]]:
    """Coherent histories (with moves between riders when ``move``), in a random arrival order
    biased to time order: many records are on time, some late."""
    records: list[dict[str, Any]] = []
    seq = 0
    for entry in ENTRIES[: draw(st.integers(1, 4))]:
        rider = draw(st.sampled_from(RIDERS))
        row: dict[str, Any] | None = None
        for ts in sorted(draw(st.lists(st.integers(0, 49), min_size=1, max_size=6))):
            seq += 1
            op = "insert" if row is None else draw(st.sampled_from(["update", "delete"]))
            after = None
            if op != "delete":
                if op == "update" and move and draw(st.booleans()):
                    rider = draw(st.sampled_from(RIDERS))
                after = {"id": entry, "rider": rider, "v": draw(st.integers(0, 5))}
            records.append({"entry": entry, "ts": ts, "seq": seq, "op": op, "before": row,
                            "after": after})  # fmt: skip
            row = after
            if op == "delete" and draw(st.booleans()):
                row = None  # the entry may come back with a new insert
            elif op == "delete":
                break
    delays = [draw(st.integers(0, 25)) for _ in records]
    order = sorted(range(len(records)), key=lambda i: records[i]["ts"] + delays[i])
    return [records[i] for i in order]


def queries(move: bool) -> tuple[Query, ...]:
    """A count per (unit, entry), whose released changes must telescope, and a sum."""
    units = RIDERS if move else (None,)
    per_pair: list[Query] = []
    for entry in ENTRIES:
        for unit in units:
            where: dict[str, Any] = {"id": entry} | ({"rider": unit} if unit else {})
            per_pair.append(Count(name=f"n-{unit or entry}-{entry}", where=where))
    return (*per_pair, Sum(name="v", column="v", lower=0, upper=5))


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _run(
    path: Path,
    con: duckdb.DuckDBPyConnection,
    qs: tuple[Query, ...],
    constraint: Constraint,
    move: bool,
    *,
    released: int,
    due: int,
    seen: int,
    frozen: tuple[FrozenPoint, ...],
) -> tuple[Any, dict[str, np.ndarray]]:
    exclude = (seen, TIMES[released - 1]) if released else None
    report = load(JsonlSource(path=path), con, unit_column="rider" if move else None,
                  on_error="quarantine", quarantine_path=path.with_suffix(".q"),
                  exclude_late=exclude, frozen=frozen)  # fmt: skip
    agg = aggregate(con, table="changelog", queries=qs, constraint=constraint,
                    release_times=TIMES[:due], first_interval=released + 1,
                    unit_is_entry=not move)  # fmt: skip
    return report, agg.values


@pytest.mark.parametrize("move", [False, True], ids=["entry", "rider"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_runs_release_what_one_run_would_and_telescope(move: bool, data: st.DataObject) -> None:
    records = data.draw(arrivals(move))
    constraint = data.draw(st.sampled_from(CONSTRAINTS))
    n_runs = data.draw(st.integers(2, 4))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(records)), min_size=n_runs - 1,
                                     max_size=n_runs - 1)))  # fmt: skip
    clocks = sorted(data.draw(st.lists(st.integers(0, 5), min_size=n_runs - 1,
                                       max_size=n_runs - 1)))  # fmt: skip
    batches = [*cuts, len(records)]
    dues = [*clocks, 5]  # the last run releases every interval
    qs = queries(move)
    released, seen, frozen = 0, 0, ()
    values = {q.name: np.zeros((0, 1), dtype=np.int64) for q in qs}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.jsonl"
        for upto, due in zip(batches, dues, strict=True):
            _write(path, records[:upto])
            con = duckdb.connect()
            report, new = _run(path, con, qs, constraint, move, released=released, due=due,
                               seen=seen, frozen=frozen)  # fmt: skip
            if due > released:
                for q in qs:
                    values[q.name] = np.vstack([values[q.name], new[q.name]])
                released = due
            seen, frozen = report.records, report.frozen
        # One run over the final changelog, with the final frozen points.
        once = duckdb.connect()
        _, whole = _run(path, once, qs, constraint, move, released=0, due=5, seen=0,
                        frozen=frozen)  # fmt: skip
    for q in qs:
        np.testing.assert_array_equal(values[q.name], whole[q.name], err_msg=q.name)
    # Telescoping: per (unit, entry), the released changes sum to f(last kept state).
    last = dict(
        ((u, e), op != "delete")
        for u, e, op in once.execute(
            "SELECT unit, entry, op FROM _dpcr_bounded WHERE kept ORDER BY ts, seq, record"
        ).fetchall()
    )
    for q in qs[:-1]:
        unit = q.where.get("rider", q.where["id"])[0]
        assert int(values[q.name].sum()) == int(last.get((unit, q.where["id"][0]), 0)), q.name
