"""A session over a wal2json changelog written by a live capture (``dpcr follow`` on PostgreSQL):
at every step the file already holds records of the next interval (committed after the interval
the step releases), which the state keeps pending. Steps from memory hold those records and
release what the SQL steps release, byte for byte with the same seed, and leave the same state
file (table ``pending`` included) whenever they write it; a process that continues from that
state releases the same, and a session killed with steps not written is rebuilt to the same."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import dpcr.engines.duckdb_memory as memory

from .memory_helpers import steps_taken as _steps_taken
from .test_memory_step import _COMPARED, _state
from .test_memory_wal2json import DAY_S, T0_S, _day, _killed, _Log, _release, _row, _stamp

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


def _steps(seed: int, *, shuffled: bool = False) -> list[list[str]]:
    """The lines appended before each step (step d releases day d): the rest of day d's
    transactions and the first of day d + 1's (pending at step d; at step 5 all of day 6's,
    so that step 6 reads no new line); at step 4 one transaction of day 6 too (pending for
    two steps). ``shuffled``: at each step none, some or all of day d + 1's, and at some
    a transaction of day d + 2 (whose changes may meet the next day's: then that step runs
    in SQL)."""
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
        # (at step 5 all of day 6: step 6 reads nothing new and settles what it holds)
        early = {5: len(times[5]), 6: 0}.get(step, rng.randint(1, 3))
        if shuffled:
            early = rng.choice([0, 1, 3, len(times[step])])
        for day, upto in ((step, len(times[step - 1])), (step + 1, early)):
            for t in times[day - 1][done[day - 1]:upto]:
                lines += _transaction(log, _stamp(t, rng.choice([0, 0, 330, -480])), rng)
            done[day - 1] = max(done[day - 1], upto)
        if shuffled and rng.random() < 0.4:
            lines += _transaction(log, _stamp(times[step + 1][0] - 1), rng)
        elif step == 4 and not shuffled:  # (a new entry's insert: no change meets it)
            ts, where = _stamp(times[5][0] - 1), {"schema": "public", "table": "t"}
            log.serial += 1
            lines += [log.message("B", ts), log.message("I", ts, **where, columns=_row(
                f"late-{log.serial}", {"v": 3})), log.message("C", ts)]  # fmt: skip
        out.append(lines)
    return out


def _steps_of(tmp: Path, steps: list[list[str]], *, fast: bool, first: int, last: int,
              monkeypatch: pytest.MonkeyPatch, states: bool = False,
              make: Any = _release) -> list[Any]:  # fmt: skip
    """Steps ``first`` .. ``last`` in one session, then closed: per step the rows,
    diagnostics, public files, whether it ran from memory and (``states``) the state file.
    ``make(tmp, k)``: the release."""
    release = make(tmp, 2)
    real = memory.HeldState.step
    taken = _steps_taken(monkeypatch, fast=fast)
    out = []
    try:
        with release.session() as session:
            for day in range(first, last + 1):
                rows, diagnostics = _day(session, tmp, steps[day - 1], day)
                public = {name: (tmp / "out" / name).read_bytes() for name in _COMPARED}
                out.append([rows, diagnostics, public, taken[-1] if taken else None,
                            _state_now(release, tmp / f"copy{day}") if states else None])
    finally:
        monkeypatch.setattr(memory.HeldState, "step", real)
    out.append(_state(release))
    return out


def fast_and_sql(tmp_path: Path, steps: list[list[str]], monkeypatch: pytest.MonkeyPatch, *,
                 last: int, states: bool = False, make: Any = _release) -> dict[bool, Any]:
    """:func:`_steps_of` of steps 1 .. ``last`` in a session from memory (key True, in the
    folder ``True``) and in one of SQL steps (False)."""
    got = {}
    for fast in (True, False):
        tmp = tmp_path / str(fast)
        tmp.mkdir()
        (tmp / "log.jsonl").write_bytes(b"")
        got[fast] = _steps_of(tmp, steps, fast=fast, first=1, last=last,
                              monkeypatch=monkeypatch, states=states, make=make)  # fmt: skip
    return got


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
    got = fast_and_sql(tmp_path, steps, monkeypatch, last=STEPS - 1, states=write_steps == 1)
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


@pytest.mark.parametrize("seed", [10, 11, 12, 13])
def test_live_steps_of_any_shape_from_memory_equal_sql_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """As above, with any share of the next interval's records present at each step, steps
    that read nothing new, and records held pending for two steps that may meet later ones
    (then the step runs in SQL, from the state file written with what the session held)."""
    monkeypatch.setattr(memory, "WRITE_STEPS", 1 + seed % 2)
    steps = _steps(seed, shuffled=True)
    got = fast_and_sql(tmp_path, steps, monkeypatch, last=STEPS)
    fast, sql = got[True], got[False]
    for day, (a, b) in enumerate(zip(fast[:-1], sql[:-1], strict=True), start=1):
        assert a[:3] == b[:3], day
    assert fast[-1] == sql[-1]
    assert sum(bool(a[3]) for a in fast[:-1]) >= STEPS // 2


def _after(tmp: Path, steps: list[list[str]], stop: int, *, killed: bool,
           monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:  # fmt: skip
    """Steps 1 .. ``stop`` in a session ``killed`` after them (else closed), then the others
    in a new one: their rows, diagnostics and public files, and the state it leaves (but
    the counts of settles and of the numbers the dictionary used: a state rebuilt from the
    whole source numbers its texts in one pass)."""
    tmp.mkdir()
    (tmp / "log.jsonl").write_bytes(b"")
    if killed:  # (none of the steps from memory written)
        assert _killed(tmp, steps, stop) == [-1, *range(1, stop)]
    else:
        _steps_of(tmp, steps, fast=True, first=1, last=stop, monkeypatch=monkeypatch)
    *rest, state = _steps_of(tmp, steps, fast=True, first=stop + 1, last=STEPS,
                             monkeypatch=monkeypatch)  # fmt: skip
    state["counters"] = [(k, v) for k, v in state["counters"]
                         if k not in ("version", "ids") and not k.startswith("rows:")]
    return [r[:3] for r in rest], state


@pytest.mark.parametrize("stop", [2, 5])
def test_a_killed_live_session_releases_what_one_never_killed_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: int
) -> None:
    """``dpcr follow`` killed after ``stop`` live steps, the last ``stop - 1`` from memory
    (records pending held) and not written: the next session (which rebuilds the state from
    the source) releases and leaves what a session that was never killed does."""
    steps = _steps(7)
    killed = _after(tmp_path / "killed", steps, stop, killed=True, monkeypatch=monkeypatch)
    never = _after(tmp_path / "never", steps, stop, killed=False, monkeypatch=monkeypatch)
    assert killed == never


def _replayed(tmp: Path, steps: list[list[str]], stop: int,
              monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, list[int]]:  # fmt: skip
    """Steps 1 .. ``stop`` in a session killed after them, then the others in a new one,
    which must replay the steps not written (no rebuild): as :func:`_after`, with the counts
    of the dictionary's numbers kept; and per killed step the steps it held not written."""
    import dpcr.engines.duckdb_replay as replayed
    from dpcr.engines import state as inc_state

    from .memory_helpers import noting

    tmp.mkdir()
    (tmp / "log.jsonl").write_bytes(b"")
    held = _killed(tmp, steps, stop)
    calls: list[bool] = []
    rebuilds: list[int] = []
    monkeypatch.setattr(replayed, "REPLAY_SHARE", 1.0)
    monkeypatch.setattr(replayed, "replay", noting(replayed.replay, calls, lambda got: got
                                                   is not None))  # fmt: skip
    monkeypatch.setattr(inc_state, "create_tables", noting(inc_state.create_tables, rebuilds,
                                                           lambda _: 1))  # fmt: skip
    *rest, state = _steps_of(tmp, steps, fast=True, first=stop + 1, last=STEPS,
                             monkeypatch=monkeypatch)  # fmt: skip
    # (a state behind the store is replayed, once, and never rebuilt)
    assert (calls, rebuilds) == ([True] if held[-1] > 0 else [], []), (held, calls, rebuilds)
    state["counters"] = [(k, v) for k, v in state["counters"]
                         if k != "version" and not k.startswith("rows:")]
    return [r[:3] for r in rest], state, held


