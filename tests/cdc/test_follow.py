"""``dpcr follow`` on a live PostgreSQL: killed with SIGKILL at random points during a pgbench
load and restarted, it releases exactly what one uninterrupted run over the same changes
releases (same simulation seed), no node twice and none lost, every change once, through wal2json
and through pgoutput (heartbeats read back as logical messages); bad input on the wire is
quarantined and counted while the follower stays up."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

import dpcr
from dpcr.changelog import load
from dpcr.changelog._sources import Wal2jsonSource
from dpcr.config import load_config
from dpcr.noise import simulation_randomness
from dpcr.release._loop import stored_result

pytestmark = pytest.mark.slow

SEED = 5
KILLS = int(os.environ.get("DPCR_FOLLOW_KILLS", "10"))


def _pgbench() -> str:
    found = shutil.which("pgbench") or next(iter(sorted(glob.glob(
        "/usr/lib/postgresql/*/bin/pgbench"))), None)  # fmt: skip
    if found is None:
        pytest.skip("pgbench is not installed")
    return found


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[Any]:
    import psycopg2

    c = psycopg2.connect(pg_dsn)
    c.autocommit = True
    try:
        yield c.cursor()
    finally:
        cur = c.cursor()
        cur.execute("SELECT slot_name FROM pg_replication_slots")
        for (slot,) in cur.fetchall():
            for _ in range(50):
                try:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    break
                except psycopg2.errors.ObjectInUse:
                    time.sleep(0.2)
        cur.execute("SELECT pubname FROM pg_publication")
        for (publication,) in cur.fetchall():
            cur.execute(f'DROP PUBLICATION "{publication}"')
        c.close()


def _config(tmp: Path, *, table: str, key: str, extra_query: str, clock: str, out: str,
            plugin: str = "wal2json") -> Path:  # fmt: skip
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
    path = tmp / f"{out}.toml"
    path.write_text(f"""
[source]
format = "wal2json"
path = "changes.jsonl"
key = "{key}"
table = "{table}"

[privacy]
epsilon = 1.0

[constraint]
at_most_k = 3

[release]
start = "{start}"
period = "1s"

[[query]]
name = "rows"
kind = "count"
{extra_query}
[follow]
capture = "postgres"
plugin = "{plugin}"
slot = "s_follow"
clock = "{clock}"
allowed_lateness = "2s"  # above the commit-time skew of a loaded machine
heartbeat = "250ms"

[output]
dir = "{out}"
""")
    return path


def _events(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _follow(config: Path, log: Path, dsn: str, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, DPCR_PG_DSN=dsn)
    command = [sys.executable, "-m", "dpcr.cli", "follow", str(config), "--simulate", str(SEED),
               "--log-format", "json", "--health-every", "1", *extra]  # fmt: skip
    with log.open("ab") as f:
        return subprocess.Popen(command, env=env, stderr=f, stdout=subprocess.DEVNULL)


def _wait_for(log: Path, event: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Wait until ``proc`` has logged ``event`` (failing with its last events if it exits or the
    time runs out first)."""
    deadline = time.time() + timeout
    while not any(e["event"] == event for e in _events(log)):
        assert proc.poll() is None and time.time() < deadline, _events(log)[-3:]
        time.sleep(0.2)


