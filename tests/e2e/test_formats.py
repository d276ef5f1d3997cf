"""Every source format carries the same changelog to the same releases (same simulation seed)."""

from __future__ import annotations

import base64
import csv
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import CLOCK_TABLE, install_triggers
from dpcr.cli import main

from .helpers import mutations, write_config, write_jsonl

Row = dict[str, Any]


def _csv(path: Path, log: list[Row]) -> str:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["entry", "ts", "seq", "op", "before", "after"])
        for m in log:
            w.writerow([m["entry"], m["ts"], m["seq"], m["op"],
                        "" if m["before"] is None else json.dumps(m["before"]),
                        "" if m["after"] is None else json.dumps(m["after"])])
    return f'format = "csv"\npath = "{path.name}"'


def _parquet(path: Path, log: list[Row]) -> str:
    tmp = path.with_suffix(".src.jsonl")
    rows = [dict(m, before=json.dumps(m["before"]) if m["before"] is not None else None,
                 after=json.dumps(m["after"]) if m["after"] is not None else None) for m in log]
    write_jsonl(tmp, rows)
    duckdb.sql(
        f"COPY (SELECT entry, ts, seq::BIGINT AS seq, op, before, after FROM read_json("
        f"'{tmp}', columns={{entry:'VARCHAR', ts:'VARCHAR', seq:'BIGINT', op:'VARCHAR', "
        f"before:'VARCHAR', after:'VARCHAR'}})) TO '{path}' (FORMAT parquet)"
    )
    return f'format = "parquet"\npath = "{path.name}"'


_ROW = ("STRUCT(ticket_id VARCHAR, rider_id VARCHAR, kind VARCHAR, zone VARCHAR, fare DOUBLE, "
        "rides BIGINT)")


def _parquet_typed(path: Path, log: list[Row]) -> str:
    """Typed columns (a timestamp, STRUCT rows) and no sequence column (the file's order is the
    log's): the release reads the file through a view instead of a copy of it."""
    tmp = path.with_suffix(".src.jsonl")
    write_jsonl(tmp, log)
    duckdb.sql(
        f"COPY (SELECT entry, ts, op, before, after FROM read_json('{tmp}', columns={{"
        f"entry: 'VARCHAR', ts: 'TIMESTAMPTZ', op: 'VARCHAR', before: '{_ROW}', "
        f"after: '{_ROW}'}})) TO '{path}' (FORMAT parquet)"
    )
    return f'format = "parquet"\npath = "{path.name}"'


def _decimal(x: float) -> dict[str, Any]:
    unscaled = round(x * 100)
    raw = unscaled.to_bytes((unscaled.bit_length() + 8) // 8 or 1, "big", signed=True)
    return {"scale": 2, "value": base64.b64encode(raw).decode()}


def _debezium(path: Path, log: list[Row]) -> str:
    from dpcr.timeutil import parse_timestamp

    def enc(row: Row | None) -> Row | None:
        return None if row is None else dict(row, fare=_decimal(row["fare"]))

    with path.open("w", encoding="utf-8") as fh:
        for m in log:
            ms = parse_timestamp(m["ts"]) // 1000
            payload = {"before": enc(m["before"]), "after": enc(m["after"]),
                       "op": {"insert": "c", "update": "u", "delete": "d"}[m["op"]],
                       "ts_ms": ms + 5, "source": {"ts_ms": ms, "lsn": m["seq"], "table": "t"}}
            fh.write(json.dumps({"payload": payload}) + "\n")
            if m["op"] == "delete":
                fh.write("null\n")
    return f'format = "debezium"\npath = "{path.name}"\nkey = "ticket_id"'


def _sqlite(path: Path, log: list[Row]) -> str:
    with sqlite3.connect(path) as con:
        con.execute(
            "CREATE TABLE tickets (ticket_id TEXT PRIMARY KEY, rider_id TEXT, kind TEXT, "
            "zone TEXT, fare REAL, rides INTEGER)"
        )
    install_triggers(path, "tickets", key="ticket_id")
    with sqlite3.connect(path) as con:
        for m in log:
            con.execute(f"DELETE FROM {CLOCK_TABLE}")
            con.execute(f"INSERT INTO {CLOCK_TABLE} (ts) VALUES (?)", (m["ts"],))
            a = m["after"]
            if m["op"] == "insert":
                con.execute("INSERT INTO tickets VALUES (?, ?, ?, ?, ?, ?)",
                            (a["ticket_id"], a["rider_id"], a["kind"], a["zone"], a["fare"],
                             a["rides"]))
            elif m["op"] == "update":
                con.execute("UPDATE tickets SET rides = ? WHERE ticket_id = ?",
                            (a["rides"], m["entry"]))
            else:
                con.execute("DELETE FROM tickets WHERE ticket_id = ?", (m["entry"],))
    return f'format = "sqlite"\npath = "{path.name}"'


WRITERS: dict[str, tuple[str, Callable[[Path, list[Row]], str]]] = {
    "csv": ("log.csv", _csv),
    "parquet": ("log.parquet", _parquet),
    "parquet-typed": ("typed.parquet", _parquet_typed),
    "debezium": ("debezium.jsonl", _debezium),
    "sqlite": ("app.sqlite", _sqlite),
}


def _rows(tmp: Path, source: str, capsys: pytest.CaptureFixture[str]) -> list[Row]:
    cfg = write_config(tmp, source=source)
    # (a fixed clock: two runs either side of midnight would otherwise close different days)
    until = ["--until", "2025-02-01T00:00:00Z"]
    assert main(["run", str(cfg), "--simulate", "11", "--json", *until]) == 0
    rows: list[Row] = json.loads(capsys.readouterr().out)["rows"]
    return rows


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_every_format_gives_the_same_release(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = mutations(n_entries=25)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_jsonl(tmp_path / "a" / "log.jsonl", log)
    expected = _rows(tmp_path / "a", 'format = "jsonl"\npath = "log.jsonl"', capsys)
    name, writer = WRITERS[fmt]
    source = writer(tmp_path / "b" / name, log)
    assert _rows(tmp_path / "b", source, capsys) == expected


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "parquet-typed", "csv"])
def test_appended_sources_continue_and_rewritten_ones_are_refused(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file source read by an earlier run: appended records are accepted (Parquet: the file
    rewritten with rows added), a changed consumed record is refused."""
    log = mutations(n_entries=25)
    half = len(log) // 2

    def write(rows: list[Row]) -> str:
        if fmt == "jsonl":
            write_jsonl(tmp_path / "log.jsonl", rows)
            return 'format = "jsonl"\npath = "log.jsonl"'
        name, writer = WRITERS[fmt]
        return writer(tmp_path / name, rows)

    cfg = str(write_config(tmp_path, source=write(log[:half])))
    until = ["--until", "2025-01-02T00:00:00Z"]
    assert main(["run", cfg, "--simulate", "3", "--quiet", *until]) == 0
    write(log)
    assert main(["run", cfg, "--simulate", "3", "--quiet", *until]) == 0
    capsys.readouterr()
    changed = [dict(m, entry="other") if i == 1 else m for i, m in enumerate(log)]
    write(changed)
    assert main(["run", cfg, "--simulate", "3", "--quiet", *until]) == 2
    assert "rewritten history" in capsys.readouterr().err
