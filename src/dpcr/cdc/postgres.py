"""Capture a PostgreSQL table's changes into a wal2json changelog file, durably.

The changes come from a logical replication slot over psycopg2's
``LogicalReplicationConnection``, decoded by the ``wal2json`` plugin (format-version 2, with LSNs
and commit timestamps) or by PostgreSQL's built-in ``pgoutput`` (its messages are written as the
lines wal2json writes for the same changes, :mod:`dpcr.cdc.pgoutput`; the slot reads the
publication ``dpcr_<slot>``, which :func:`create_slot` creates when it is missing):

* :func:`create_slot` creates the slot and, from the snapshot the slot exports, writes every row
  the table holds at that moment as an insert (``"action":"I"``, ``"snapshot":true``, the LSN
  just below the slot's consistent point, and the server's time just before the slot was
  created, which precedes every later commit) into a new changelog file, made durable before
  it appears under its name.
* :func:`capture` streams the slot's messages of the table into that file. Each batch is
  appended and fsynced *before* the slot is told it may discard them (``send_feedback`` with the
  flush LSN of the last complete transaction in the file). After a crash the slot sends again
  every transaction not acknowledged; those already in the file (whole or in part) are
  recognised by their LSNs and not written twice.
* :func:`drop_slot` drops the slot (the server then keeps no more WAL for it), and the
  publication :func:`create_slot` created for it.

With a ``heartbeat`` period (:class:`Batching`), :func:`capture` also writes a transactional
logical message with the prefix ``dpcr_heartbeat`` into the WAL at that period
(``pg_logical_emit_message``) and reads it back from the slot: its commit time is the
**watermark** (:attr:`CaptureStats.watermark`). Every change of the table that the server
committed before the heartbeat precedes it in the stream, so once the heartbeat is read they
are all in the file. Heartbeats are never written to the file, and no change of the table moves
the watermark: it is a clock of the server, not of the data.

The followed table must have ``REPLICA IDENTITY FULL`` (otherwise updates and deletes carry no
old row); :func:`check_table` refuses it otherwise with the statement that fixes it.
"""

from __future__ import annotations

import codecs
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpcr.cdc import pgoutput
from dpcr.cdc._durable import BATCHING, Batching, DurableLog, fsync_dir
from dpcr.cdc._stream import HEARTBEAT_PREFIX, CaptureStats, Stream, lsn_int, lsn_text
from dpcr.cdc._stream import resume_point as _resume_point
from dpcr.errors import ConfigError, DpcrError, MissingExtraError

__all__ = [
    "HEARTBEAT_PREFIX", "Batching", "CaptureStats", "capture", "check_table", "connect",
    "create_slot", "drop_slot", "lsn_int", "lsn_text", "psycopg2_module", "split_table",
]  # fmt: skip

_TABLE = re.compile(r"([A-Za-z_][A-Za-z0-9_$]*)\.([A-Za-z_][A-Za-z0-9_$]*)")
_SLOT = re.compile(r"[a-z0-9_]{1,63}")
PLUGINS = ("wal2json", "pgoutput")
OPTIONS = {
    "format-version": "2",
    "include-lsn": "1",
    "include-timestamp": "1",
    "include-xids": "1",
    "include-transaction": "1",
    # Columns as {"name", "value"}, like the snapshot rows: the loader reads no type, and type
    # names cost the server a catalog lookup per column and value.
    "include-types": "0",
}


def psycopg2_module() -> Any:
    """The psycopg2 module (an error naming the extra when it is missing)."""
    try:
        import psycopg2
        import psycopg2.extras
    except ImportError:
        raise MissingExtraError.for_module("psycopg2", "postgres") from None
    return psycopg2


def split_table(table: str) -> tuple[str, str]:
    """``schema.table`` as (schema, table); one line naming the form otherwise."""
    m = _TABLE.fullmatch(table)
    if m is None:
        raise ConfigError(
            f"--table must be schema.table with plain identifiers, e.g. public.tickets; "
            f"got {table!r}"
        )
    return m.group(1), m.group(2)


def _check_slot(slot: str) -> None:
    if not _SLOT.fullmatch(slot):
        raise ConfigError(
            f"a replication slot name is 1-63 lower-case letters, digits and underscores; "
            f"got {slot!r}"
        )


def _check_plugin(plugin: str) -> None:
    if plugin not in PLUGINS:
        raise ConfigError(f"the plugin must be 'wal2json' or 'pgoutput', got {plugin!r}")


def connect(dsn: str, **kw: Any) -> Any:
    """A psycopg2 connection to ``dsn`` (its password never in an error)."""
    pg = psycopg2_module()
    try:
        return pg.connect(dsn, **kw)
    except pg.OperationalError as exc:  # the message never contains the password
        raise DpcrError(f"cannot connect to PostgreSQL: {str(exc).strip()}") from None
    except pg.ProgrammingError:  # a malformed string: its text may hold a password, not shown
        raise ConfigError(
            "the PostgreSQL connection string is malformed; give key=value pairs "
            "(host=127.0.0.1 port=5432 dbname=app user=dpcr) or a postgresql:// URI"
        ) from None


