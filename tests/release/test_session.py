"""A release session (one connection, the incremental state attached, one calibration) gives
the releases of separate runs; it leaves no temporary tables behind and recovers from a run
that raised. Its tail reads cover the complete lines a file held when the read started, so a
writer appending meanwhile (a live capture) neither forces a second read nor splits a line."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import dpcr
import dpcr.changelog.position as position
import dpcr.release._loop as loop
from dpcr.changelog.position import complete_lines, parse_token
from dpcr.noise import simulation_randomness
from dpcr.store import Store
from dpcr.timeutil import format_timestamp
from engines.helpers import DAY, T0, generate
from release.helpers import log_release


def _release(tmp: Path) -> Any:
    return log_release(tmp, on_error="quarantine")


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def _steps(tmp: Path, lines: list[str], session: bool) -> list[Any]:
    tmp.mkdir()
    release = _release(tmp)
    cuts = [len(lines) * i // 4 for i in range(1, 5)]
    out = []
    runner = release.session() if session else None
    for i, cut in enumerate(cuts):
        _append(tmp / "log.jsonl", "".join(x + "\n" for x in lines[cuts[i - 1] if i else 0 : cut]))
        until = format_timestamp(T0 + DAY * (2 * i + 1))
        rng = simulation_randomness(7)
        if runner is not None:
            result = runner.run(until=until, rng=rng)
        else:
            result = dataclasses.replace(release, until=until).run(rng=rng)
        changelog = dict(result.diagnostics["changelog"])
        changelog.pop("quarantine_file", None)
        out.append((result.rows, changelog, result.diagnostics["bounding"]))
    if runner is not None:
        con = runner._con  # the session's connection: no temporary objects left by the runs
        assert con is not None
        tables = con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary")
        assert tables.fetchone() == (0,)
        assert con.execute(
            "SELECT count(*) FROM duckdb_views() WHERE temporary AND NOT internal"
        ).fetchone() == (0,)
        runner.close()
    return out


@pytest.mark.parametrize("seed", [0, 3])
def test_session_equals_separate_runs(tmp_path: Path, seed: int) -> None:
    lines = generate(seed, unit_column=False)
    a = _steps(tmp_path / "session", lines, True)
    b = _steps(tmp_path / "runs", lines, False)
    assert a == b
    assert any(r[0] for r in a)  # something was released


def test_session_recovers_after_a_failed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = generate(1, unit_column=False)
    (tmp_path / "log.jsonl").write_text("".join(x + "\n" for x in lines))
    release = _release(tmp_path)
    real = loop.load_and_aggregate
    calls = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "load_and_aggregate", failing)
    with release.session() as session:
        with pytest.raises(OSError, match="disk went away"):
            session.run(until=format_timestamp(T0 + 3 * DAY), rng=simulation_randomness(1))
        assert session._con is None  # closed; the next run opens a fresh one
        result = session.run(until=format_timestamp(T0 + 3 * DAY), rng=simulation_randomness(1))
    expected = dataclasses.replace(_release(tmp_path / "x"), source=release.source,
                                   until=format_timestamp(T0 + 3 * DAY))  # fmt: skip
    assert result.rows == expected.run(rng=simulation_randomness(1)).rows


def test_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"")
    assert complete_lines(path, 0) == 0
    path.write_bytes(b"abc")
    assert complete_lines(path, 3) == 0
    body = b"x" * 100_000 + b"\n" + b"y" * 200_000  # the line feed is far before the end
    path.write_bytes(body)
    assert complete_lines(path, len(body)) == 100_001
    assert complete_lines(path, 100_001) == 100_001
    assert complete_lines(path, 100_000) == 0


def test_tail_read_while_a_writer_appends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer is in the middle of a line when a step starts and appends more while it
    reads: the step covers the complete lines only (one read) and the next step reads the rest,
    so the releases equal those of steps over files that only ever held complete lines."""
    lines = generate(2, unit_column=False)
    half = len(lines) // 2
    clocks = [format_timestamp(T0 + DAY * d) for d in (1, 2, 9)]

    def steps(tmp: Path, writer: bool) -> list[Any]:
        tmp.mkdir()
        log = tmp / "log.jsonl"
        release = _release(tmp)
        out = []
        with release.session() as session:
            _append(log, "".join(x + "\n" for x in lines[:half]))
            out.append(session.run(until=clocks[0], rng=simulation_randomness(3)))
            _append(log, "".join(x + "\n" for x in lines[half : half + 5]))
            if writer:
                partial = lines[half + 5][: len(lines[half + 5]) // 2]
                complete = log.stat().st_size
                _append(log, partial)
                tails = []

                def tail(path: Path, start: int, end: int, **kw: Any) -> Any:
                    tails.append(end)
                    assert kw["directory"] == tmp / "out" / "operator" / "scratch"
                    _append(log, lines[half + 5][len(partial) :] + "\n")  # finishes the line
                    return real_tail(path, start, end, **kw)

                real_tail = position.copy_range
                monkeypatch.setattr(position, "copy_range", tail)
                out.append(session.run(until=clocks[1], rng=simulation_randomness(3)))
                monkeypatch.setattr(position, "copy_range", real_tail)
                assert tails == [complete]  # one read, of the complete lines
                with Store(release.store_path, fingerprint=release.fingerprint(),
                           mode="simulation") as store:  # fmt: skip
                    token = parse_token(store.source_state().digest)
                assert token is not None and token.size == complete
                _append(log, "".join(x + "\n" for x in lines[half + 6 :]))
            else:
                out.append(session.run(until=clocks[1], rng=simulation_randomness(3)))
                _append(log, "".join(x + "\n" for x in lines[half + 5 :]))
            out.append(session.run(until=clocks[2], rng=simulation_randomness(3)))
        return [(r.rows, _plain(r.diagnostics)) for r in out]

    assert steps(tmp_path / "writer", True) == steps(tmp_path / "still", False)


def _plain(diagnostics: dict[str, Any]) -> dict[str, Any]:
    changelog = dict(diagnostics["changelog"])
    changelog.pop("quarantine_file", None)
    return {**diagnostics, "changelog": changelog}


def test_tail_read_of_a_file_at_rest_without_a_final_line_feed(tmp_path: Path) -> None:
    lines = generate(4, unit_column=False)
    log = tmp_path / "log.jsonl"
    release = _release(tmp_path)
    with release.session() as session:
        _append(log, "".join(x + "\n" for x in lines[:-3]))
        session.run(until=format_timestamp(T0 + DAY), rng=simulation_randomness(3))
        _append(log, "\n".join(lines[-3:]))  # no line feed after the last record
        got = session.run(until=format_timestamp(T0 + 9 * DAY), rng=simulation_randomness(3))
    other = tmp_path / "whole"
    other.mkdir()
    (other / "log.jsonl").write_bytes(log.read_bytes())
    until = format_timestamp(T0 + 9 * DAY)
    whole = dataclasses.replace(_release(other), until=until).run(rng=simulation_randomness(3))
    assert got.diagnostics["changelog"]["records"] == whole.diagnostics["changelog"]["records"]
    assert got.diagnostics["changelog"]["valid"] == whole.diagnostics["changelog"]["valid"]


@pytest.mark.parametrize("plan", ["disjoint", "tree"])
def test_warmed_intervals_are_the_published_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: str
) -> None:
    """A run computes its rows' intervals from the plan and the calibration while its data step
    runs; they are the very intervals the published rows take: afterwards nothing is left to
    compute."""
    import dpcr.release._uncertainty as uncertainty
    from dpcr.release._calibrate import calibrate
    from dpcr.release._loop import stored_result
    from dpcr.release._rows import intervals_cache, warm_intervals

    (tmp_path / "log.jsonl").write_text(
        "".join(x + "\n" for x in generate(5, unit_column=False))
    )
    release = _release(tmp_path)
    if plan == "tree":
        release = dataclasses.replace(
            release, plan=dpcr.TreeRelease(start=format_timestamp(T0), period="1d", branching=3)
        )
    release = dataclasses.replace(release, until=format_timestamp(T0 + 9 * DAY))
    uncertainty._CACHE.clear()  # (the cache file records what is new to the process)
    first = release.run(rng=simulation_randomness(1))
    intervals_cache(release).unlink()
    uncertainty._CACHE.clear()
    warm_intervals(release, calibrate(release).layers, 9)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an interval was not warmed")

    monkeypatch.setattr(uncertainty, "half_width", refuse)
    monkeypatch.setattr(uncertainty, "half_widths_iid", refuse)
    uncertainty._CACHE.clear()  # from the cache file alone
    again = stored_result(release, simulation=True)
    assert again.rows == first.rows


