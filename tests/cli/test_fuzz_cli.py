"""A fuzz of the whole command line: every command with generated configurations and inputs
(tests/cli/fuzz_cases.py), run in-process by a pool of worker processes under a watchdog
(tests/cli/fuzz_pool.py). Requirements: no traceback (an exception out of ``dpcr.cli.main``
other than argparse's exit, or "Traceback" on stderr), no hang (each case at most 60 s, the
worker is killed past it), no case above 2 GiB of memory, and every exit status one of those
docs/cli.md documents ("Exit codes").

The case list is fixed by ``SEED``: a failure prints its case as ``SEED:INDEX`` with a one-line
command that reruns it alone, ``PYTHONPATH=src:tests python -m cli.fuzz_worker SEED INDEX``.
``DPCR_FUZZ_ONLY="30:17,30:52"`` runs only those cases (the count and class checks are then
skipped: a failure outside the known classes still fails).

Every failure fails :func:`test_no_failure`, listed by class (kind, command, exception, place)
with the first few cases.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli.fuzz_cases import FAMILIES, Case, make_case
from cli.fuzz_pool import run_pool

pytestmark = pytest.mark.slow

SEED = 30
COUNT = 2000
TIMEOUT = 60.0
MEMORY_CAP = 5 << 29  # 2.5 GiB: the watchdog kills a worker above it
MEMORY_GOAL = 2 << 30  # no case may need more than 2 GiB
PLAN_SECONDS = 1.0  # CPU seconds of `dpcr plan` on a configuration it accepts
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Failure:
    """One failing command (or a whole case for a hang, a kill or a crash)."""

    case: Case
    kind: str  # traceback | stderr | exit | hang | memory | crash | harness
    command: str = ""  # argv[0] (argv[0] argv[1] for commands with subcommands)
    exc: str = ""  # the exception's type
    where: str = ""  # the innermost frame in dpcr: path:function
    message: str = ""
    interrupted: bool = False  # Ctrl-C arrived during the command

    def line(self) -> str:
        what = f"{self.kind} {self.exc} at {self.where}: {self.message}".strip()
        return (
            f"[{self.case.name}] dpcr {self.command}: {what[:300]}\n    {self.case.reproduction()}"
        )

    @property
    def gaussian(self) -> bool:
        return any(
            b'mechanism = "gaussian"' in (a.data or b"")
            for s in self.case.steps
            for a in s.actions
            if a.kind == "write" and isinstance(a.data, bytes)
        )


_FRAME = re.compile(r'File "[^"]*?/dpcr/([^"]+)", line \d+, in (\w+)')
_SUBCOMMANDS = {"analyze", "capture"}


def documented_exit_codes() -> set[int]:
    """The codes of docs/cli.md's "Exit codes" table."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m) for m in re.findall(r"^\| `(\d+)` \|", section, flags=re.M)}


def failures_of(result: dict[str, Any], codes: set[int]) -> list[Failure]:
    case = make_case(result["seed"], result["index"])
    for kind in ("hang", "memory", "crash", "lost"):
        if kind in result:
            return [Failure(case, kind, message=str(result[kind]))]
    if "harness_error" in result:
        return [Failure(case, "harness", message=result["harness_error"][-500:])]
    out = []
    if result.get("peak_rss", 0) > MEMORY_GOAL:
        out.append(Failure(case, "memory", message=f"{result['peak_rss'] >> 20} MiB resident"))
    released = False  # has a run of this case succeeded yet?
    for step in result["steps"]:
        argv = step["argv"]
        command = " ".join(argv[:2] if argv[:1] and argv[0] in _SUBCOMMANDS else argv[:1])
        tb = step["traceback"]
        if tb:
            frames = _FRAME.findall(tb)
            last = tb.strip().splitlines()[-1]
            out.append(
                Failure(
                    case,
                    "traceback",
                    command,
                    exc=last.split(":", 1)[0],
                    where=":".join(frames[-1]) if frames else "?",
                    message=last,
                    interrupted=step.get("interrupted", False),
                )
            )
        elif "Traceback" in step["stderr"]:
            out.append(Failure(case, "stderr", command, message=step["stderr"][-300:]))
        elif step["code"] not in codes:
            out.append(Failure(case, "exit", command, message=f"exit status {step['code']!r}"))
        if command == "run" and step["code"] != 0 and not released:
            out += _first_run_failures(case, command, step)
        released = released or (command == "run" and step["code"] == 0)
    codes_run = [s["code"] for s in result["steps"]]
    if case.family == "interrupt" and codes_run and codes_run[-1] != 0 and 2 not in codes_run:
        out.append(
            Failure(
                case,
                "rerun",
                "run",
                message=f"exit statuses {codes_run}: the run after Ctrl-C does not complete",
            )
        )
    return out


