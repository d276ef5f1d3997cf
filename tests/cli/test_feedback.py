"""What `dpcr run` tells its operator on stderr: a progress bar on a terminal, nothing with
--quiet or when stderr is not a terminal, one JSON object per event with --log-format json."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import pytest

from dpcr.cli import main
from dpcr.commands._feedback import Feedback
from e2e.helpers import mutations, write_config, write_jsonl


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    return write_config(tmp_path)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_json_log_is_one_object_per_event(cfg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(cfg), "--until", "2025-01-10", "--log-format", "json"]) == 0
    err = capsys.readouterr().err
    events = [json.loads(line) for line in err.splitlines()]
    assert events and all({"time", "level", "event"} <= e.keys() for e in events)
    names = [e["event"] for e in events]
    assert names[0] == "run_started" and "released" in names
    assert names[-2:] == ["report_written", "operator_report_written"]
    stages = {e["stage"] for e in events if e["event"] == "progress"}
    assert {"load changelog", "bound and aggregate", "release", "commit", "report"} <= stages
    released = next(e for e in events if e["event"] == "released")
    assert released["released_intervals"] == 9 and released["simulation"] is False
    # errors are events too
    assert main(["run", str(cfg.parent / "missing.toml"), "--log-format", "json"]) == 2
    error = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert error["level"] == "error" and "missing.toml" in error["message"]


def test_quiet_and_no_terminal_print_nothing_on_stderr(
    cfg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(cfg), "--until", "2025-01-05", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["run", str(cfg), "--until", "2025-01-10"]) == 0  # stderr is not a terminal
    captured = capsys.readouterr()
    assert captured.err == "" and "Guarantee" in captured.out
    assert main(["run", str(cfg), "--until", "2025-01-10", "--quiet", "--log-format", "json"]) == 0
    assert capsys.readouterr().err == ""


def test_progress_bar_shows_percentage_count_and_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    screen = _Terminal()
    with Feedback(stream=screen) as feedback:
        for done in range(0, 101, 10):
            feedback.progress("load changelog", done * 1000, 100_000)
            time.sleep(0.01)
        feedback.progress("release", 3, 4)
    text = screen.getvalue()
    assert "load changelog" in text and "release" in text
    assert "100%" in text and "75%" in text
    assert "100000/100000" in text
    assert re.search(r"[0-9,]+/s", text)  # the rate of the stage