def _wait_released_after(log: Path, proc: subprocess.Popen[bytes], done_at: float,
                         timeout: float = 120) -> None:  # fmt: skip
    """Wait until ``proc`` has released an interval ending more than a second after
    ``done_at`` (failing with its last events if it exits first); at most ``timeout`` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        through = [e["through"] for e in _events(log) if e["event"] == "released"]
        if through and dpcr.timeutil.parse_timestamp(through[-1]) > (done_at + 1) * 1e6:
            return
        assert proc.poll() is None, _events(log)[-3:]
        time.sleep(0.5)


def _rebuilt(path: Path, tmp: Path, table: str, key: str) -> dict[Any, dict[str, Any]]:
    con = duckdb.connect()
    report = load(Wal2jsonSource(path=path, key=key, table=table), con, on_error="quarantine",
                  quarantine_path=tmp / "rebuilt.quarantine.jsonl")  # fmt: skip
    assert sum(report.quarantined.values()) == 0, report.quarantined
    rows = con.execute("SELECT entry, op, before::VARCHAR, after::VARCHAR FROM changelog "
                       "ORDER BY ts, seq, record").fetchall()  # fmt: skip
    state: dict[Any, dict[str, Any]] = {}
    for entry, op, before, after in rows:
        if op != "insert":
            assert state.pop(entry) == json.loads(before), (entry, op)
        if op != "delete":
            state[entry] = json.loads(after)
    return state


@pytest.mark.parametrize(("plugin", "kill_count"),
                         [("wal2json", KILLS), ("pgoutput", max(1, KILLS // 3))])  # fmt: skip
def test_killed_during_pgbench_releases_what_one_run_releases(
    pg_dsn: str, conn: Any, tmp_path: Path, plugin: str, kill_count: int
) -> None:
    pgbench = _pgbench()
    subprocess.run([pgbench, "-i", "-q", "-s", "1", pg_dsn], check=True, capture_output=True)
    conn.execute("ALTER TABLE pgbench_accounts REPLICA IDENTITY FULL")
    sum_query = ('[[query]]\nname = "balance"\nkind = "sum"\ncolumn = "abalance"\n'
                 "lower = -10000\nupper = 10000\n")  # fmt: skip
    config = _config(tmp_path, table="public.pgbench_accounts", key="aid",
                     extra_query=sum_query, clock="source", out="follow",
                     plugin=plugin)  # fmt: skip
    log = tmp_path / "follow.log"
    first = _follow(config, log, pg_dsn, "--create-slot")
    _wait_for(log, "slot_created", first)  # a kill before it would leave no file to follow
    time.sleep(3)
    load_proc = subprocess.Popen([pgbench, "-n", "-c", "2", "-j", "1", "-R", "150",
                                  "-T", str(3 + 2 * kill_count), pg_dsn],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    rng = random.Random(SEED)
    proc = first
    kills = 0
    try:
        while load_proc.poll() is None and kills < kill_count:
            time.sleep(0.6 + rng.random() * 1.6)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            kills += 1
            proc = _follow(config, log, pg_dsn)
        assert load_proc.wait(120) == 0
        # The follower drains the rest (a restarted follower's first step rebuilds its state,
        # seconds on a loaded machine).
        _wait_released_after(log, proc, time.time())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, [e for e in _events(log) if e.get("level") != "info"][-5:]
    finally:
        load_proc.kill()
        proc.kill()
    assert kills == kill_count
    events = _events(log)
    assert not [e for e in events if e.get("level") == "error"], events[-5:]

    release = load_config(config)
    follower = stored_result(release, simulation=True)
    n = int(follower.summary["released_intervals"])
    assert n >= 2 * kill_count
    until = release.plan.schedule().release_time(n)
    reference = dataclasses.replace(release, output_dir=tmp_path / "ref",
                                    store=tmp_path / "ref" / "store.sqlite")  # fmt: skip
    once = reference.run(until=until, rng=simulation_randomness(SEED))
    assert once.rows == follower.rows
    late = [e.get("late", 0) for e in events if e["event"] == "released"]
    assert late and max(late) == 0

    with sqlite3.connect(release.store_path) as db:
        nodes = db.execute("SELECT query, key, layer, idx, count(*) FROM released "
                           "GROUP BY query, key, layer, idx HAVING count(*) > 1"
                           ).fetchall()  # fmt: skip
        assert nodes == []
        ledger = db.execute("SELECT count(*), count(DISTINCT layer || ':' || idx || ':' || "
                            "query) FROM release_ledger").fetchone()  # fmt: skip
        assert ledger[0] == ledger[1] > 0
    with sqlite3.connect(reference.store_path) as db:
        ref_nodes = db.execute("SELECT count(*) FROM released").fetchone()
    with sqlite3.connect(release.store_path) as db:
        assert db.execute("SELECT count(*) FROM released").fetchone() == ref_nodes

    lines = [json.loads(x) for x in release.source.path.read_text().splitlines()]
    changes = [(m["action"], m["lsn"]) for m in lines if m["action"] in "IUD" and
               not m.get("snapshot")]  # fmt: skip
    assert len(changes) == len(set(changes)) > 100
    rebuilt = _rebuilt(release.source.path, tmp_path, "public.pgbench_accounts", "aid")
    conn.execute("SELECT aid, bid, abalance, filler FROM pgbench_accounts")
    table = {str(a): {"aid": a, "bid": b, "abalance": bal, "filler": f}
             for a, b, bal, f in conn.fetchall()}  # fmt: skip
    assert rebuilt == table



def test_bad_input_on_the_wire_is_counted_and_the_follower_stays_up(
    pg_dsn: str, conn: Any, tmp_path: Path
) -> None:
    conn.execute("DROP TABLE IF EXISTS tickets")
    conn.execute("CREATE TABLE tickets (id int PRIMARY KEY, zone text, fare numeric(10,2))")
    conn.execute("ALTER TABLE tickets REPLICA IDENTITY FULL")
    conn.execute("INSERT INTO tickets SELECT g, 'S', g / 100.0 FROM generate_series(1, 50) g")
    fare = ('[[query]]\nname = "fares"\nkind = "sum"\ncolumn = "fare"\nlower = 0\n'
            "upper = 10\ngrid = 0.01\n")  # fmt: skip
    config = _config(tmp_path, table="public.tickets", key="id", extra_query=fare,
                     clock="wall", out="bad")  # fmt: skip
    log = tmp_path / "bad.log"
    proc = _follow(config, log, pg_dsn, "--create-slot")
    try:
        _wait_for(log, "slot_created", proc)  # (what is written before it is the snapshot's)
        conn.execute("BEGIN")  # thousands of rows in one transaction
        conn.execute("INSERT INTO tickets SELECT g, 'B', 1.5 FROM generate_series(1000, 4999) g")
        conn.execute("COMMIT")
        conn.execute("ALTER TABLE tickets ADD COLUMN note text")  # schema changes
        conn.execute("UPDATE tickets SET note = 'x', fare = fare + 1 WHERE id <= 10")
        conn.execute("ALTER TABLE tickets DROP COLUMN note")
        conn.execute("UPDATE tickets SET zone = 'C' WHERE id BETWEEN 11 AND 20")
        conn.execute("TRUNCATE tickets")  # names no rows: refused, counted
        conn.execute("INSERT INTO tickets VALUES (7000, 'A', 2.0)")
        _wait_released_after(log, proc, time.time())  # (staying up throughout)
        assert proc.poll() is None, _events(log)[-3:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        proc.kill()
    released = [e for e in _events(log) if e["event"] == "released"]
    assert released and released[-1]["quarantined"] >= 1
    result = stored_result(load_config(config), simulation=True)
    changelog = result.diagnostics["changelog"]
    assert changelog["quarantined"] == {"unknown_op": 1}, changelog
    assert changelog["valid"] == 50 + 4000 + 10 + 10 + 1
    assert not result.diagnostics["bounding"]["non_numeric_values"]


def test_kafka_follow_once_quarantines_bad_envelopes_and_warns_of_unknown_scales(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dpcr.cli import main

    from .conftest import FIXTURES
    from .test_kafka_capture import _produce

    lines = (FIXTURES / "debezium_precise.jsonl").read_text().splitlines()
    values: list[bytes | None] = [None if x == "null" else x.encode() for x in lines]
    envelope = json.loads(lines[0])["payload"]
    truncate = dict(envelope, op="t", before=None, after=None)
    values += [b"{not json", json.dumps({"payload": truncate}).encode()]
    _produce(kafka_bootstrap, "dbz.follow", values)

    def config(name: str, topic: str, query: str) -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(f"""
