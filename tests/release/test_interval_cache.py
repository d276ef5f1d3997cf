"""The cache of interval half-widths beside the store: one entry per line, new entries
appended (a file of the earlier form, one JSON object, is read and rewritten), a file as this
process left it not read again, a line cut short skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dpcr.release._uncertainty as unc
from dpcr.mechanisms import Interval


def _add(key: str, hw: float) -> None:
    unc._CACHE[key] = Interval(hw, 0.95, 1.0, "exact")


def test_entries_are_appended_and_read_back(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(unc, "_CACHE", {})
    monkeypatch.setattr(unc, "_SEEN", {})
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"old": [1.0, 0.95, 1.0, "exact"]}))  # the earlier form
    with unc.cached_on_disk(path):
        assert "old" in unc._CACHE
        _add("a", 2.0)
    lines = path.read_text().splitlines()
    assert [json.loads(x)[0] for x in lines] == ["old", "a"]
    with unc.cached_on_disk(path):
        _add("b", 3.0)
    assert path.read_text().splitlines() == [*lines, json.dumps(["b", 3.0, 0.95, 1.0, "exact"])]
    reads = []
    real = unc._read_cache
    monkeypatch.setattr(unc, "_read_cache", lambda p: reads.append(p) or real(p))
    with unc.cached_on_disk(path):  # as this process left it: not read again
        pass
    assert reads == []
    unc._CACHE.clear()  # (another process: everything from the file)
    with unc.cached_on_disk(path):
        assert set(unc._CACHE) == {"old", "a", "b"}
    assert reads == [path]
    with path.open("a") as f:
        f.write('["cut", 1.')  # a line cut short: skipped, and the file rewritten whole
    unc._CACHE.clear()
    with unc.cached_on_disk(path):
        assert set(unc._CACHE) == {"old", "a", "b"}
        _add("c", 4.0)
    assert [json.loads(x)[0] for x in path.read_text().splitlines()] == ["old", "a", "b", "c"]
