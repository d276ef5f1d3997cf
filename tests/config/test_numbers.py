"""Every number of the configuration refuses, with one line naming the key, what a TOML file
can put there by mistake: booleans (``threshold = true``), NaN, infinities, integers past a
float's range, text where a number goes and numbers where text goes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from dpcr.config import parse_config
from dpcr.errors import DpcrError

BASE: dict[str, Any] = {
    "source": {"format": "jsonl", "path": "log.jsonl"},
    "privacy": {"epsilon": 1.0, "delta": 1e-6},
    "constraint": {"at_most_k": 3},
    "release": {"plan": "tree", "start": "2025-01-01", "period": "1d", "end": "2025-03-01"},
    "query": [
        {"name": "n", "kind": "count"},
        {"name": "s", "kind": "sum", "column": "fare", "lower": 0, "upper": 100, "grid": 0.5},
        {"name": "h", "kind": "histogram", "column": "zone", "keys": ["A", "B"]},
    ],
    "alerts": [
        {
            "name": "a",
            "statistic": "n",
            "what": "window",
            "window": 3,
            "threshold": 5,
            "cutoff": 2,
            "epsilon": 0.1,
        }
    ],
}
BAD: list[Any] = [
    True,
    False,
    float("nan"),
    float("inf"),
    float("-inf"),
    10**400,
    -(10**400),
    "1",
    "x",
    [],
    {},
    None,
]
KEYS: list[tuple[Any, ...]] = [
    ("privacy", "epsilon"),
    ("privacy", "delta"),
    ("constraint", "at_most_k"),
    ("release", "branching"),
    ("release", "height"),
    ("query", 0, "weight"),
    ("query", 1, "lower"),
    ("query", 1, "upper"),
    ("query", 1, "grid"),
    ("alerts", 0, "threshold"),
    ("alerts", 0, "cutoff"),
    ("alerts", 0, "epsilon"),
    ("alerts", 0, "delta"),
    ("alerts", 0, "window"),
    ("alerts", 0, "numeric"),
    ("alerts", 0, "name"),
    ("alerts", 0, "statistic"),
    ("alerts", 0, "what"),
]


def _with(key: tuple[Any, ...], value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    target = raw
    for k in key[:-1]:
        target = target[k]
    target[key[-1]] = value
    return raw


def _outcome(raw: dict[str, Any], tmp: Path) -> str:
    try:
        parse_config(raw, base_dir=tmp).explain()
    except DpcrError as exc:
        assert "\n" not in str(exc)
        return "refused"
    return "accepted"


@pytest.mark.parametrize("value", [True, False, 10**400, -(10**400), "5", float("nan")])
def test_alert_threshold_that_is_not_a_number_is_one_line(value: Any, tmp_path: Path) -> None:
    with pytest.raises(DpcrError, match=r"alert 'a': threshold must be a number"):
        parse_config(_with(("alerts", 0, "threshold"), value), base_dir=tmp_path).explain()


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (("alerts", 0, "cutoff"), 10**400, "cutoff must be an integer from 1 to"),
        (("alerts", 0, "epsilon"), True, "epsilon must be a number"),
        (("alerts", 0, "delta"), False, "delta must be a number"),
        (("alerts", 0, "name"), 5, "name must be text"),
        (("alerts", 0, "statistic"), 1.5, "statistic must be text"),
        (("privacy", "epsilon"), 10**400, "privacy.epsilon must be a number in"),
        (("query", 0, "weight"), 10**400, "weight must be from 1e-6 to 1e6"),
        (("query", 1, "lower"), -(10**400), "lower must be a finite number"),
        (("query", 1, "upper"), 10**400, "upper must be a finite number"),
        (("query", 1, "grid"), 10**400, "grid must be a finite number"),
    ],
)
def test_each_bad_number_names_its_key(
    key: tuple[Any, ...], value: Any, match: str, tmp_path: Path
) -> None:
    with pytest.raises(DpcrError, match=match):
        parse_config(_with(key, value), base_dir=tmp_path).explain()


def test_a_state_machine_bucket_past_floats_is_refused(tmp_path: Path) -> None:
    raw = copy.deepcopy(BASE)
    raw["alerts"] = []
    raw["constraint"] = {
        "state_machine": {
            "column": "uses",
            "initial": ["0"],
            "transitions": ["0 -> 1"],
            "terminal": ["0", "1"],
            "buckets": {"0": 0, "1": 10**400},
        }
    }
    with pytest.raises(DpcrError, match="bucket '1' needs a finite numeric lower bound"):
        parse_config(raw, base_dir=tmp_path)


@pytest.mark.parametrize("key", KEYS, ids=lambda k: ".".join(map(str, k)))
def test_no_bad_value_gets_past_as_a_traceback(key: tuple[Any, ...], tmp_path: Path) -> None:
    for value in BAD:
        # refused with one line, or a value the key can take (e.g. numeric = false)
        assert _outcome(_with(key, value), tmp_path) in ("refused", "accepted")


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_alert_deltas_past_the_budget_delta_say_so(mechanism: str, tmp_path: Path) -> None:
    raw = _with(("alerts", 0, "delta"), 1e-5)
    raw["alerts"][0]["cutoff"] = 50  # (with few alerts the rule's pure bound is tighter)
    raw["privacy"].update(mechanism=mechanism, delta=1e-6)
    with pytest.raises(DpcrError, match=r"alert rules spend δ = 1e-05, at least the budget δ"):
        parse_config(raw, base_dir=tmp_path).explain()