def check_table(cur: Any, table: str, key: tuple[str, ...]) -> None:
    """Refuse a table that does not exist, lacks a key column or is not REPLICA IDENTITY
    FULL."""
    schema, name = split_table(table)
    cur.execute(
        "SELECT c.oid, c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = "
        "c.relnamespace WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (schema, name),
    )
    row = cur.fetchone()
    if row is None:
        raise ConfigError(f"table {table} does not exist in this database; check --table")
    oid, identity = row
    cur.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT "
        "attisdropped ORDER BY attnum",
        (oid,),
    )
    columns = [r[0] for r in cur.fetchall()]
    missing = [k for k in key if k not in columns]
    if missing:
        raise ConfigError(
            f"table {table} has no column {missing[0]!r} (--key); its columns: "
            + ", ".join(columns)
        )
    if identity != "f":
        kind = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX"}.get(identity, identity)
        raise ConfigError(
            f"table {table} has REPLICA IDENTITY {kind}: its updates and deletes would reach "
            "the changelog without the row before the change, so they could not be charged to "
            f"the right entry and unit; run `ALTER TABLE {table} REPLICA IDENTITY FULL;` and "
            "capture again"
        )


def _slot_plugin(cur: Any, slot: str) -> str | None:
    """The output plugin of slot ``slot``, or None when there is no such slot."""
    cur.execute("SELECT plugin FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    row = cur.fetchone()
    return None if row is None else str(row[0])


def _slot_exists(cur: Any, slot: str) -> bool:
    return _slot_plugin(cur, slot) is not None


def create_slot(
    dsn: str,
    *,
    slot: str,
    table: str,
    key: tuple[str, ...],
    out: Path,
    plugin: str = "wal2json",
) -> int:
    """Create logical slot ``slot`` with ``plugin`` and write ``out``: the table's rows at the
    slot's snapshot as inserts. Return the number of rows written. ``out`` must not exist.

    With ``pgoutput``, publication ``dpcr_<slot>`` of the table is created first when it does
    not exist (and checked when it does)."""
    _check_slot(slot)
    _check_plugin(plugin)
    schema, name = split_table(table)
    out = Path(out)
    if out.exists():
        raise ConfigError(
            f"{out} already exists; a new slot starts a new changelog (its first records are "
            "the table's rows at the slot's snapshot): choose another --out, or capture into "
            "this one with the slot that filled it"
        )
    pg = psycopg2_module()
    plain = connect(dsn)
    try:
        with plain.cursor() as cur:
            check_table(cur, table, key)
            if _slot_exists(cur, slot):
                raise ConfigError(
                    f"replication slot {slot!r} already exists; drop it first "
                    f"(dpcr capture postgres --drop-slot --slot {slot}) or use another name"
                )
            if plugin == "pgoutput":
                pgoutput.ensure_publication(cur, slot=slot, table=table)
            cur.execute("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', "
                        "'YYYY-MM-DD HH24:MI:SS.US') || '+00'")  # fmt: skip
            snapshot_time = cur.fetchone()[0]
        plain.commit()
        repl = connect(dsn, connection_factory=pg.extras.LogicalReplicationConnection)
        try:
            rcur = repl.cursor()
            try:
                rcur.execute(
                    f'CREATE_REPLICATION_SLOT "{slot}" LOGICAL "{plugin}" EXPORT_SNAPSHOT'
                )
            except pg.errors.InsufficientPrivilege as exc:
                raise DpcrError(
                    f"PostgreSQL refuses the output plugin {plugin!r} "
                    f"({str(exc).strip().splitlines()[0]}); add it to the server's "
                    f"output_plugin_libraries (e.g. 'pgoutput, test_decoding, {plugin}') and "
                    "reload, or use plugin = 'pgoutput' (docs/cdc.md); no slot was created"
                ) from None
            _, consistent, snapshot_name, _ = rcur.fetchone()
            # One below the consistent point: the first streamed change can start exactly there,
            # and a snapshot row must come before it (same entry, a lower sequence number).
            snapshot_lsn = lsn_text(lsn_int(consistent) - 1)
            # The exported snapshot is valid while `repl` stays idle: read the table now.
            tmp = out.with_name(out.name + ".snapshot-tmp")
            count = 0
            with plain.cursor() as cur:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
                # json.dumps writes '"snapshot": true' (_SNAPSHOT_MARK), where a restart
                # stops reading the file backwards.
                head = json.dumps(
                    {"action": "I", "lsn": snapshot_lsn, "timestamp": snapshot_time,
                     "schema": schema, "table": name, "snapshot": True}
                )[:-1]  # fmt: skip
                cur.execute(
                    "SELECT (SELECT json_agg(json_build_object('name', e.key, 'value', e.value)) "
                    f'FROM json_each(to_json(t)) e)::text FROM "{schema}"."{name}" t'
                )
                with DurableLog(tmp) as log:
                    while batch := cur.fetchmany(10_000):
                        # json_agg puts newlines between elements (never inside strings).
                        log.append(
                            f'{head}, "columns": {row[0].replace(chr(10), "")}}}' for row in batch
                        )
                        count += len(batch)
                plain.rollback()
            tmp.replace(out)
            fsync_dir(out)
        finally:
            repl.close()
    finally:
        plain.close()
    return count


def drop_slot(dsn: str, *, slot: str) -> None:
    """Drop slot ``slot``, and publication ``dpcr_<slot>`` when :func:`create_slot` created
    it."""
    _check_slot(slot)
    conn = connect(dsn)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            if not _slot_exists(cur, slot):
                raise ConfigError(f"replication slot {slot!r} does not exist")
            # A capture that just disconnected can hold the slot for a moment.
            for attempt in range(50):
                try:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    break
                except psycopg2_module().errors.ObjectInUse:
                    if attempt == 49:
                        raise DpcrError(
                            f"replication slot {slot!r} is in use by a running capture; stop "
                            "it first"
                        ) from None
                    time.sleep(0.2)
            pgoutput.drop_publication(cur, slot=slot)
    finally:
        conn.close()


def capture(
    dsn: str,
    *,
    slot: str,
    table: str,
    out: Path,
    batching: Batching = BATCHING,
    plugin: str = "wal2json",
    should_stop: Callable[[], bool] = lambda: False,
    on_batch: Callable[[CaptureStats], None] | None = None,
) -> CaptureStats:
    """Stream slot ``slot``'s changes of ``table`` into ``out`` until ``should_stop()`` or,
    with ``batching.idle_exit``, until no change of the table arrived for that many seconds.

    ``on_batch(stats)`` is called after each batch is durable and acknowledged, and at least
    every ``batching.tick`` seconds while the slot is quiet. With ``batching.heartbeat``
    (seconds), a heartbeat is written at that period (see the module docstring). ``plugin`` is
    the slot's output plugin (a slot created with another one is refused).
    """
    _check_slot(slot)
    _check_plugin(plugin)
    split_table(table)
    out = Path(out)
    if not out.exists():
        raise ConfigError(
            f"{out} does not exist; create the slot with its snapshot first "
            f"(dpcr capture postgres --create-slot ... --out {out})"
        )
    pg = psycopg2_module()
    _check_source(dsn, slot, table, plugin)
    stats = CaptureStats()
    log = DurableLog(out, create=False)
    beats = connect(dsn) if batching.heartbeat is not None else None
    if beats is not None:
        beats.autocommit = True
    # pgoutput sends text in the connection's encoding; the decoder reads UTF-8.
    encoding = {"client_encoding": "UTF8"} if plugin == "pgoutput" else {}
    repl = connect(dsn, connection_factory=pg.extras.LogicalReplicationConnection, **encoding)
    try:
        state = _resume_point(out)
        cur = repl.cursor()
        stream = Stream(
            cur=cur,
            decode=_start(cur, slot=slot, table=table, plugin=plugin),
            # Messages arrive as bytes in the database's encoding; the file is UTF-8.
            codec=codecs.lookup(pg.extensions.encodings.get(repl.encoding, "utf_8")).name,
            slot=slot, log=log, stats=stats, state=state, batching=batching,
            on_batch=on_batch, beats=beats,
        )  # fmt: skip
        stream.run(should_stop)
    finally:
        repl.close()
        if beats is not None:
            beats.close()
        log.close()
    return stats


def _check_source(dsn: str, slot: str, table: str, plugin: str) -> None:
    """Refuse a slot made with another plugin, a table without its identity, a publication
    that does not cover the table (pgoutput)."""
    plain = connect(dsn)
    try:
        with plain.cursor() as cur:
            _check_slot_plugin(cur, slot, plugin)
            check_table(cur, table, ())  # the identity may have changed since the slot
            if plugin == "pgoutput":
                pgoutput.check_publication(cur, slot=slot, table=table)
    finally:
        plain.close()


def _check_slot_plugin(cur: Any, slot: str, plugin: str) -> None:
    found = _slot_plugin(cur, slot)
    if found is None:
        raise ConfigError(
            f"replication slot {slot!r} does not exist; create it with --create-slot "
            "(into a new --out file)"
        )
    if found != plugin:
        raise ConfigError(
            f"replication slot {slot!r} was created with the {found} plugin, not {plugin}: "
            f"capture it with --plugin {found} ([follow] plugin = {found!r}), or drop it and "
            f"create a {plugin} slot into a new file"
        )


def _start(cur: Any, *, slot: str, table: str, plugin: str) -> Callable[[Any], bytes | None]:
    """Start streaming the slot; return what turns one of its messages into the bytes of a
    wal2json line (None: the message makes no line)."""
    if plugin == "wal2json":
        cur.start_replication(slot_name=slot, decode=False,
                              options=dict(OPTIONS, **{"add-tables": table}))  # fmt: skip
        return lambda msg: msg.payload
    decoder = pgoutput.PgoutputDecoder(table=table)
    cur.start_replication(slot_name=slot, decode=False, options=pgoutput.stream_options(slot))

    def decode(msg: Any) -> bytes | None:
        line = decoder.decode(msg.payload, msg.data_start)
        return None if line is None else line.encode()

    return decode
