"""A simulation draws each node's noise from the seed and the node alone: releasing the same
changelog in several runs or in one gives the same rows, which lets a follower that was stopped
and restarted be compared with one that ran through (tests/cdc/test_follow.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import dpcr
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
from engines.helpers import CONSTRAINTS, DAY, QUERIES, T0, generate


def _release(tmp: Path, plan: Any) -> Any:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=CONSTRAINTS[0],
        plan=plan,
        queries=list(QUERIES),
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
    )


def _rows(tmp: Path, plan: Any, clocks: list[int], seed: int) -> Any:
    tmp.mkdir()
    (tmp / "log.jsonl").write_text("".join(line + "\n" for line in generate(3, unit_column=False)))
    release = _release(tmp, plan)
    result = None
    for clock in clocks:
        step = dataclasses.replace(release, until=format_timestamp(clock))
        result = step.run(rng=simulation_randomness(seed))
    assert result is not None
    return result.rows


@pytest.mark.parametrize("tree", [False, True])
def test_steps_and_one_run_release_the_same_noise(tmp_path: Path, tree: bool) -> None:
    start = format_timestamp(T0)
    plan: Any = (
        dpcr.TreeRelease(start=start, period="1d", end=format_timestamp(T0 + 8 * DAY))
        if tree else dpcr.DisjointRelease(start=start, period="1d")
    )  # fmt: skip
    end = T0 + 8 * DAY
    steps = _rows(tmp_path / "steps", plan, [T0 + 2 * DAY, T0 + 5 * DAY, end], seed=11)
    once = _rows(tmp_path / "once", plan, [end], seed=11)
    other = _rows(tmp_path / "other", plan, [end], seed=12)
    assert len(steps) == len(once) > 0
    assert steps == once
    assert steps != other  # the seed decides the noise
