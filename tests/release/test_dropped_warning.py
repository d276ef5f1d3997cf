"""``[constraint] warn_dropped``: every run warns the operator when bounding drops more than
that share of the mutations; no public file depends on it."""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.errors import ConfigError
from dpcr.release import public_dir

from .suggest_data import _histories, _write


def _config(tmp: Path, warn: str | None) -> Path:
    extra = "" if warn is None else f"warn_dropped = {warn}\n"
    return _write(tmp, _histories(units=40), f"at_most_k = 3\n{extra}")


def _run(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, object], str, str]:
    assert main(["run", str(config), "--simulate", "3", "--until", "2025-08-01", "--json",
                 "--log-format", "json"]) == 0  # fmt: skip
    captured = capsys.readouterr()
    return json.loads(captured.out)["diagnostics"], captured.out, captured.err


def _public(config: Path) -> dict[str, bytes]:
    folder = public_dir(load_config(config), simulation=True)
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_the_warning_fires_above_the_share_and_is_silent_at_or_below_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    diagnostics, _, err = _run(_config(probe, None), capsys)
    bounding = diagnostics["bounding"]
    assert isinstance(bounding, dict)
    share = bounding["dropped_share"]
    assert 0.05 < share < 0.9  # (the default threshold, 5 %, fires here)
    assert bounding["dropped_warning"] and '"event": "dropped_share"' in err
    assert share == sum(bounding["dropped"].values()) / bounding["mutations"]
    runs = {}
    for name, warn in (("below", f"{share - 1e-4:.6f}"), ("at", repr(share)), ("off", "1.0")):
        folder = tmp_path / name
        folder.mkdir()
        config = _config(folder, warn)
        d, _, err = _run(config, capsys)
        runs[name] = (config, d, err)
    fired, *silent = runs["below"], runs["at"], runs["off"]
    warning = fired[1]["bounding"]["dropped_warning"]
    assert warning and warning.startswith("DROPPED") and "dpcr suggest" in warning
    assert warning not in fired[1]["changelog"]["warnings"]  # (those are about records)
    events = [json.loads(line) for line in fired[2].splitlines()]
    loud = [e for e in events if e["event"] == "dropped_share"]
    assert [(e["level"], e["message"]) for e in loud] == [("warning", warning)]
    for _, d, err in silent:
        assert d["bounding"]["dropped_warning"] is None and "dropped_share" not in err
        assert not any("DROPPED" in w for w in d["changelog"]["warnings"])
    # the operator report says so, in a box at the top
    report = load_config(fired[0]).output_dir / "operator" / "simulation-report.html"
    assert main(["report", str(fired[0]), "--simulation"]) == 0
    capsys.readouterr()
    html = report.read_text(encoding="utf-8")
    assert '<p class="warning">Warning: DROPPED' in html
    # the public files are the same bytes whether or not it fired
    assert _public(fired[0]) == _public(runs["off"][0]) != {}


def test_the_threshold_is_no_part_of_the_fingerprint(tmp_path: Path) -> None:
    a = load_config(_config(tmp_path, "0.5"))
    b = load_config(_config(tmp_path, None))
    assert a.warn_dropped == 0.5 and b.warn_dropped == 0.05
    assert a.fingerprint() == b.fingerprint()


@pytest.mark.parametrize("value", ["1.5", "-0.1", '"5 %"', "true"])
def test_a_bad_threshold_is_one_config_error(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match="warn_dropped must be a share from 0 to 1"):
        load_config(_config(tmp_path, value))


def test_the_run_text_names_the_warning_among_the_operator_diagnostics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, "0.01")
    assert main(["run", str(config), "--simulate", "3", "--until", "2025-08-01",
                 "--no-report"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    operator = out[out.index("Operator diagnostics") :]
    assert "warning: DROPPED" in operator
    shutil.rmtree(tmp_path / "out", ignore_errors=True)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_warning_is_a_line_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, warn, loud in (("fires", "0.01", True), ("silent", "0.99", False)):
        folder = tmp_path / name
        folder.mkdir()
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert main(["run", str(_config(folder, warn)), "--simulate", "3", "--until",
                     "2025-08-01", "--no-report"]) == 0  # fmt: skip
        monkeypatch.undo()
        capsys.readouterr()
        assert ("warning: DROPPED" in terminal.getvalue()) is loud, terminal.getvalue()
