"""A session writes the steps it settles from memory to the state file in batches
(:meth:`dpcr.engines.duckdb_memory.HeldState.settled`): whatever the batch, the releases and the
state file are those of SQL steps; a session killed with steps not yet written, or whose run
failed, leaves a state that the next run brings level with the store, releasing what runs that
never failed release."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

import dpcr.engines.duckdb_memory as memory
import dpcr.engines.incremental as incremental
import dpcr.engines.memory_batch as reading
import dpcr.release._loop as loop
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
from release import test_memory_step as steps
from release.memory_helpers import noting
from release.test_memory_step import DAY, T0, _release, _year

#: Days of plain records only: every step after the first runs from memory.
PLAIN_DAYS = 12


def _plain_days(seed: int, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    monkeypatch.setattr(steps, "ODD", {})
    monkeypatch.setattr(steps, "DAYS", PLAIN_DAYS)
    return steps._days(seed)


def _as_sql_steps(tmp: Path, days: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The state of a session's year over ``days`` (in ``tmp/fast``), asserted to be, with its
    releases, that of SQL steps (in ``tmp/sql``), every step but the first from memory."""
    fast, fast_state, taken = _year(tmp / "fast", days, fast=True, k=2,
                                    monkeypatch=monkeypatch)  # fmt: skip
    sql, sql_state, _ = _year(tmp / "sql", days, fast=False, k=2, monkeypatch=monkeypatch)
    assert taken == PLAIN_DAYS - 1
    assert fast == sql
    assert fast_state == sql_state
    return fast_state


@pytest.mark.parametrize("every", [1, 2, 5])
def test_batched_writes_leave_the_state_of_sql_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    days = _plain_days(3, monkeypatch)
    written: list[int] = []
    real = memory.write_held

    def counting(con: Any, held: Any) -> None:
        written.append(len(held.pending))
        real(con, held)

    monkeypatch.setattr(memory, "write_held", counting)
    monkeypatch.setattr(memory, "WRITE_STEPS", every)
    fast_state = _as_sql_steps(tmp_path, days, monkeypatch)
    # every step but the first settled from memory, written in batches of `every` (the
    # last one when the session closed)
    assert sum(written) == PLAIN_DAYS - 1 and max(written) == every
    assert fast_state["counters"] and any(  # the seed tables were rewritten meanwhile
        k.startswith("rows:") for k, _ in fast_state["counters"]
    )


@pytest.mark.parametrize("every", [3, 5])
def test_a_write_rewrites_table_seeds_from_the_held_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    """A write whose steps rewrite table seeds makes it of the seeds the session holds (no
    read of the table), leaving every row of it as SQL steps do."""
    days = _plain_days(3, monkeypatch)
    monkeypatch.setattr(memory, "WRITE_STEPS", every)
    writing, held_rewrites, sql_rewrites = [False], [], []
    real_write, real_rewrite = memory.write_held, incremental.rewrite_seeds

    def write(con: Any, held: Any) -> None:
        held_rewrites.append(sum(p.newest is not None for p in held.pending))
        writing[0] = True
        try:
            real_write(con, held)
        finally:
            writing[0] = False

    def rewrite(con: Any) -> int:
        sql_rewrites.append(writing[0])
        return real_rewrite(con)

    monkeypatch.setattr(memory, "write_held", write)
    monkeypatch.setattr(incremental, "rewrite_seeds", rewrite)
    _as_sql_steps(tmp_path, days, monkeypatch)
    assert _seed_rows(tmp_path / "fast") == _seed_rows(tmp_path / "sql")
    assert sum(held_rewrites) >= 1  # (rewritten from the held seeds: no window over the table)
    assert True not in sql_rewrites


def _seed_rows(tmp: Path) -> list[Any]:
    """Every row of the state file's table seeds (older versions too), ids by their texts."""
    store = _release(tmp, 2).store_path
    con = duckdb.connect()
    con.execute(f"ATTACH '{store.with_name(store.name + '.state') / 'state.duckdb'}' AS st "
                "(READ_ONLY)")  # fmt: skip
    rows = con.execute(
        "SELECT coalesce(nu.name, x.u::VARCHAR), coalesce(ne.name, x.e::VARCHAR), "
        "x.* EXCLUDE (u, e) FROM st.seeds x LEFT JOIN st.names nu ON nu.id = x.u "
        "LEFT JOIN st.names ne ON ne.id = x.e"
    ).fetchall()
    con.close()
    return sorted(rows, key=repr)


