"""``dpcr capture postgres|kafka``: follow a source into a durable changelog file (docs/cdc.md).

Connection strings come from ``--dsn-file`` or the environment (``DPCR_PG_DSN``), or ``--dsn``
(visible to other local users in the process list); they are never printed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from dpcr.errors import ConfigError

DSN_ENV = "DPCR_PG_DSN"


def connection_string(args: argparse.Namespace) -> str:
    if args.dsn_file:
        try:
            return Path(args.dsn_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"--dsn-file: cannot read {args.dsn_file}: {exc.strerror}") from None
    if args.dsn:
        return str(args.dsn)
    value = os.environ.get(DSN_ENV)
    if not value:
        raise ConfigError(
            f"no connection string: set {DSN_ENV}, or pass --dsn-file FILE (or --dsn)"
        )
    return value


class StopOnSignal:
    """Set by SIGTERM/SIGINT: the capture finishes its batch (fsync, acknowledge) and returns."""

    def __init__(self) -> None:
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def __call__(self) -> bool:
        return self.requested


def _keys(text: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    if not keys:
        raise ConfigError("--key names the primary-key column(s), e.g. --key id or --key a,b")
    return keys


def _cmd_postgres(args: argparse.Namespace) -> int:
    from dpcr.cdc import postgres

    dsn = connection_string(args)
    if args.drop_slot:
        postgres.drop_slot(dsn, slot=args.slot)
        print(f"dropped replication slot {args.slot!r}")
        return 0
    if args.table is None or args.out is None or args.key is None:
        raise ConfigError("dpcr capture postgres needs --table, --key and --out")
    out = Path(args.out)
    if args.create_slot:
        rows = postgres.create_slot(
            dsn, slot=args.slot, table=args.table, key=_keys(args.key), out=out,
            plugin=args.plugin,
        )  # fmt: skip
        print(f"created slot {args.slot!r}; wrote {rows} rows of {args.table} (snapshot) to {out}",
              file=sys.stderr)  # fmt: skip
        if args.snapshot_only:
            return 0
    stats = postgres.capture(
        dsn,
        slot=args.slot,
        table=args.table,
        out=out,
        batching=postgres.Batching(idle_exit=args.idle_exit),
        should_stop=StopOnSignal(),
        plugin=args.plugin,
    )
    print(
        f"wrote {stats.written} messages ({stats.transactions} transactions; {stats.skipped} "
        f"skipped: already in the file or empty); acknowledged LSN {stats.acknowledged}",
        file=sys.stderr,
    )
    return 0


def _cmd_kafka(args: argparse.Namespace) -> int:
    from dpcr.cdc import kafka

    stats = kafka.capture(
        args.bootstrap,
        topic=args.topic,
        partition=args.partition,
        out=Path(args.out),
        group=args.group,
        batching=kafka.Batching(idle_exit=args.idle_exit),
        should_stop=StopOnSignal(),
    )
    print(f"wrote {stats.written} records; committed offset {stats.committed}", file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = subparsers.add_parser(
        "capture", help="follow PostgreSQL (wal2json, pgoutput) or Kafka (Debezium) into a "
        "changelog file"
    )
    sub = c.add_subparsers(dest="capture_source", required=True)

    p = sub.add_parser("postgres", help="a logical replication slot (wal2json or pgoutput) "
                       "into a wal2json file")  # fmt: skip
    p.add_argument("--dsn", help=f"connection string (prefer --dsn-file or ${DSN_ENV})")
    p.add_argument("--dsn-file", help="file holding the connection string")
    p.add_argument("--slot", required=True, help="logical replication slot name")
    p.add_argument("--table", help="schema.table to follow, e.g. public.tickets")
    p.add_argument("--key", help="primary-key column(s), comma-separated")
    p.add_argument("--out", help="changelog file (JSON lines, wal2json format-version 2)")
    p.add_argument("--plugin", choices=("wal2json", "pgoutput"), default="wal2json",
                   help="the slot's output plugin: wal2json (installed on the server), or "
                   "PostgreSQL's built-in pgoutput, which reads publication dpcr_SLOT "
                   "(--create-slot creates it); both write the same file")  # fmt: skip
    action = p.add_mutually_exclusive_group()
    action.add_argument("--create-slot", action="store_true",
                        help="create the slot and write the table's rows (its snapshot) to a "
                        "new --out file, then capture")  # fmt: skip
    action.add_argument("--drop-slot", action="store_true", help="drop the slot and exit")
    p.add_argument("--snapshot-only", action="store_true",
                   help="with --create-slot: stop after the snapshot")  # fmt: skip
    p.add_argument(
        "--idle-exit",
        type=float,
        metavar="SECONDS",
        help="stop after this long without a message (default: run until SIGTERM)",
    )
    p.set_defaults(func=_cmd_postgres)

    k = sub.add_parser("kafka", help="Debezium envelopes of one Kafka partition into a file")
    k.add_argument("--bootstrap", required=True, help="broker address, e.g. 127.0.0.1:9092")
    k.add_argument("--topic", required=True)
    k.add_argument("--partition", type=int, default=0)
    k.add_argument("--group", default="dpcr-capture", help="group the offsets are committed in")
    k.add_argument("--out", required=True, help="changelog file (JSON lines, Debezium)")
    k.add_argument(
        "--idle-exit",
        type=float,
        metavar="SECONDS",
        help="stop after this long without a record (default: run until SIGTERM)",
    )
    k.set_defaults(func=_cmd_kafka)
