"""A full disk says what is intact and to free space, never "restore a backup" (an older store
is what draws published values again).

The store's full disk is SQLite's own (``PRAGMA max_page_count`` caps the file). The command-line
cases run on a real small file system (a tmpfs mounted for the test; skipped where mounting is not
allowed) that the test fills at one moment of the run: before the commit, after it, or while the
report is written. No write of dpcr is faked: the file system really has no space left.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.errors import DiskFullError
from dpcr.store import ReleasedNode, SourceState, Store
from e2e.helpers import mutations, write_config, write_jsonl


def test_a_full_disk_at_the_commit_leaves_the_store_intact(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    with Store(path, fingerprint="f") as store:
        pages = store._con.execute("PRAGMA page_count").fetchone()[0]
        store._con.execute(f"PRAGMA max_page_count = {pages}")  # the disk holds no more page
        values = [ReleasedNode(layer=0, index=i, t_lo=None, t_hi=i, query="q", key="k" * 40,
                               value=i) for i in range(1, 3000)]  # fmt: skip
        with pytest.raises(DiskFullError) as caught:
            store.commit_release(values=values, events=[], source=SourceState(records=9),
                                 summary={}, started=0.0)  # fmt: skip
    message = str(caught.value)
    assert "Nothing was released" in message and "intact" in message
    assert "free space and run again" in message and "damaged" not in message
    assert "\n" not in message
    with Store(path, fingerprint="f") as store:  # opens: the head is verified
        assert store.released() == [] and store.source_state().records == 0


# --- a real small file system ------------------------------------------------------------------


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs mounted at ``tmp_path / "disk"`` for the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs",
                           str(mount)], capture_output=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip("mounting a small file system needs root (CAP_SYS_ADMIN)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Take every free byte of ``folder``'s file system; returns the filler (delete it to free
    the space)."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    block = bytes(1 << 16)
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    return filler


def _release(disk: Path) -> Path:
    write_jsonl(disk / "log.jsonl", mutations())
    return write_config(disk, epsilon=2.0, plan="tree")


def _fill_at(monkeypatch: pytest.MonkeyPatch, disk: Path, when: Callable[[str, int], bool],
             fillers: list[Path]) -> None:  # fmt: skip
    """Fill ``disk`` the first time the run reports progress ``(stage, done)`` with ``when``."""
    from dpcr.commands._feedback import Feedback

    original = Feedback.progress

    def progress(self: Feedback, stage: str, done: int, total: int) -> None:
        if not fillers and when(stage, done):
            fillers.append(fill(disk))
        original(self, stage, done, total)

    monkeypatch.setattr(Feedback, "progress", progress)


def _state(config: Path) -> tuple[int, list[Any]]:
    release = load_config(config)
    with Store(release.store_path, fingerprint=release.fingerprint()) as store:
        return store.source_state().interval, store.released()


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_a_full_disk_during_the_commit_releases_nothing(
    disk: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _release(disk)
    assert main(["run", str(config), "--quiet", "--until", "2025-01-05"]) == 0
    before = _state(config)
    fillers: list[Path] = []
    _fill_at(monkeypatch, disk, lambda stage, done: stage == "release", fillers)
    capsys.readouterr()
    assert main(["run", str(config), "--quiet", "--until", "2025-01-09"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "the disk is full" in line and "Nothing was released" in line, line
    assert "free space and run again" in line and "damaged" not in line
    fillers[0].unlink()
    monkeypatch.undo()
    assert _state(config) == before  # the store is as it was
    assert main(["run", str(config), "--quiet", "--until", "2025-01-09"]) == 0
    n, released = _state(config)
    assert n == 8 and all(v in released for v in before[1])


def test_a_full_disk_after_the_commit_is_one_line_and_the_next_run_rewrites(
    disk: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _release(disk)
    assert main(["run", str(config), "--quiet", "--until", "2025-01-05"]) == 0
    fillers: list[Path] = []
    _fill_at(monkeypatch, disk, lambda stage, done: stage == "commit" and done == 1, fillers)
    capsys.readouterr()
    assert main(["run", str(config), "--quiet", "--until", "2025-01-09"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "the disk is full" in line and "committed" in line and "rewrites" in line, line
    fillers[0].unlink()
    monkeypatch.undo()
    committed = _state(config)
    assert committed[0] == 8  # released, not yet published
    assert not list((disk / "out" / "public").glob("*.tmp"))
    assert main(["run", str(config), "--quiet", "--until", "2025-01-09"]) == 0
    assert _state(config) == committed  # the outputs are rewritten; nothing is drawn again
    summary = (disk / "out" / "public" / "summary.json").read_text()
    assert '"released_intervals": 8' in summary


def test_a_full_disk_while_the_report_is_written_is_one_line(
    disk: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import dpcr.report.html as html

    config = _release(disk)
    assert main(["run", str(config), "--quiet", "--no-report", "--until", "2025-01-05"]) == 0
    render = html.render_report
    fillers: list[Path] = []

    def render_then_fill(data: Any) -> str:
        text = render(data)
        fillers.append(fill(disk))
        return text

    monkeypatch.setattr(html, "render_report", render_then_fill)
    capsys.readouterr()
    assert main(["report", str(config), "--quiet"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "report.html" in line and "the disk is full" in line and "free space" in line, line
    assert not (disk / "out" / "public" / "report.html").exists()
    fillers[0].unlink()
    monkeypatch.undo()
    assert main(["report", str(config), "--quiet"]) == 0
    assert (disk / "out" / "public" / "report.html").exists()


def test_a_full_disk_while_the_state_moves_forward_is_one_line(
    disk: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The incremental state of a JSON-lines source is written after the outputs."""
    config = _release(disk)
    assert main(["run", str(config), "--quiet", "--until", "2025-01-05"]) == 0
    fillers: list[Path] = []
    _fill_at(monkeypatch, disk, lambda stage, done: stage == "publish" and done == 1, fillers)
    capsys.readouterr()
    assert main(["run", str(config), "--quiet", "--no-report", "--until", "2025-01-09"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "the disk is full" in line and "incremental state" in line, line
    assert "committed" in line and "outputs are written" in line
    fillers[0].unlink()
    monkeypatch.undo()
    committed = _state(config)
    assert main(["run", str(config), "--quiet", "--until", "2025-01-09"]) == 0
    assert _state(config) == committed