#: A session over the plain days that dies without closing anything (as ``kill -9`` would)
#: after ``stop`` steps, the last ones settled in memory only.
_DIES = """
import os, sys
from pathlib import Path
sys.path[:0] = {paths!r}
from release import test_memory_step as steps
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
tmp = Path({tmp!r})
release = steps._release(tmp, 2)
session = release.session()
for day, lines in enumerate({days!r}[:{stop}], start=1):
    with (tmp / "log.jsonl").open("a", encoding="utf-8") as f:
        f.write("".join(line + "\\n" for line in lines))
    session.run(until=format_timestamp(steps.T0 + day * steps.DAY),
                rng=simulation_randomness(11))
    held = session.held._held
    print(len(held.pending) if held is not None else -1, flush=True)
os._exit(0)
"""


def _runs(tmp: Path, days: list[list[str]], first: int) -> list[Any]:
    """Runs of their own (``dpcr run``) releasing days ``first`` .. the last."""
    release = _release(tmp, 2)
    out = []
    for day in range(first, len(days) + 1):
        with (tmp / "log.jsonl").open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in days[day - 1]))
        run = dataclasses.replace(release, until=format_timestamp(T0 + day * DAY))
        result = run.run(rng=simulation_randomness(11))
        out.append((result.rows, json.loads(json.dumps(result.diagnostics, default=str))))
    return out


def _plain(results: list[Any]) -> list[Any]:
    for _, diagnostics in results:
        diagnostics["changelog"].pop("quarantine_file", None)
        diagnostics.pop("timing", None)
    return results


def test_a_killed_session_with_steps_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    days = _plain_days(4, monkeypatch)
    stop = 7
    here = Path(__file__).resolve().parent
    paths = [str(here.parent), *sys.path]
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "log.jsonl").write_bytes(b"")
    code = _DIES.format(paths=paths, tmp=str(killed), days=days, stop=stop)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    # (the first step reads the whole file in SQL; none of the next ones was written)
    assert [int(x) for x in proc.stdout.split()] == [-1, *range(1, stop)]
    after = _runs(killed, days, stop + 1)
    never = tmp_path / "never"
    never.mkdir()
    (never / "log.jsonl").write_bytes(b"")
    whole = _runs(never, days, 1)
    assert _plain(after) == _plain(whole[stop:])
    assert any(rows for rows, _ in after)


def _killed(tmp: Path, days: list[list[str]], stop: int) -> None:
    """A session over ``days`` in ``tmp`` killed after ``stop`` steps (none but the first
    written to the state file)."""
    here = Path(__file__).resolve().parent
    tmp.mkdir()
    (tmp / "log.jsonl").write_bytes(b"")
    code = _DIES.format(paths=[str(here.parent), *sys.path], tmp=str(tmp), days=days, stop=stop)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [int(x) for x in proc.stdout.split()] == [-1, *range(1, stop)]


