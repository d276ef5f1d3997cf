"""An ``end`` that is not a whole number of periods after ``start`` is refused (issue 33, point
6a): the part of the last period before it would never be released."""

from __future__ import annotations

from pathlib import Path

import pytest

import dpcr
from dpcr.config import parse_config
from dpcr.errors import ConfigError


def _raw(plan: str, end: str) -> dict[str, object]:
    release: dict[str, object] = {"plan": plan, "start": "2025-01-01", "period": "7d", "end": end}
    if plan == "window":
        release["window"] = "14d"
    return {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "mechanism": "gaussian"},
        "constraint": {"at_most_k": 3},
        "release": release,
        "query": [{"name": "n", "kind": "count"}],
    }


@pytest.mark.parametrize("plan", ["disjoint", "tree", "window", "factorization", "auto"])
def test_a_partial_last_period_is_refused_with_the_nearest_ends(tmp_path: Path, plan: str) -> None:
    """34 days at 7d: 4 intervals and 6 days that would never be released (was: silently
    4 intervals)."""
    with pytest.raises(ConfigError) as err:
        parse_config(_raw(plan, "2025-02-04"), base_dir=tmp_path)
    message = str(err.value)
    assert "not a whole number of periods (7d)" in message, message
    assert 'end = "2025-01-29T00:00:00Z" (4 intervals)' in message
    assert 'end = "2025-02-05T00:00:00Z" (5 intervals)' in message


@pytest.mark.parametrize("plan", ["disjoint", "tree", "window", "factorization", "auto"])
def test_a_whole_number_of_periods_is_taken(tmp_path: Path, plan: str) -> None:
    cfg = parse_config(_raw(plan, "2025-01-29"), base_dir=tmp_path)
    assert cfg.plan.schedule().release_count() == 4


def test_the_python_api_refuses_it_too() -> None:
    with pytest.raises(ConfigError, match="not a whole number of periods"):
        dpcr.DisjointRelease(start="2025-01-01", period="7d", end="2025-02-04")
    with pytest.raises(ConfigError, match="not a whole number of periods"):
        dpcr.TreeRelease(start="2025-01-01", period="7d", end="2025-02-04").schedule()
