"""A session over a wal2json changelog written by a live capture (``dpcr follow`` on PostgreSQL):
at every step the file already holds records of the next interval (committed after the interval
the step releases), which the state keeps pending. Steps from memory hold those records and
release what the SQL steps release, byte for byte with the same seed, and leave the same state
file (table ``pending`` included) whenever they write it; a process that continues from that
state releases the same, and a session killed with steps not written is rebuilt to the same."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dpcr.engines.duckdb_memory as memory
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp

from .test_memory_step import _COMPARED, _state
from .test_memory_wal2json import DAY_S, T0_S, _Log, _release, _row, _stamp

STEPS = 9

#: Values of a column no query reads, in the forms a row after may hold them (DuckDB writes
#: the row after's JSON text of each: what table ``pending`` keeps).
_OTHER = [1.50, 1e2, -0.0, 12345678901234567890, "é \"q\" \\ \u2603", {"a": [1, None]}, True,
          None, "", 0.1]  # fmt: skip


def _transaction(log: _Log, ts: str, rng: random.Random) -> list[str]:
    lines = [log.message("B", ts)]
    for _ in range(rng.randint(1, 3)):
        line = json.loads(log.change(ts))
        if line.get("columns") and rng.random() < 0.5:
            line["columns"].append({"name": "o", "type": "text", "value": rng.choice(_OTHER)})
        lines.append(json.dumps(line, separators=(",", ":"), ensure_ascii=rng.random() < 0.5))
    if rng.random() < 0.2:
        lines.append(log.message("I", ts, schema="public", table="other",
                                 columns=[{"name": "k", "value": 1}]))  # fmt: skip
    lines.append(log.message("C", ts))
    return lines


def _steps(seed: int) -> list[list[str]]:
    """The lines appended before each step (step d releases day d): the rest of day d's
    transactions and the first of day d + 1's (pending at step d); at step 4 one
    transaction of day 6 too (pending for two steps)."""
    rng = random.Random(seed)
    log = _Log(rng)
    times = [sorted(T0_S + (day - 1) * DAY_S + rng.random() * (DAY_S - 60)
                    for _ in range(rng.randint(6, 14)))
             for day in range(1, STEPS + 3)]  # fmt: skip
    snapshot = []
    for _ in range(20):
        log.serial += 1
        entry = log.serial if log.serial % 3 else f"e-{log.serial}"
        log.live[entry] = {"v": rng.randint(0, 12)}
        snapshot.append(json.dumps({"action": "I", "lsn": "0/FFFFFF", "timestamp":
                                    _stamp(T0_S - 5), "schema": "public", "table": "t",
                                    "columns": _row(entry, log.live[entry])}))  # fmt: skip
    done = [0] * len(times)  # (the transactions of each day appended)
    out = []
    for step in range(1, STEPS + 1):
        lines = snapshot if step == 1 else []
        early = rng.randint(1, 3)
        for day, upto in ((step, len(times[step - 1])), (step + 1, early)):
            for t in times[day - 1][done[day - 1]:upto]:
                lines += _transaction(log, _stamp(t, rng.choice([0, 0, 330, -480])), rng)
            done[day - 1] = max(done[day - 1], upto)
        if step == 4:  # (a new entry's insert: no change of the next day's meets it)
            ts, where = _stamp(times[5][0] - 1), {"schema": "public", "table": "t"}
            log.serial += 1
            lines += [log.message("B", ts), log.message("I", ts, **where, columns=_row(
                f"late-{log.serial}", {"v": 3})), log.message("C", ts)]  # fmt: skip
        out.append(lines)
    return out


def _steps_of(tmp: Path, steps: list[list[str]], *, fast: bool, first: int, last: int,
              monkeypatch: pytest.MonkeyPatch, states: bool = False) -> list[Any]:  # fmt: skip
    """Steps ``first`` .. ``last`` in one session, then closed: per step the rows,
    diagnostics, public files, whether it ran from memory and (``states``) the state file."""
    release = _release(tmp, 2)
    real = memory.HeldState.step
    taken: list[bool] = []

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        got = real(self, *args, **kwargs) if fast else None
        taken.append(got is not None)
        return got

    monkeypatch.setattr(memory.HeldState, "step", step)
    out = []
    try:
        with release.session() as session:
            for day in range(first, last + 1):
                with (tmp / "log.jsonl").open("a", encoding="utf-8") as f:
                    f.write("".join(line + "\n" for line in steps[day - 1]))
                result = session.run(until=format_timestamp((T0_S + day * DAY_S) * 10**6),
                                     rng=simulation_randomness(11))  # fmt: skip
                diagnostics = json.loads(json.dumps(result.diagnostics, default=str))
                diagnostics["changelog"].pop("quarantine_file", None)
                diagnostics.pop("timing", None)
                public = {name: (tmp / "out" / name).read_bytes() for name in _COMPARED}
                out.append([result.rows, diagnostics, public, taken[-1] if taken else None,
                            _state_now(release, tmp / f"copy{day}") if states else None])
    finally:
        monkeypatch.setattr(memory.HeldState, "step", real)
    out.append(_state(release))
    return out


def _state_now(release: Any, copy: Path) -> dict[str, Any]:
    """:func:`_state` of a copy of the state folder (which the session keeps attached)."""
    import shutil
    import types

    state = release.store_path.with_name(release.store_path.name + ".state")
    shutil.copytree(state, copy / state.name)
    return _state(types.SimpleNamespace(store_path=copy / release.store_path.name))


@pytest.mark.parametrize(("seed", "write_steps"), [(0, 1), (1, 1), (2, 128), (3, 3)])
def test_live_steps_from_memory_equal_sql_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, write_steps: int
) -> None:
    """Every step holds records of the next interval: from memory (the state written every
    ``write_steps`` steps and at the close) it releases and leaves what the SQL steps do;
    then a process continues from each state in SQL and releases the same."""
    monkeypatch.setattr(memory, "WRITE_STEPS", write_steps)
    steps = _steps(seed)
    got = {}
    for fast in (True, False):
        tmp = tmp_path / str(fast)
        tmp.mkdir()
        (tmp / "log.jsonl").write_bytes(b"")
        got[fast] = _steps_of(tmp, steps, fast=fast, first=1, last=STEPS - 1,
                              monkeypatch=monkeypatch, states=write_steps == 1)  # fmt: skip
    fast, sql = got[True], got[False]
    for day, (a, b) in enumerate(zip(fast[:-1], sql[:-1], strict=True), start=1):
        assert a[:3] == b[:3], day
        if write_steps == 1 and a[3]:  # (a step from memory wrote the state)
            for table in b[4]:
                assert a[4][table] == b[4][table], (day, table)
    for table in sql[-1]:
        assert fast[-1][table] == sql[-1][table], table
    assert any(p for p in fast[-1]["pending"])  # (the state keeps records pending)
    # from memory: every step after the first (the first reads the whole file in SQL)
    assert [a[3] for a in fast[:-1]] == [False, *[True] * (STEPS - 2)]
    # a new process continues in SQL from each state and releases the same
    after = {fast: _steps_of(tmp_path / str(fast), steps, fast=False, first=STEPS,
                             last=STEPS, monkeypatch=monkeypatch) for fast in (True, False)}
    assert after[True][0][:3] == after[False][0][:3]
    assert after[True][-1] == after[False][-1]


#: A session over the live steps that dies without closing anything (as ``kill -9`` would)
#: after ``stop`` steps, the last ones settled in memory only (its records pending held).
_DIES = """
import json, os, sys
from pathlib import Path
sys.path[:0] = {paths!r}
from release import test_memory_live as live
from release import test_memory_wal2json as w
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
tmp = Path({tmp!r})
session = w._release(tmp, 2).session()
steps = json.loads((tmp / "steps.json").read_text())
for day, lines in enumerate(steps[:{stop}], start=1):
    with (tmp / "log.jsonl").open("a", encoding="utf-8") as f:
        f.write("".join(line + "\\n" for line in lines))
    session.run(until=format_timestamp((w.T0_S + day * w.DAY_S) * 10**6),
                rng=simulation_randomness(11))
    held = session.held._held
    print(len(held.pending) if held is not None else -1, flush=True)