def _session(tmp: Path, days: list[list[str]], first: int, last: int) -> tuple[Any, Any]:
    """A session releasing days ``first`` .. ``last``, then closed: per step its rows and
    diagnostics, and the state file it leaves without what counts settles (the seed version,
    the seed rows kept)."""
    release = _release(tmp, 2)
    out = []
    with release.session() as session:
        for day in range(first, last + 1):
            with (tmp / "log.jsonl").open("a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in days[day - 1]))
            result = session.run(until=format_timestamp(T0 + day * DAY),
                                 rng=simulation_randomness(11))  # fmt: skip
            out.append((result.rows, json.loads(json.dumps(result.diagnostics, default=str))))
    state = steps._state(release)
    state["counters"] = [(k, v) for k, v in state["counters"]
                         if k != "version" and not k.startswith("rows:")]  # fmt: skip
    return _plain(out), state


@pytest.mark.parametrize("stop", [2, 7])
def test_a_killed_session_is_replayed_not_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: int
) -> None:
    """A session killed after ``stop`` steps, ``stop - 1`` of them from memory and not
    written: the next session brings the state to the store's head by one replay of the lines
    those steps read (no read of the whole source), and its state and releases, after its
    first step and after the rest, are those of a session that was never killed and of a next
    session that rebuilds the state."""
    import dpcr.engines.duckdb_replay as replayed
    from dpcr.engines import state as inc_state

    days = _plain_days(4, monkeypatch)
    calls: list[bool] = []
    rebuilds: list[int] = []
    spy = noting(replayed.replay, calls, lambda got: got is not None)
    create = noting(inc_state.create_tables, rebuilds, lambda _: 1)

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise duckdb.IOException("the disk is full")

    results = {}
    # ("share": the lost lines are more than REPLAY_SHARE of the file, which is rebuilt;
    # "failed": the replay's write fails, and the step rebuilds the state)
    for name in ("replayed", "rebuilt", "never", "share", "failed"):
        tmp = tmp_path / name
        if name == "never":
            tmp.mkdir()
            (tmp / "log.jsonl").write_bytes(b"")
            _session(tmp, days, 1, stop)
        else:
            _killed(tmp, days, stop)
        monkeypatch.setattr(replayed, "replay", {"rebuilt": lambda *a, **k: None,
                                                 "failed": fails}.get(name, spy))  # fmt: skip
        monkeypatch.setattr(replayed, "REPLAY_SHARE", 0.25 if name == "share" else 1.0)
        monkeypatch.setattr(inc_state, "create_tables", create)
        calls.clear()
        rebuilds.clear()
        first = _session(tmp, days, stop + 1, stop + 1)
        assert (calls, bool(rebuilds)) == {
            "replayed": ([True], False), "rebuilt": ([], True), "never": ([], False),
            "share": ([False], True), "failed": ([], True)}[name], name  # fmt: skip
        rebuilds.clear()
        rest = _session(tmp, days, stop + 2, len(days))
        assert not rebuilds
        results[name] = (first, rest)
    assert results["replayed"] == results["never"]
    # (a rebuild's dictionary counts an id for every unit text, integers included: 41 where
    # the steps count 23, the same names and seeds)
    for name in ("rebuilt", "share", "never", "failed"):
        for _, state in results[name]:
            state["counters"] = [(k, v) for k, v in state["counters"] if k != "ids"]
    assert results["rebuilt"] == results["share"] == results["never"] == results["failed"]
    assert any(rows for rows, _ in results["replayed"][1][0])


@pytest.mark.parametrize("where", ["unwritten", "written"])
def test_a_killed_session_whose_source_changed_is_not_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A byte changed after the kill, in the lines the lost steps read or in those the state
    holds: the replay writes nothing and the next step refuses the rewritten source."""
    import dpcr.engines.duckdb_replay as replayed
    from dpcr.errors import RewrittenError

    days = _plain_days(4, monkeypatch)
    tmp = tmp_path / "killed"
    _killed(tmp, days, 4)
    log = tmp / "log.jsonl"
    data = log.read_bytes()
    end = {"unwritten": len(data), "written": sum(len(line) + 1 for line in days[0])}[where]
    at = max(i for i in range(end) if data[i:i + 1].isdigit())  # (the day's last digit)
    log.write_bytes(data[:at] + (b"1" if data[at:at + 1] != b"1" else b"2") + data[at + 1:])
    calls: list[Any] = []
    monkeypatch.setattr(replayed, "replay", noting(replayed.replay, calls))
    monkeypatch.setattr(replayed, "REPLAY_SHARE", 1.0)
    with pytest.raises(RewrittenError):
        _session(tmp, days, 5, 5)
    assert calls == [None]


def test_a_session_step_that_fails_after_steps_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run fails after its commit with steps settled in memory only: they are written, the
    failed step's state is rebuilt by the next step, and the session goes on releasing what
    a session that never failed releases."""
    days = _plain_days(5, monkeypatch)
    fail_at = 6
    real = loop.publish

    def run(tmp: Path, fail: bool) -> list[Any]:
        tmp.mkdir()
        log = tmp / "log.jsonl"
        log.write_bytes(b"")
        out = []
        with _release(tmp, 2).session() as session:
            for day, lines in enumerate(days, start=1):
                with log.open("a", encoding="utf-8") as f:
                    f.write("".join(line + "\n" for line in lines))
                until = format_timestamp(T0 + day * DAY)
                if fail and day == fail_at:
                    def failing(*args: Any, **kwargs: Any) -> None:
                        raise OSError("disk went away")

                    monkeypatch.setattr(loop, "publish", failing)
                    with pytest.raises(OSError, match="disk went away"):
                        session.run(until=until, rng=simulation_randomness(11))
                    monkeypatch.setattr(loop, "publish", real)
                    continue
                out.append(session.run(until=until, rng=simulation_randomness(11)).rows)
        return out

    failed = run(tmp_path / "failed", True)
    never = run(tmp_path / "never", False)
    assert failed == never[: fail_at - 1] + never[fail_at:]


