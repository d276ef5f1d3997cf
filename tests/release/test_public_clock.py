"""Public files change only with the public clock (issue 30, point 2).

A run that closes no reporting interval must leave every public file byte-identical, whether or
not the source changed in between (one unit appending one record is enough to tell otherwise),
with and without alert rules. The report's "Runs" table lists the runs that released; the
operator report keeps the whole run log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.release._outputs import public_dir

LOG = [
    {
        "entry": "t1",
        "ts": "2025-01-02T08:00:00Z",
        "seq": 1,
        "op": "insert",
        "before": None,
        "after": {"zone": "A"},
    },
    {
        "entry": "t2",
        "ts": "2025-01-03T09:30:00Z",
        "seq": 2,
        "op": "insert",
        "before": None,
        "after": {"zone": "B"},
    },
    {
        "entry": "t1",
        "ts": "2025-01-09T17:10:00Z",
        "seq": 3,
        "op": "update",
        "before": {"zone": "A"},
        "after": {"zone": "B"},
    },
]
LATE = {
    "entry": "t3",
    "ts": "2025-01-15T07:45:00Z",
    "seq": 4,
    "op": "insert",
    "before": None,
    "after": {"zone": "A"},
}

CONFIG = """
[source]
format = "jsonl"
path = "log.jsonl"
[privacy]
epsilon = 1.0
[constraint]
at_most_k = 4
[release]
plan = "{plan}"
start = "2025-01-01T00:00:00Z"
period = "7d"
[[query]]
name = "active"
kind = "count"
[[query]]
name = "zones"
kind = "histogram"
column = "zone"
keys = ["A", "B"]
{alerts}
[output]
dir = "out"
"""
ALERTS = """
[[alerts]]
name = "busy"
statistic = "active"
what = "running"
threshold = 1
cutoff = 2
epsilon = 0.5
"""


def _public_files(folder: Path) -> dict[str, bytes]:
    """Every file of the public folder (operator files, the store and its state are not)."""
    out: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if rel.parts[0] in ("operator", "simulation") or rel.parts[0].startswith("store"):
            continue
        if path.is_file():
            out[str(rel)] = path.read_bytes()
    return out


def _write_log(path: Path, records: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.mark.parametrize("alerts", [False, True], ids=["plain", "alerts"])
@pytest.mark.parametrize("plan", ["disjoint", "tree"])
def test_runs_that_close_nothing_change_no_public_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: str, alerts: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dpcr.toml").write_text(
        CONFIG.format(plan=plan, alerts=ALERTS if alerts else ""), encoding="utf-8"
    )
    _write_log(tmp_path / "log.jsonl", LOG)
    public = public_dir(load_config("dpcr.toml"), simulation=False)

    def run(until: str) -> dict[str, bytes]:
        assert main(["run", "dpcr.toml", "--until", until, "--quiet"]) == 0
        return _public_files(public)

    first = run("2025-01-15")  # closes weeks 1 and 2
    assert "releases.csv" in first and "report.html" in first and "summary.json" in first
    same_source = run("2025-01-16")  # nothing closes, nothing new
    assert same_source == first
    _write_log(tmp_path / "log.jsonl", [*LOG, LATE])  # one unit appends one record
    changed_source = run("2025-01-17")  # nothing closes, the source changed
    assert changed_source.keys() == first.keys()
    for name, content in first.items():
        assert changed_source[name] == content, f"{name} changed with the source"
    assert main(["report", "dpcr.toml", "--quiet"]) == 0  # rewritten from the store alone
    assert _public_files(public) == first
    later = run("2025-01-22")  # closes week 3: the public files move on
    assert later["releases.csv"] != first["releases.csv"]
    summary = json.loads(later["summary.json"])
    assert summary["released_intervals"] == 3
    assert summary["released_through"] == "2025-01-22T00:00:00Z"
    assert "clock" not in summary and "new_intervals" not in summary
    assert ("alerts" in summary) == alerts


def test_report_lists_the_runs_that_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dpcr.toml").write_text(CONFIG.format(plan="disjoint", alerts=""),
                                        encoding="utf-8")  # fmt: skip
    _write_log(tmp_path / "log.jsonl", LOG)
    public = public_dir(load_config("dpcr.toml"), simulation=False)
    for until, records in (("2025-01-15", LOG), ("2025-01-16", [*LOG, LATE]),
                           ("2025-01-22", [*LOG, LATE])):  # fmt: skip
        _write_log(tmp_path / "log.jsonl", records)
        assert main(["run", "dpcr.toml", "--until", until, "--quiet"]) == 0
    page = (public / "report.html").read_text(encoding="utf-8")
    data = json.loads(page.split('id="dpcr-data">', 1)[1].split("</script>", 1)[0])
    assert [r["clock"] for r in data["runs"]] == ["2025-01-15T00:00:00Z",
                                                  "2025-01-22T00:00:00Z"]  # fmt: skip
    operator = (tmp_path / "out" / "operator" / "report.html").read_text(encoding="utf-8")
    assert "2025-01-16T00:00:00Z" in operator  # the operator's run log keeps every run
