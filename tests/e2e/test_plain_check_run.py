"""``dpcr run`` on a clean Parquet file checks its histories in the aggregation's ranking
window: plain histories are released as JSON lines release them, without a second load; a
history that is not plain (valid or not), or a record that phase 1 rejects, makes the run load
the file again with the checks, with the same release and quarantine as JSON lines."""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.cli import main

from .helpers import write_jsonl

CONFIG = """
[source]
{source}

[privacy]
unit = "entry"
epsilon = 1.0

[constraint]
at_most_k = 3

[release]
plan = "disjoint"
start = "2025-01-01T00:00:00Z"
period = "1d"

[[query]]
name = "active"
kind = "count"

[[query]]
name = "fares"
kind = "sum"
column = "fare"
lower = 0
upper = 100

[output]
dir = "out"
on_error = "quarantine"
"""


def _log(extra: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """Plain histories over ten days, then ``extra`` (entry, day and hour, op)."""
    out: list[dict[str, Any]] = []
    for e in range(12):
        ops = ["insert", "update", "update"] + (["delete"] if e % 3 == 0 else [])
        out += [(f"t{e}", f"{1 + e % 9:02d}T{k * 5 + e % 4:02d}", op)
                for k, op in enumerate(ops)]  # type: ignore[misc]
    rows = []
    for entry, when, op in [*out, *extra]:  # type: ignore[misc]
        fare = float(len(rows) % 90)
        rows.append({"entry": entry, "ts": f"2025-01-{when}:00:00Z", "op": op,
                     "before": None if op == "insert" else {"fare": fare},
                     "after": None if op == "delete" else {"fare": fare}})  # fmt: skip
    rows.sort(key=lambda r: r["ts"])
    return rows


def _release(tmp: Path, source: str, until: str, capsys: pytest.CaptureFixture[str]) -> Any:
    (tmp / "dpcr.toml").write_text(CONFIG.format(source=source), encoding="utf-8")
    assert main(["run", str(tmp / "dpcr.toml"), "--simulate", "5", "--json",
                 "--until", until]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    quarantine = sorted((tmp / "out").rglob("quarantine*"))
    bad = [(r["record"], r["reason"]) for q in quarantine if q.is_file()
           for r in map(json.loads, q.read_text(encoding="utf-8").splitlines())]  # fmt: skip
    return out["rows"], bad


EXTRA = {
    "plain": [],
    # deleted and inserted again: valid, but not plain
    "reinserted": [("t3", "06T22", "insert"), ("t3", "07T03", "update")],
    # a double insert (quarantined) after the last release time as well as before it
    "double": [("t2", "03T23", "insert"), ("t5", "12T01", "insert")],
    # a record that phase 1 rejects, its verdict read in the ranking window too
    "unknown op": [("t4", "04T23", "upsert")],
}
REASONS = {"plain": [], "reinserted": [], "double": ["double_insert"] * 2,
           "unknown op": ["unknown_op"]}


@pytest.mark.parametrize("until", ["2025-01-20T00:00:00Z", "2025-01-05T00:00:00Z"])
@pytest.mark.parametrize("case", sorted(EXTRA))
# (a time in microseconds: the run reads the times' extent from the file's statistics)
@pytest.mark.parametrize("micros", [False, True])
def test_a_parquet_run_checks_its_histories_in_the_ranking_window(
    tmp_path: Path, case: str, until: str, micros: bool, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    import dpcr.changelog._load as load_module

    log = _log(EXTRA[case])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_jsonl(tmp_path / "a" / "log.jsonl", log)
    expected = _release(tmp_path / "a", 'format = "jsonl"\npath = "log.jsonl"', until, capsys)
    write_jsonl(tmp_path / "b" / "src.jsonl", log)
    path = tmp_path / "b" / "log.parquet"
    duckdb.sql(
        f"COPY (SELECT entry, {'epoch_us(ts)' if micros else 'ts'} AS ts, op, before, after FROM "
        f"read_json('{tmp_path / 'b' / 'src.jsonl'}', "
        "columns={entry: 'VARCHAR', ts: 'TIMESTAMPTZ', op: 'VARCHAR', "
        "before: 'STRUCT(fare DOUBLE)', after: 'STRUCT(fare DOUBLE)'})) "
        f"TO '{path}' (FORMAT parquet)"
    )
    loads: list[str] = []
    real = load_module.load

    def spy(*args: Any, **kwargs: Any) -> Any:
        if "load_and_aggregate" in [f.name for f in traceback.extract_stack()]:
            loads.append(kwargs.get("liveness", "check"))  # (not the report's exact series)
        return real(*args, **kwargs)

    times: list[str | None] = []
    real_times = load_module.typed_times

    def spy_times(*args: Any) -> str | None:
        times.append(real_times(*args))
        return times[-1]

    monkeypatch.setattr(load_module, "typed_times", spy_times)
    monkeypatch.setattr(load_module, "load", spy)
    monkeypatch.setattr("dpcr.changelog.load", spy)
    unit = '\nepoch_unit = "us"' if micros else ""
    got = _release(tmp_path / "b", f'format = "parquet"\npath = "log.parquet"{unit}', until,
                   capsys)  # fmt: skip
    assert got == expected
    # the run's one load, the checks left to the ranking window; a second with the checks
    # when a history is not plain or a record is rejected
    assert loads == (["defer"] if case == "plain" else ["defer", "check"])
    assert [reason for _, reason in got[1]] == REASONS[case]
    assert (times[0] is not None) == micros  # (the first load: a view of the time column)