[source]
format = "debezium"
path = "{name}.jsonl"
key = "id"
[privacy]
epsilon = 1.0
[constraint]
at_most_k = 3
[release]
start = "2026-11-24T17:00:00Z"  # the fixture's events are at 18:03
period = "1h"
[[query]]
name = "rows"
kind = "count"
{query}
[follow]
capture = "kafka"
bootstrap = "{kafka_bootstrap}"
topic = "{topic}"
allowed_lateness = "0s"
[output]
dir = "{name}"
""")
        return path

    fares = '[[query]]\nname = "fares"\nkind = "sum"\ncolumn = "fare"\nlower = 0\nupper = 10\n'
    good = config("good", "dbz.follow", fares)
    assert main(["follow", str(good), "--once", "--idle-exit", "2", "--simulate", "1",
                 "--log-format", "json"]) == 0  # fmt: skip
    events = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    released = [e for e in events if e["event"] == "released"]
    assert released and released[-1]["quarantined"] == 3, events
    result = stored_result(load_config(good), simulation=True)
    # the fixture's own truncate and the one added, and the value that is not JSON
    assert result.diagnostics["changelog"]["quarantined"] == {"bad_json": 1, "unknown_op": 2}
    assert not result.diagnostics["bounding"]["non_numeric_values"]

    # Without a schema the scale of a precise decimal is nowhere in the event: the value
    # counts as non-numeric (one record's text never stops a release) and the operator is
    # told the column and the key that declares its scale.
    bare = dict(envelope, after=dict(envelope["after"], fare="AQ=="))
    _produce(kafka_bootstrap, "dbz.bare", [json.dumps({"payload": bare}).encode()])
    bad = config("bare", "dbz.bare", fares)
    assert main(["follow", str(bad), "--once", "--idle-exit", "2", "--simulate", "1"]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "'fare'" in err and "decimal_scales" in err, err
    result = stored_result(load_config(bad), simulation=True)
    assert result.diagnostics["bounding"]["non_numeric_values"] == {"fares": 1}
