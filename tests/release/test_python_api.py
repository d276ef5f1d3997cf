"""The Python API does what the command line does: every source format, plan = "auto", the
reports after a run, and a plan's report and a run's result that show themselves briefly in a
terminal and with the report's charts in a notebook."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dpcr
from dpcr.changelog._sources import _FORMATS
from dpcr.config import load_config, parse_config
from e2e.helpers import mutations, write_config, write_jsonl


def _release(plan: Any, path: Path) -> dpcr.ContinualRelease:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=path), constraint=dpcr.AtMostK(k=3), plan=plan,
        queries=[dpcr.Count(name="n"), dpcr.Sum(name="s", column="v", lower=0, upper=10)],
        budget=dpcr.Budget(epsilon=1.0),
    )  # fmt: skip


def test_every_source_format_has_a_python_source() -> None:
    names = [n for n in dpcr.sources.__all__ if n != "SourceConfig"]
    assert {getattr(dpcr.sources, n).format for n in names} == set(_FORMATS)


def test_auto_plan_is_the_toml_auto_plan(tmp_path: Path) -> None:
    log = (tmp_path / "log.jsonl").resolve()
    python = _release(dpcr.AutoPlan(start="2025-01-01", period="1d", end="2026-01-01"), log)
    toml = parse_config({
        "source": {"format": "jsonl", "path": str(log)}, "privacy": {"epsilon": 1.0},
        "constraint": {"at_most_k": 3},
        "release": {"start": "2025-01-01", "period": "1d", "end": "2026-01-01"},
        "query": [{"name": "n", "kind": "count"},
                  {"name": "s", "kind": "sum", "column": "v", "lower": 0, "upper": 10}],
    }, base_dir=tmp_path)  # fmt: skip
    assert python.plan == toml.plan and python.plan.kind == "tree"
    assert python.fingerprint() == toml.fingerprint()


def test_a_plan_report_shows_itself_briefly(tmp_path: Path) -> None:
    report = _release(dpcr.DisjointRelease(start="2025-01-01", period="7d"),
                      tmp_path / "log.jsonl").explain()  # fmt: skip
    assert len(repr(report)) < 200 and "(1, 0)-DP" in repr(report)
    text = str(report)
    assert text.splitlines()[0].startswith("Plan: ") and "n: one interval's change" in text
    assert report.__rich__() == text
    html = report._repr_html_()
    assert html.startswith("<div>") and html.count("<table>") == 2


def test_reports_and_views_of_a_python_run(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    release = load_config(write_config(tmp_path, on_error="quarantine"))
    result = release.run(until="2025-01-10")
    paths = dpcr.write_reports(release, simulation=False, result=result)
    assert [p.name for p in paths] == ["report.html", "report.html"]
    assert paths[0].parent.name == "public" and paths[1].parent.name == "operator"
    assert repr(result).startswith("RunResult(5 statistics through interval 9")
    assert len(str(result).splitlines()) == 1 + 5
    html = result._repr_html_()
    # per statistic the report's two charts: the running value and each interval's change
    assert html.count("<svg") == 2 * 5 and "quarantined" not in html


@pytest.mark.parametrize("name", ["AutoPlan", "write_reports"])
def test_the_new_names_are_in_the_api(name: str) -> None:
    assert name in dpcr.__all__ and getattr(dpcr, name) is not None