def _first_run_failures(case: Case, command: str, step: dict[str, Any]) -> list[Failure]:
    """A run that fails before anything was released: it never blames a rewritten history
    (nothing was consumed), and a source that does not exist leaves no output folder."""
    out = []
    if "rewritten history" in step["stderr"]:
        out.append(
            Failure(
                case,
                "message",
                command,
                message="a store that has consumed "
                "nothing reports a rewritten history: " + step["stderr"][-200:],
            )
        )
    missing = any(
        n.startswith("source ") and n.endswith((" missing", " dangling")) for n in case.notes
    )
    if missing and step["out_exists"] and case.steps[0].argv[:1] == ("run",):
        out.append(
            Failure(
                case,
                "leftover",
                command,
                message="a run whose source does not exist leaves the output folder behind",
            )
        )
    return out


@dataclass(frozen=True)
class Run:
    results: list[dict[str, Any]]
    failures: list[Failure]
    seconds: float
    codes: set[int]


@pytest.fixture(scope="module")
def fuzz() -> Run:
    only = os.environ.get("DPCR_FUZZ_ONLY")
    if only:
        cases = [(int(a), int(b)) for a, b in (x.split(":") for x in only.split(","))]
    else:
        cases = [(SEED, i) for i in range(COUNT)]
    codes = documented_exit_codes()
    started = time.monotonic()
    results = run_pool(cases, workers=2, timeout=TIMEOUT, memory_cap=MEMORY_CAP)
    seconds = time.monotonic() - started
    failures = [f for r in results for f in failures_of(r, codes)]
    return Run(results, failures, seconds, codes)


def _summary(failures: list[Failure], limit: int = 25) -> str:
    by_class = Counter(f"{f.kind} {f.command} {f.exc} {f.where}" for f in failures)
    lines = [f"{n:5d} x {k}" for k, n in by_class.most_common()]
    lines += [f.line() for f in failures[:limit]]
    return "\n".join(lines)


def _whole_list_only() -> None:
    if os.environ.get("DPCR_FUZZ_ONLY"):
        pytest.skip("DPCR_FUZZ_ONLY runs a few cases: classes are checked on the whole list")


def test_every_case_ran(fuzz: Run) -> None:
    harness = [f for f in fuzz.failures if f.kind in ("harness", "lost")]
    assert not harness, _summary(harness)
    if os.environ.get("DPCR_FUZZ_ONLY"):
        return
    assert len(fuzz.results) >= 2000
    families = Counter(make_case(r["seed"], r["index"]).family for r in fuzz.results)
    assert set(families) == set(FAMILIES), families
    commands = {s["argv"][0] for r in fuzz.results for s in r["steps"] if s["argv"]}
    from dpcr.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) <= commands, set(sub.choices) - commands  # type: ignore[union-attr]
    peak = max(fuzz.results, key=lambda r: r.get("peak_rss", 0))
    print(
        f"\nCLI fuzz: {len(fuzz.results)} cases in {fuzz.seconds:.0f} s, "
        f"largest case {peak.get('peak_rss', 0) >> 20} MiB ({peak['seed']}:{peak['index']}), "
        f"{sum(len(r['steps']) for r in fuzz.results)} commands; "
        f"{len(fuzz.failures)} failures"
    )


def test_no_failure(fuzz: Run) -> None:
    assert not fuzz.failures, f"{len(fuzz.failures)} failures:\n{_summary(fuzz.failures)}"


def test_exit_codes_are_documented(fuzz: Run) -> None:
    """docs/cli.md lists the codes the code base can return, and every case returned one."""
    assert {0, 1, 2, 130} <= fuzz.codes
    seen = Counter(s["code"] for r in fuzz.results for s in r["steps"] if not s["traceback"])
    assert set(seen) <= fuzz.codes, seen


def test_planning_is_fast(fuzz: Run) -> None:
    """Every `dpcr plan` of a configuration it accepts takes at most 1 CPU second (the goal on
    a calm machine; CPU time, so that a busy machine does not fail it). Memory: no case may
    pass 2 GiB (a "memory" failure in the tests above)."""
    _whole_list_only()
    plans = sorted(
        (s["cpu"], f"{r['seed']}:{r['index']}")
        for r in fuzz.results
        for s in r["steps"]
        if s["argv"][:1] == ["plan"] and s["code"] == 0
    )
    assert plans
    cpu, case = plans[-1]
    print(
        f"\n`dpcr plan` of {len(plans)} accepted configurations: slowest {cpu:.2f} CPU s "
        f"({case}), {sum(c > PLAN_SECONDS for c, _ in plans)} above {PLAN_SECONDS} s"
    )
    assert cpu <= PLAN_SECONDS, f"case {case}: {cpu:.2f} CPU s"
