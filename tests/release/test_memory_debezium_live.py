"""A session over a Debezium changelog written by a live capture (``dpcr follow`` over Kafka): at
every step the file already holds changes of the next interval, which the state keeps pending.
Steps from memory hold those records, as they hold wal2json's, and release what the SQL steps
release, byte for byte with the same seed, and leave the same state file (table ``pending``,
with the texts of the rows after, included) whenever they write it; a session killed with steps
not written is replayed to the same."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import dpcr.engines.duckdb_memory as memory

from .memory_helpers import noting
from .test_memory_debezium import DAY_S, T0_S, _Log, _release
from .test_memory_live import _steps_of as live_steps_of
from .test_memory_live import fast_and_sql
from .test_memory_wal2json import _killed

STEPS = 8

#: Values of a column no query reads, in the forms a row after may hold them (the SQL step
#: keeps the JSON text DuckDB's staging gives the row after in table ``pending``).
_OTHER = [1.50, 1e2, -0.0, 12345678901234567890, "é \"q\" \\ \u2603", True, None, "", 0.1,
          2.675, -7]  # fmt: skip


def _change(log: _Log, ms: int, rng: random.Random) -> list[str]:
    """One change of the connector's, a column no query reads added to some rows after."""
    out = []
    for line in log.change(ms):
        value = json.loads(line)
        env = value.get("payload") if isinstance(value, dict) and "payload" in value else value
        if isinstance(env, dict) and env.get("after") and rng.random() < 0.5:
            env["after"]["o"] = rng.choice(_OTHER)
            line = json.dumps(value, separators=(",", ":"), ensure_ascii=rng.random() < 0.5)
        out.append(line)
    return out


def _steps(seed: int, *, shuffled: bool = False) -> list[list[str]]:
    """The lines appended before each step (step d releases day d): the rest of day d's changes
    and the first of day d + 1's (pending at step d; at step 4 all of day 5's, so that step 5
    reads no new line). ``shuffled``: at each step none, some or all of day d + 1's."""
    rng = random.Random(seed)
    log = _Log(rng, 2**53 - 6_000 if seed % 2 else 0x1000000)
    times = [sorted(T0_S + (day - 1) * DAY_S + rng.random() * (DAY_S - 60)
                    for _ in range(rng.randint(6, 14)))
             for day in range(1, STEPS + 3)]  # fmt: skip
    snapshot = []
    for _ in range(20):
        entry = log.inserted()
        snapshot.append(log.line("r", (T0_S - 5) * 1000, None, {"id": entry, **log.live[entry]}))
    done = [0] * len(times)
    out = []
    for step in range(1, STEPS + 1):
        lines = snapshot if step == 1 else []
        early = {4: len(times[4]), 5: 0}.get(step, rng.randint(1, 3))
        if shuffled:
            early = rng.choice([0, 1, 3, len(times[step])])
        for day, upto in ((step, len(times[step - 1])), (step + 1, early)):
            for t in times[day - 1][done[day - 1]:upto]:
                lines += _change(log, int(t * 1000), rng)
            done[day - 1] = max(done[day - 1], upto)
        out.append(lines)
    return out


def _steps_of(tmp: Path, steps: list[list[str]], **kwargs: Any) -> list[Any]:
    """``test_memory_live._steps_of`` of the Debezium release."""
    return live_steps_of(tmp, steps, make=_release, **kwargs)


