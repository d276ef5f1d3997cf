"""What the tests of a session's steps from memory share: a session stepping through days of
lines, from memory or in SQL, and a spy noting what a function returned."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import dpcr
import dpcr.engines.duckdb_memory as memory
from dpcr.noise import simulation_randomness


def session_steps(
    release: dpcr.ContinualRelease, days: Sequence[Sequence[str]], *, fast: bool,
    until: Callable[[int], str], compared: Sequence[str], monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[Any], list[bool]]:
    """Each day's lines (day 1 first) appended to the release's source file, which is made
    empty first, and a step of one session of ``release`` run with the public clock at
    ``until(day)`` and the simulation seed 11. ``fast=False``: every step takes the SQL step.
    Per step: (rows, diagnostics without the quarantine file's path, the bytes of each file of
    ``compared`` in the output folder); per step, whether it ran from memory."""
    real = memory.HeldState.step
    taken = steps_taken(monkeypatch, fast=fast)
    out = []
    log, folder = release.source.path, release.output_dir
    log.write_bytes(b"")
    with release.session() as session:
        for day, lines in enumerate(days, start=1):
            with log.open("a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
            result = session.run(until=until(day), rng=simulation_randomness(11))
            diagnostics = json.loads(json.dumps(result.diagnostics, default=str))
            diagnostics["changelog"].pop("quarantine_file", None)
            public = {name: (folder / name).read_bytes() for name in compared}
            out.append((result.rows, diagnostics, public))
    monkeypatch.setattr(memory.HeldState, "step", real)
    return out, taken


def steps_taken(monkeypatch: pytest.MonkeyPatch, *, fast: bool) -> list[bool]:
    """Per step of a session from now on, whether it ran from memory (``fast`` false: none
    does, every step runs in SQL)."""
    taken: list[bool] = []
    real = memory.HeldState.step

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        got = real(self, *args, **kwargs) if fast else None
        taken.append(got is not None)
        return got

    monkeypatch.setattr(memory.HeldState, "step", step)
    return taken


def noting(
    real: Callable[..., Any], calls: list[Any], note: Callable[[Any], Any] = lambda got: got
) -> Callable[..., Any]:
    """``real``, which appends ``note(what it returned)`` to ``calls`` at each call (a replay
    spy: ``note=lambda got: got is not None``, whether it replayed)."""

    def spy(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        calls.append(note(got))
        return got

    return spy


def assert_same_steps(fast: Sequence[Any], sql: Sequence[Any], fast_state: dict[str, Any],
                      sql_state: dict[str, Any], steps: int) -> None:  # fmt: skip
    """The ``steps`` steps of two ways (per step rows, diagnostics, files) and the state each
    left are the same, told by step and by table."""
    assert len(fast) == len(sql) == steps
    for day, (a, b) in enumerate(zip(fast, sql, strict=True), start=1):
        assert a[0] == b[0], day
        assert a[1] == b[1], day
        assert a[2] == b[2], day
    for table in sql_state:
        assert fast_state[table] == sql_state[table], table
