"""Times in a config are ISO 8601 text or TOML dates: a number (``start = 0``) is ambiguous and
would mean 1970, so it is refused with one line; and ``dpcr plan`` says when a run would close
many intervals, and how to release more than one run closes."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from dpcr.config import parse_config
from dpcr.errors import ConfigError
from dpcr.timeutil import parse_timestamp

BASE = """
[source]
format = "jsonl"
path = "log.jsonl"
[privacy]
epsilon = 1.0
delta = 1e-6
mechanism = "gaussian"
[constraint]
at_most_k = 1
[[query]]
name = "n"
kind = "count"
"""
RELEASES = {
    "disjoint": 'plan = "disjoint"\nperiod = "1d"\n',
    "tree": 'plan = "tree"\nperiod = "1d"\n',
    "window": 'plan = "window"\nperiod = "1d"\nwindow = "2d"\n',
    "factorization": 'plan = "factorization"\nperiod = "1d"\nhorizon = 8\n',
    "auto": 'period = "1d"\n',
}


def _parse(release: str) -> object:
    return parse_config(tomllib.loads(BASE + "[release]\n" + release), base_dir=Path("."))


@pytest.mark.parametrize("kind", sorted(RELEASES))
@pytest.mark.parametrize("value", ["0", "1735689600", "1735689600.5", "-5"])
def test_a_number_for_start_is_refused(kind: str, value: str) -> None:
    with pytest.raises(ConfigError, match=r"release\.start = .* is a number.*ISO 8601"):
        _parse(RELEASES[kind] + f"start = {value}\n")


@pytest.mark.parametrize("key", ["end", "times"])
def test_a_number_for_end_or_times_is_refused(key: str) -> None:
    release = (
        'plan = "disjoint"\nstart = "2025-01-01"\nperiod = "1d"\nend = 1767225600\n'
        if key == "end"
        else 'plan = "disjoint"\ntimes = ["2025-01-31", 1740700800]\n'
    )
    with pytest.raises(ConfigError, match=rf"release\.{key} = .* is a number"):
        _parse(release)


@pytest.mark.parametrize(
    "start", ['"2025-01-01"', '"2025-01-01T00:00:00Z"', "2025-01-01", "2025-01-01T00:00:00Z"]
)
def test_iso_text_and_toml_dates_are_times(start: str) -> None:
    settings = _parse(RELEASES["tree"] + f"start = {start}\n")
    assert settings.plan.start == parse_timestamp("2025-01-01T00:00:00Z")  # type: ignore[attr-defined]


def test_plan_announces_a_long_backlog_and_the_steps() -> None:
    from dpcr.plans.base import MAX_RUN_INTERVALS
    from dpcr.report.text import backlog_lines

    settings = _parse('plan = "tree"\nperiod = "1d"\nstart = "1970-01-01"\n')
    now = parse_timestamp("2026-01-01T00:00:00Z")
    (line,) = backlog_lines(settings, now=now)  # type: ignore[arg-type]
    assert "A run now closes 20,454 reporting intervals" in line
    runs = -(-20_454 // MAX_RUN_INTERVALS)
    assert f"one run releases at most {MAX_RUN_INTERVALS:,}: {runs} runs release them" in line


def test_plan_is_quiet_about_a_short_backlog() -> None:
    from dpcr.plans.base import ANNOUNCE_RUN_INTERVALS
    from dpcr.report.text import backlog_lines

    settings = _parse('plan = "tree"\nperiod = "1d"\nstart = "2025-01-01"\n')
    few = parse_timestamp("2025-01-01T00:00:00Z") + ANNOUNCE_RUN_INTERVALS * 86_400_000_000
    assert backlog_lines(settings, now=few) == []  # type: ignore[arg-type]
    (line,) = backlog_lines(settings, now=few + 86_400_000_000)  # type: ignore[arg-type]
    assert "closes 101 reporting intervals" in line and "--until" not in line
