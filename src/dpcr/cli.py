"""The ``dpcr`` command line: ``plan``, ``run``, ``sqlite-install-triggers``.

Errors that dpcr raises on purpose print one line (``error: ...``) and exit with status 2;
anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from dpcr import __version__
from dpcr.errors import DpcrError


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _esc(value: object) -> str:
    """Text that rich must print verbatim (data may contain [brackets])."""
    from rich.markup import escape

    return escape(str(value))


def _cmd_plan(args: argparse.Namespace) -> int:
    from dpcr.config import load_config
    from dpcr.pipeline import plan
    from dpcr.plans.dcr import DisjointRelease

    config = load_config(args.config)
    if not isinstance(config.plan, DisjointRelease):  # tree / sliding window
        from dpcr.node_pipeline import format_plan
        from dpcr.node_pipeline import plan as plan_nodes

        node_summary = plan_nodes(config)
        if args.json:
            print(json.dumps(node_summary.to_json(), indent=2))
        else:
            _console().print(
                "\n".join(_esc(line) for line in format_plan(config, node_summary)),
                soft_wrap=True,
            )
        return 0
    summary = plan(config)
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
        return 0
    _print_plan(config, summary)
    return 0


def _print_plan(config: Any, summary: Any) -> None:
    from rich.table import Table

    from dpcr.accounting.events import event_to_dict
    from dpcr.timeutil import format_duration, format_timestamp

    console = _console()
    p = config.plan
    if p.is_periodic:
        end = format_timestamp(p.end) if p.end is not None else "open-ended"
        what = f"every {format_duration(p.period)} from {format_timestamp(p.start)} ({end})"
    else:
        what = f"{len(p.times)} explicit release times"
    console.print("[bold]Plan[/bold]: disjoint continual release (DCR), " + what)
    console.print(
        f"  privacy unit: {_esc(config.unit or 'entry')}; "
        f"constraint: {_esc(config.constraint.describe())}"
    )
    console.print(
        f"  mechanism: {config.mechanism}, "
        f"budget ε={config.budget.epsilon}, δ={config.budget.delta}"
    )
    table = Table(title="Per release")
    for col in ("query", "what", "noise", "std"):
        table.add_column(col)
    for q in config.queries:
        e = event_to_dict(summary.events[q.name])
        params = ", ".join(f"{k}={v}" for k, v in e.items() if k != "type")
        table.add_row(
            _esc(q.name),
            _esc(q.describe()),
            _esc(f"{e['type']} ({params})"),
            f"{summary.noise_std[q.name]:.4g}",
        )
    console.print(table)
    console.print("[bold]Worst case per unit[/bold] (queries one unit's mutations can affect):")
    for cls, n in summary.per_class.items():
        label = {"all": "every unit", "*": "other classes"}.get(cls, f"class {_esc(cls)}")
        console.print(f"  {label}: {n} releases")
    for cls, sm in getattr(summary, "state_machines", {}).items():
        label = {"all": "state machine", "*": "state machine (other classes)"}.get(
            cls, f"state machine of class {_esc(cls)}"
        )
        console.print(f"  {label}: k = {sm['k']}, attained by {_esc(sm['path'])}")
    console.print(
        f"[bold]Guarantee[/bold]: ({summary.epsilon:.6g}, {summary.delta:.3g})-DP per "
        f"{config.unit or 'entry'} over the whole release [{summary.method}]"
    )
    _print_alert_plan(console, summary)


def _print_alert_plan(console: Any, summary: Any) -> None:
    rules = summary.to_json().get("alerts", [])
    for a in rules:
        acc = a["accuracy"]
        console.print(
            f"[bold]Alert[/bold] {_esc(a['name'])}: {_esc(a['rule'])}; sensitivity "
            f"{a['sensitivity']:g}; ({a['epsilon']:.4g}, {a['delta']:.3g})-DP; accurate to "
            f"±{acc['alpha']:g} with probability {1 - acc['beta']:g} over {_esc(acc['horizon'])}"
        )
    if rules:
        t = summary.to_json()["total"]
        console.print(
            f"[bold]Total[/bold] (release + alerts, basic composition): "
            f"({t['epsilon']:.6g}, {t['delta']:.3g})-DP"
        )


def _cmd_run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from dpcr.config import load_config
    from dpcr.noise import simulation_randomness
    from dpcr.pipeline import run

    config = load_config(args.config, until=args.until)
    rng = simulation_randomness(args.simulate) if args.simulate is not None else None
    quiet = args.json or args.quiet
    if quiet:
        result = run(config, rng=rng)
    else:
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=_console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task("starting", total=1)

            def progress(stage: str, done: int, total: int) -> None:
                bar.update(task, description=stage, completed=done, total=max(total, 1))

            result = run(config, rng=rng, progress=progress)
    if args.json:
        print(json.dumps({"summary": result.summary, "rows": result.rows}, indent=1))
        return 0
    _print_run(config, result)
    return 0


def _print_run(config: Any, result: Any) -> None:
    from rich.table import Table

    console = _console()
    s = result.summary
    if "plan" in s:  # tree / sliding window (dpcr.node_pipeline)
        console.print(f"Plan: {s['plan']['kind']}, {s['plan']['new_nodes']} new nodes this run")
    if s["simulation"]:
        console.print("[bold yellow]SIMULATION[/bold yellow]: seeded noise, not for publication")
    rows = result.rows
    shown = sorted({r["interval"] for r in rows})[-3:]
    table = Table(
        title=f"Latest releases ({s['released_intervals']} intervals, "
        f"{s['new_intervals']} new this run)"
    )
    for col in ("#", "ends", "statistic", "change", "estimate", "± std"):
        table.add_column(col, justify="left" if col in ("ends", "statistic") else "right")
    for r in rows:
        if r["interval"] in shown:
            name = r["query"] + (f"[{r['key']}]" if r["key"] else "")
            table.add_row(
                str(r["interval"]),
                r["end"][:10],
                _esc(name),
                f"{r['change']:.6g}",
                f"{r['estimate']:.6g}",
                f"{r['std_estimate']:.3g}",
            )
    console.print(table)
    g = s["guarantee"]
    console.print(
        f"[bold]Guarantee[/bold]: ({g['epsilon']:.6g}, {g['delta']:.3g})-DP per {s['unit']} "
        f"(≤ {g['max_queries_per_entry']} releases per unit; {g['method']})"
    )
    ch, b = s["changelog"], s["bounding"]
    quarantined = sum(ch["quarantined"].values())
    console.print(
        f"Changelog: {ch['records']} records, {ch['valid']} valid, {quarantined} quarantined"
        + (f" {_esc(ch['quarantined'])} → {_esc(ch['quarantine_file'])}" if quarantined else "")
    )
    dropped = sum(b["dropped"].values())
    console.print(
        f"Bounding: {b['units']} units, {b['kept']} mutations kept, {dropped} dropped "
        f"{_esc(b['dropped']) if dropped else ''}, {b['late']} late"
    )
    for name, a in s.get("alerts", {}).items():
        console.print(
            f"Alert {_esc(name)}: {a['above']} above threshold this run, {a['count']}/"
            f"{a['cutoff']} used" + (" (halted)" if a["halted"] else "")
        )
    out = config.output_dir.resolve()
    console.print(f"Outputs: {_esc(out)}/releases.csv, releases.json, summary.json")


def _cmd_triggers(args: argparse.Namespace) -> int:
    from dpcr.changelog import install_triggers

    install_triggers(
        args.db, args.table, key=args.key, log_table=args.log_table, time_column=args.time_column
    )
    print(f"installed changelog triggers on {args.table!r} → {args.log_table!r} in {args.db}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpcr",
        description="Differentially private continual release from a changing database.",
    )
    parser.add_argument("--version", action="version", version=f"dpcr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="show the plan and its privacy guarantee (reads no data)")
    p.add_argument("config", help="TOML configuration file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_plan)

    r = sub.add_parser("run", help="release every closed interval not yet released")
    r.add_argument("config", help="TOML configuration file")
    r.add_argument("--until", help="treat intervals ending at or before this time as closed")
    r.add_argument(
        "--simulate",
        type=int,
        metavar="SEED",
        help="seeded noise for testing; writes a simulation store that is never publishable",
    )
    r.add_argument("--json", action="store_true", help="print the summary and rows as JSON")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=_cmd_run)

    t = sub.add_parser(
        "sqlite-install-triggers",
        help="log INSERT/UPDATE/DELETE of a SQLite table into a changelog table",
    )
    t.add_argument("db", help="SQLite database file")
    t.add_argument("table", help="table to instrument")
    t.add_argument("--key", required=True, help="column that identifies an entry")
    t.add_argument("--log-table", default="dpcr_changelog", help="changelog table name")
    t.add_argument("--time-column", help="take mutation times from this column")
    t.set_defaults(func=_cmd_triggers)

    from dpcr.commands import register_all

    register_all(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except DpcrError as exc:
        from rich.text import Text

        message = Text("error: ", style="bold red")
        message.append(str(exc))
        _console(stderr=True).print(message, soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