def test_the_state_lives_in_an_owner_only_folder(tmp_path: Path) -> None:
    """DuckDB writes the state's log with the default mode: the folder keeps it operator-only;
    a state file an older dpcr kept beside the store is deleted (rebuilt in the folder)."""
    from dpcr.release._outputs import state_path

    (tmp_path / "log.jsonl").write_text("".join(x + "\n" for x in generate(6, unit_column=False)))
    release = _release(tmp_path)
    release.store_path.parent.mkdir(parents=True)
    legacy = release.store_path.with_name(release.store_path.name + ".state.duckdb")
    legacy.write_bytes(b"old")
    with release.session() as session:
        session.run(until=format_timestamp(T0 + 3 * DAY), rng=simulation_randomness(1))
        state = state_path(release)
        assert state.exists() and state.stat().st_mode & 0o777 == 0o600
        assert state.parent.stat().st_mode & 0o777 == 0o700
        assert not legacy.exists()


#: A session that runs two steps and dies without closing anything (as ``kill -9`` would:
#: no DuckDB checkpoint, no detach), printing the state's write-ahead log size after each.
_DIES = """
import os, sys
from pathlib import Path
sys.path[:0] = {paths!r}
from test_session import _cuts_and_untils, _release
from dpcr.noise import simulation_randomness
from dpcr.release._outputs import state_path
tmp = Path({tmp!r})
release = _release(tmp)
session = release.session()
for text, until in _cuts_and_untils(tmp)[:2]:
    with (tmp / "log.jsonl").open("a", encoding="utf-8") as f:
        f.write(text)
    session.run(until=until, rng=simulation_randomness(7))
    wal = state_path(release).with_name("state.duckdb.wal")
    print(wal.stat().st_size if wal.exists() else 0, flush=True)
os._exit(0)
"""


