"""Declared keys have a limit (MAX_KEYS, over all queries), refused with one line before any
data is read; ``dpcr plan`` states how many rows a release publishes when they are many."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

import dpcr
from dpcr.config import load_config
from dpcr.errors import ConfigError

MAX = 10_000  # dpcr.queries.MAX_KEYS (written out: the test must run on code without it)


def _config(tmp: Path, keys: int, *, queries: int = 1, end: str = "2025-02-01") -> Path:
    listed = ", ".join(f'"k{j}"' for j in range(keys))
    text = f"""
[source]
format = "jsonl"
path = "log.jsonl"
[privacy]
epsilon = 1.0
[constraint]
at_most_k = 3
[release]
plan = "disjoint"
start = "2025-01-01"
period = "1d"
end = "{end}"
"""
    for i in range(queries):
        text += (
            f'[[query]]\nname = "h{i}"\nkind = "histogram"\ncolumn = "zone"\nkeys = [{listed}]\n'
        )
    path = tmp / "dpcr.toml"
    path.write_text(text)
    return path


def test_a_histogram_past_the_limit_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"1,000,000 keys, more than 10,000") as info:
        load_config(_config(tmp_path, 1_000_000))
    assert "\n" not in str(info.value)


def test_the_limit_counts_every_query(tmp_path: Path) -> None:
    load_config(_config(tmp_path, MAX))  # at the limit: accepted
    with pytest.raises(ConfigError, match=r"12,000 keys together, more than 10,000"):
        load_config(_config(tmp_path, 6_000, queries=2))


def test_the_python_api_has_the_same_limit(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="more than 10,000"):
        dpcr.Histogram(name="h", column="zone", categories=tuple(map(str, range(MAX + 1))))


def test_dpcr_plan_refuses_a_million_keys_in_bounded_memory(tmp_path: Path) -> None:
    """The issue's case: plan answers with one line, within 2 GB of address space."""
    path = _config(tmp_path, 1_000_000)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    done = subprocess.run(
        [sys.executable, "-m", "dpcr.cli", "plan", str(path)],
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "more than 10,000" in done.stderr


def test_plan_states_the_published_rows(tmp_path: Path) -> None:
    from dpcr.report.text import plan_lines

    settings = load_config(_config(tmp_path, 5_000, end="2025-02-01"))
    lines = plan_lines(settings, settings.explain())
    (line,) = [x for x in lines if x.startswith("releases.csv will hold")]
    assert "155,000 rows (5,000 keys × 31 intervals)" in line
    few = load_config(_config(tmp_path, 100))
    assert not [x for x in plan_lines(few, few.explain()) if "releases.csv" in x]