@pytest.mark.parametrize(("seed", "shuffled"), [(0, False), (1, False), (2, True), (3, True)])
def test_live_debezium_steps_from_memory_equal_sql_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, shuffled: bool
) -> None:
    """Every step holds records of the next interval: from memory (the state written at every
    step) it releases and leaves what the SQL steps do."""
    monkeypatch.setattr(memory, "WRITE_STEPS", 1)
    steps = _steps(seed, shuffled=shuffled)
    got = fast_and_sql(tmp_path, steps, monkeypatch, last=STEPS, states=True, make=_release)
    fast, sql = got[True], got[False]
    for day, (a, b) in enumerate(zip(fast[:-1], sql[:-1], strict=True), start=1):
        assert a[:3] == b[:3], day
        for table in b[4]:
            assert a[4][table] == b[4][table], (day, table)
    assert fast[-1] == sql[-1]
    assert any(a[4]["pending"] for a in fast[:-1])  # (the state keeps records pending)
    taken = [a[3] for a in fast[:-1]]
    assert taken[0] is False and sum(taken) >= (STEPS - 1 if not shuffled else STEPS // 2), taken


def test_a_killed_debezium_follower_holding_pending_records_is_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after each step in turn with the steps from memory not written: the next
    session replays them (no rebuild) and releases and leaves what SQL steps do."""
    import dpcr.engines.duckdb_replay as replayed
    from dpcr.engines import state as inc_state

    steps = _steps(5)
    sql_dir = tmp_path / "sql"
    sql_dir.mkdir()
    (sql_dir / "log.jsonl").write_bytes(b"")
    sql = _steps_of(sql_dir, steps, fast=False, first=1, last=STEPS, monkeypatch=monkeypatch)
    monkeypatch.setattr(replayed, "REPLAY_SHARE", 1.0)
    for stop in range(2, STEPS):
        tmp = tmp_path / f"killed{stop}"
        tmp.mkdir()
        (tmp / "log.jsonl").write_bytes(b"")
        held = _killed(tmp, steps, stop, __name__)
        assert held == [-1, *range(1, stop)], held
        calls: list[bool] = []
        rebuilds: list[int] = []
        with monkeypatch.context() as m:
            m.setattr(replayed, "replay", noting(replayed.replay, calls,
                                                 lambda got: got is not None))  # fmt: skip
            m.setattr(inc_state, "create_tables", noting(inc_state.create_tables, rebuilds,
                                                         lambda _: 1))  # fmt: skip
            *rest, state = _steps_of(tmp, steps, fast=True, first=stop + 1, last=STEPS,
                                     monkeypatch=monkeypatch)  # fmt: skip
        assert (calls, rebuilds) == ([True], []), stop
        assert [r[:3] for r in rest] == [r[:3] for r in sql[stop:-1]], stop
        for table in sql[-1]:
            if table == "counters":
                continue
            assert state[table] == sql[-1][table], (stop, table)
        assert [c for c in state["counters"] if c[0] != "version" and not c[0].startswith(
            "rows:")] == [c for c in sql[-1]["counters"] if c[0] != "version"
                          and not c[0].startswith("rows:")], stop  # fmt: skip


def _texts(tmp: Path, lines: list[str]) -> list[tuple[Any, Any]]:
    """Per line, the texts of the row after and of the record that staging ``lines`` (a file
    of them) gives: what table ``pending`` keeps of each (``duckdb_held._staged``)."""
    import types

    import duckdb

    from dpcr import sources
    from dpcr.engines.duckdb_held import _staged

    con = duckdb.connect()
    try:
        later = types.SimpleNamespace(source=sources.Debezium(path=tmp / "x.jsonl", key="id"),
                                      scratch=tmp)  # fmt: skip
        return _staged(con, later, [line.encode() for line in lines])  # type: ignore[arg-type]
    finally:
        con.close()


def _befores(tmp: Path, data: bytes) -> dict[int, bool]:
    """Per record of the lines ``data`` that is no tombstone, whether it gave a row before, as
    the stage gives it (the SQL step's ``has_before``: its row before not null)."""
    import duckdb

    from dpcr import sources
    from dpcr.changelog import stage

    path = tmp / "chunk.jsonl"
    path.write_bytes(data)
    con = duckdb.connect()
    try:
        staged = stage(sources.Debezium(path=path, key="id"), con, "_chunk", None, [],
                       digests=False, scratch=tmp)  # fmt: skip
        return dict(con.execute(f"SELECT record, before IS NOT NULL FROM {staged.table} "
                                "WHERE NOT tombstone").fetchall())  # fmt: skip
    finally:
        con.close()


@pytest.mark.parametrize("seed", range(2))
def test_a_record_staged_alone_gives_the_texts_its_chunk_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Chunks of random Debezium lines that the reader from memory takes: each line's texts
    (row after, record) and whether it gave a row before are the same staged alone (as the
    pending records of a step from memory are, when written) as staged in its chunk (as the
    SQL step stages the lines it reads), by DuckDB's reader of JSON lines and by the
    line-by-line path alike (which the stage takes when the reader refuses a chunk)."""
    import dpcr.changelog._stage_debezium as stage_debezium
    from dpcr.engines import _debezium

    from .test_memory_debezium import _fuzz_line

    rng = random.Random(seed)
    taken = 0
    for trial in range(80):
        lines = []
        for i in range(rng.randint(1, 6)):
            line = _fuzz_line(rng, 10 * trial + i)
            value = json.loads(line)
            env = value.get("payload") if isinstance(value, dict) and "payload" in value \
                else value  # fmt: skip
            if isinstance(env, dict) and isinstance(env.get("after"), dict) and rng.random() < .6:
                env["after"]["o"] = rng.choice(_OTHER)
                line = json.dumps(value, separators=(",", ":"), ensure_ascii=rng.random() < 0.5)
            lines.append(line)
        data = "".join(line + "\n" for line in lines).encode()
        got = _debezium.read(data, key="id", columns=("v",))
        if got is None or not len(got.ts):
            continue
        taken += 1
        whole = _texts(tmp_path, lines)
        alone = [_texts(tmp_path, [line])[0] for line in lines]
        befores = _befores(tmp_path, data)
        with monkeypatch.context() as m:  # (the line-by-line path)
            m.setattr(stage_debezium, "fast_records", lambda *a, **k: None)
            by_line = _texts(tmp_path, lines)
            befores_by_line = _befores(tmp_path, data)
        assert whole == alone == by_line, lines
        assert got.has_before is not None
        mine = dict(zip(got.line.tolist(), got.has_before.tolist(), strict=True))
        assert befores == befores_by_line == {r: mine[r] for r in befores}, lines
    assert taken >= 12, taken
