"""Ctrl-C in any statement of a run: the run ends with the interrupt itself (never with an error
of the clean-up that follows it, which DuckDB refuses in the transaction the interrupt aborted),
and the next runs release what runs never interrupted release.

Each case interrupts the ``at``-th statement the run sends to its connection, in one of two
ways: inside DuckDB (Ctrl-C while the statement runs: DuckDB stops it with
``RuntimeError("Query interrupted")`` and aborts the open transaction) or in Python just before
it (``KeyboardInterrupt``, Ctrl-C between statements)."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

import dpcr
import dpcr.release._session as session_module
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
from engines.helpers import (
    CONSTRAINTS,
    DAY,
    GROUPED_QUERIES,
    OPEN_QUERIES,
    QUERIES,
    T0,
    generate,
)
from release.helpers import log_release


class _Counter:
    def __init__(self, at: int | None, how: str) -> None:
        self.at, self.how, self.n, self.fired = at, how, 0, False
        self.sql = ""  # (the statement interrupted)


class _Connection:
    """A connection (or cursor) whose statements are counted; the ``at``-th is interrupted."""

    def __init__(self, con: Any, counter: _Counter) -> None:
        self._con, self._counter = con, counter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def cursor(self) -> _Connection:
        return _Connection(self._con.cursor(), self._counter)

    def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        c = self._counter
        c.n += 1
        if c.n == c.at:
            c.fired, c.sql = True, " ".join(sql.split())[:80]
            if c.how == "python":
                raise KeyboardInterrupt
            _interrupt_inside(self._con)
        result = self._con.execute(sql, *args, **kwargs)
        return self if result is self._con else result


def _interrupt_inside(con: Any) -> None:
    """What Ctrl-C does to a statement DuckDB runs: the statement fails, which aborts an open
    transaction, and DuckDB raises ``RuntimeError("Query interrupted")``. (A real SIGINT is not
    always taken by DuckDB on a loaded machine: a failing statement aborts as it does.)"""
    with contextlib.suppress(duckdb.Error):
        con.execute("SELECT error('interrupted')")
    raise RuntimeError("Query interrupted")


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Counter]:
    """Every connection a run opens counts its statements in the yielded counter."""
    counter = _Counter(None, "duckdb")
    real = session_module.open_connection
    monkeypatch.setattr(session_module, "open_connection",
                        lambda *a, **k: _Connection(real(*a, **k), counter))  # fmt: skip
    yield counter


_PARTS = 3
_STOPPED = repr(RuntimeError("Query interrupted"))
_CACHES = ("out/store.sqlite.noise", "out/store.sqlite.intervals", "out/store.sqlite.state/quiet")


#: The releases run: counts, sums, histograms and events of entries, daily (the default of
#: :func:`log_release`); open histograms and grouped sums of owners, per-class constraints and
#: a tree.
_SCENARIOS: dict[str, dict[str, Any]] = {
    "counts": {},
    "open": {
        "queries": [*QUERIES[:2], *OPEN_QUERIES, *GROUPED_QUERIES],
        "constraint": CONSTRAINTS[5],
        "unit": "owner",
        "budget": dpcr.Budget(epsilon=1.0, delta=1e-6),
        "plan": dpcr.TreeRelease(start=format_timestamp(T0), period="1d",
                                 end=format_timestamp(T0 + 8 * DAY)),
    },
}  # fmt: skip


class _Runs:
    """Runs of one release in folder ``work``, over a log that grows before each: the reference
    runs (none interrupted), the folder kept after each, and the runs of a case."""

    def __init__(self, tmp: Path, counter: _Counter, scenario: str = "counts") -> None:
        lines = [x + "\n" for x in generate(3, unit_column=scenario == "open")]
        cuts = [0] + [len(lines) * (i + 1) // _PARTS for i in range(_PARTS)]
        self.parts = ["".join(lines[a:b]) for a, b in itertools.pairwise(cuts)]
        self.tmp, self.work, self.counter = tmp, tmp / "work", counter
        self.release = dataclasses.replace(log_release(self.work, on_error="quarantine"),
                                           **_SCENARIOS[scenario])  # fmt: skip
        self.work.mkdir()
        self.want: list[Any] = []
        self.sent: list[int] = []
        for i in range(_PARTS):
            self._append(i)
            self.counter.n = 0
            self.want.append(self._run(i))
            self.sent.append(self.counter.n)
            shutil.copytree(self.work, tmp / f"after{i}", symlinks=True)

    def _append(self, i: int) -> None:
        with (self.work / "log.jsonl").open("a", encoding="utf-8") as f:
            f.write(self.parts[i])

    def _run(self, i: int, session: Any = None) -> tuple[Any, dict[str, bytes], list[str]]:
        """Run ``i`` (a step of ``session``, else a run of its own): its released rows, its
        public files and the files of its folder."""
        until, rng = format_timestamp(T0 + DAY * (2 * i + 2)), simulation_randomness(11 + i)
        if session is not None:
            result = session.run(until=until, rng=rng)
        else:
            result = dataclasses.replace(self.release, until=until).run(rng=rng)
        public = self.work / "out" / "simulation"  # (a seeded run's public files)
        files = {p.name: p.read_bytes() for p in sorted(public.iterdir()) if p.is_file()}
        # (aside: the caches of calibrations, which a process writes once per store path; the
        # state's summary for a step with nothing new, which a run interrupted after its store
        # committed does not leave: the state is then a step behind, as after a crash, and the
        # next run reads the source to bring it forward)
        folder = [str(p.relative_to(self.work)) for p in self.work.rglob("*")]
        folder = sorted(f for f in folder if not f.startswith(_CACHES))
        return result.rows, files, folder

    def check(self, run: int, at: int, how: str, *, session: bool = False) -> str | None:
        """Run ``run`` interrupted in its ``at``-th statement (``how``), then again, then the
        next: what is wrong (None: the interrupt ended the run, and the runs after it released
        what the reference runs released and left the same files). With ``session``, these are
        steps of one session, which first runs the step before (a session holds what its steps
        read; its files are not compared)."""
        first = max(run - 1, 0) if session else run
        shutil.rmtree(self.work)
        if first:
            shutil.copytree(self.tmp / f"after{first - 1}", self.work, symlinks=True)
        else:
            self.work.mkdir()
        runner = self.release.session() if session else None
        try:
            return self._case(run, at, how, first, runner)
        finally:
            if runner is not None:
                runner.close()

    def _case(self, run: int, at: int, how: str, first: int, runner: Any) -> str | None:
        for i in range(first, run):
            self._append(i)
            self._run(i, runner)
        self._append(run)
        c = self.counter
        c.at, c.how, c.n, c.fired = at, how, 0, False
        try:
            self._run(run, runner)
            wrong = "the run went on past its interrupt" if c.fired else None
        except BaseException as exc:  # the interrupt itself, nothing in its place
            ok = c.fired and (isinstance(exc, KeyboardInterrupt) or repr(exc) == _STOPPED)
            wrong = None if ok else f"raised {exc!r:.300}"
        c.at = None
        for i in range(run, min(run + 2, _PARTS)):
            if i > run:
                self._append(i)
            got = self._run(i, runner)
            for k, what in enumerate(("released rows", "public files", "files left")):
                if got[k] != self.want[i][k] and wrong is None and not (runner and k == 2):
                    wrong = f"run {i}: {what} differ"
        return None if wrong is None else f"run {run}, statement {at} ({c.sql}): {wrong}"

    def sample(self, every: int) -> list[tuple[int, int]]:
        return [(run, at) for run, n in enumerate(self.sent) for at in range(1, n + 1, every)]


@pytest.mark.parametrize("how", ["duckdb", "python"])
def test_an_interrupt_in_some_statements(tmp_path: Path, counted: _Counter, how: str) -> None:
    """A sample of the statements of a first run and of the incremental runs after it."""
    runs = _Runs(tmp_path, counted)
    assert all(n > 10 for n in runs.sent), runs.sent
    wrong = [runs.check(run, at, how) for run, at in runs.sample(max(runs.sent) // 6 + 1)]
    assert not [w for w in wrong if w], "\n".join(w for w in wrong if w)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "how", "every", "session"),
    [("counts", "duckdb", 1, False), ("counts", "python", 3, False), ("open", "duckdb", 4, False),
     ("counts", "duckdb", 4, True)],
)  # fmt: skip
def test_an_interrupt_in_every_statement(
    tmp_path: Path, counted: _Counter, scenario: str, how: str, every: int, session: bool
) -> None:  # fmt: skip
    """Every statement (or every third or fourth) of a first run and of the incremental runs
    after it, each a run of its own or a step of a session."""
    runs = _Runs(tmp_path, counted, scenario)
    cases = runs.sample(every)
    wrong = [runs.check(run, at, how, session=session) for run, at in cases]
    assert not [w for w in wrong if w], "\n".join(w for w in wrong if w)