@pytest.mark.parametrize(
    ("line", "taken"),
    [
        ('{"entry":1,"ts":5,"op":"insert","after":{"v":1}}', True),
        ('{"entry":1,"ts":5,"op":"insert","after":{"v":1,"v":2}}', False),
        ('{"entry":1,"ts":5,"op":"insert","after":{"v" :1,"v":2}}', False),
        ('{"entry":1,"ts":5,"ts":6,"op":"insert","after":{"v":1}}', False),
        ('{"entry":1,"ts":5,"op":"insert","after":{"v":1,"w":{"a":1,"a":2}}}', False),
        ('{"entry":1,"ts":5,"op":"insert","after":{"v":1,"w":{"a":1,"b":2}}}', True),
        ('{"entry":"x\\":y","ts":5,"op":"insert","after":{"v":1,"w":":"}}', True),
        ('{"entry":"x","ts":5,"op":"insert","after":{"v":1,"w":[{"a":1,"a":1}]}}', False),
        ('{"entry":"x","ts":5,"op":"insert" ,"after":{"v":1 , "w":"a"}}', True),
    ],
)
def test_parse_refuses_every_repeated_key(line: str, taken: bool) -> None:
    """The step from memory takes no record with a repeated key, at any depth, however it is
    spaced (the SQL step reads such records as DuckDB's parser does)."""
    from dpcr.release._engine import engine_request

    request = engine_request(_release(Path("/nonexistent"), 2))
    data = (line + "\n" + '{"entry":2,"ts":6,"op":"insert","after":{"v":2}}\n').encode()
    if not taken:
        with pytest.raises(reading._Refused):
            memory.parse(data, request, 1)
        return
    batch = memory.parse(data, request, 1)
    assert batch.ts.tolist() == [5, 6]
    assert batch.f[1].tolist() == [1, 2]


@pytest.mark.parametrize(("plan", "limit"), [("disjoint", None), ("tree", None),
                                             ("disjoint", 7)])  # fmt: skip
def test_a_session_commits_the_head_of_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: str, limit: int | None
) -> None:
    """A session's commits hash the rows the store held at its last commit and the new ones
    (:data:`dpcr.store._heads.ROWS`; past ``ROW_LIMIT`` rows, every row read again): the head
    each records is that of every row read again."""
    import dpcr
    import dpcr.store._heads as heads
    from dpcr.store import Store
    from dpcr.store._heads import ROWS, file_key

    if limit is not None:
        monkeypatch.setattr(heads, "ROW_LIMIT", limit)

    days = _plain_days(6, monkeypatch)[:6]
    release = _release(tmp_path, 2)
    if plan == "tree":
        release = dataclasses.replace(release, plan=dpcr.TreeRelease(
            start=format_timestamp(T0), period="1d", branching=2))  # fmt: skip
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"")
    got = []
    with release.session() as session:
        for day, lines in enumerate(days, start=1):
            with log.open("a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
            session.run(until=format_timestamp(T0 + day * DAY), rng=simulation_randomness(11))
            with Store(release.store_path, fingerprint=release.fingerprint(),
                       mode="simulation") as store:  # fmt: skip
                got.append((store.recorded_head(), store.content_head()))
            kept = ROWS.get(file_key(release.store_path))
            assert (kept is None) == (limit is not None and 4 * day > limit)
            assert kept is None or kept[0] == got[-1][0]
    assert all(recorded == computed for recorded, computed in got)
    assert len({h for h, _ in got}) == len(days)