def _cuts_and_untils(tmp: Path) -> list[tuple[str, str]]:
    """The four steps of :func:`_steps` over seed 0's log: (the text appended, the clock)."""
    lines = generate(0, unit_column=False)
    cuts = [0] + [len(lines) * i // 4 for i in range(1, 5)]
    return [("".join(x + "\n" for x in lines[cuts[i] : cuts[i + 1]]),
             format_timestamp(T0 + DAY * (2 * i + 1))) for i in range(4)]  # fmt: skip


def test_a_session_step_does_not_checkpoint_and_a_killed_session_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's step commits the state without checkpointing it (the commit lives in the
    state's write-ahead log, which grows); a session killed after its steps leaves a state the
    next run resumes from (no rebuild), releasing what separate runs release."""
    import subprocess
    import sys

    import dpcr.engines.state as inc_state

    here = str(Path(__file__).resolve().parent)
    paths = [here, str(Path(here).parent), *sys.path]
    code = _DIES.format(paths=paths, tmp=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    sizes = [int(x) for x in proc.stdout.split()]
    assert len(sizes) == 2 and 0 < sizes[0] < sizes[1]  # the log grew: no checkpoint per step
    created = []
    real = inc_state.create_tables
    monkeypatch.setattr(inc_state, "create_tables",
                        lambda *a, **k: (created.append(1), real(*a, **k))[1])  # fmt: skip
    release = _release(tmp_path)
    steps = _cuts_and_untils(tmp_path)
    rows = []
    for text, until in steps[2:]:  # the next runs, each a run of its own
        _append(tmp_path / "log.jsonl", text)
        result = dataclasses.replace(release, until=until).run(rng=simulation_randomness(7))
        rows.append(result.rows)
    assert not created  # the state the killed session committed was resumed, not rebuilt
    separate = [r[0] for r in _steps(tmp_path / "runs", generate(0, unit_column=False), False)]
    assert rows == separate[2:]


class _Recorder:
    """A connection that records the SQL of every statement it runs (else the connection)."""

    def __init__(self, con: Any, sql: list[str]) -> None:
        self._con, self._sql = con, sql

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        self._sql.append(" ".join(sql.split()))
        result = self._con.execute(sql, *args, **kwargs)
        return self if result is self._con else result


def test_a_resumed_step_neither_checkpoints_nor_asks_whether_the_state_has_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a session's step need not ask: once a settle has appended seeds (its counters say
    so), the state is not scanned for whether it holds any, and no step checkpoints the state
    (DuckDB does, at its threshold and when the state closes)."""
    from contextlib import contextmanager

    import dpcr.release._session as session_module

    sql: list[str] = []
    real = session_module.Session.connection

    @contextmanager
    def recording(self: Any) -> Any:
        with real(self) as con:
            yield _Recorder(con, sql)

    monkeypatch.setattr(session_module.Session, "connection", recording)
    release = _release(tmp_path)
    with release.session() as session:
        for i, (text, until) in enumerate(_cuts_and_untils(tmp_path)[:3]):
            _append(tmp_path / "log.jsonl", text)
            if i == 2:
                sql.clear()  # (the third step: its state has seeds)
            session.run(until=until, rng=simulation_randomness(7))
    assert any("INSERT INTO dpcr_state.seeds" in s for s in sql)  # the step settled seeds
    assert not [s for s in sql if "NOT EXISTS (SELECT 1 FROM dpcr_state.seeds)" in s]
    assert not [s for s in sql if s.upper().startswith("CHECKPOINT")]


def test_a_session_computes_the_next_rows_intervals_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's run computes the intervals of the rows after its own with them (they depend
    on the plan alone): its next runs compute none, and publish the rows separate runs do."""
    import dpcr.release._uncertainty as uncertainty
    from dpcr.release._session import INTERVALS_AHEAD

    lines = generate(2, unit_column=False)
    (tmp_path / "log.jsonl").write_text("".join(x + "\n" for x in lines))
    release = _release(tmp_path)
    calls: list[int] = []
    found = uncertainty.group_half_widths

    def counted(groups: Any, **kwargs: Any) -> Any:
        calls.append(groups.rows)
        return found(groups, **kwargs)

    monkeypatch.setattr(uncertainty, "group_half_widths", counted)
    uncertainty._CACHE.clear()
    with release.session() as session:
        first = session.run(until=format_timestamp(T0 + DAY), rng=simulation_randomness(3))
        assert calls and sum(calls) >= INTERVALS_AHEAD  # (rows 1 .. 65, each query)
        del calls[:]
        later = [session.run(until=format_timestamp(T0 + DAY * d), rng=simulation_randomness(3))
                 for d in range(2, 6)]  # fmt: skip
        assert calls == []
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "log.jsonl").write_text("".join(x + "\n" for x in lines))
    again = dataclasses.replace(_release(alone), until=format_timestamp(T0 + DAY * 5))
    uncertainty._CACHE.clear()
    assert again.run(rng=simulation_randomness(3)).rows == later[-1].rows
    assert first.rows == later[-1].rows[: len(first.rows)]


def test_a_session_checks_the_consumed_bytes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's later steps read of the consumed bytes only their last, partial block (its
    first step re-hashed them all): no full block in turn (docs/changelog.md)."""
    log = tmp_path / "log.jsonl"
    release = dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=log), constraint=dpcr.AtMostK(k=2),
        plan=dpcr.DisjointRelease(start=format_timestamp(T0), period="1d"),
        queries=[dpcr.Count(name="n")], budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp_path / "out",
    )  # fmt: skip

    def day(d: int, n: int) -> str:
        return "".join(
            f'{{"entry":"{d}-{i}","ts":{T0 + (d - 1) * DAY + i},"op":"insert","after":{{}}}}\n'
            for i in range(n)
        )

    _append(log, day(1, 18_000))  # (a full block and a partial one)
    assert log.stat().st_size > position.BLOCK
    dataclasses.replace(release, until=format_timestamp(T0 + DAY)).run(
        rng=simulation_randomness(1))  # fmt: skip
    read: list[int] = []
    real = open

    class Counting:
        def __init__(self, f: Any) -> None:
            self.f = f

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def read(self, n: int = -1) -> bytes:
            data = self.f.read(n)
            read.append(len(data))
            return bytes(data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.f, name)

    monkeypatch.setattr(position, "open", lambda *a: Counting(real(*a)), raising=False)
    with release.session() as session:
        consumed = log.stat().st_size
        _append(log, day(2, 50))
        session.run(until=format_timestamp(T0 + 2 * DAY), rng=simulation_randomness(1))
        assert sum(read) >= consumed  # the session's first step: every consumed byte
        del read[:]
        new = log.stat().st_size
        _append(log, day(3, 50))
        session.run(until=format_timestamp(T0 + 3 * DAY), rng=simulation_randomness(1))
        # the partial block, the new bytes (hashed, read), a line end's byte, the search for
        # the last line end: no full block
        added = log.stat().st_size - new
        assert 0 < sum(read) <= new % position.BLOCK + 2 * added + 1 + (1 << 16)


