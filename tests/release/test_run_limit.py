"""One run releases at most MAX_RUN_INTERVALS reporting intervals: a longer backlog is released
in steps, each run the next ones, exactly as runs with the ``--until`` of each step would."""

from __future__ import annotations

from pathlib import Path

import dpcr
from dpcr.noise import simulation_randomness
from dpcr.plans.base import MAX_RUN_INTERVALS, run_step
from dpcr.timeutil import format_timestamp, parse_timestamp
from e2e.helpers import mutations, write_jsonl

START = "2000-01-01T00:00:00Z"
DAY = 86_400_000_000


def test_a_step_is_the_next_intervals_at_the_end_of_the_last() -> None:
    schedule = dpcr.DisjointRelease(start=START, period="1d")
    clock = parse_timestamp(START) + (MAX_RUN_INTERVALS + 7) * DAY + 5
    assert run_step(schedule, 0, MAX_RUN_INTERVALS, clock) == (MAX_RUN_INTERVALS, clock)
    assert run_step(schedule, 10, 10 + MAX_RUN_INTERVALS, clock) == (10 + MAX_RUN_INTERVALS,
                                                                     clock)  # fmt: skip
    last, at = run_step(schedule, 0, MAX_RUN_INTERVALS + 7, clock)
    assert last == MAX_RUN_INTERVALS and at == schedule.release_time(MAX_RUN_INTERVALS)


def _release(tmp: Path, name: str) -> dpcr.ContinualRelease:
    write_jsonl(tmp / "log.jsonl", mutations())
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=dpcr.AtMostK(k=3),
        plan=dpcr.DisjointRelease(start=START, period="1d"),
        queries=[dpcr.Count(name="n")],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / name,
    )


def test_a_long_backlog_is_released_in_steps(tmp_path: Path) -> None:
    until = format_timestamp(parse_timestamp(START) + (MAX_RUN_INTERVALS + 500) * DAY)
    release = _release(tmp_path, "stepped")
    first = release.run(until=until, rng=simulation_randomness(1))
    assert first.new_intervals == MAX_RUN_INTERVALS
    assert first.summary["waiting_intervals"] == 500
    # the same as a run whose clock is the end of the step
    step = format_timestamp(parse_timestamp(START) + MAX_RUN_INTERVALS * DAY)
    explicit = _release(tmp_path, "explicit").run(until=step, rng=simulation_randomness(1))
    assert explicit.rows == first.rows
    second = release.run(until=until, rng=simulation_randomness(1))
    assert second.new_intervals == 500 and second.summary["waiting_intervals"] == 0
    assert second.rows[: len(first.rows)] == first.rows
