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
    assert main(["check", str(config)]) == 0
    assert "the store holds no release yet" in capsys.readouterr().out
    assert main(["verify", str(config)]) == 2  # (verify writes nothing: it rebinds nothing)
    assert "holds no release yet" in capsys.readouterr().err
    assert main(["run", str(config), *UNTIL]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert "held no release of its earlier config" in caplog.text
    assert _released(tmp_path) == 7
    assert main(["verify", str(config)]) == 0
    capsys.readouterr()
    # Released now: the store is bound to this config, exactly as before.
    config.write_text(good.replace("epsilon = 1.0", "epsilon = 2.0"), encoding="utf-8")
    assert main(["check", str(config)]) == 2
    assert "a run would refuse this config" in capsys.readouterr().err
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


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("command", ["check", "plan"])
def test_check_and_plan_catch_a_misspelt_column_before_any_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """The source's head is read: a misspelt column is one line naming it, its likely
    spelling and the fix; nothing is written."""
    config = _setup(tmp_path, monkeypatch)
    good = config.read_text(encoding="utf-8")
    config.write_text(good.replace('column = "zone"', 'column = "zoen"'), encoding="utf-8")
    assert main([command, str(config)]) == 2
    line = _one_error_line(capsys)
    assert "'zoen'" in line and "query 'zones'" in line and "did you mean 'zone'?" in line
    assert not (tmp_path / "out").exists()
    config.write_text(good.replace('column = "kind"', 'column = "sort"'), encoding="utf-8")
    assert main([command, str(config)]) == 2  # no likely spelling, the whole source read
    line = _one_error_line(capsys)
    assert "'sort' ([constraint] column)" in line and "fare, kind" in line
    config.write_text(good, encoding="utf-8")
    assert main([command, str(config)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    if command == "check":
        assert "checked against the whole source (106 records)" in out


def test_a_column_absent_from_the_head_of_a_long_source_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Past the records read, a column may still appear: without a likely spelling among the
    columns read, a warning (exit 0); a plan whose source does not exist yet reads nothing."""
    from dpcr.changelog import _columns

    config = _setup(tmp_path, monkeypatch)
    good = config.read_text(encoding="utf-8")
    config.write_text(good.replace('column = "zone"', 'column = "region"'), encoding="utf-8")
    monkeypatch.setattr(_columns, "RECORDS", 50)
    assert main(["check", str(config)]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("warning: column 'region' (the column of query 'zones') is in no "
                          "row of the source's first 50 records")  # fmt: skip
    assert "checked against its first 50 records" in out
    (tmp_path / "log.jsonl").unlink()
    assert main(["plan", str(config)]) == 0
    assert capsys.readouterr().err == ""
    assert main(["check", str(config)]) == 2
    assert "cannot read the source" in _one_error_line(capsys)
