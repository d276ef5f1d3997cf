"""Small changelogs, writers for every source format, and a sequential reference validator."""

from __future__ import annotations

import base64
import csv
import json
import sqlite3
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

from dpcr.changelog import CLOCK_TABLE, install_triggers

Row = dict[str, Any]

COLUMNS = "record, unit, entry, ts, seq, op, before::VARCHAR, after::VARCHAR"


def small_log() -> list[Row]:
    """A valid changelog of three tickets, with ties in ts broken by seq, in time order."""
    t1 = {"id": 1, "rider": "r1", "zone": "A", "fare": 14.5, "rides": 0}
    t2 = {"id": 2, "rider": "r2", "zone": "B", "fare": -3.25, "rides": 0}
    t3 = {"id": 3, "rider": "r1", "zone": "C", "fare": 100.0, "rides": 0}
    log = [
        ("2025-01-01T08:00:00.000Z", "insert", None, t1),
        ("2025-01-01T08:00:00.000Z", "insert", None, t2),
        ("2025-01-01T09:30:00.250Z", "update", t1, dict(t1, rides=1)),
        ("2025-01-02T10:00:00.000Z", "insert", None, t3),
        ("2025-01-02T10:00:00.000Z", "update", dict(t1, rides=1), dict(t1, rides=2)),
        ("2025-01-03T00:00:00.000Z", "delete", t2, None),
        ("2025-01-04T12:00:00.000Z", "update", t3, dict(t3, zone="A")),
        ("2025-01-05T00:00:00.000Z", "delete", dict(t1, rides=2), None),
        ("2025-01-06T00:00:00.000Z", "insert", None, dict(t2, rides=5)),
    ]
    return [
        {"entry": str((a or b or {})["id"]), "ts": ts, "seq": i + 1, "op": op,
         "before": b, "after": a}
        for i, (ts, op, b, a) in enumerate(log)
    ]  # fmt: skip


