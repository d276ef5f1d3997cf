"""Capture Debezium change events from one Kafka partition into a changelog file, durably.

The consumer is assigned the partition (``assign()``, no consumer-group rebalancing). Each
batch of records is appended to the file and fsynced; only then is the next offset committed to
the broker (under ``group``). Every line carries where it came from,
``"dpcr_kafka": {"topic", "partition", "offset"}`` added to the envelope (a tombstone, whose
value is null, is written as ``{"payload": null, "dpcr_kafka": ...}``), so a restart resumes
after the last offset in the file whatever the broker remembers: a crash between the fsync and
the commit neither loses nor repeats a record. A value that is not JSON is kept as a JSON string
(one line) for the loader to report as ``bad_json``; one that is not UTF-8 either is written as
it came when it holds no line break (the loader quarantines it whole, ``bad_encoding``, keeping
its bytes), else as a JSON string with each byte that is not UTF-8 as ``\\xNN``. Lines are
written with ``surrogateescape`` (:meth:`~dpcr.cdc._durable.DurableLog.append`), so such a line
reaches the file byte for byte; a JSON value whose text escapes a lone surrogate is written with
its escapes (never a line the file cannot hold).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpcr.cdc._durable import BATCHING, Batching, DurableLog, tail_lines
from dpcr.errors import ConfigError, DpcrError, MissingExtraError

__all__ = ["Batching", "KafkaStats", "capture", "envelope_line", "last_offset"]

FIELD = "dpcr_kafka"


def _kafka() -> Any:
    try:
        import kafka
    except ImportError:
        raise MissingExtraError.for_module("kafka-python", "kafka") from None
    return kafka


def envelope_line(value: bytes | None, *, topic: str, partition: int, offset: int) -> str:
    """The changelog line of one Kafka record (see the module docstring)."""
    where = {"topic": topic, "partition": partition, "offset": offset}
    if value is None:
        return json.dumps({"payload": None, FIELD: where})
    try:
        parsed = json.loads(value)
    except ValueError:
        try:
            return json.dumps(value.decode("utf-8"))
        except UnicodeDecodeError:
            if b"\n" in value or b"\r" in value:
                return json.dumps(value.decode("utf-8", errors="backslashreplace"))
            return value.decode("utf-8", errors="surrogateescape")
    if parsed is None:
        return json.dumps({"payload": None, FIELD: where})
    if not isinstance(parsed, dict):
        return json.dumps(parsed, separators=(",", ":"))
    parsed[FIELD] = where
    line = json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, escaped in the value: keep it escaped
        return json.dumps(parsed, separators=(",", ":"))
    return line


def last_offset(path: Path, *, topic: str, partition: int) -> int | None:
    """The offset of the last record of ``topic``/``partition`` in the file, or None."""
    if not path.exists():
        return None
    for line in tail_lines(path, stop=FIELD.encode()):
        try:
            where = json.loads(line).get(FIELD)
        except (ValueError, AttributeError):
            continue
        if isinstance(where, dict):
            if where.get("topic") != topic or where.get("partition") != partition:
                raise ConfigError(
                    f"{path} holds records of {where.get('topic')!r} partition "
                    f"{where.get('partition')!r}, not of {topic!r} partition {partition}; one "
                    "changelog file follows one partition"
                )
            return int(where["offset"])
    return None


@dataclass(slots=True)
class KafkaStats:
    """Records written by one :func:`capture` call and the next offset committed last."""

    written: int = 0
    committed: int | None = None


def _one_partition(consumer: Any, topic: str, partition: int) -> None:
    """Refuse a topic of several partitions: one partition is read, in order, and the changes
    keyed to the others would be missed without a trace. (A topic the broker does not know yet
    passes: it is created with the first record, and the check runs again at every capture.)"""
    parts = consumer.partitions_for_topic(topic)
    if not parts or parts == {partition}:
        return
    raise ConfigError(
        f"Kafka topic {topic!r} has partitions {sorted(parts)}: dpcr reads one partition, in "
        f"order (--partition {partition}), and would miss the changes Debezium writes to the "
        "others. Give the topic one partition (docs/cdc.md, \"Debezium → Kafka → dpcr\") and "
        "capture again; nothing was written"
    )


def capture(
    bootstrap: str,
    *,
    topic: str,
    partition: int,
    out: Path,
    group: str = "dpcr-capture",
    batching: Batching = BATCHING,
    should_stop: Callable[[], bool] = lambda: False,
    on_batch: Callable[[KafkaStats], None] | None = None,
) -> KafkaStats:
    """Append the records of ``topic``/``partition`` to ``out`` from where it ends, until
    ``should_stop()`` or, with ``batching.idle_exit``, until no record arrived for that many
    seconds. A poll returns at most ``batching.batch_messages`` records, written as one batch.

    ``on_batch(stats)`` is called after each batch is durable and committed, and after every
    quiet poll (about twice a second)."""
    idle_exit, max_records = batching.idle_exit, batching.batch_messages
    kafka = _kafka()
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ConfigError(f"--partition must be an integer >= 0, got {partition!r}")
    out = Path(out)
    done = last_offset(out, topic=topic, partition=partition)
    try:
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            client_id="dpcr-capture",
        )
    except kafka.errors.KafkaError as exc:
        raise DpcrError(f"cannot reach Kafka at {bootstrap}: {exc}") from None
    try:
        _one_partition(consumer, topic, partition)
    except BaseException:
        consumer.close(autocommit=False)
        raise
    stats = KafkaStats()
    log = DurableLog(out)
    try:
        tp = kafka.TopicPartition(topic, partition)
        consumer.assign([tp])
        if done is not None:
            consumer.seek(tp, done + 1)
        last_record = time.monotonic()
        while not should_stop():
            batches = consumer.poll(timeout_ms=500, max_records=max_records)
            records = batches.get(tp, [])
            if not records:
                if idle_exit is not None and time.monotonic() - last_record >= idle_exit:
                    break
                if on_batch is not None:  # a quiet partition still ticks
                    on_batch(stats)
                continue
            last_record = time.monotonic()
            log.append(
                envelope_line(r.value, topic=topic, partition=partition, offset=r.offset)
                for r in records
            )
            stats.written += len(records)
            following = records[-1].offset + 1
            consumer.commit({tp: kafka.OffsetAndMetadata(following, "", -1)})
            stats.committed = following
            if on_batch is not None:
                on_batch(stats)
    finally:
        consumer.close(autocommit=False)
        log.close()
    return stats
