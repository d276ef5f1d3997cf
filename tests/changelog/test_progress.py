"""Progress of a load and of an aggregation: monotone, ending at the total, with the running
statement's own progress in between (DuckDB's query_progress, polled)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb

from dpcr.bounding.constraints import AtMostK
from dpcr.changelog import JsonlSource, load
from dpcr.changelog._progress import Steps
from dpcr.engines.duckdb import aggregate
from dpcr.queries import Count


def _check(reports: list[tuple[int, int]]) -> None:
    assert reports, "no progress was reported"
    totals = {t for _, t in reports}
    assert len(totals) == 1
    done = [d for d, _ in reports]
    assert done == sorted(done) and done[0] == 0 and done[-1] == reports[-1][1]


def test_load_and_aggregate_report_monotone_progress(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    with path.open("w") as f:
        for i in range(20_000):
            f.write(json.dumps({"entry": f"e{i % 5000}", "ts": 1_735_689_600 + i, "seq": i,
                                "op": "insert" if i < 5000 else "update",
                                "after": {"v": i}}) + "\n")  # fmt: skip
    con = duckdb.connect()
    reports: list[tuple[int, int]] = []
    load(JsonlSource(path=path, epoch_unit="s"), con,
         progress=lambda d, t: reports.append((d, t)))  # fmt: skip
    _check(reports)
    assert len({d for d, _ in reports}) >= 6  # the start and the end of each of the 5 steps
    reports.clear()
    aggregate(con, table="changelog", queries=[Count(name="n")], constraint=AtMostK(k=2),
              release_times=[1_735_689_600_000_000 + 10**10], first_interval=1,
              unit_is_entry=True, progress=lambda d, t: reports.append((d, t)))  # fmt: skip
    _check(reports)


def test_a_long_statement_reports_its_own_progress() -> None:
    con = duckdb.connect()
    reports: list[tuple[int, int]] = []
    steps = Steps(con, lambda d, t: reports.append((d, t)), 1)
    with steps.step():
        started = time.perf_counter()
        # Statements of about half a second each, for a second or more (polls every 0.2 s).
        while time.perf_counter() - started < 1.5:
            con.execute("SELECT sum(hash(i)) FROM range(200000000) t(i)").fetchall()
    _check(reports)
    assert any(0 < d < 1000 for d, _ in reports), reports


def test_no_callback_no_thread() -> None:
    import threading

    con = duckdb.connect()
    before = threading.active_count()
    steps = Steps(con, None, 3)
    steps.next()
    assert threading.active_count() == before
    steps.close()
