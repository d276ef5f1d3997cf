"""A line file appended to while a run reads it (a live capture writing the changelog): the run
reads a still copy of its complete lines, and the next run continues after them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dpcr
import dpcr.changelog.position as position
from dpcr.noise import simulation_randomness
from e2e.helpers import mutations, write_jsonl

END = "2025-01-06T00:00:00Z"


def _release(tmp: Path) -> dpcr.ContinualRelease:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=dpcr.AtMostK(k=3),
        plan=dpcr.DisjointRelease(start="2025-01-01", period="1d"),
        queries=[dpcr.Count(name="active")],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
    )


def test_a_file_growing_during_the_read_is_read_from_a_still_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = mutations()
    half = len(log) // 2
    path = tmp_path / "log.jsonl"
    write_jsonl(path, log[:half])
    with path.open("a") as f:  # a writer caught in the middle of a line
        f.write(json.dumps(log[half])[:20])
    real = position.snapshot
    calls = {"n": 0}

    def growing(p: Path) -> tuple[int, int]:
        calls["n"] += 1
        size, mtime = real(p)
        return size, mtime + calls["n"]  # every look sees a different file

    monkeypatch.setattr(position, "snapshot", growing)
    release = _release(tmp_path)
    first = release.run(until=END, rng=simulation_randomness(1))
    assert first.diagnostics["changelog"]["records"] == half  # the partial line is not read
    scratch = tmp_path / "out" / "operator" / "scratch"
    assert not list(scratch.glob("dpcr-*"))  # the copy is gone
    (scratch / "dpcr-tail-left.jsonl").write_text("{}")  # as a killed run leaves it
    monkeypatch.setattr(position, "snapshot", real)
    write_jsonl(path, log)  # the writer finished its line and went on
    second = release.run(until=END, rng=simulation_randomness(2))
    assert second.diagnostics["changelog"]["records"] == len(log)
    assert not list(scratch.glob("dpcr-*"))  # a run clears what a killed one left
