#!/usr/bin/env python3
"""Write the planner's tables into docs/choosing-a-plan.md by running ``dpcr plan`` on the
example configurations below (each between ``<!-- plan: NAME -->`` and ``<!-- end plan -->``).

    python scripts/gen_plan_tables.py           # rewrite the tables in place
    python scripts/gen_plan_tables.py --check   # exit 1 when a table differs (tests/docs does it)

The planner reads no data, so the configurations name a source that need not exist.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import tempfile
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "choosing-a-plan.md"

_COMMON = """
[source]
format = "jsonl"
path = "log.jsonl"

[[query]]
name = "active"
kind = "count"
"""

#: name -> the configuration's privacy, constraint and release tables
SCENARIOS: dict[str, str] = {
    "transit": """
[privacy]
epsilon = 2.0
[constraint]
column = "kind"
[constraint.classes.multi]
at_most_k = 12
[constraint.classes.monthly]
time_bounded = "31d"
[release]
start = "2025-01-01T00:00:00Z"
period = "7d"
end = "2025-12-31T00:00:00Z"
""",
    "short": """
[privacy]
epsilon = 1.0
[constraint]
at_most_k = 12
[release]
start = "2025-01-01T00:00:00Z"
period = "7d"
end = "2025-02-26T00:00:00Z"
""",
    "insert-only": """
[privacy]
epsilon = 1.0
[constraint]
at_most_k = 1
[release]
start = "2025-01-01T00:00:00Z"
period = "1d"
end = "2027-12-31T00:00:00Z"
""",
    "gaussian": """
[privacy]
epsilon = 1.0
delta = 1e-6
mechanism = "gaussian"
[constraint]
at_most_k = 1
[release]
start = "2025-01-01T00:00:00Z"
period = "1d"
end = "2026-01-01T00:00:00Z"
""",
    "open-ended": """
[privacy]
epsilon = 1.0
[constraint]
time_bounded = "2d"
[release]
start = "2025-01-01T00:00:00Z"
period = "1d"
""",
    "open-ended-gaussian": """
[privacy]
epsilon = 1.0
delta = 1e-6
mechanism = "gaussian"
[constraint]
at_most_k = 1
[release]
start = "2025-01-01T00:00:00Z"
period = "1d"
planning_horizon = 3650
""",
}

_BLOCK = re.compile(r"(<!-- plan: (?P<name>[\w-]+) -->\n)(.*?)(<!-- end plan -->)", re.S)


def table(name: str) -> str:
    """The ranking ``dpcr plan`` prints for scenario ``name`` (from "Plans ranked" on)."""
    from dpcr.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / f"{name}.toml"
        cfg.write_text(_COMMON + SCENARIOS[name], encoding="utf-8")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["plan", str(cfg)])
        if code != 0:
            raise SystemExit(f"dpcr plan failed for {name}")
    lines = out.getvalue().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Plans ranked"))
    return "\n".join(line.rstrip() for line in lines[first:])


def config(name: str) -> str:
    return SCENARIOS[name].strip()


def render(text: str) -> str:
    """``text`` with every plan block regenerated: the configuration, then the ranking."""
    def block(m: re.Match[str]) -> str:
        name = m.group("name")
        body = f"```toml\n{config(name)}\n```\n\n```\n{table(name)}\n```\n"
        return f"{m.group(1)}{body}{m.group(4)}"

    return _BLOCK.sub(block, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 on a difference")
    args = ap.parse_args(argv)
    current = DOC.read_text(encoding="utf-8")
    text = render(current)
    if args.check:
        if text != current:
            print(f"{DOC} is out of date: run python scripts/gen_plan_tables.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
