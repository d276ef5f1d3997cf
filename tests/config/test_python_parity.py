"""Every TOML key has its Python counterpart: the keys docs/config.md documents and the keys
the parser reads, each mapped to the parameter of the Python value that takes it (a test fails
when a key is added to the TOML alone)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import dpcr
from dpcr.cdc.follow import FollowSettings
from dpcr.engines import EngineConfig

ROOT = Path(__file__).resolve().parents[2]
R = dpcr.ContinualRelease

#: (table, TOML key) -> (the Python value that takes it, its parameter).
PYTHON: dict[tuple[str, str], tuple[object, str]] = {
    ("privacy", "epsilon"): (dpcr.Budget, "epsilon"),
    ("privacy", "delta"): (dpcr.Budget, "delta"),
    ("privacy", "selection_delta"): (dpcr.Budget, "selection_delta"),
    ("privacy", "mechanism"): (R, "noise"),
    ("privacy", "unit"): (R, "unit"),
    ("constraint", "at_most_k"): (dpcr.AtMostK, "k"),
    ("constraint", "time_bounded"): (dpcr.TimeBounded, "bound"),
    ("constraint", "column"): (dpcr.Hybrid, "column"),
    ("constraint", "classes"): (dpcr.Hybrid, "classes"),
    ("constraint", "default"): (dpcr.Hybrid, "default"),
    ("constraint", "on_exhausted"): (R, "on_exhausted"),
    ("constraint", "warn_dropped"): (R, "warn_dropped"),
    ("constraint", "state_machine"): (dpcr.StateMachine, "transitions"),
    ("constraint", "initial"): (dpcr.StateMachine, "initial"),
    ("constraint", "transitions"): (dpcr.StateMachine, "transitions"),
    ("constraint", "terminal"): (dpcr.StateMachine, "terminal"),
    ("constraint", "values"): (dpcr.StateMachine, "values"),
    ("constraint", "buckets"): (dpcr.StateMachine, "buckets"),
    ("constraint", "allowance"): (dpcr.StateMachine, "allowance"),
    ("constraint", "inserts"): (dpcr.OpLimits, "inserts"),
    ("constraint", "deletes"): (dpcr.OpLimits, "deletes"),
    ("constraint", "updates"): (dpcr.OpLimits, "updates"),
    ("constraint", "immutable"): (dpcr.OpLimits, "immutable"),
    ("release", "objective"): (R, "objective"),
    ("release", "weights"): (R, "weights"),
    ("release", "plan"): (R, "plan"),
    ("release", "start"): (dpcr.DisjointRelease, "start"),
    ("release", "period"): (dpcr.DisjointRelease, "period"),
    ("release", "end"): (dpcr.DisjointRelease, "end"),
    ("release", "times"): (dpcr.DisjointRelease, "times"),
    ("release", "branching"): (dpcr.TreeRelease, "branching"),
    ("release", "height"): (dpcr.TreeRelease, "height"),
    ("release", "estimator"): (dpcr.TreeRelease, "estimator"),
    ("release", "window"): (dpcr.SlidingWindowRelease, "window"),
    ("release", "factorization"): (dpcr.FactorizationRelease, "factorization"),
    ("release", "horizon"): (dpcr.FactorizationRelease, "horizon"),
    ("release", "fit_participations"): (dpcr.FactorizationRelease, "fit_participations"),
    ("release", "planning_horizon"): (R, "horizon"),
    ("query", "name"): (dpcr.Count, "name"),
    ("query", "kind"): (R, "queries"),
    ("query", "column"): (dpcr.Sum, "column"),
    ("query", "lower"): (dpcr.Sum, "lower"),
    ("query", "upper"): (dpcr.Sum, "upper"),
    ("query", "grid"): (dpcr.Sum, "grid"),
    ("query", "where"): (dpcr.Count, "where"),
    ("query", "keys"): (dpcr.Histogram, "keys"),
    ("query", "unknown"): (dpcr.Histogram, "unknown"),
    ("query", "open"): (dpcr.Histogram, "open"),
    ("query", "by"): (dpcr.GroupedSum, "by"),
    ("query", "keys_from"): (dpcr.GroupedSum, "keys_from"),
    ("query", "weight"): (R, "weights"),
    ("query", "consistency"): (R, "consistency"),
    ("query", "total"): (dpcr.Consistency, "total"),
    ("query", "op"): (dpcr.Events, "op"),
    ("query", "before"): (dpcr.Events, "before"),
    **{("alerts", k): (dpcr.AlertRule, k) for k in (
        "name", "statistic", "what", "threshold", "cutoff", "epsilon", "delta", "window",
        "numeric")},
    ("output", "dir"): (R, "output_dir"),
    ("output", "store"): (R, "store"),
    ("output", "on_error"): (R, "on_error"),
    ("engine", "name"): (EngineConfig, "name"),
    ("engine", "master"): (EngineConfig, "master"),
    ("engine", "memory_limit"): (EngineConfig, "memory_limit"),
    **{("follow", k): (FollowSettings, k) for k in (
        "capture", "plugin", "clock", "allowed_lateness", "heartbeat", "slot", "table",
        "bootstrap", "topic", "partition", "group")},
}  # fmt: skip

#: Names in docs/config.md's examples that are not keys (a state machine's states).
NOT_KEYS = {("constraint", n) for n in ("issued", "activated", "expired", "used1", "used2",
                                         "used3", "active", "cancelled", "paused")}  # fmt: skip
#: The tables the parser's pop() calls name (not keys of a table).
TABLES = {"source", "privacy", "constraint", "release", "query", "alerts", "output", "engine",
          "follow"}  # fmt: skip


def _documented() -> set[tuple[str, str]]:
    """(table, key) of every `key = ...` line (commented or not) in docs/config.md's TOML
    examples, by the section it is under."""
    found: set[tuple[str, str]] = set()
    table, inside = "", False
    for line in (ROOT / "docs" / "config.md").read_text(encoding="utf-8").splitlines():
        head = re.match(r"^## `\[\[?([a-z_]+)\]\]?`", line)
        if head:
            table = head[1]
        if line.startswith("```"):
            inside = line.startswith("```toml")
            continue
        key = re.match(r"^#? ?([a-z_]+) *=", line)
        if inside and key and table:
            found.add((table, key[1]))
    return found


def _parsed() -> set[str]:
    """Every key the release's TOML parser reads (its ``pop("key"`` calls)."""
    text = (ROOT / "src" / "dpcr" / "config.py").read_text(encoding="utf-8")
    return set(re.findall(r'\.pop\(\s*"([a-z_]+)"', text)) - TABLES


