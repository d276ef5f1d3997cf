"""A run without a session (``dpcr run`` from cron) steps from memory with the seeds of the
units its new lines touch (:mod:`dpcr.engines.duckdb_partial`): its releases, diagnostics,
public and quarantine files and the state file it leaves are those of the SQL step, run after
run, over random changelogs of every shape a session's step takes (text, small and large
integer entries), with days of records it refuses in between (bad lines, quarantined, late and
pending records, sequence numbers, repeated keys), which the SQL step reads; and a run killed
after its store committed, before its state file was written, is caught up by the next."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dpcr.engines.duckdb_incremental as inc
import dpcr.engines.duckdb_partial as partial
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
from release import test_memory_step as steps
from release.memory_helpers import assert_same_steps
from release.test_memory_step import _COMPARED, DAY, DAYS, T0, _days, _release, _state


def _entries(days: list[list[str]], scale: int | None) -> list[list[str]]:
    """``days`` with every entry of the random histories an integer (``n * scale`` for the
    entry ``n`` or ``"e-n"``; None: as they are). The lines of refused records stay."""
    if scale is None:
        return days
    out = []
    for lines in days:
        day = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                day.append(line)
                continue
            entry = record.get("entry") if isinstance(record, dict) else None
            if isinstance(entry, int) or (isinstance(entry, str) and entry.startswith("e-")):
                record["entry"] = int(str(entry).removeprefix("e-")) * scale
                line = json.dumps(record, separators=(",", ":"))
            day.append(line)
        out.append(day)
    return out


def _runs(tmp: Path, days: list[list[str]], *, fast: bool, k: int,
          monkeypatch: pytest.MonkeyPatch,
          share: float = 1.0) -> tuple[list[Any], dict[str, Any], int]:  # fmt: skip
    """Each day's lines appended and one run (no session) with the public clock at its end:
    per run the rows, diagnostics and compared files; the state at the end; the runs that
    stepped from memory (``fast`` false: none does; ``share``: the largest share of the file
    they read, every day's by default)."""
    tmp.mkdir()
    release = _release(tmp, k)
    taken: list[bool] = []
    real = inc.partial_step

    def step(*args: Any) -> Any:
        got = real(*args) if fast else None
        taken.append(got is not None)
        return got

    monkeypatch.setattr(inc, "partial_step", step)
    monkeypatch.setattr(partial, "REPLAY_SHARE", share)
    out = _append_and_run(release, days, 1)
    monkeypatch.setattr(inc, "partial_step", real)
    return out, _state(release), sum(taken)


def _append_and_run(release: Any, days: list[list[str]], first: int) -> list[Any]:
    """Day ``first`` on: its lines appended to the release's source (made empty before day
    1) and one run; per run its rows, diagnostics and compared files."""
    log, folder = release.source.path, release.output_dir
    if first == 1:
        log.write_bytes(b"")
    out = []
    for day, lines in enumerate(days[first - 1:], start=first):
        with log.open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
        run = dataclasses.replace(release, until=format_timestamp(T0 + day * DAY))
        result = run.run(rng=simulation_randomness(11))
        diagnostics = json.loads(json.dumps(result.diagnostics, default=str))
        diagnostics["changelog"].pop("quarantine_file", None)
        out.append((result.rows, diagnostics,
                    {name: (folder / name).read_bytes() for name in _COMPARED}))  # fmt: skip
    return out


@pytest.mark.parametrize(("seed", "k", "scale"), [
    (0, 3, None), (1, 2, 1), (2, 50, 10**7), (4, 1, 1),
])  # fmt: skip
def test_runs_from_memory_equal_sql_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         seed: int, k: int, scale: int | None) -> None:  # fmt: skip
    days = _entries(_days(seed), scale)
    fast, fast_state, taken = _runs(tmp_path / "fast", days, fast=True, k=k,
                                    monkeypatch=monkeypatch)  # fmt: skip
    sql, sql_state, _ = _runs(tmp_path / "sql", days, fast=False, k=k, monkeypatch=monkeypatch)
    assert_same_steps(fast, sql, fast_state, sql_state, DAYS)
    # from memory: the days a session's steps take (every day but the first, those with a
    # refused record and the day after the pending record; none after a sequence number,
    # which freezes its entry): days 2, 4, 6, 9, 11, 12 and 14
    assert taken == 7, taken


