"""A first run's fixed cost: a daily release for one year over a changelog of one record, with
the plan ``auto`` chooses for it (an 8-ary Honaker tree), two queries (a count and a clamped
sum). Its 730 published rows each carry a 95 % interval; computed row by row by convolution they
took 17-46 s of CPU (issue 31), from characteristic functions they take a fraction of a second.

The bound is CPU time of this process (every thread: the intervals are computed beside the data
step) and generous, so a busy machine does not fail it; a return to per-row convolutions does.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import dpcr
from dpcr.noise import simulation_randomness
from dpcr.release import _uncertainty

#: CPU seconds; the release below takes about 0.5 s in-process on a 2-core machine
LIMIT = 8.0


def test_a_daily_year_first_run_of_an_8_ary_tree_is_cheap(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"entry": "1", "ts": "2025-01-02T07:57:37Z", "op": "insert",
                               "before": None, "after": {"fare": 14.0}}) + "\n")  # fmt: skip
    release = dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=log),
        constraint=dpcr.AtMostK(k=3),
        plan=dpcr.TreeRelease(start="2025-01-01", period="1d", branching=8, end="2026-01-01"),
        queries=[dpcr.Count(name="active"),
                 dpcr.Sum(name="fares", column="fare", lower=0, upper=100)],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp_path / "out",
    )  # fmt: skip
    _uncertainty._CACHE.clear()  # nothing remembered from other tests of this process
    started = time.process_time()
    result = release.run(until="2026-01-01", rng=simulation_randomness(31))
    cpu = time.process_time() - started
    assert result.new_intervals == 365 and len(result.rows) == 730
    assert all(r.estimate_lo < r.estimate < r.estimate_hi for r in result.rows)
    assert cpu < LIMIT, f"a daily year's first run took {cpu:.1f} s of CPU (limit {LIMIT} s)"
