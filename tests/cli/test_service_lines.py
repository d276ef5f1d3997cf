"""What the commands print for an operator: ``--quiet`` prints no table, a statistic's key is
never cut short in the terminal table, the plan's noise line says what a sum's grid step is, and a
follower's log names its clock, knows what the store released when it restarts and says what a
lost connection was."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dpcr.cli import main
from e2e.helpers import empty_follower_release, mutations, write_config, write_jsonl

UNTIL = "2025-01-05"


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    return write_config(tmp_path, on_error="quarantine")


def test_quiet_prints_where_the_outputs_are_and_no_table(
    cfg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(cfg), "--until", UNTIL, "--quiet", "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "Public outputs:" in out
    assert "Latest releases" not in out and "± std" not in out and "Guarantee" not in out


def test_the_terminal_table_never_cuts_a_statistics_key(
    cfg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dpcr.cli as cli
    from dpcr.config import load_config
    from dpcr.release import stored_result

    assert main(["run", str(cfg), "--until", UNTIL, "--quiet", "--no-report"]) == 0
    config = load_config(cfg)
    result = stored_result(config)
    long_key = "zones[" + "A" * 30 + "]"
    rows = tuple(replace(r, key="A" * 30) if r.key == "A" else r for r in result.rows)
    result = replace(result, rows=rows)

    from rich.console import Console

    buffer = io.StringIO()
    monkeypatch.setattr(cli, "_console", lambda stderr=False: Console(
        file=buffer, width=90, force_terminal=False, highlight=False))  # fmt: skip
    monkeypatch.setattr(cli.sys.stdout, "isatty", lambda: True)
    cli._print_run(config, result)
    assert long_key in buffer.getvalue()


def test_the_noise_line_of_a_sum_names_its_grid_step(tmp_path: Path) -> None:
    from dpcr.config import parse_config
    from dpcr.report.text import plan_lines

    release = parse_config({
        "source": {"format": "jsonl", "path": "c.jsonl"},
        "privacy": {"epsilon": 1.0}, "constraint": {"at_most_k": 3},
        "release": {"plan": "disjoint", "start": "2025-01-01", "period": "1d", "end": "2025-02-01"},
        "query": [{"name": "revenue", "kind": "sum", "column": "amount", "lower": 0,
                   "upper": 100, "grid": 0.01}, {"name": "n", "kind": "count"}],
    }, base_dir=tmp_path)  # fmt: skip
    lines = plan_lines(release, release.explain())
    noise = next(line for line in lines if "revenue:" in line and "std" in line)
    revenue, count = noise.split(", n: ")
    assert "in steps of 0.01 (std" in revenue and "in steps of" not in count


def test_a_lost_connection_is_described_for_the_operator() -> None:
    psycopg2 = pytest.importorskip("psycopg2")
    from dpcr.cdc.follow import _describe

    text = _describe(psycopg2.OperationalError("no COPY in progress\n"))
    assert text.startswith("lost or refused the PostgreSQL connection")
    assert "no COPY in progress" in text


def test_a_restarted_follower_knows_what_the_store_released(tmp_path: Path) -> None:
    from dpcr.cdc.follow import Follower

    release, follow = empty_follower_release(tmp_path, clock="source")
    day, t0 = 86_400_000_000, 1_735_689_600_000_000  # 2025-01-01T00:00Z
    events: list[tuple[str, dict[str, Any]]] = []
    first = Follower(release, follow, dsn="host=x", wall=lambda: t0 + 9 * day,
                     log=lambda e, **f: events.append((e, f)))  # fmt: skip
    assert first.status.released == 0 and first.health()["released_intervals"] == 0
    with first._session:
        first.step(t0 + 3 * day)
    released = [f for e, f in events if e == "released"]
    assert released and released[0]["clock"] == "source (database)"
    again = Follower(release, follow, dsn="host=x", wall=lambda: t0 + 9 * day)
    assert again.status.released == 3
    assert again.next_close() == t0 + 4 * day


def test_the_follower_health_names_where_the_capture_stands(tmp_path: Path) -> None:
    from dpcr.cdc.follow import Follower

    release, follow = empty_follower_release(tmp_path)
    follower = Follower(release, follow, dsn="host=x", wall=lambda: 1_735_689_600_000_000)
    assert follower.health()["position"] is None
    follower.tick(3, None, "16/B374D848")  # (the LSN acknowledged last)
    assert follower.health()["position"] == "16/B374D848"
    assert follower.health()["captured"] == 3