def test_every_documented_key_has_a_python_counterpart() -> None:
    missing = sorted(_documented() - set(PYTHON) - NOT_KEYS)
    assert not missing, f"TOML keys without a Python counterpart in this test's map: {missing}"


def test_every_key_the_parser_reads_has_a_python_counterpart() -> None:
    mapped = {key for _, key in PYTHON}
    assert not sorted(_parsed() - mapped)


@pytest.mark.parametrize(("where", "target"), sorted(PYTHON.items(), key=str))
def test_the_python_counterpart_exists(where: tuple[str, str], target: tuple[object, str]) -> None:
    value, parameter = target
    assert parameter in inspect.signature(value).parameters, (where, value, parameter)  # type: ignore[arg-type]


def test_every_plan_kind_and_source_format_has_a_python_value() -> None:
    from dpcr.changelog._sources import _FORMATS
    from dpcr.plans import PLAN_TYPES

    plans = {getattr(dpcr, n).kind for n in dir(dpcr)
             if n.endswith("Release") and n != "ContinualRelease"}  # fmt: skip
    assert set(PLAN_TYPES) <= plans and hasattr(dpcr, "AutoPlan")
    assert {getattr(dpcr.sources, n).format for n in dpcr.sources.__all__
            if n != "SourceConfig"} == set(_FORMATS)  # fmt: skip


def test_the_release_docstring_names_every_command() -> None:
    """help(dpcr.ContinualRelease) gives each command of ``dpcr`` its Python counterpart."""
    from dpcr.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    doc = (dpcr.ContinualRelease.__doc__ or "").replace("-\n    ", "-").replace("``\n", "``")
    missing = [name for name in sub.choices if f"``dpcr {name.split('-')[0]}" not in doc]
    assert not missing, missing