def test_a_rewrite_of_the_seeds_counts_the_keys_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of plain days, whose table seeds doubles and is rewritten by runs from memory:
    the keys it then holds are the state file's, not the touched units' alone."""
    monkeypatch.setattr(steps, "ODD", {})
    days = _days(6)[:10]
    counted: list[int] = []
    real = partial._known_keys

    def known(con: Any) -> int:
        counted.append(real(con))
        return counted[-1]

    monkeypatch.setattr(partial, "_known_keys", known)
    fast, fast_state, taken = _runs(tmp_path / "fast", days, fast=True, k=2,
                                    monkeypatch=monkeypatch)  # fmt: skip
    sql, sql_state, _ = _runs(tmp_path / "sql", days, fast=False, k=2, monkeypatch=monkeypatch)
    assert taken == len(days) - 1
    assert counted  # (at least one run from memory rewrote the table)
    assert_same_steps(fast, sql, fast_state, sql_state, len(days))


def test_a_large_share_of_new_lines_runs_in_sql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New lines beyond a quarter of the file (days 2 and 3 of days of about equal size) are
    read by the SQL step; the later days from memory."""
    monkeypatch.setattr(steps, "ODD", {})
    days = _days(8)[:8]
    sizes = [len("".join(line + "\n" for line in day)) for day in days]
    shares = [sizes[i] / sum(sizes[:i + 1]) for i in range(1, len(days))]
    limit = partial.REPLAY_SHARE
    fast, fast_state, taken = _runs(tmp_path / "fast", days, fast=True, k=2,
                                    monkeypatch=monkeypatch, share=limit)  # fmt: skip
    sql, sql_state, _ = _runs(tmp_path / "sql", days, fast=False, k=2, monkeypatch=monkeypatch)
    assert taken == sum(share <= limit for share in shares) < len(days) - 1
    assert_same_steps(fast, sql, fast_state, sql_state, len(days))


#: A run that dies once its store has committed, inside the write of its state file, before
#: that write commits (as ``kill -9`` would); ``fast`` false: a SQL run.
_DIES = """
import dataclasses, os, sys
sys.path[:0] = {paths!r}
import dpcr.engines.duckdb_incremental as inc
import dpcr.engines.state as state
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
from release.test_memory_step import DAY, T0, _release
from pathlib import Path

if not {fast}:
    inc.partial_step = lambda *args: None
state.write_head = lambda *a, **k: os._exit(9)
release = dataclasses.replace(_release(Path({tmp!r}), 3),
                              until=format_timestamp(T0 + {day} * DAY))
release.run(rng=simulation_randomness(11))
"""


def _killed(tmp: Path, days: list[list[str]], stop: int, fast: bool) -> tuple[list[Any], Any]:
    """Runs of ``days`` in ``tmp``, the run of day ``stop`` killed inside its state file's
    write (``fast``: a run from memory, else a SQL run; the others from memory): the
    others' rows, diagnostics and files, and the state at the end."""
    tmp.mkdir()
    release = _release(tmp, 3)
    before = _append_and_run(release, days[:stop - 1], 1)
    with release.source.path.open("a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in days[stop - 1]))
    paths = [str(Path(__file__).resolve().parents[1]), *sys.path]
    code = _DIES.format(paths=paths, tmp=str(tmp), day=stop, fast=fast)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 9, proc.stderr
    return before + _append_and_run(release, days, stop + 1), _state(release)


def test_a_run_killed_before_its_state_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run from memory killed after the store committed, before the state file's write
    committed: the next runs release what runs never killed release, and leave the state a
    SQL run killed the same way leaves."""
    monkeypatch.setattr(steps, "ODD", {})
    days = _days(7)[:6]
    stop = 4
    sql, _, _ = _runs(tmp_path / "sql", days, fast=False, k=3, monkeypatch=monkeypatch)
    fast, fast_state = _killed(tmp_path / "fast", days, stop, True)
    slow, slow_state = _killed(tmp_path / "slow", days, stop, False)
    assert fast == slow == sql[:stop - 1] + sql[stop:]
    assert fast_state == slow_state
