"""``dpcr capture kafka`` against a real Kafka-protocol broker (Tansu) on 127.0.0.1, fed with
the envelopes the real Debezium engine wrote (tests/fixtures/cdc/debezium_precise.jsonl)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import DebeziumSource, load
from dpcr.cli import main

from .conftest import FIXTURES

pytestmark = pytest.mark.slow


def _produce(bootstrap: str, topic: str, values: list[bytes | None]) -> None:
    """``values`` into ``topic``, created first with one partition (as docs/cdc.md asks: a
    capture refuses a topic of several)."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i, value in enumerate(values):
        # A tombstone is a null value with the row's key.
        producer.send(topic, key=b'{"id":%d}' % i, value=value, partition=0)
    producer.flush()
    producer.close()


def _envelopes() -> list[bytes | None]:
    lines = (FIXTURES / "debezium_precise.jsonl").read_text().splitlines()
    return [None if line == "null" else line.encode() for line in lines]


def _load(out: Path, tmp_path: Path) -> tuple[Any, list[tuple]]:
    con = duckdb.connect()
    report = load(DebeziumSource(path=out, key="id"), con, on_error="quarantine",
                  quarantine_path=tmp_path / "q.jsonl")  # fmt: skip
    rows = con.execute("SELECT entry, op, after ->> 'fare' FROM changelog").fetchall()
    return report, rows


def test_capture_load_and_resume(kafka_bootstrap: str, tmp_path: Path) -> None:
    envelopes = _envelopes()
    _produce(kafka_bootstrap, "dbz.public.dz", envelopes)
    out = tmp_path / "changes.debezium.jsonl"
    args = ["capture", "kafka", "--bootstrap", kafka_bootstrap, "--topic", "dbz.public.dz",
            "--partition", "0", "--out", str(out), "--idle-exit", "2"]  # fmt: skip
    assert main(args) == 0
    report, rows = _load(out, tmp_path)
    direct = duckdb.connect()
    expected = load(DebeziumSource(path=FIXTURES / "debezium_precise.jsonl", key="id"), direct,
                    on_error="quarantine", quarantine_path=tmp_path / "q2.jsonl")  # fmt: skip
    assert (report.valid, report.tombstones, dict(report.quarantined)) == (
        expected.valid, expected.tombstones, dict(expected.quarantined)
    )  # fmt: skip
    assert rows == direct.execute("SELECT entry, op, after ->> 'fare' FROM changelog").fetchall()
    assert ("3", "insert", "-0.01") in rows
    offsets = [json.loads(x)["dpcr_kafka"]["offset"] for x in out.read_text().splitlines()]
    assert offsets == list(range(len(envelopes)))
    # More records later: a new capture resumes after the file's last offset.
    _produce(kafka_bootstrap, "dbz.public.dz", envelopes[:2])
    assert main(args) == 0
    offsets = [json.loads(x)["dpcr_kafka"]["offset"] for x in out.read_text().splitlines()]
    assert offsets == list(range(len(envelopes) + 2))
    report, _ = _load(out, tmp_path)  # the two replayed snapshot reads are found again
    assert dict(report.quarantined) == {"unknown_op": 1, "duplicate": 2}


def test_kill_mid_stream_and_restart(kafka_bootstrap: str, tmp_path: Path) -> None:
    n, ms = 8000, 1_735_689_600_000
    values = [
        json.dumps({"payload": {"op": "c", "after": {"id": i, "fare": i},
                                "source": {"ts_ms": ms + i, "lsn": 10 + i}}}).encode()
        for i in range(n)
    ]  # fmt: skip

    def produce() -> None:  # in 16 bursts over about 4 s, while captures are killed
        for k in range(0, n, 500):
            _produce(kafka_bootstrap, "bulk", values[k : k + 500])
            time.sleep(0.25)

    producer = threading.Thread(target=produce)
    producer.start()
    out = tmp_path / "bulk.jsonl"
    command = [sys.executable, "-m", "dpcr.cli", "capture", "kafka", "--bootstrap",
               kafka_bootstrap, "--topic", "bulk", "--out", str(out)]  # fmt: skip
    seen = []
    for delay in (1.2, 0.9, 1.4, 1.1):
        proc = subprocess.Popen(command, stderr=subprocess.PIPE)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        seen.append(len(out.read_text().splitlines()) if out.exists() else 0)
    producer.join(60)
    assert seen[0] < n, seen  # killed while records were still arriving
    proc = subprocess.Popen([*command, "--idle-exit", "3"], stderr=subprocess.PIPE)
    assert proc.wait(120) == 0
    offsets = [json.loads(x)["dpcr_kafka"]["offset"] for x in out.read_text().splitlines()]
    assert offsets == list(range(n))
    report, _ = _load(out, tmp_path)
    assert report.valid == n and dict(report.quarantined) == {}
    # SIGTERM stops a waiting capture cleanly.
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, env=dict(os.environ))
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_a_topic_of_several_partitions_is_refused(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Debezium spreads keyed changes over a topic's partitions; reading one of them would miss
    the others without a trace, so the capture refuses and writes nothing."""
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i, value in enumerate(_envelopes()[:8]):
        producer.send("dbz.public.spread", key=b'{"id":%d}' % i, value=value)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap)
    parts = consumer.partitions_for_topic("dbz.public.spread")
    consumer.close()
    if not parts or len(parts) < 2:
        pytest.skip(f"the broker created the topic with partitions {parts}")
    out = tmp_path / "changes.debezium.jsonl"
    assert main(["capture", "kafka", "--bootstrap", kafka_bootstrap, "--topic",
                 "dbz.public.spread", "--partition", "0", "--out", str(out),
                 "--idle-exit", "1"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "one partition" in err[0] and "nothing was written" in err[0]
    assert not out.exists()
