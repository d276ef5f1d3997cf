"""Fuzzed configuration values: every one is a clean ConfigError (or a valid plan), never a
traceback or a hang. Values at the edges of floats, integers and times, in every key that takes
a number, a time or a duration, on every plan kind."""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path
from typing import Any

import pytest

from dpcr.config import parse_config
from dpcr.errors import DpcrError

EDGES: list[Any] = [
    0, -1, 1, 3, 2**31, 2**63 - 1, -(2**63), 2**63, 1e308, -1e308, float("inf"), float("-inf"),
    float("nan"), 5e-324, 1e-300, 0.5, True, None, "", "x", "nan", "-5d", "0s", "7d",
    "99999999d", "0001-01-01", "9999-12-31T23:59:59Z", "10000-01-01", "2025-01-01T00:00:00+25:00",
    [], {}, [1], {"a": 1},
]
KEYS: list[tuple[Any, ...]] = [
    ("privacy", "epsilon"), ("privacy", "delta"), ("constraint", "at_most_k"),
    ("constraint", "time_bounded"), ("release", "start"), ("release", "period"),
    ("release", "end"), ("release", "height"), ("release", "branching"), ("release", "window"),
    ("release", "horizon"), ("query", 1, "lower"), ("query", 1, "upper"), ("query", 1, "grid"),
    ("query", 1, "where", "zone"), ("query", 2, "keys"), ("query", 0, "weight"),
]
PLANS = ["disjoint", "tree", "window", "factorization"]


def config(rnd: random.Random) -> dict[str, Any]:
    plan = rnd.choice(PLANS)
    raw: dict[str, Any] = {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0},
        "constraint": rnd.choice([{"at_most_k": 3}, {"time_bounded": "3d"}]),
        "release": {"plan": plan, "start": "2025-01-01", "period": "1d"},
        "query": [
            {"name": "n", "kind": "count"},
            {"name": "s", "kind": "sum", "column": "fare", "lower": 0, "upper": 100,
             "grid": 0.5, "where": {"zone": "A"}},
            {"name": "h", "kind": "histogram", "column": "zone", "keys": ["A", "B"]},
        ],
    }
    if plan == "window":
        raw["release"]["window"] = "3d"
    if plan == "factorization":
        raw["release"]["horizon"] = 16
        raw["privacy"].update(delta=1e-6, mechanism="gaussian")
    for _ in range(rnd.randint(1, 3)):
        key = rnd.choice(KEYS)
        target = raw
        for k in key[:-1]:
            target = target[k]
        target[key[-1]] = rnd.choice(EDGES)
    if len(raw["constraint"]) > 1:
        raw["constraint"].pop("at_most_k")
    return raw


class _Timeout(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _Timeout


@pytest.mark.parametrize("seed", range(5))
def test_fuzzed_configs_are_clean_errors(seed: int, tmp_path: Path) -> None:
    rnd = random.Random(seed)
    previous = signal.signal(signal.SIGALRM, _alarm)
    failures: dict[str, str] = {}
    try:
        for _ in range(200):  # 1000 configurations over the five seeds
            raw = config(rnd)
            signal.alarm(10)  # per case: a hang is a failure, not a stuck CI
            try:
                parse_config(raw, base_dir=tmp_path).explain()
            except DpcrError:
                pass
            except _Timeout:
                failures.setdefault("hang", json.dumps(raw, default=str))
            except Exception as exc:  # any other exception is the defect
                failures.setdefault(type(exc).__name__, json.dumps(raw, default=str))
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert failures == {}