def write_jsonl(path: Path, records: Iterable[Row | str]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path


def write_csv(path: Path, log: Sequence[Row]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["entry", "ts", "seq", "op", "before", "after"])
        for m in log:
            w.writerow(
                [m["entry"], m["ts"], m["seq"], m["op"]]
                + ["" if m[k] is None else json.dumps(m[k]) for k in ("before", "after")]
            )
    return path


def write_parquet(path: Path, log: Sequence[Row]) -> Path:
    """Parquet with a TIMESTAMPTZ ts, an integer seq and struct-free JSON text rows."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t (entry VARCHAR, ts TIMESTAMPTZ, seq BIGINT, op VARCHAR, "
        "before VARCHAR, after VARCHAR)"
    ).fetchall()
    con.executemany(
        "INSERT INTO t VALUES (?, ?::TIMESTAMPTZ, ?, ?, ?, ?)",
        [
            [m["entry"], m["ts"], m["seq"], m["op"]]
            + [None if m[k] is None else json.dumps(m[k]) for k in ("before", "after")]
            for m in log
        ],
    )
    con.execute(f"COPY t TO '{path}' (FORMAT parquet)").fetchall()
    con.close()
    return path


def decimal(value: Decimal | float | int, scale: int) -> Row:
    """Debezium's encoding of a decimal with ``scale`` digits after the point."""
    unscaled = int((Decimal(str(value)) * (Decimal(10) ** scale)).to_integral_value())
    raw = unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
    return {"scale": scale, "value": base64.b64encode(raw).decode()}


def write_debezium(
    path: Path, log: Sequence[Row], *, tombstones: bool = False, wrap: bool = True
) -> Path:
    """Envelopes with ``fare`` as a decimal of scale 2 and the row's ``id`` as key."""
    from dpcr.timeutil import parse_timestamp

    def enc(row: Row | None) -> Row | None:
        return None if row is None else dict(row, fare=decimal(row["fare"], 2))

    with path.open("w", encoding="utf-8") as f:
        for m in log:
            ms = parse_timestamp(m["ts"]) // 1000
            env = {
                "before": enc(m["before"]), "after": enc(m["after"]),
                "source": {"ts_ms": ms, "lsn": m["seq"], "table": "tickets"},
                "op": {"insert": "c", "update": "u", "delete": "d"}[m["op"]], "ts_ms": ms + 7,
            }  # fmt: skip
            f.write(json.dumps({"schema": None, "payload": env} if wrap else env) + "\n")
            if tombstones and m["op"] == "delete":
                f.write('{"payload": null}\n')
    return path


def write_sqlite(path: Path, log: Sequence[Row]) -> Path:
    """Replay ``log`` through real triggers, with the simulated times of the clock table."""
    with sqlite3.connect(path) as con:
        con.execute(
            "CREATE TABLE tickets (id INTEGER PRIMARY KEY, rider TEXT, zone TEXT, fare REAL, "
            "rides INTEGER)"
        )
    con.close()
    install_triggers(path, "tickets", key="id")
    con = sqlite3.connect(path)
    with con:
        con.execute(f"INSERT INTO {CLOCK_TABLE} VALUES (NULL)")
        for m in log:
            con.execute(f"UPDATE {CLOCK_TABLE} SET ts = ?", (m["ts"],))
            if m["op"] == "insert":
                con.execute("INSERT INTO tickets VALUES (:id, :rider, :zone, :fare, :rides)",
                            m["after"])  # fmt: skip
            elif m["op"] == "update":
                con.execute(
                    "UPDATE tickets SET rider = :rider, zone = :zone, fare = :fare, "
                    "rides = :rides WHERE id = :id",
                    m["after"],
                )
            else:
                con.execute("DELETE FROM tickets WHERE id = ?", (m["before"]["id"],))
    con.close()
    return path


def table(con: duckdb.DuckDBPyConnection, name: str = "changelog") -> list[tuple[Any, ...]]:
    return con.execute(f"SELECT {COLUMNS} FROM {name} ORDER BY ts, seq, record").fetchall()


def quarantine(path: Path) -> list[Row]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# -- the sequential reference validator ---------------------------------------------------------
OPS = {"insert": "insert", "i": "insert", "c": "insert", "r": "insert", "update": "update",
       "u": "update", "delete": "delete", "d": "delete"}  # fmt: skip


def reference(records: Sequence[Row | str]) -> tuple[list[int], dict[int, str]]:
    """The valid record numbers in (ts, seq, record) order, and the reason of every invalid one.

    Records have ``entry``, integer ``ts`` (epoch seconds), optional integer ``seq`` and ``op``;
    a string is a line that is not JSON. Plain Python, one record at a time: per-record checks,
    then duplicates in record order, then each entry's live/not-live state in time order, where
    only valid inserts and deletes change the state.
    """
    bad: dict[int, str] = {}
    ok: list[tuple[int, int, int, str, str]] = []  # ts, seq, record, entry, op
    seen: set[tuple[str, int]] = set()
    for n, r in enumerate(records, start=1):
        if isinstance(r, str):
            bad[n] = "bad_json"
            continue
        op = OPS.get(str(r.get("op")).lower()) if r.get("op") is not None else None
        entry = r.get("entry")
        if op is None:
            bad[n] = "unknown_op"
        elif entry in (None, ""):
            bad[n] = "missing_entry"
        else:
            seq = r["seq"] if r.get("seq") is not None else n
            if (entry, seq) in seen:
                bad[n] = "duplicate"
            else:
                seen.add((entry, seq))
                ok.append((r["ts"], seq, n, entry, op))
    live: dict[str, bool] = {}
    valid: list[int] = []
    for _ts, _seq, n, entry, op in sorted(ok):
        state = live.get(entry, False)
        if op == "insert" and state:
            bad[n] = "double_insert"
        elif op == "update" and not state:
            bad[n] = "update_before_insert"
        elif op == "delete" and not state:
            bad[n] = "delete_before_insert"
        else:
            valid.append(n)
            if op != "update":
                live[entry] = op == "insert"
    return valid, bad


def write_log_table(db: Path, rows: Iterable[tuple[object, ...]], *, key: bool = True) -> None:
    """A SQLite change-log table ``dpcr_changelog`` (seq, entry, ts, op, before, after) with
    ``rows``; ``key=False``: without a primary key (a hand-made log may repeat a seq)."""
    seq = "seq INTEGER PRIMARY KEY" if key else "seq INTEGER"
    with sqlite3.connect(db) as con:
        con.execute(f"CREATE TABLE dpcr_changelog ({seq}, entry TEXT, ts TEXT, op TEXT, "
                    "before TEXT, after TEXT)")  # fmt: skip
        con.executemany("INSERT INTO dpcr_changelog VALUES (?, ?, ?, ?, ?, ?)", rows)
    con.close()
