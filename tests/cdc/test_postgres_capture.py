"""``dpcr capture postgres`` against a real PostgreSQL 15 on 127.0.0.1, through wal2json and
through the built-in pgoutput plugin."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.cdc import _stream, postgres
from dpcr.changelog import load
from dpcr.changelog._sources import Wal2jsonSource
from dpcr.cli import main
from dpcr.errors import ConfigError

from .conftest import database

pytestmark = pytest.mark.slow


@pytest.fixture
def db(pg_dsn: str) -> Iterator[Any]:
    with database(
        pg_dsn, "DROP TABLE IF EXISTS tickets",
        "CREATE TABLE tickets (id int PRIMARY KEY, zone text, fare numeric(10,2))",
        "ALTER TABLE tickets REPLICA IDENTITY FULL",
    ) as cur:  # fmt: skip
        yield cur


def _cli(pg_dsn: str, *args: str) -> int:
    os.environ["DPCR_PG_DSN"] = pg_dsn
    try:
        return main(["capture", "postgres", *args])
    finally:
        del os.environ["DPCR_PG_DSN"]


def _loaded(out: Path, tmp_path: Path) -> tuple[Any, list[tuple], list[dict]]:
    con = duckdb.connect()
    q = tmp_path / "q.jsonl"
    report = load(Wal2jsonSource(path=out, key="id", table="public.tickets"), con,
                  on_error="quarantine", quarantine_path=q)  # fmt: skip
    rows = con.execute(
        "SELECT entry, op, before::VARCHAR, after::VARCHAR FROM changelog ORDER BY ts, seq, record"
    ).fetchall()
    return report, rows, [json.loads(x) for x in q.read_text().splitlines()]


def _rebuilt(rows: list[tuple]) -> dict[int, tuple[str, float]]:
    table: dict[int, tuple[str, float]] = {}
    for entry, op, before, after in rows:
        if op != "insert":
            b = json.loads(before)
            assert table.pop(int(entry)) == (b["zone"], float(b["fare"])), (entry, op, before)
        if op != "delete":
            a = json.loads(after)
            table[int(entry)] = (a["zone"], float(a["fare"]))
    return table


def _table(cur: Any) -> dict[int, tuple[str, float]]:
    cur.execute("SELECT id, zone, fare FROM tickets")
    return {i: (z, float(f)) for i, z, f in cur.fetchall()}


PLUGINS = pytest.mark.parametrize("plugin", ["wal2json", "pgoutput"])


@PLUGINS
def test_snapshot_then_changes_with_before_rows(
    pg_dsn: str, db: Any, tmp_path: Path, plugin: str
) -> None:
    db.execute("INSERT INTO tickets VALUES (1, 'A', 2.50), (2, 'B', -3.10)")
    out = tmp_path / "changes.wal2json.jsonl"
    args = ["--slot", "s_basic", "--table", "public.tickets", "--key", "id", "--out", str(out),
            "--plugin", plugin]  # fmt: skip
    assert _cli(pg_dsn, *args, "--create-slot", "--snapshot-only") == 0
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    snapshot = out.read_bytes().splitlines()  # a restart reads back to the last of these
    assert len(snapshot) == 2 and all(_stream.SNAPSHOT_MARK in x for x in snapshot)
    db.execute("UPDATE tickets SET fare = 9.99 WHERE id = 1")  # the first change after the slot
    db.execute("INSERT INTO tickets VALUES (3, 'C', 0)")
    db.execute("DELETE FROM tickets WHERE id = 2")
    db.execute("BEGIN; UPDATE tickets SET zone = 'Z' WHERE id = 3; "
               "UPDATE tickets SET zone = 'Y' WHERE id = 3; COMMIT")  # fmt: skip
    assert _cli(pg_dsn, *args, "--idle-exit", "1") == 0
    report, rows, bad = _loaded(out, tmp_path)
    assert bad == [] and report.valid == 7
    assert [(e, op) for e, op, _, _ in rows] == [
        ("1", "insert"), ("2", "insert"), ("1", "update"), ("3", "insert"), ("2", "delete"),
        ("3", "update"), ("3", "update"),
    ]  # fmt: skip
    assert json.loads(rows[2][2])["fare"] == 2.5 and json.loads(rows[2][3])["fare"] == 9.99
    assert _rebuilt(rows) == _table(db)
    # Nothing new: a second capture writes nothing and duplicates nothing.
    size = out.stat().st_size
    assert _cli(pg_dsn, *args, "--idle-exit", "1") == 0
    assert out.stat().st_size == size
    assert _cli(pg_dsn, "--slot", "s_basic", "--drop-slot") == 0
    db.execute("SELECT count(*) FROM pg_publication")
    assert db.fetchone() == (0,)  # the publication the slot read went with it


def test_refusals(pg_dsn: str, db: Any, tmp_path: Path) -> None:
    db.execute("ALTER TABLE tickets REPLICA IDENTITY DEFAULT")
    out = tmp_path / "c.jsonl"
    with pytest.raises(ConfigError, match=r"ALTER TABLE public\.tickets REPLICA IDENTITY FULL"):
        postgres.create_slot(pg_dsn, slot="s_ref", table="public.tickets", key=("id",), out=out)
    db.execute("ALTER TABLE tickets REPLICA IDENTITY FULL")
    with pytest.raises(ConfigError, match="no column 'nope'"):
        postgres.create_slot(pg_dsn, slot="s_ref", table="public.tickets", key=("nope",), out=out)
    with pytest.raises(ConfigError, match="does not exist"):
        postgres.capture(pg_dsn, slot="s_ref", table="public.tickets", out=out)
    postgres.create_slot(pg_dsn, slot="s_ref", table="public.tickets", key=("id",), out=out)
    with pytest.raises(ConfigError, match="already exists"):
        postgres.create_slot(pg_dsn, slot="s_ref", table="public.tickets", key=("id",), out=out)
    postgres.drop_slot(pg_dsn, slot="s_ref")


def test_plugins_and_publications_are_checked(pg_dsn: str, db: Any, tmp_path: Path) -> None:
    from dpcr.cdc import postgres

    def create(slot: str, name: str, plugin: str = "pgoutput") -> int:
        return postgres.create_slot(pg_dsn, slot=slot, table="public.tickets", key=("id",),
                                    out=tmp_path / name, plugin=plugin)  # fmt: skip

    create("s_w", "w.jsonl", "wal2json")
    with pytest.raises(ConfigError, match="created with the wal2json plugin, not pgoutput"):
        postgres.capture(pg_dsn, slot="s_w", table="public.tickets", out=tmp_path / "w.jsonl",
                         plugin="pgoutput")  # fmt: skip
    postgres.drop_slot(pg_dsn, slot="s_w")
    with pytest.raises(ConfigError, match="'wal2json' or 'pgoutput'"):
        create("s_x", "x.jsonl", "test_decoding")
    with pytest.raises(ConfigError, match="at most 58 characters"):
        create("s" * 59, "x.jsonl")
    # A publication made by someone else is checked, used as it is, and left in place.
    db.execute("DROP TABLE IF EXISTS other")
    db.execute("CREATE TABLE other (k int)")
    db.execute("CREATE PUBLICATION dpcr_s_p FOR TABLE other")
    with pytest.raises(ConfigError, match=r"does not publish public\.tickets; run `ALTER"):
        create("s_p", "p.jsonl")
    db.execute("ALTER PUBLICATION dpcr_s_p SET TABLE tickets WHERE (id > 10)")
    with pytest.raises(ConfigError, match="only some rows or columns"):
        create("s_p", "p.jsonl")
    db.execute("ALTER PUBLICATION dpcr_s_p SET TABLE tickets (id, zone)")
    with pytest.raises(ConfigError, match="only some rows or columns"):
        create("s_p", "p.jsonl")
    db.execute("ALTER PUBLICATION dpcr_s_p SET TABLE tickets")
    db.execute("ALTER PUBLICATION dpcr_s_p SET (publish = 'insert, update, delete')")
    with pytest.raises(ConfigError, match="every insert, update, delete and truncate"):
        create("s_p", "p.jsonl")
    db.execute("ALTER PUBLICATION dpcr_s_p SET (publish = 'insert, update, delete, truncate')")
    assert create("s_p", "p.jsonl") == 0
    db.execute("INSERT INTO tickets VALUES (1, 'A', 1)")
    stats = postgres.capture(pg_dsn, slot="s_p", table="public.tickets",
                             out=tmp_path / "p.jsonl", batching=postgres.Batching(idle_exit=1),
                             plugin="pgoutput")  # fmt: skip
    assert (stats.written, stats.transactions) == (3, 1)
    db.execute("DROP PUBLICATION dpcr_s_p")
    with pytest.raises(ConfigError, match=r"publication 'dpcr_s_p' does not exist; .* `CREATE"):
        postgres.capture(pg_dsn, slot="s_p", table="public.tickets",
                         out=tmp_path / "p.jsonl", plugin="pgoutput")  # fmt: skip
    db.execute("CREATE PUBLICATION dpcr_s_p FOR TABLE tickets")
    postgres.drop_slot(pg_dsn, slot="s_p")
    db.execute("SELECT pubname FROM pg_publication")
    assert db.fetchall() == [("dpcr_s_p",)]  # not dpcr's: kept


def test_pgoutput_in_a_latin1_database(pg_dsn: str, db: Any, tmp_path: Path) -> None:
    import psycopg2

    from dpcr.cdc import postgres

    db.execute("SELECT 1 FROM pg_database WHERE datname = 'latin'")
    if db.fetchone() is None:
        db.execute("CREATE DATABASE latin ENCODING 'LATIN1' TEMPLATE template0 LC_COLLATE 'C' "
                   "LC_CTYPE 'C'")  # fmt: skip
    dsn = pg_dsn.replace("dbname=postgres", "dbname=latin")
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("DROP TABLE IF EXISTS tickets")
    cur.execute("CREATE TABLE tickets (id int PRIMARY KEY, zone text, twice int GENERATED "
                "ALWAYS AS (id * 2) STORED)")  # fmt: skip
    cur.execute("ALTER TABLE tickets REPLICA IDENTITY FULL")
    out = tmp_path / "latin.jsonl"
    try:
        postgres.create_slot(dsn, slot="s_latin", table="public.tickets", key=("id",), out=out,
                             plugin="pgoutput")  # fmt: skip
        cur.execute("INSERT INTO tickets VALUES (1, 'Zürich')")
        postgres.capture(dsn, slot="s_latin", table="public.tickets", out=out,
                         batching=postgres.Batching(idle_exit=1),
                         plugin="pgoutput")  # fmt: skip
        postgres.drop_slot(dsn, slot="s_latin")
    finally:
        conn.close()
    insert = json.loads(out.read_text(encoding="utf-8").splitlines()[1])
    # Text arrives as UTF-8 whatever the database's encoding; generated columns are not sent.
    assert insert["columns"] == [{"name": "id", "value": 1}, {"name": "zone", "value": "Zürich"}]


class _Writer(threading.Thread):
    """Random single- and multi-row transactions on tickets until stopped."""

    def __init__(self, dsn: str, seed: int) -> None:
        super().__init__(daemon=True)
        import psycopg2

        self.conn = psycopg2.connect(dsn)
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.changes = 0
        self.next_id = 1000

    def run(self) -> None:
        cur = self.conn.cursor()
        while not self.stop.is_set():
            for _ in range(self.rng.randint(1, 20)):
                cur.execute("SELECT id FROM tickets ORDER BY random() LIMIT 1")
                row = cur.fetchone()
                kind = self.rng.random()
                if row is None or kind < 0.4:
                    self.next_id += 1
                    cur.execute("INSERT INTO tickets VALUES (%s, 'A', %s)",
                                (self.next_id, self.rng.randint(-999, 999) / 100))  # fmt: skip
                elif kind < 0.85:
                    cur.execute("UPDATE tickets SET fare = fare + 1, zone = %s WHERE id = %s",
                                (self.rng.choice("ABC"), row[0]))  # fmt: skip
                else:
                    cur.execute("DELETE FROM tickets WHERE id = %s", (row[0],))
                self.changes += 1
            self.conn.commit()
            time.sleep(self.rng.random() * 0.01)
        self.conn.close()


@PLUGINS
def test_kill_and_restart_loses_and_repeats_nothing(
    pg_dsn: str, db: Any, tmp_path: Path, plugin: str
) -> None:
    db.execute("INSERT INTO tickets SELECT g, 'S', g / 100.0 FROM generate_series(1, 200) g")
    out = tmp_path / "changes.wal2json.jsonl"
    args = ["--slot", "s_kill", "--table", "public.tickets", "--key", "id", "--out", str(out),
            "--plugin", plugin]  # fmt: skip
    assert _cli(pg_dsn, *args, "--create-slot", "--snapshot-only") == 0
    writer = _Writer(pg_dsn, seed=7)
    writer.start()
    env = dict(os.environ, DPCR_PG_DSN=pg_dsn)
    command = [sys.executable, "-m", "dpcr.cli", "capture", "postgres", *args]
    rng = random.Random(11)
    kills = 0
    try:
        for _ in range(6):
            proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
            time.sleep(0.8 + rng.random() * 1.5)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            kills += 1
    finally:
        writer.stop.set()
        writer.join(30)
    # Catch up with a clean run, then a graceful stop (SIGTERM) on an idle stream.
    assert _cli(pg_dsn, *args, "--idle-exit", "2") == 0
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    changes = [(m["action"], m["lsn"]) for m in lines if m["action"] in "IUD" and
               not m.get("snapshot")]  # fmt: skip
    assert writer.changes > 100
    assert len(changes) == len(set(changes)) == writer.changes, kills
    report, rows, bad = _loaded(out, tmp_path)
    assert bad == [] and report.valid == 200 + writer.changes
    assert _rebuilt(rows) == _table(db)
    assert _cli(pg_dsn, "--slot", "s_kill", "--drop-slot") == 0


class _Crash(Exception):
    pass


@PLUGINS
@pytest.mark.parametrize("copy", [False, True], ids=["insert", "copy"])
def test_a_transaction_half_written_before_a_crash_is_completed_once(
    pg_dsn: str, db: Any, tmp_path: Path, plugin: str, copy: bool
) -> None:
    out = tmp_path / "c.jsonl"
    postgres.create_slot(pg_dsn, slot="s_half", table="public.tickets", key=("id",), out=out,
                         plugin=plugin)  # fmt: skip
    if copy:  # COPY writes the rows in one WAL record: the ten inserts share one LSN
        db.copy_from(io.StringIO("".join(f"{g}\tA\t1\n" for g in range(1, 11))), "tickets")
    else:
        db.execute("INSERT INTO tickets SELECT g, 'A', 1 FROM generate_series(1, 10) g")

    def crash(stats: postgres.CaptureStats) -> None:
        raise _Crash  # after the first batch is durable, before its transaction is acknowledged

    with pytest.raises(_Crash):
        postgres.capture(pg_dsn, slot="s_half", table="public.tickets", out=out,
                         batching=postgres.Batching(batch_messages=4, batch_seconds=60),
                         on_batch=crash,
                         plugin=plugin)  # fmt: skip
    # The first batch is cut by its size (4 messages) or earlier, when the server pauses
    # mid-transaction: the begin and some of the 10 inserts, never the commit.
    first = [json.loads(x)["action"] for x in out.read_text().splitlines()]
    assert 2 <= len(first) <= 4 and first == ["B", *["I"] * (len(first) - 1)]
    stats = postgres.capture(pg_dsn, slot="s_half", table="public.tickets", out=out,
                             batching=postgres.Batching(idle_exit=1), plugin=plugin)  # fmt: skip
    held = len(first)  # what the restart skips: exactly what the file already holds
    assert (stats.skipped, stats.written, stats.transactions) == (held, 12 - held, 1)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [m["action"] for m in lines] == ["B", *["I"] * 10, "C"]
    assert len({m["lsn"] for m in lines[1:-1]}) == (1 if copy else 10)
    report, _, bad = _loaded(out, tmp_path)
    assert bad == [] and report.valid == 10
    postgres.drop_slot(pg_dsn, slot="s_half")


def test_schema_changes_and_a_large_transaction(pg_dsn: str, db: Any, tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    args = ["--slot", "s_schema", "--table", "public.tickets", "--key", "id", "--out", str(out)]
    assert _cli(pg_dsn, *args, "--create-slot", "--snapshot-only") == 0
    db.execute("INSERT INTO tickets SELECT g, 'A', g / 100.0 FROM generate_series(1, 5000) g")
    db.execute("ALTER TABLE tickets ADD COLUMN rides int DEFAULT 0")
    db.execute("UPDATE tickets SET rides = 2 WHERE id <= 3")
    db.execute("ALTER TABLE tickets DROP COLUMN rides")
    db.execute("DELETE FROM tickets WHERE id = 1")
    assert _cli(pg_dsn, *args, "--idle-exit", "1") == 0
    report, rows, bad = _loaded(out, tmp_path)
    assert bad == [] and report.valid == 5000 + 3 + 1
    updates = [json.loads(after) for _, op, _, after in rows if op == "update"]
    assert [u["rides"] for u in updates] == [2, 2, 2]
    assert json.loads(rows[-1][2]) == {"id": 1, "zone": "A", "fare": 0.01}  # column dropped
    assert _rebuilt(rows) == _table(db)
    assert _cli(pg_dsn, "--slot", "s_schema", "--drop-slot") == 0


def test_values_with_newlines_quotes_and_other_encodings(
    pg_dsn: str, db: Any, tmp_path: Path
) -> None:
    zones = ["two\nlines", 'say "hi" \\ back\\slash', "tab\there é ü €", '{"action":"C"}']
    out = tmp_path / "c.jsonl"
    postgres.create_slot(pg_dsn, slot="s_text", table="public.tickets", key=("id",), out=out)
    for i, zone in enumerate(zones):
        db.execute("INSERT INTO tickets VALUES (%s, %s, 1)", (i, zone))
    db.execute("UPDATE tickets SET fare = 2")
    stats = postgres.capture(pg_dsn, slot="s_text", table="public.tickets", out=out,
                             batching=postgres.Batching(idle_exit=1))
    assert (stats.written, stats.transactions) == (3 * len(zones) + 2 + len(zones), 5)
    lines = out.read_bytes().splitlines()
    assert all(json.loads(x)["action"] in "BCIU" for x in lines)
    report, rows, bad = _loaded(out, tmp_path)
    assert bad == [] and report.valid == 2 * len(zones)
    assert [json.loads(after)["zone"] for _, op, _, after in rows if op == "insert"] == zones
    postgres.drop_slot(pg_dsn, slot="s_text")
    # A LATIN1 database: the server sends LATIN1, the file is UTF-8.
    db.execute("DROP DATABASE IF EXISTS latin")
    db.execute("CREATE DATABASE latin TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' "
               "LC_CTYPE 'C'")  # fmt: skip
    dsn = pg_dsn.replace("dbname=postgres", "dbname=latin")
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        cur = conn.cursor()
        cur.execute("CREATE TABLE tickets (id int PRIMARY KEY, zone text, fare numeric(10,2))")
        cur.execute("ALTER TABLE tickets REPLICA IDENTITY FULL")
        out = tmp_path / "latin.jsonl"
        postgres.create_slot(dsn, slot="s_latin", table="public.tickets", key=("id",), out=out)
        cur.execute("INSERT INTO tickets VALUES (1, 'é ü ß', 1)")
        postgres.capture(dsn, slot="s_latin", table="public.tickets", out=out,
                             batching=postgres.Batching(idle_exit=1))
        postgres.drop_slot(dsn, slot="s_latin")
    finally:
        conn.close()
        db.execute("DROP DATABASE latin")
    _, rows, bad = _loaded(out, tmp_path)
    assert bad == [] and json.loads(rows[0][3])["zone"] == "é ü ß"