def _numbers(tmp: Path) -> list[tuple[int, str]]:
    """The state's dictionary (its numbers and texts) in the folder ``tmp``."""
    import duckdb

    from dpcr.engines.state import SCHEMA

    path = next(tmp.glob("**/state.duckdb"))
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{path}' AS {SCHEMA} (READ_ONLY)")
        return sorted(con.execute(f"SELECT id, name FROM {SCHEMA}.names").fetchall())
    finally:
        con.close()


@pytest.mark.parametrize(("seed", "shuffled"), [(7, False), (13, True)])
def test_a_killed_live_session_is_replayed_at_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, shuffled: bool
) -> None:
    """``dpcr follow`` killed after each step in turn, the steps from memory since the last
    write (records pending held) not written: the next session replays the lines they read
    (no rebuild) and releases and leaves what a session that was never killed does, and
    what a session of SQL steps does."""
    steps = _steps(seed, shuffled=shuffled)
    got = fast_and_sql(tmp_path, steps, monkeypatch, last=STEPS)  # (sessions never killed)
    for fast in (True, False):
        got[fast][-1]["counters"] = [(k, v) for k, v in got[fast][-1]["counters"]
                                     if k != "version" and not k.startswith("rows:")]
    assert got[True][-1] == got[False][-1]
    replays = 0
    for stop in range(2, STEPS):
        killed, state, held = _replayed(tmp_path / f"killed{stop}", steps, stop, monkeypatch)
        replays += held[-1] > 0
        for fast in (True, False):
            assert killed == [r[:3] for r in got[fast][stop:-1]], (stop, fast)
            assert state == got[fast][-1], (stop, fast)
        # (and the dictionary numbers each text as the steps from memory did)
        assert _numbers(tmp_path / f"killed{stop}") == _numbers(tmp_path / "True"), stop
    assert replays >= (STEPS - 2 if not shuffled else 2)


