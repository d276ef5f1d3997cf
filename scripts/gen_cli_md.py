#!/usr/bin/env python3
"""Write docs/cli.md from the ``dpcr`` command line's own parser (its help texts and defaults).

    python scripts/gen_cli_md.py           # rewrite docs/cli.md
    python scripts/gen_cli_md.py --check   # exit 1 when docs/cli.md differs (tests/docs does it)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
HEADER = """# Command line reference

Generated from `dpcr`'s own parser by `python scripts/gen_cli_md.py` (a test fails when this
page and the parser differ). Every command exits 0 on success and 2 on an error dpcr raises on
purpose (one line `error: ...` naming the fix); the [exit codes](#exit-codes) below are all it
returns. `dpcr run` and `dpcr report` also accept `--log-format json` for one JSON object per
event on stderr. Unless the environment sets `OPENBLAS_THREAD_TIMEOUT`, `dpcr` sets it to 20:
numpy's OpenBLAS threads then sleep after spinning about 2^20 cycles, not 2^28 (about 50 ms of
CPU that each process spent for nothing on two cores); the threads and the results are the same.
"""
#: (status, meaning): every exit status of ``dpcr`` (tests/cli/test_fuzz_cli.py checks them).
EXIT_CODES = (
    ("0", "success; also `--help` and `--version`, and `dpcr follow` stopped by SIGTERM or "
     "SIGINT (it finishes its batch and step first)"),
    ("1", "a check refuted a claim: `dpcr audit` (the lower bound on ε is above the claimed ε), "
     "`dpcr analyze region` (the exact profile violates the spec's `[claim]`) and `dpcr verify` "
     "(the source's consumed bytes, the store or the public outputs differ from what earlier "
     "runs recorded)"),
    ("2", "an error dpcr raises on purpose: one line `error: ...` naming the cause and the safe "
     "action (with `--log-format json`, one JSON `error` event); also a command line argparse "
     "cannot read (usage)"),
    ("130", "interrupted (Ctrl-C): a step's release is committed whole in one transaction or "
     "not at all, and one committed is never drawn again (a run interrupted after its commit "
     "leaves the incremental state behind the store: the next run that reads the source "
     "rebuilds it); run the command again"),
)
EXIT_CODES_NOTE = (
    "Any other status, and any traceback, is a bug (tests/cli/test_fuzz_cli.py runs every "
    "command on\ngenerated input and checks both).\n"
)


def _exit_codes() -> list[str]:
    lines = ["## Exit codes", "", "| code | meaning |", "|---|---|"]
    lines += [f"| `{code}` | {meaning} |" for code, meaning in EXIT_CODES]
    return [*lines, "", EXIT_CODES_NOTE]


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    out: list[tuple[str, str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in action._choices_actions}
            out.extend((name, helps.get(name, ""), sub) for name, sub in action.choices.items())
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _argument(action: argparse.Action) -> tuple[str, str]:
    if action.option_strings:
        names = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or (
                "{" + ",".join(map(str, action.choices)) + "}" if action.choices
                else action.dest.upper()
            )
            names += f" `{metavar}`"
    else:
        names = f"`{action.metavar or action.dest}`"
    text = action.help or ""
    if action.option_strings and action.nargs != 0 and action.default not in (None, False):
        text += f" (default: `{action.default}`)"
    return names, _cell(text)


def _section(prog: str, summary: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    usage = parser.format_usage().removeprefix("usage: ").strip()
    lines = [f"{'#' * level} `{prog}`", ""]
    if summary:
        lines += [_cell(summary)[0].upper() + _cell(summary)[1:] + ".", ""]
    lines += ["```", " ".join(usage.split()), "```", ""]
    rows = [_argument(a) for a in parser._actions
            if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)]
    if rows:
        lines += ["| argument | meaning |", "|---|---|"]
        lines += [f"| {name} | {text} |" for name, text in rows]
        lines.append("")
    for name, help_text, sub in _subparsers(parser):
        lines += _section(f"{prog} {name}", help_text, sub, level + 1)
    return lines


def render() -> str:
    """The text of docs/cli.md."""
    from dpcr.cli import build_parser

    parser = build_parser()
    lines = [HEADER]
    lines += [f"- [`dpcr {name}`](#dpcr-{name}): {_cell(h)}" for name, h, _ in
              _subparsers(parser)]
    lines += ["", *_exit_codes()]
    for name, help_text, sub in _subparsers(parser):
        lines += _section(f"dpcr {name}", help_text, sub, 2)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 on a difference")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is out of date: run python scripts/gen_cli_md.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
