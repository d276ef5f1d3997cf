"""Failures the CLI fuzz found in command modules: each is one ``error:`` line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcr.cli import main


def _fails_cleanly(argv: list[str], capsys: pytest.CaptureFixture[str], *words: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert all(w in err for w in words), err


@pytest.mark.parametrize("kind", ["region", "cw-stream", "summary-privacy"])
def test_a_spec_that_is_not_utf8_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_bytes(b'title = "Jos\xe9"\n')
    _fails_cleanly(["analyze", kind, str(spec)], capsys, "not UTF-8", "spec.toml")


def test_a_spec_that_is_a_folder_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fails_cleanly(["analyze", "region", str(tmp_path)], capsys, "cannot read")


@pytest.mark.parametrize("factor", ["inf", "nan", "0", "-1"])
def test_audit_refuses_a_noise_factor_that_is_not_a_finite_positive_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], factor: str
) -> None:
    config = tmp_path / "dpcr.toml"
    config.write_text(
        '[source]\nformat = "jsonl"\npath = "log.jsonl"\n[privacy]\nepsilon = 1.0\n'
        '[constraint]\nat_most_k = 3\n[release]\nplan = "disjoint"\nstart = "2025-01-01"\n'
        'period = "1d"\n[[query]]\nname = "n"\nkind = "count"\n',
        encoding="utf-8",
    )
    (tmp_path / "log.jsonl").write_text(
        '{"entry":"1","ts":"2025-01-01T01:00:00Z","op":"insert","before":null,'
        '"after":{"zone":"A"}}\n',
        encoding="utf-8",
    )
    _fails_cleanly(
        ["audit", str(config), "--runs", "10", "--noise-factor", factor], capsys, "--noise-factor"
    )
