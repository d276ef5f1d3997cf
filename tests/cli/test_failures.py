"""Failures of a run or a command end in one line that names the cause and the safe action,
never in a traceback, and leave nothing behind that was not there (issue 30, point 6)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import duckdb
import pytest

import dpcr.release._loop as release_loop
from dpcr.cli import main

CONFIG = """
[source]
format = "{fmt}"
path = "{path}"
[privacy]
epsilon = 1.0
[constraint]
at_most_k = 4
[release]
plan = "disjoint"
start = "2025-01-01T00:00:00Z"
period = "7d"
[[query]]
name = "active"
kind = "count"
[output]
dir = "out"
"""
LINE = (
    '{"entry": "t1", "ts": "2025-01-02T08:00:00Z", "seq": 1, "op": "insert", "before": null, '
    '"after": {"zone": "A"}}\n'
)


def _config(tmp: Path, fmt: str, path: str) -> str:
    (tmp / "dpcr.toml").write_text(CONFIG.format(fmt=fmt, path=path), encoding="utf-8")
    return "dpcr.toml"


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("case", ["missing", "loop", "folder"])
def test_an_unreachable_source_is_named_and_nothing_is_created(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    if case == "loop":
        os.symlink("b.jsonl", tmp_path / "a.jsonl")
        os.symlink("a.jsonl", tmp_path / "b.jsonl")
    if case == "folder":
        (tmp_path / "a.jsonl").mkdir()
    config = _config(tmp_path, "jsonl", "a.jsonl")
    assert main(["run", config, "--until", "2025-01-15"]) == 2
    line = _one_error_line(capsys)
    assert "a.jsonl" in line and ("check [source] path" in line or "is not a file" in line)
    assert not (tmp_path / "out").exists()  # no store, state, lock or operator folder


@pytest.mark.parametrize("content", [b"", b"PAR1\x00\x00"], ids=["empty", "truncated"])
def test_an_unreadable_parquet_file_is_not_called_a_rewritten_history(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    content: bytes,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "log.parquet").write_bytes(content)
    config = _config(tmp_path, "parquet", "log.parquet")
    assert main(["run", config, "--until", "2025-01-15"]) == 2
    line = _one_error_line(capsys)
    assert "rewritten" not in line
    assert "cannot read the source" in line and "check [source] path and format" in line


@pytest.mark.parametrize("target", ["folder", "store", "missing"])
def test_report_of_something_that_is_not_a_config(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    target: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "log.jsonl").write_text(LINE, encoding="utf-8")
    config = _config(tmp_path, "jsonl", "log.jsonl")
    assert main(["run", config, "--until", "2025-01-15", "--quiet"]) == 0
    capsys.readouterr()
    path = {"folder": "out", "store": "out/store.sqlite", "missing": "nothing.toml"}[target]
    if target == "store":
        path = str(next((tmp_path / "out").rglob("store.sqlite")))
    for command in ("report", "run", "plan"):
        assert main([command, path]) == 2
        line = _one_error_line(capsys)
        assert "config" in line or "TOML" in line


@pytest.mark.parametrize("how", ["interrupt", "sigint", "clean-up refused"])
def test_ctrl_c_while_duckdb_runs_a_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """Ctrl-C while DuckDB runs a query of the data step ends the query with DuckDB's own
    error instead of KeyboardInterrupt: ``InterruptException`` (here from ``con.interrupt()``,
    as DuckDB raises it) or, for SIGINT, ``RuntimeError("Query interrupted")`` (what duckdb
    2.0 raises; a real SIGINT is not always taken by DuckDB on a loaded machine, so that case
    raises the same error at the same place). A clean-up statement that DuckDB then refuses,
    the transaction being aborted, raises while the interrupt unwinds: still the interrupt.
    The command says it was interrupted (exit 130) and the next run works."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "log.jsonl").write_text(LINE, encoding="utf-8")
    config = _config(tmp_path, "jsonl", "log.jsonl")
    real = release_loop.load_and_aggregate

    def slow(settings, con, *args, **kwargs):  # type: ignore[no-untyped-def]
        if how == "sigint":
            raise RuntimeError("Query interrupted")
        if how == "clean-up refused":
            try:
                raise RuntimeError("Query interrupted")
            finally:
                con.execute("BEGIN")
                with pytest.raises(duckdb.Error):
                    con.execute("SELECT error('aborts the transaction')")
                con.execute("SET threads = 1")  # TransactionException: aborted
        threading.Timer(0.3, con.interrupt).start()
        con.execute("SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3").fetchall()
        return real(settings, con, *args, **kwargs)

    monkeypatch.setattr(release_loop, "load_and_aggregate", slow)
    assert main(["run", config, "--until", "2025-01-15"]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "interrupted" in err and "run again" in err
    monkeypatch.setattr(release_loop, "load_and_aggregate", real)
    assert main(["run", config, "--until", "2025-01-15", "--quiet"]) == 0  # nothing lost


@pytest.mark.parametrize("unit", ['ri"der', "ri\\der"])
def test_plan_refuses_a_unit_column_no_load_path_can_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    unit: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    text = CONFIG.format(fmt="jsonl", path="log.jsonl").replace(
        "epsilon = 1.0", f"epsilon = 1.0\nunit = '{unit}'"
    )
    (tmp_path / "dpcr.toml").write_text(text, encoding="utf-8")
    assert main(["plan", "dpcr.toml"]) == 2
    assert "rename the column" in _one_error_line(capsys)
