"""The ``dpcr`` command line: ``plan``, ``run``, ``sqlite-install-triggers`` (and ``commands/``).

Errors that dpcr raises on purpose print one line (``error: ...``) and exit with status 2;
anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import json
import os
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
    from dpcr.report.text import plan_lines

    settings = load_config(args.config)
    report = settings.explain()
    from dpcr.commands.check import plan_warnings  # (the source's head, when it exists)

    for warning in plan_warnings(settings):
        print(warning, file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0
    _console().print("\n".join(_esc(line) for line in plan_lines(settings, report)),
                     soft_wrap=True)
    return 0


def _feedback(args: argparse.Namespace) -> Any:
    from dpcr.commands import Feedback

    return Feedback(log_format=args.log_format, quiet=args.quiet)


def _write_reports(
    config: Any, feedback: Any, *, simulation: bool, result: Any = None,
    output: str | None = None, operator: bool = True, exact: bool = False,
) -> list[Any]:
    """The public report (with the exact series in a simulation) and the operator report, from
    one read-only snapshot of the store (no run lock: works beside a running follower)."""
    from pathlib import Path

    from dpcr.report.write import write_reports

    def written(kind: str, path: Path) -> None:
        if kind == "public":
            feedback.progress("report", 1, 1)
            feedback.event("report_written", path=str(path), simulation=simulation)
        else:
            feedback.event("operator_report_written", path=str(path), sensitive=True)

    # a simulation's reports always show its exact series; a release's operator report only
    # with --exact
    return write_reports(config, simulation=simulation, result=result,
                         output=Path(output) if output else None, operator=operator,
                         exact_values=simulation or exact, progress=feedback.progress,
                         written=written)  # fmt: skip


def _cmd_run(args: argparse.Namespace) -> int:
    from dpcr.config import load_config
    from dpcr.noise import simulation_randomness
    from dpcr.release import public_dir

    config = load_config(args.config, until=args.until)
    rng = simulation_randomness(args.simulate) if args.simulate is not None else None
    with _feedback(args) as feedback:
        feedback.event("run_started", config=args.config, simulation=rng is not None)
        result = config.run(rng=rng, progress=feedback.progress)
        s = result.summary
        simulation = bool(s.get("simulation"))
        feedback.event(
            "released", new_intervals=s.get("new_intervals"),
            released_intervals=s.get("released_intervals"),
            spent_epsilon=s.get("guarantee", {}).get("spent_epsilon"),
            epsilon=s.get("guarantee", {}).get("epsilon"), simulation=simulation,
            outputs=str(public_dir(config, simulation=simulation)),
        )
        _warn_dropped(args, feedback, result.diagnostics)
        reports: list[Any] = []
        if not args.no_report:
            reports = _write_reports(config, feedback, simulation=simulation, result=result)
    if args.json:
        print(json.dumps({"summary": result.summary, "rows": result.records(),
                          "diagnostics": result.diagnostics}, indent=1))
        return 0
    _print_run(config, result, reports, quiet=args.quiet)
    return 0


def _warn_dropped(args: argparse.Namespace, feedback: Any, diagnostics: dict[str, Any]) -> None:
    """Bounding dropped more than ``constraint.warn_dropped`` of the mutations: say so on the
    operator's channel, besides the run's operator lines (stdout): a JSON event, or on a
    terminal a line on stderr (like the progress bar, nothing there otherwise)."""
    warning = (diagnostics.get("bounding") or {}).get("dropped_warning")
    if not warning:
        return
    feedback.event("dropped_share", level="warning", message=warning)
    if args.log_format == "text" and not args.quiet and sys.stderr.isatty():
        from rich.text import Text

        line = Text("warning: ", style="bold yellow")
        line.append(warning)
        _console(stderr=True).print(line, soft_wrap=True)


def _cmd_report(args: argparse.Namespace) -> int:
    from dpcr.config import load_config

    config = load_config(args.config)
    with _feedback(args) as feedback:
        paths = _write_reports(config, feedback, simulation=args.simulation,
                               output=args.output, operator=not args.no_operator,
                               exact=args.exact)  # fmt: skip
    print(f"wrote {paths[0]}")
    if len(paths) > 1:
        print(f"wrote {paths[1]} (operator only, sensitive: do not publish)")
    return 0


def _print_run(config: Any, result: Any, reports: Sequence[Any] = (), *,
               quiet: bool = False) -> None:  # fmt: skip
    """The latest releases and the run's lines: a table drawn by rich on a terminal, plain
    aligned text otherwise (a cron job's log; rich is not imported). ``quiet``: only where the
    outputs are and the warnings."""
    from dpcr.report.text import run_lines

    if quiet:
        kept = ("Public outputs:", "Operator report", "  warning:", "warning:")
        lines = [line for line in run_lines(config, result, reports=reports)
                 if line.startswith(kept)]  # fmt: skip
        if lines:
            print("\n".join(lines))
        return
    s = result.summary
    header = [f"Plan: {s['plan']['kind']}, {s['plan']['new_nodes']} new releases this run"]
    if s["simulation"]:
        header.append("SIMULATION: seeded noise, not for publication")
    shown = sorted({r.interval for r in result.rows})[-3:]
    title = (f"Latest releases ({s['released_intervals']} intervals, "
             f"{s['new_intervals']} new this run)")  # fmt: skip
    columns = ("#", "ends", "statistic", "change", "estimate", "± std", "95 % interval")
    cells = [
        (str(r.interval), r.end[:10], r.query + (f"[{r.key}]" if r.key else ""),
         f"{r.change:.6g}", f"{r.estimate:.6g}", f"{r.std_estimate:.3g}",
         ("" if r.std_estimate == r.std_estimate else "≈ ")  # (derived: delta method)
         + f"{r.estimate_lo:.6g} .. {r.estimate_hi:.6g}")
        for r in result.rows if r.interval in shown
    ]  # fmt: skip
    lines = run_lines(config, result, reports=reports)
    if not sys.stdout.isatty():
        left = {1, 2}  # ends, statistic
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]

        def line(values: Sequence[str]) -> str:
            pairs = enumerate(zip(values, widths, strict=True))
            return "  ".join(v.ljust(w) if i in left else v.rjust(w) for i, (v, w) in pairs)

        print("\n".join([*header, title, line(columns), *map(line, cells), *lines]))
        return
    from rich.table import Table

    console = _console()
    console.print(header[0])
    if s["simulation"]:
        console.print("[bold yellow]SIMULATION[/bold yellow]: seeded noise, not for publication")
    table = Table(title=title)
    for i, col in enumerate(columns):
        # a statistic's name and key are never cut short (the numbers may wrap instead)
        widest = max([len(col)] + [len(row[i]) for row in cells]) if col == "statistic" else None
        table.add_column(col, justify="left" if col in ("ends", "statistic") else "right",
                         min_width=widest, no_wrap=col == "statistic")  # fmt: skip
    for row in cells:
        table.add_row(*(_esc(c) for c in row))
    console.print(table)
    for text in lines:
        console.print(_esc(text), soft_wrap=True)


def _cmd_triggers(args: argparse.Namespace) -> int:
    from dpcr.changelog import install_triggers

    install_triggers(
        args.db, args.table, key=args.key, log_table=args.log_table, time_column=args.time_column
    )
    print(f"installed changelog triggers on {args.table!r} → {args.log_table!r} in {args.db}")
    return 0


def _feedback_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar, no log lines and no table of releases: only "
                   "errors, warnings and where the outputs are")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="text: a progress bar on a terminal; json: one JSON object per event "
                   "on stderr")


#: The commands this module defines; the others are found in :mod:`dpcr.commands`.
_OWN = ("plan", "run", "report", "sqlite-install-triggers")


def build_parser(*, commands: bool = True) -> argparse.ArgumentParser:
    """The ``dpcr`` parser; without ``commands``, only the commands of this module (what a
    ``dpcr run`` needs: the other commands' modules are not imported)."""
    parser = argparse.ArgumentParser(
        prog="dpcr",
        description="Differentially private continual release from a changing database.",
    )
    parser.add_argument("--version", action="version", version=f"dpcr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="show the plan and its privacy guarantee (reads no data: "
                       "only the column names of the source's first records, when it exists)")
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
    _feedback_options(r)
    r.add_argument("--no-report", action="store_true",
                   help="do not write public/report.html (nor the operator report)")
    r.set_defaults(func=_cmd_run)

    rp = sub.add_parser(
        "report", help="write the HTML reports of what the store holds (reads no source data, "
        "except for a simulation's exact series)"
    )
    rp.add_argument("config", help="TOML configuration file")
    rp.add_argument("-o", "--output", help="where to write (default: public/report.html in the "
                    "output folder)")
    rp.add_argument("--simulation", action="store_true",
                    help="report a simulation store (adds the exact series and the errors)")
    rp.add_argument("--no-operator", action="store_true",
                    help="do not write the operator report (operator/report.html)")
    rp.add_argument("--exact", action="store_true",
                    help="load the source again to draw each published statistic beside its "
                    "exact value in the operator report (owner-only; never the public one)")
    _feedback_options(rp)
    rp.set_defaults(func=_cmd_report)

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

    if commands:
        from dpcr.commands import register_all

        register_all(sub)
    return parser


def _is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C while DuckDB runs a query: DuckDB ends the query with ``RuntimeError("Query
    interrupted")`` (or its ``InterruptException``) in place of ``KeyboardInterrupt``. An
    error raised while one of these unwinds (a clean-up statement refused in the transaction
    the interrupt aborted) is the interrupt too."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and all(seen is not c for c in chain):
        chain.append(seen)
        seen = seen.__context__
    return any(isinstance(c, KeyboardInterrupt) or type(c).__name__ == "InterruptException"
               or str(c) == "Query interrupted" for c in chain)  # fmt: skip


def _interrupted() -> int:
    _console(stderr=True).print(
        "interrupted: a step's release is committed whole in one transaction or not at all, "
        "and one committed is never drawn again; run again to continue"
    )
    return 130


#: How long (log2 of CPU cycles) an idle OpenBLAS thread (numpy's) spins before it sleeps,
#: unless the environment says: OpenBLAS's default, 28 (about 0.1 s), is spent by its threads
#: when numpy is imported, and after each call that used them, whether or not more work comes
#: (about 50 ms of CPU a process on two cores, a quarter of importing numpy and DuckDB). The
#: threads, and so every result, are the same; an idle one sleeps after about a millisecond.
BLAS_SPIN = "20"


def main(argv: Sequence[str] | None = None) -> int:
    # (read by OpenBLAS when it is loaded: before the command imports numpy)
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", BLAS_SPIN)
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(commands=not words or words[0] not in _OWN)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except KeyboardInterrupt:
        return _interrupted()
    except DpcrError as exc:
        if _is_interrupt(exc):
            return _interrupted()
        if getattr(args, "log_format", "text") == "json":
            from dpcr.commands import Feedback

            Feedback(log_format="json").error(str(exc))
            return 2
        from rich.text import Text

        message = Text("error: ", style="bold red")
        message.append(str(exc))
        _console(stderr=True).print(message, soft_wrap=True)
        return 2
    except Exception as exc:
        if not _is_interrupt(exc):
            raise
        return _interrupted()


if __name__ == "__main__":
    sys.exit(main())
