"""A failed first run binds nothing (issue 33, point 1): a store is bound to a plan by its
first committed release, so an operator who fixes a config after a run that released nothing
runs again without deleting anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.e2e.helpers import mutations, write_config, write_jsonl

from dpcr.cli import main

UNTIL = ["--until", "2025-01-08T00:00:00Z"]


def _setup(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp)
    write_jsonl(tmp / "log.jsonl", mutations())
    return write_config(tmp)


def _released(tmp: Path) -> int:
    summary = json.loads((tmp / "out" / "public" / "summary.json").read_text(encoding="utf-8"))
    return int(summary["released_intervals"])


def test_misspelt_column_then_fixed_config_releases(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The walkthrough: a misspelt column fails the run; the fixed config releases from the
    same output folder; the store is then bound to the fixed config."""
    config = _setup(tmp_path, monkeypatch)
    good = config.read_text(encoding="utf-8")
    config.write_text(good.replace('column = "zone"', 'column = "zoen"'), encoding="utf-8")
    assert main(["run", str(config), "--no-report", *UNTIL]) == 2
    assert "'zoen'" in capsys.readouterr().err
    assert (tmp_path / "out" / "store.sqlite").exists()  # (what the failed run left)
    config.write_text(good, encoding="utf-8")
    assert main(["run", str(config), *UNTIL]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert "held no release of its earlier config" in caplog.text
    assert _released(tmp_path) == 7
    assert main(["verify", str(config)]) == 0
    capsys.readouterr()
    # Released now: the store is bound to this config, exactly as before.
    config.write_text(good.replace("epsilon = 1.0", "epsilon = 2.0"), encoding="utf-8")
    assert main(["run", str(config), "--no-report", *UNTIL]) == 2
    assert "holds releases of a different plan" in capsys.readouterr().err


def test_a_run_before_the_first_interval_closes_binds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that released no interval commits and publishes empty outputs; a changed config
    is still accepted, its public files are accounted for and replaced."""
    config = _setup(tmp_path, monkeypatch)
    good = config.read_text(encoding="utf-8")
    assert main(["run", str(config), "--until", "2024-12-31T00:00:00Z"]) == 0
    assert _released(tmp_path) == 0
    config.write_text(good.replace("epsilon = 1.0", "epsilon = 2.0"), encoding="utf-8")
    assert main(["run", str(config), *UNTIL]) == 0
    assert _released(tmp_path) == 7
    summary = json.loads((tmp_path / "out" / "public" / "summary.json").read_text("utf-8"))
    assert summary["guarantee"]["epsilon"] == 2.0
    capsys.readouterr()
    assert main(["verify", str(config)]) == 0
