"""The replication stream of a PostgreSQL capture (:func:`dpcr.cdc.postgres.capture`): the
wal2json messages read from their fixed head, where an interrupted file resumes, and the loop that
appends batches durably before it acknowledges them."""

from __future__ import annotations

import json
import math
import re
import select
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpcr.cdc._durable import Batching, DurableLog, tail_lines
from dpcr.errors import ConfigError, DpcrError
from dpcr.timeutil import parse_timestamp

__all__ = [
    "HEARTBEAT_PREFIX", "SNAPSHOT_MARK", "CaptureStats", "Resume", "Stream", "lsn_int",
    "lsn_text", "message", "resume_point",
]  # fmt: skip


def lsn_int(text: str) -> int:
    """``"16/B374D848"`` as an integer (``hi * 2^32 + lo``)."""
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


HEARTBEAT_PREFIX = "dpcr_heartbeat"


@dataclass(slots=True)
class CaptureStats:
    """What one :func:`capture` call did: messages written, skipped as already in the file,
    transactions completed, the LSN acknowledged last (text, or None), and the commit time of
    the last heartbeat read (µs since the epoch, or None; see the module docstring)."""

    written: int = 0
    skipped: int = 0
    transactions: int = 0
    acknowledged: str | None = None
    watermark: int | None = None
    heartbeats: int = 0


@dataclass(slots=True)
class Resume:
    """Where the file stands: the commit LSN of its last complete transaction and how many
    messages of each (action, LSN) follow it (a transaction a crash interrupted; the rows of
    one COPY share one WAL record, so one LSN)."""

    last_commit: int
    partial: Counter[tuple[bytes, int]]

    def written(self, action: bytes, lsn: int) -> bool:
        """Whether the next message (action, lsn) of the interrupted transaction is in the file
        already (the server sends it again in the same order)."""
        left = self.partial[action, lsn]
        if left:
            self.partial[action, lsn] = left - 1
        return left > 0


# The snapshot rows' header, as create_slot writes it: streamed messages never contain it.
SNAPSHOT_MARK = b'"snapshot": true'


def resume_point(path: Path) -> Resume:
    last_commit = -1
    partial: Counter[tuple[bytes, int]] = Counter()
    for line in tail_lines(path, stop=(b'"action":"C"', SNAPSHOT_MARK)):
        try:
            msg = json.loads(line)
            action, lsn = msg["action"].encode(), lsn_int(msg["lsn"])
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigError(
                f"{path}: a line near the end is not a wal2json message with an lsn "
                f"({line[:80]!r}); capture into a file that only dpcr capture postgres writes"
            ) from None
        if action == b"C":
            last_commit = lsn
        elif not msg.get("snapshot"):
            partial[action, lsn] += 1
    return Resume(last_commit, partial)


# The fixed head of a wal2json format-version 2 message with the capture's OPTIONS (field
# order as wal2json writes it), and the tail of a commit ("C"); see message.
_HEAD = re.compile(
    rb'\{"action":"([BCIUD])","xid":[0-9]+,"timestamp":"[^"\\]*",'
    rb'"lsn":"([0-9A-F]{1,8})/([0-9A-F]{1,8})"'
)
_NEXT = re.compile(rb',"nextlsn":"([0-9A-F]{1,8})/([0-9A-F]{1,8})"\}')


def message(data: bytes, slot: str) -> tuple[bytes, int, int, dict[str, Any] | None, bytes]:
    """A message's action, LSN, end LSN (a commit's ``nextlsn``, else the LSN), JSON object and
    line for the file.

    The messages of the followed table and the begin/commit markers are read from their fixed
    head (the object is then None) and written as they came: the server's wal2json writes them,
    escapes newlines and quotes in values, and ends them with ``}``. Any other message (a
    logical message, a truncate, an unexpected head) is parsed in full, and refused when it is
    not a JSON object with an action and an LSN.
    """
    m = _HEAD.match(data)
    if m is not None and data[-1] == 0x7D and b"\n" not in data:  # ends with "}"
        action = m[1]
        lsn = (int(m[2], 16) << 32) + int(m[3], 16)
        if action != b"C":
            return action, lsn, lsn, None, data
        n = _NEXT.match(data, m.end())
        if n is not None and n.end() == len(data):
            return action, lsn, (int(n[1], 16) << 32) + int(n[2], 16), None, data
    try:
        parsed = json.loads(data)
        action = parsed["action"].encode()
        lsn = lsn_int(parsed["lsn"])
    except (ValueError, KeyError, TypeError, AttributeError):
        raise DpcrError(
            f"slot {slot!r} sent a message that is not wal2json format-version 2 with an lsn "
            f"({data[:80].decode(errors='replace')!r}); was the slot created with another "
            "plugin?"
        ) from None
    nxt = parsed.get("nextlsn") if action == b"C" else None
    end = lsn_int(nxt) if isinstance(nxt, str) else lsn
    line = data if b"\n" not in data else json.dumps(parsed).encode()
    return action, lsn, end, parsed, line


