"""``dpcr audit CONFIG``: an empirical lower bound on ε for a release config, against its claim.

The release is simulated ``--runs`` times on each of two neighbouring changelogs, the config's own
and the same without one privacy unit's whole history (``--unit``, default: the unit with the most
mutations), through the release core's loading, bounding, aggregation and linear map and its
calibrated noise, for every plan kind (:func:`dpcr.analysis.audit.audit_pipeline`). The best
threshold test on the log-likelihood ratio, with Clopper-Pearson intervals, gives a lower bound
on ε that holds with probability ≥ 1 − α.

Simulation only: the noise comes from a seeded generator (``--seed``; drawn at random and printed
when omitted), nothing is released and no store is read or written. Exit status 0 when the bound
stays at or below the claimed ε, 1 when the data refute the claim.
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
from typing import Any


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "audit",
        help="empirical lower bound on ε for a release config (simulation; reads no store)",
        description="Simulate the release on neighbouring changelogs (one privacy unit's history "
        "removed) and report a statistically valid lower bound on ε against the claimed ε. "
        "Exit status 1 when the claim is refuted.",
    )
    p.add_argument("config", help="TOML release configuration")
    p.add_argument("--runs", type=int, default=100_000, metavar="N",
                   help="simulated releases on each side (default 100000)")
    p.add_argument("--unit", metavar="U",
                   help="privacy unit whose history is removed (default: the worst of the "
                   "--candidates most active units, by the exact loss of its pair)")
    p.add_argument("--candidates", type=int, default=20, metavar="N",
                   help="units tried when --unit is not given (default 20)")
    p.add_argument("--seed", type=int, metavar="S",
                   help="seed of the simulation noise (default: random, printed)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="the bound fails with probability at most alpha (default 0.05)")
    p.add_argument("--noise-factor", type=float, default=1.0, metavar="F",
                   help="draw F times the calibrated noise (F < 1 simulates a broken mechanism "
                   "to see the audit catch it; default 1)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_audit)


def _cmd_audit(args: argparse.Namespace) -> int:
    import time

    from dpcr.analysis.audit import audit_pipeline
    from dpcr.config import load_config
    from dpcr.errors import ConfigError
    from dpcr.noise import simulation_randomness

    if args.runs < 10:
        raise ConfigError(f"--runs must be at least 10, got {args.runs}")
    if not 0 < args.alpha < 1:
        raise ConfigError(f"--alpha must be in (0, 1), got {args.alpha}")
    if not 0 < args.noise_factor < math.inf:
        raise ConfigError(f"--noise-factor must be a finite number > 0, got {args.noise_factor}")
    seed = args.seed if args.seed is not None else secrets.randbits(63)
    config = load_config(args.config)
    started = time.perf_counter()
    result, pair = audit_pipeline(
        config,
        runs=args.runs,
        rng=simulation_randomness(seed),
        unit=args.unit,
        alpha=args.alpha,
        noise_factor=args.noise_factor,
        candidates=args.candidates,
    )
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({
            **result.to_json(),
            "unit": pair.unit,
            "units_searched": pair.searched,
            "pair_loss": {"kind": pair.loss_kind, "value": pair.loss},
            "coordinates": [list(c) for c in pair.coordinates],
            "seed": seed,
            "noise_factor": args.noise_factor,
            "seconds": seconds,
        }, indent=1))
    else:
        _print(args, config, result, pair, seed, seconds)
    return 1 if result.violated else 0


def _print(args: argparse.Namespace, config: Any, result: Any, pair: Any, seed: int,
           seconds: float) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(highlight=False)
    console.print(
        f"[bold yellow]SIMULATION[/bold yellow]: seeded noise (seed {seed}); nothing released, "
        "no store read or written"
    )
    if args.noise_factor != 1:
        console.print(f"[bold red]Broken on purpose[/bold red]: noise drawn at "
                      f"{args.noise_factor:g}× its calibrated scale")
    console.print(
        f"[bold]Neighbours[/bold]: the changelog with and without {config.unit} "
        f"{escape(repr(pair.unit))} (the worst of {pair.searched} tried), which changes "
        f"{len(pair.coordinates)} released value(s); exact loss of the pair with the noise off: "
        f"{pair.loss_kind} = {pair.loss:.6g}"
    )
    table = Table(title="Audit")
    table.add_column("")
    table.add_column("value", justify="right")
    pos, neg = result.counts
    rows = [
        ("runs (both sides)", f"{result.runs:,}"),
        ("test", escape(f"{result.direction}, t = {result.threshold:.6g}")),
        ("hits (evaluation runs)", f"{pos:,} vs {neg:,}"),
        ("confidence", f"{1 - result.alpha:g}"),
        ("claimed", f"ε = {result.epsilon_claimed:.6g}, δ = {result.delta:.3g}"),
        ("lower bound on ε", f"{result.epsilon_lower:.4f}"),
        ("bound / claim", f"{result.epsilon_lower / result.epsilon_claimed:.3f}"
         if result.epsilon_claimed > 0 else "—"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    if result.violated:
        console.print(
            f"[bold red]REFUTED[/bold red]: ε ≥ {result.epsilon_lower:.4f} > claimed "
            f"{result.epsilon_claimed:.6g} (with probability ≥ {1 - result.alpha:g})"
        )
    else:
        console.print(
            f"[green]consistent[/green]: the lower bound {result.epsilon_lower:.4f} ≤ claimed "
            f"{result.epsilon_claimed:.6g} ({seconds:.1f} s)"
        )
