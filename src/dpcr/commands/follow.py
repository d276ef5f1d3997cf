"""``dpcr follow CONFIG``: capture a live source and release every interval the clock closes
(docs/cdc.md, "dpcr follow").

The connection string of a PostgreSQL source comes from ``--dsn-file`` or ``$DPCR_PG_DSN`` (or
``--dsn``); it is never printed. SIGTERM and SIGINT finish the current batch and step, then exit
0; everything durable is kept, and a restart continues from there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dpcr.commands.capture import DSN_ENV, StopOnSignal, connection_string

_TEXT = {
    "released": "released {new_intervals} interval(s) through {through} (lag {lag_s} s after "
    "its end + allowed lateness: {clock_s} s until the {clock} clock passed it, step {step_s} "
    "s; late {late}, quarantined {quarantined})",
    "health": "following: {captured} captured (at {position}), clock {clock} (watermark "
    "{watermark}), {released_intervals} intervals released, next closes {next_close} + "
    "{allowed_lateness}, last lag {last_lag_s} s, late {late}, quarantined {quarantined}, "
    "reconnects {reconnects}",
    "reconnect": "source unavailable ({error}); reconnecting in {wait_s} s",
    "warning": "warning: {warning}",
    "stopped": "stopped: {captured} captured, {released_intervals} intervals released",
    "complete": "the release has ended: all {released_intervals} intervals are released",
    "slot_created": "created slot {slot}; wrote {rows} rows of {table} (snapshot) to {path}",
}


def _cmd_follow(args: argparse.Namespace) -> int:
    from dpcr.cdc.follow import Follower, load_follow
    from dpcr.commands._feedback import Feedback
    from dpcr.config import load_config
    from dpcr.noise import simulation_randomness

    release = load_config(args.config)
    follow = load_follow(args.config, release)
    dsn = connection_string(args) if follow.capture == "postgres" else None
    json_log = args.log_format == "json"
    feedback = Feedback(log_format=args.log_format, quiet=args.quiet)

    def log(event: str, level: str = "info", **fields: Any) -> None:
        if json_log:
            feedback.event(event, level=level, **fields)
        elif not args.quiet or level == "error":
            print(_TEXT.get(event, event).format(**fields), file=sys.stderr, flush=True)

    path = Path(release.source.path)
    if follow.capture == "postgres" and not path.exists():
        if not args.create_slot:
            raise_missing(path, follow.slot)
        from dpcr.cdc import postgres

        assert dsn is not None and follow.slot is not None and follow.table is not None
        source: Any = release.source  # wal2json: checked by parse_follow
        key = source.key
        rows = postgres.create_slot(dsn, slot=follow.slot, table=follow.table,
                                    key=(key,) if isinstance(key, str) else tuple(key),
                                    out=path, plugin=follow.plugin)  # fmt: skip
        log("slot_created", slot=follow.slot, rows=rows, table=follow.table, path=str(path))
    follower = Follower(
        release, follow, dsn=dsn,
        rng=simulation_randomness(args.simulate) if args.simulate is not None else None,
        log=log, should_stop=StopOnSignal(), health_every=args.health_every,
    )  # fmt: skip
    follower.after_step = (lambda result: None) if args.no_report else _reporter(
        release, log, follower.health)
    follower.run(once=args.once, idle_exit=args.idle_exit)
    return 0


def _reporter(release: Any, log: Any, health: Any = None) -> Any:
    """After each step: the follower's ``health()`` record in the operator folder, then both
    reports from a snapshot of the store the step committed (a report that cannot be written
    is logged; the release goes on, and the next step writes it again)."""
    import json
    import time

    from dpcr._fs import write_atomic
    from dpcr.errors import DpcrError
    from dpcr.release import PRIVATE_MODES, operator_dir
    from dpcr.report.operator import HEALTH_FILE
    from dpcr.report.write import write_reports

    def after_step(result: Any) -> None:
        simulation = bool(result.summary.get("simulation"))
        try:
            if health is not None:
                record = {"last_step": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                          **health()}  # fmt: skip
                write_atomic(operator_dir(release) / HEALTH_FILE,
                             json.dumps(record, indent=1, default=str), mode=PRIVATE_MODES[1])
            write_reports(release, simulation=simulation, result=result)
        except DpcrError as exc:
            log("warning", level="warning",
                warning=f"the reports were not written ({exc}); the next step writes them again")

    return after_step


def raise_missing(path: Path, slot: str | None) -> None:
    from dpcr.errors import ConfigError

    raise ConfigError(
        f"{path} does not exist: start with --create-slot (creates slot {slot!r} and writes the "
        "table's rows at its snapshot to that file), or point [source] path at the file an "
        "earlier capture of this slot filled"
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    f = subparsers.add_parser(
        "follow", help="capture a live source ([follow]) and release each interval the clock "
        "closes"
    )
    f.add_argument("config", help="TOML configuration file with a [follow] table")
    f.add_argument("--once", action="store_true",
                   help="capture until the source is quiet, release what the clock closed, exit "
                   "(for cron)")  # fmt: skip
    f.add_argument("--idle-exit", type=float, default=2.0, metavar="SECONDS",
                   help="with --once: how long the source must be quiet (default 2)")  # fmt: skip
    f.add_argument("--create-slot", action="store_true",
                   help="PostgreSQL: create the slot and write the table's snapshot when the "
                   "changelog file does not exist yet")  # fmt: skip
    f.add_argument("--dsn", help=f"connection string (prefer --dsn-file or ${DSN_ENV})")
    f.add_argument("--dsn-file", help="file holding the connection string")
    f.add_argument("--simulate", type=int, metavar="SEED",
                   help="seeded noise for testing; the store is a simulation, never "
                   "publishable")  # fmt: skip
    f.add_argument("--health-every", type=float, default=10.0, metavar="SECONDS",
                   help="seconds between health lines (default 10)")  # fmt: skip
    f.add_argument("--no-report", action="store_true",
                   help="do not write report.html and operator/report.html after each step")
    f.add_argument("--quiet", action="store_true", help="errors only on stderr")
    f.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="text lines, or one JSON object per event on stderr")  # fmt: skip
    f.set_defaults(func=_cmd_follow)

