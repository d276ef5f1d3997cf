"""One random workload captured twice, through wal2json and through the built-in pgoutput
plugin (two slots of one PostgreSQL 15): the files hold the same lines (but for the ``nextlsn``
of begin markers, which pgoutput does not send), load into the same changelog, and rebuild the
table row for row."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.cdc import postgres
from dpcr.changelog import load
from dpcr.changelog._sources import Wal2jsonSource

from .conftest import database

pytestmark = pytest.mark.slow

TABLE = "public.wide"
SEED_ROWS = 20
TEXTS = ['plain', 'say "hi"', "back\\slash", "two\nlines\ttab", "ünïcödé 😀 €", "", "a'b",
         "\x01ctl"]  # fmt: skip


@pytest.fixture
def db(pg_dsn: str) -> Iterator[Any]:
    with database(
        pg_dsn, "DROP TABLE IF EXISTS wide, bystander",
        "CREATE TABLE wide (id int PRIMARY KEY, zone text, fare numeric(12,2), exact numeric, "
        "note text, flag bool, big text, qty int8, ratio float8)",
        "ALTER TABLE wide REPLICA IDENTITY FULL", "CREATE TABLE bystander (k int)",
    ) as cur:  # fmt: skip
        yield cur


def _values(rng: random.Random) -> dict[str, Any]:
    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.15 else value

    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40)))
    scale = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 25)))
    return {
        "zone": maybe(rng.choice("ABC")),
        "fare": maybe(Decimal(rng.randint(-99_999, 99_999)) / 100),
        "exact": maybe(Decimal(f"{rng.choice('-+')}{digits}.{scale or '0'}")),
        "note": maybe(rng.choice(TEXTS)),
        "flag": maybe(rng.random() < 0.5),
        "qty": maybe(rng.randint(-(2**62), 2**62)),
        "ratio": maybe(rng.choice([0.1, -2.5e-300, 1e300, 3.0, rng.random()])),
    }


def _big(rng: random.Random) -> str:
    # Random hex does not compress below the TOAST threshold: stored out of line.
    return "".join(f"{rng.getrandbits(128):032x}" for _ in range(600))


def _workload(cur: Any, rng: random.Random, transactions: int, next_id: int) -> None:
    for _ in range(transactions):
        cur.execute("BEGIN")
        for _ in range(rng.randint(1, 6)):
            cur.execute("SELECT id FROM wide ORDER BY random() LIMIT 1")
            found = cur.fetchone()
            kind = rng.random()
            if found is None or kind < 0.35:
                next_id += 1
                v = _values(rng)
                v["big"] = _big(rng) if rng.random() < 0.2 else None
                cur.execute(
                    "INSERT INTO wide VALUES (%(id)s, %(zone)s, %(fare)s, %(exact)s, %(note)s, "
                    "%(flag)s, %(big)s, %(qty)s, %(ratio)s)", dict(v, id=next_id),
                )  # fmt: skip
            elif kind < 0.75:  # an update that leaves `big` (perhaps out of line) unchanged
                v = _values(rng)
                names = rng.sample(sorted(v), rng.randint(1, len(v)))
                sets = ", ".join(f"{n} = %({n})s" for n in names)
                cur.execute(f"UPDATE wide SET {sets} WHERE id = %(id)s", dict(v, id=found[0]))
            elif kind < 0.8:
                cur.execute("UPDATE wide SET big = %s WHERE id = %s", (_big(rng), found[0]))
            elif kind < 0.85:
                cur.execute("UPDATE wide SET qty = qty / 2 WHERE id %% 3 = %s",
                            (rng.randint(0, 2),))  # fmt: skip
            elif kind < 0.9:
                cur.execute("INSERT INTO bystander VALUES (1)")  # another table: not captured
            elif kind < 0.92:
                cur.execute("SELECT pg_logical_emit_message(true, 'app', %s)", (rng.choice(TEXTS),))
            else:
                cur.execute("DELETE FROM wide WHERE id = %s", (found[0],))
        cur.execute("COMMIT")


def _changelog(path: Path, tmp: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    report = load(Wal2jsonSource(path=path, key="id", table=TABLE), con, on_error="quarantine",
                  quarantine_path=tmp / f"{path.stem}.quarantine.jsonl")  # fmt: skip
    assert sum(report.quarantined.values()) == 0, report.quarantined
    return con.execute("SELECT entry, op, ts, seq, before::VARCHAR, after::VARCHAR FROM changelog "
                       "ORDER BY ts, seq, record").fetchall()  # fmt: skip


def _without_nextlsn_of_begins(line: str) -> dict[str, Any]:
    msg: dict[str, Any] = json.loads(line)
    if msg["action"] == "B":
        msg.pop("nextlsn", None)
    return msg


def test_wal2json_and_pgoutput_capture_the_same_changelog(
    pg_dsn: str, db: Any, tmp_path: Path
) -> None:
    rng = random.Random(16)
    _workload(db, rng, 8, 0)  # the rows at the slots' snapshots
    db.execute("SELECT count(*) FROM wide")
    seeded = db.fetchone()[0]
    files = {p: tmp_path / f"{p}.jsonl" for p in postgres.PLUGINS}
    for plugin, path in files.items():
        rows = postgres.create_slot(pg_dsn, slot=f"s_{plugin}", table=TABLE, key=("id",),
                                    out=path, plugin=plugin)  # fmt: skip
        assert rows == seeded
    _workload(db, rng, 250, 10_000)
    db.execute("TRUNCATE bystander")  # a truncate of another table: not captured either
    for plugin, path in files.items():
        stats = postgres.capture(pg_dsn, slot=f"s_{plugin}", table=TABLE, out=path,
                                 batching=postgres.Batching(idle_exit=1),
                                 plugin=plugin)  # fmt: skip
        assert stats.transactions > 200, (plugin, stats)

    # The same lines; the snapshots differ only in where and when each slot started.
    w2j, pgo = ([json.loads(x) for x in p.read_text().splitlines()] for p in files.values())
    assert [m for m in w2j if m.get("snapshot")] != []
    for snapshot in (w2j[:seeded], pgo[:seeded]):
        for m in snapshot:
            assert m.pop("snapshot") and m.pop("lsn") and m.pop("timestamp")
    assert w2j[:seeded] == pgo[:seeded]
    w_lines = files["wal2json"].read_text().splitlines()[seeded:]
    p_lines = files["pgoutput"].read_text().splitlines()[seeded:]
    assert [_without_nextlsn_of_begins(x) for x in w_lines] == [json.loads(x) for x in p_lines]
    change = ('{"action":"I"', '{"action":"U"', '{"action":"D"')
    changes = [x for x in p_lines if x.startswith(change)]
    assert changes == [x for x in w_lines if x.startswith(change)]  # byte for byte
    assert any('"app"' in x for x in p_lines)  # the application's logical messages too
    assert sum('"action":"U"' in x and '"name":"big"' not in x.split('"identity"')[0]
               for x in changes) > 10  # unchanged out-of-line values left out  # fmt: skip

    # The same changelog: entries, operations, times, LSNs, rows before and after.
    by_wal2json, by_pgoutput = (_changelog(p, tmp_path) for p in files.values())
    assert len(by_pgoutput) > seeded + 500
    assert by_pgoutput[seeded:] == by_wal2json[seeded:]
    drop_ts_seq = [(e, op, b, a) for e, op, _, _, b, a in by_pgoutput[:seeded]]
    assert drop_ts_seq == [(e, op, b, a) for e, op, _, _, b, a in by_wal2json[:seeded]]

    # The table rebuilt from the pgoutput file, row for row.
    state: dict[str, dict[str, Any]] = {}
    for entry, op, _, _, before, after in by_pgoutput:
        if op != "insert":
            assert state.pop(entry) == json.loads(before), (entry, op)
        if op != "delete":
            # An update leaves an unchanged out-of-line value out of its row: it kept its value.
            state[entry] = {**(json.loads(before) if before else {}), **json.loads(after)}
    db.execute("SELECT id, row_to_json(w)::text FROM wide w")
    assert state == {str(i): json.loads(row) for i, row in db.fetchall()}
    for plugin in files:
        postgres.drop_slot(pg_dsn, slot=f"s_{plugin}")