@dataclass(eq=False)
class Stream:
    """One capture's replication stream and what it has pending: messages of the open batch,
    the end LSN of its last complete transaction (``ack``), and where the stream stands inside
    a transaction."""

    cur: Any
    decode: Callable[[Any], bytes | None]
    codec: str
    slot: str
    log: DurableLog
    stats: CaptureStats
    state: Resume
    batching: Batching
    on_batch: Callable[[CaptureStats], None] | None
    beats: Any
    pending: list[bytes] = field(default_factory=list)
    ack: int | None = None  # end LSN of the last complete transaction in `pending`
    skipping: bool = False  # inside a transaction that is complete in the file already
    held: bytes | None = None  # a begin marker, written once its transaction has a change
    beat: int | None = None  # commit time of the heartbeat in the open transaction
    changed: bool = False  # a change of the table arrived since the stream was last empty
    last_change: float = field(default_factory=time.monotonic)
    last_call: float = field(default_factory=time.monotonic)
    deadline: float = 0.0  # when the open batch must be flushed
    last_beat: float = -math.inf
    period: float = math.inf

    def __post_init__(self) -> None:
        self.deadline = self.last_call + self.batching.batch_seconds
        if self.batching.heartbeat is not None:
            self.period = self.batching.heartbeat

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Read, write and acknowledge until ``should_stop()`` or the idle exit."""
        read = self.cur.read_message
        while not should_stop():
            if self.beats is not None and time.monotonic() - self.last_beat >= self.period:
                self.last_beat = time.monotonic()
                with self.beats.cursor() as bcur:
                    bcur.execute("SELECT pg_logical_emit_message(true, %s, '')",
                                 (HEARTBEAT_PREFIX,))  # fmt: skip
            msg = read()
            if msg is None:
                if self._quiet():
                    break
                continue
            self._drain(msg)
        self.flush()

    def flush(self) -> None:
        """Append the pending messages durably, then acknowledge the last complete
        transaction among them."""
        if self.pending:
            self.log.append_bytes(self.pending)
            self.stats.written += len(self.pending)
            self.pending.clear()
        if self.ack is not None:
            self.cur.send_feedback(write_lsn=self.ack, flush_lsn=self.ack, force=True)
            self.stats.acknowledged = lsn_text(self.ack)
            self.ack = None
        self.last_call = time.monotonic()
        self.deadline = self.last_call + self.batching.batch_seconds
        if self.on_batch is not None:
            self.on_batch(self.stats)

    def _quiet(self) -> bool:
        """The stream has nothing to read: flush when due, wait; True at the idle exit."""
        b, clock = self.batching, time.monotonic
        now = clock()
        if self.pending or self.ack is not None:
            # The stream paused inside a batch: wait for more until the batch is due
            # (a backlog arrives in full batches, not one fsync per pause).
            due = min(self.deadline, self.last_call + b.tick)
            if self.beats is not None:
                due = min(due, self.last_beat + self.period)
            if now < due and select.select([self.cur], [], [], due - now)[0]:
                return False
            now = clock()
        if self.changed:
            self.last_change, self.changed = now, False
        if self.pending or self.ack is not None or now - self.last_call >= b.tick:
            self.flush()
        if b.idle_exit is not None and now - self.last_change >= b.idle_exit:
            return True
        wait = min(b.tick, b.idle_exit or b.tick)
        if self.beats is not None:
            wait = max(0.0, min(wait, self.last_beat + self.period - clock()))
        select.select([self.cur], [], [], wait)
        self.cur.send_feedback()
        return False

    def _drain(self, msg: Any) -> None:
        """The messages the stream holds, from ``msg`` up to a full batch: the hot loop (the
        state it changes is held in locals while it runs)."""
        read, decode, codec, slot, parse = (
            self.cur.read_message, self.decode, self.codec, self.slot, message
        )
        state, stats, pending, clock = self.state, self.stats, self.pending, time.monotonic
        partial, limit, deadline = state.partial, self.batching.batch_messages, self.deadline
        skipping, held, beat, changed, ack = (
            self.skipping, self.held, self.beat, self.changed, self.ack
        )
        while msg is not None:
            data = decode(msg)
            if data is None:  # a message that makes no line (pgoutput: a relation, a type)
                msg = read()
                continue
            if codec != "utf-8":
                data = data.decode(codec).encode()
            action, lsn, end, parsed, data = parse(data, slot)
            if action == b"B":
                skipping = lsn <= state.last_commit
                held = None
                beat = None
            if action == b"M" and parsed and parsed.get("prefix") == HEARTBEAT_PREFIX:
                stats.skipped += 1  # a heartbeat: its commit moves the watermark
                if parsed.get("transactional") and isinstance(parsed.get("timestamp"), str):
                    beat = parse_timestamp(parsed["timestamp"], name="heartbeat timestamp")
            elif skipping or (partial and state.written(action, lsn)):
                stats.skipped += 1
                changed = True
            elif action == b"B":
                held = data
            elif action == b"C" and held is not None:
                held = None  # a transaction without a change of the table: nothing to keep
                stats.skipped += 2
            else:
                if held is not None:
                    pending.append(held)
                    held = None
                pending.append(data)
                changed = True
            if action == b"C":
                stats.transactions += 1
                ack = end
                partial.clear()
                state.last_commit = max(state.last_commit, lsn)
                skipping = False
                if beat is not None:
                    stats.watermark = max(stats.watermark or beat, beat)
                    stats.heartbeats += 1
                    beat = None
            if len(pending) >= limit or clock() >= deadline:
                break
            msg = read()
        self.skipping, self.held, self.beat, self.changed, self.ack = (
            skipping, held, beat, changed, ack
        )
        if msg is not None:  # a full batch
            self.flush()