os._exit(0)
"""


@pytest.mark.parametrize("stop", [2, 5])
def test_a_killed_live_session_releases_what_one_never_killed_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: int
) -> None:
    """``dpcr follow`` killed after ``stop`` live steps, the last ``stop - 1`` from memory
    (records pending held) and not written: the next session releases and leaves what a
    session that was never killed does."""
    steps = _steps(7)
    results = {}
    for name in ("killed", "never"):
        tmp = tmp_path / name
        tmp.mkdir()
        (tmp / "log.jsonl").write_bytes(b"")
        if name == "never":
            _steps_of(tmp, steps, fast=True, first=1, last=stop, monkeypatch=monkeypatch)
        else:
            here = Path(__file__).resolve().parent
            (tmp / "steps.json").write_text(json.dumps(steps))
            code = _DIES.format(paths=[str(here.parent), *sys.path], tmp=str(tmp), stop=stop)
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                  text=True, timeout=300, check=False)  # fmt: skip
            assert proc.returncode == 0, proc.stderr[-2000:]
            assert [int(x) for x in proc.stdout.split()] == [-1, *range(1, stop)]
        rest = _steps_of(tmp, steps, fast=True, first=stop + 1, last=STEPS,
                         monkeypatch=monkeypatch)  # fmt: skip
        state = rest[-1]
        # (but the counts of settles and of the numbers the dictionary used: a state rebuilt
        # from the whole source numbers its texts in one pass)
        state["counters"] = [(k, v) for k, v in state["counters"]
                             if k not in ("version", "ids") and not k.startswith("rows:")]
        results[name] = ([r[:3] for r in rest[:-1]], state)
    assert results["killed"] == results["never"]
