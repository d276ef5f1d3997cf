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


@pytest.mark.parametrize("target", ["folder", "text"])
def test_triggers_on_something_that_is_not_a_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    path = tmp_path
    if target == "text":
        path = tmp_path / "notes.txt"
        path.write_text("not a database\n", encoding="utf-8")
    _fails_cleanly(["sqlite-install-triggers", str(path), "t", "--key", "id"], capsys,
                   str(path))  # fmt: skip


@pytest.mark.parametrize("fmt", ["[]", "{ a = 1 }", "1"])
def test_a_source_format_that_is_not_a_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    config = tmp_path / "dpcr.toml"
    config.write_text(
        f'[source]\nformat = {fmt}\npath = "log.jsonl"\n[privacy]\nepsilon = 1.0\n'
        '[constraint]\nat_most_k = 3\n[release]\nplan = "disjoint"\nstart = "2025-01-01"\n'
        'period = "1d"\n[[query]]\nname = "n"\nkind = "count"\n',
        encoding="utf-8",
    )
    _fails_cleanly(["plan", str(config)], capsys, "format")


def test_capture_with_a_malformed_connection_string(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psycopg2")
    secret = "password=hunter2 not-a-pair"
    _fails_cleanly(["capture", "postgres", "--dsn", secret, "--slot", "s", "--drop-slot"],
                   capsys, "connection string")  # fmt: skip
    assert "hunter2" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kind", "spec", "words"),
    [
        ("cw-stream", 'n = 100000\np = "1/2"\nc = "1/2"\nbrute_force = false\n', "n must"),
        ("cw-stream", 'n = 4\np = "1/2"\nc = "1/2"\nsteps = 1735689600\nbrute_force = false\n',
         "steps must"),
        ("region", '[mechanism]\ncompose = 1000\nrandomized_response = { p_truth = "3/4" }\n',
         "compose must"),
        ("region", '[[mechanisms]]\ncompose = 40\nrandomized_response = { p_truth = "3/4" }\n'
                   '[[mechanisms]]\ncompose = 40\nrandomized_response = { p_truth = "2/3" }\n',
         "80 rounds"),
    ],
)  # fmt: skip
def test_analyze_refuses_sizes_beyond_its_documented_limits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, spec: str, words: str
) -> None:
    path = tmp_path / "spec.toml"
    path.write_text(spec, encoding="utf-8")
    _fails_cleanly(["analyze", kind, str(path)], capsys, words, "docs/analysis.md")


def test_a_composition_with_too_many_products_is_refused() -> None:
    from fractions import Fraction

    from dpcr.analysis.regions import MAX_LOSS_PAIRS, LossDistribution
    from dpcr.errors import ConfigError

    n = int(MAX_LOSS_PAIRS**0.5) + 1
    wide = LossDistribution(
        masses=tuple((Fraction(i + 1), Fraction(1, n), Fraction(1, n)) for i in range(n))
    )
    with pytest.raises(ConfigError, match="exact products"):
        wide.compose(wide)