def test_a_run_between_two_steps_and_an_edit_are_seen(tmp_path: Path) -> None:
    """The session keeps its store's connection between steps, its lock only during a step
    (dpcr.store._kept): between two steps another process may open the store, and a commit of
    another connection makes the next step open it afresh (releasing as separate runs do); a
    released value edited between two steps is refused as an opening refuses it."""
    import sqlite3

    from dpcr.errors import StoreError

    lines = generate(0, unit_column=False)
    cuts = [len(lines) * i // 3 for i in range(1, 4)]
    untils = [format_timestamp(T0 + DAY * (2 * i + 1)) for i in range(3)]

    def chunk(i: int) -> str:
        return "".join(x + "\n" for x in lines[cuts[i - 1] if i else 0 : cuts[i]])

    (tmp_path / "a").mkdir()
    release = _release(tmp_path / "a")
    with release.session() as session:
        _append(tmp_path / "a" / "log.jsonl", chunk(0))
        session.run(until=untils[0], rng=simulation_randomness(7))
        _append(tmp_path / "a" / "log.jsonl", chunk(1))
        with Store(release.store_path, fingerprint=release.fingerprint(), mode="simulation"):
            pass  # (the lock is free between steps)
        with sqlite3.connect(release.store_path) as con:  # (a commit that changes nothing)
            con.execute("UPDATE meta SET value = value WHERE key = 'mode'")
        session.run(until=untils[1], rng=simulation_randomness(7))
        _append(tmp_path / "a" / "log.jsonl", chunk(2))
        got = session.run(until=untils[2], rng=simulation_randomness(7))
    (tmp_path / "b").mkdir()
    other = _release(tmp_path / "b")
    for i in range(3):
        _append(tmp_path / "b" / "log.jsonl", chunk(i))
        want = dataclasses.replace(other, until=untils[i]).run(rng=simulation_randomness(7))
    assert got.rows == want.rows

    with release.session() as session:
        session.run(until=untils[2], rng=simulation_randomness(7))
        with sqlite3.connect(release.store_path) as con:
            con.execute("UPDATE released SET value = value + 1 WHERE idx = 2")
        with pytest.raises(StoreError, match="edited"):
            session.run(until=format_timestamp(T0 + DAY * 9), rng=simulation_randomness(7))


def test_a_session_stepped_in_other_threads_closes_in_this_one(tmp_path: Path) -> None:
    """``dpcr follow`` runs its steps in a worker thread and closes its session from the main
    thread: the store the session keeps between steps is used by one thread at a time, each
    step's thread another one, and the steps release what separate runs release."""
    import threading

    lines = generate(3, unit_column=False)
    cuts = [len(lines) * i // 3 for i in range(1, 4)]
    untils = [format_timestamp(T0 + DAY * (2 * i + 1)) for i in range(3)]
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    release, other = _release(tmp_path / "a"), _release(tmp_path / "b")
    got: list[Any] = []
    session = release.session()
    with session:
        for i in range(3):
            text = "".join(x + "\n" for x in lines[cuts[i - 1] if i else 0 : cuts[i]])
            _append(tmp_path / "a" / "log.jsonl", text)
            step = threading.Thread(target=lambda u=untils[i]: got.append(
                session.run(until=u, rng=simulation_randomness(7))))  # fmt: skip
            step.start()
            step.join()
            assert len(got) == i + 1  # (a step that raised appends nothing)
    for i in range(3):
        _append(tmp_path / "b" / "log.jsonl", "".join(
            x + "\n" for x in lines[cuts[i - 1] if i else 0 : cuts[i]]))  # fmt: skip
        want = dataclasses.replace(other, until=untils[i]).run(rng=simulation_randomness(7))
        assert got[i].rows == want.rows
