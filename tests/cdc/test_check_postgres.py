"""``dpcr check`` of a ``[follow]`` of PostgreSQL: the columns the configuration names are
looked for in the followed table's catalog before the follower has written anything (issue 33,
point 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcr.cli import main

CONFIG = """
[source]
format = "wal2json"
path = "changes.jsonl"
key = "id"
table = "public.tickets"
[privacy]
epsilon = 1.0
[constraint]
at_most_k = 3
[release]
plan = "disjoint"
start = "2025-01-01T00:00:00Z"
period = "1d"
[[query]]
name = "zones"
kind = "histogram"
column = "{column}"
keys = ["A", "B"]
[follow]
capture = "postgres"
slot = "s_check"
[output]
dir = "out"
"""


def test_check_reads_the_followed_tables_columns(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import psycopg2

    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS tickets")
        cur.execute("CREATE TABLE tickets (id int PRIMARY KEY, zone text, fare numeric)")
    conn.close()
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "dpcr.toml"
    config.write_text(CONFIG.format(column="zoen"), encoding="utf-8")
    monkeypatch.delenv("DPCR_PG_DSN", raising=False)
    assert main(["check", str(config)]) == 0  # no connection string: nothing to read yet
    assert "the follower has not written the source yet" in capsys.readouterr().out
    monkeypatch.setenv("DPCR_PG_DSN", pg_dsn)
    assert main(["check", str(config)]) == 2
    err = capsys.readouterr().err
    assert "'zoen'" in err and "the columns of public.tickets in PostgreSQL" in err
    assert "did you mean 'zone'?" in err and pg_dsn not in err
    config.write_text(CONFIG.format(column="zone"), encoding="utf-8")
    assert main(["check", str(config)]) == 0
    out = capsys.readouterr().out
    assert "columns it names (zone, id) checked against the columns of public.tickets" in out
    assert not (tmp_path / "out").exists() and not (tmp_path / "changes.jsonl").exists()
    config.write_text(CONFIG.format(column="zone").replace("public.tickets", "public.nope"),
                      encoding="utf-8")  # fmt: skip
    assert main(["check", str(config)]) == 2
    assert "table public.nope does not exist" in capsys.readouterr().err
