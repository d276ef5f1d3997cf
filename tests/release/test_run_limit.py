"""One run closes at most MAX_RUN_INTERVALS reporting intervals: a longer backlog is refused
with one line naming the ``--until`` of the first step, before anything is read or released;
the steps then release it."""

from __future__ import annotations

from pathlib import Path

import pytest

import dpcr
from dpcr.errors import ConfigError
from dpcr.noise import simulation_randomness
from dpcr.plans.base import MAX_RUN_INTERVALS, check_run_count
from dpcr.timeutil import format_timestamp, parse_timestamp
from e2e.helpers import mutations, write_jsonl

START = "2000-01-01T00:00:00Z"


def test_the_check_names_the_first_step() -> None:
    schedule = dpcr.DisjointRelease(start=START, period="1d")
    check_run_count(schedule, 0, MAX_RUN_INTERVALS)
    check_run_count(schedule, 10, 10 + MAX_RUN_INTERVALS)
    with pytest.raises(ConfigError, match=r"close 2,001 reporting intervals.*--until 2005-06-23"):
        check_run_count(schedule, 0, MAX_RUN_INTERVALS + 1)


def test_a_long_first_run_is_refused_then_released_in_steps(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    release = dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp_path / "log.jsonl"),
        constraint=dpcr.AtMostK(k=3),
        plan=dpcr.DisjointRelease(start=START, period="1d"),
        queries=[dpcr.Count(name="n")],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp_path / "out",
    )
    until = parse_timestamp(START) + (MAX_RUN_INTERVALS + 500) * 86_400_000_000
    with pytest.raises(ConfigError, match="more than 2,000 in one run") as info:
        release.run(until=format_timestamp(until), rng=simulation_randomness(1))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out" / "simulation" / "releases.csv").exists()
    step = str(info.value).split("--until ")[1].split(",")[0]
    first = release.run(until=step, rng=simulation_randomness(1))
    assert first.new_intervals == MAX_RUN_INTERVALS
    second = release.run(until=format_timestamp(until), rng=simulation_randomness(1))
    assert second.new_intervals == 500
