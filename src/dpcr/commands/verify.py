"""``dpcr verify CONFIG``: check in full what every run checks only in part.

A run re-reads only a bounded part of the source bytes earlier runs consumed (the size, the
last partial block of 1 MiB and a few full blocks in turn; docs/changelog.md, "Resuming: late
records and the source's position"), and parses only public files that are not byte for byte
what a run of the store wrote, so that a step costs what is new. ``dpcr verify`` checks every
consumed byte, the store against the heads of its last commit (every commit of the values of
open histograms' candidate keys, of which a run checks the newest) and every public file against
the store, and writes nothing. Exit status 0 when everything is intact, 1 when something differs (a
rewritten source, an edited store, public files the store cannot account for), 2 when it cannot
check (no store, an unreadable source, a store in use by a run).
"""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "verify",
        help="check every source byte earlier runs consumed, the store against its head and "
        "every public file against the store, in full (writes nothing): exit 0 all intact, "
        "1 something differs, 2 it cannot be checked",
        description="Check in full what each run checks only in part: every byte of the "
        "source that earlier runs consumed, every released value and ledger row against the "
        "store's recorded head, and every public file against the store. Exit status 0 when "
        "all is intact, 1 when something differs, 2 when it cannot be checked.",
    )
    p.add_argument("config", help="TOML release configuration")
    p.add_argument("--simulation", action="store_true",
                   help="verify a simulation store (runs with --simulate)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_verify)


def _cmd_verify(args: argparse.Namespace) -> int:
    from dpcr.config import load_config
    from dpcr.release import verify

    findings = verify(load_config(args.config), simulation=args.simulation)
    intact = all(f.intact for f in findings)
    if args.json:
        print(json.dumps({
            "intact": intact,
            "checks": [{"what": f.what, "intact": f.intact, "detail": f.detail}
                       for f in findings],
        }, indent=1))  # fmt: skip
    else:
        for f in findings:
            print(f"{f.what}: {'intact' if f.intact else 'DIFFERS'}: {f.detail}")
    return 0 if intact else 1
