"""``operator/diagnostics.json`` is written without an fsync: a copy of what the store's run
summary holds, read by no check. One lost or cut short (a power cut after the rename, before
the data reached the disk) does not stop the next run, which writes it whole again."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
from engines.helpers import DAY, T0, generate
from release.helpers import log_release


@pytest.mark.parametrize("damage", ["empty", "cut", "missing"])
def test_a_damaged_diagnostics_file_is_written_again(tmp_path: Path, damage: str) -> None:
    (tmp_path / "log.jsonl").write_text("".join(x + "\n" for x in generate(1, unit_column=False)))
    release = log_release(tmp_path)
    dataclasses.replace(release, until=format_timestamp(T0 + 3 * DAY)).run(
        rng=simulation_randomness(2))  # fmt: skip
    path = tmp_path / "out" / "operator" / "diagnostics.json"
    text = path.read_text()
    if damage == "missing":
        path.unlink()
    else:
        path.write_text("" if damage == "empty" else text[: len(text) // 2])
    result = dataclasses.replace(release, until=format_timestamp(T0 + 6 * DAY)).run(
        rng=simulation_randomness(2))  # fmt: skip
    assert result.new_intervals == 3
    assert json.loads(path.read_text()) == json.loads(
        json.dumps(result.diagnostics, default=str))  # fmt: skip
