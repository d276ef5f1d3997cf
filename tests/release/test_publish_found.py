"""A run appends its rows to the release files as its check of the public files found them
(dpcr.release._layout.check_published returns their bytes) instead of reading them again: the
files are byte for byte those the run writes when it reads them again, step by step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dpcr.release._outputs as outputs
import dpcr.release._stored as stored
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
from engines.helpers import DAY, T0, generate
from release.helpers import log_release


def _year(tmp: Path) -> list[dict[str, bytes]]:
    """The public files after each step of a session over the generated log."""
    tmp.mkdir()
    (tmp / "log.jsonl").write_text("".join(x + "\n" for x in generate(3, unit_column=False)))
    release = log_release(tmp, on_error="quarantine")
    folder = tmp / "out" / "simulation"
    out = []
    with release.session() as session:
        for day in range(1, 8):
            session.run(until=format_timestamp(T0 + day * DAY),
                        rng=simulation_randomness(11))  # fmt: skip
            out.append({p.name: p.read_bytes() for p in sorted(folder.iterdir())})
    return out


def test_the_found_bytes_give_the_files_reading_them_again_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Any] = []
    real = outputs.published_releases

    def counted(*args: Any, **kw: Any) -> Any:
        reads.append(args[1])
        return real(*args, **kw)

    monkeypatch.setattr(outputs, "published_releases", counted)
    found = _year(tmp_path / "found")
    assert len(reads) <= 1  # (the session's first step: nothing published before it)
    monkeypatch.setattr(stored, "_found_releases", lambda *a, **kw: None)
    again = _year(tmp_path / "read")
    assert len(reads) >= 6  # (the test means something: the other way was taken)
    assert len(found) == len(again) == 7
    for a, b in zip(found, again, strict=True):
        assert a.keys() == b.keys() and "releases.json" in a
        assert a == b


def test_files_changed_after_the_check_are_written_from_the_checked_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release file changed between the step's check and its publishing is replaced by the
    file the step writes from the store's values, as when it is read again (whose digest
    differs: every row written)."""
    expected = _year(tmp_path / "expected")
    real = stored._found_releases

    def changed_after_check(settings: Any, found: Any, *a: Any, **kw: Any) -> Any:
        if found is not None:
            folder = outputs.public_dir(settings, simulation=True)
            (folder / "releases.csv").write_bytes(b"edited\n")
        return real(settings, found, *a, **kw)

    monkeypatch.setattr(stored, "_found_releases", changed_after_check)
    assert _year(tmp_path / "changed") == expected