def test_a_step_reading_only_lines_without_rows_counts_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that holds records pending and reads only lines without rows of the table (a
    transaction of another table) numbers the next records as the SQL step does: its
    lines count (the state written at every step equals the SQL steps')."""
    monkeypatch.setattr(memory, "WRITE_STEPS", 1)
    steps = _steps(0)
    ts = _stamp(T0_S + 6 * DAY_S - 30)  # (in day 6: step 6 holds day 6's records pending)
    lines = [{"action": "B", "xid": 9, "timestamp": ts, "lsn": "F/10"},
             {"action": "I", "xid": 9, "timestamp": ts, "lsn": "F/11", "schema": "public",
              "table": "other", "columns": [{"name": "k", "type": "integer", "value": 1}]},
             {"action": "C", "xid": 9, "timestamp": ts, "lsn": "F/12"}]  # fmt: skip
    assert steps[5] == []
    steps[5] = [json.dumps(line, separators=(",", ":")) for line in lines]
    got = fast_and_sql(tmp_path, steps, monkeypatch, last=STEPS, states=True)
    fast, sql = got[True], got[False]
    assert fast[5][3]  # (step 6 ran from memory)
    for day, (a, b) in enumerate(zip(fast[:-1], sql[:-1], strict=True), start=1):
        assert a[:3] == b[:3], day
        assert a[4] == b[4], day
    assert fast[-1] == sql[-1]
