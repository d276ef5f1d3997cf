"""A step whose source holds nothing past the store's position runs without an engine
(:mod:`dpcr.release._quiet`): against the step through the incremental state, over generated
changelogs (every quarantine reason, ties, records out of time order, moving updates) for
every constraint kind, unit mode, plan, query kind (open histograms and grouped sums among
them), ``on_error`` and ``on_exhausted``, run after run with the same simulation seeds, both
give the same bytes: released rows, diagnostics, quarantine file, the simulation's output
files and every store row (but the wall-clock times of a run). The path is taken where it
should be (a test that never takes it proves nothing), the state file it leaves behind is
brought forward by the next step that reads (no rebuild from the whole source), a tampered
source, quarantine file or summary falls back to the read, and such a step imports no DuckDB."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dpcr
import dpcr.release._loop as loop
import dpcr.release._quiet as quiet
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
from engines.helpers import (
    CONSTRAINTS,
    DAY,
    GROUPED_QUERIES,
    HOUR,
    OPEN_QUERIES,
    QUERIES,
    T0,
    generate,
)

#: (share of the generated lines in the file, days after T0 of the clock) of each step: steps
#: that add nothing close intervals (quiet), or none (a rerun), before and after steps that read.
STEPS = ((0.4, 1), (0.4, 2), (0.7, 4), (0.7, 5), (1.0, 7), (1.0, 8), (1.0, 9), (1.0, 9),
         (1.0, 11))  # fmt: skip
#: A step that would be quiet, every record long settled (tampered with before it).
QUIET = 5


def _release(tmp: Path, seed: int, **kw: Any) -> Any:
    c, unit_column, tree = seed % len(CONSTRAINTS), seed % 3 == 1, seed % 4 == 3
    kind = dpcr.TreeRelease if tree else dpcr.DisjointRelease
    plan = kind(start=format_timestamp(T0), period="1d", end=format_timestamp(T0 + 16 * DAY))
    # (open keys need a cap on each unit's mutations: not under a time bound alone)
    capped = c not in (2, 4)
    queries = list(QUERIES) + (list(OPEN_QUERIES + GROUPED_QUERIES) if capped and seed % 2 else [])
    args: dict[str, Any] = dict(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"), constraint=CONSTRAINTS[c],
        plan=plan, queries=queries, budget=dpcr.Budget(epsilon=1.0, delta=1e-6),
        output_dir=tmp / "out", unit="owner" if unit_column else "entry",
        on_error="quarantine" if seed % 5 else "raise",
    )  # fmt: skip
    return dpcr.ContinualRelease(**(args | kw))


def _lines(seed: int) -> list[str]:
    """The changelog of case ``seed``: generated with every quarantine reason, in shuffled
    file order (records dated after a step's clock wait in the state), or valid records in
    time order for a release that refuses a bad one."""
    rng = random.Random(seed)
    if seed % 5:
        lines = generate(seed, unit_column=seed % 3 == 1)
    else:
        lines = []
        for e in range(rng.randint(10, 20)):
            ts = sorted(rng.sample(range(0, 6 * DAY, HOUR), rng.randint(1, 5)))
            owner, before = f"u{rng.randint(0, 3)}", None
            for i, t in enumerate(ts):
                row = {"owner": owner, "status": "issued", "k": rng.choice("abcz"),
                       "kind": rng.choice(["short", "long"]),
                       "v": rng.choice([rng.randint(-6, 14), "x"])}  # fmt: skip
                op = "insert" if i == 0 else "update"
                if i and i == len(ts) - 1 and rng.random() < 0.3:
                    op = "delete"
                rec: dict[str, Any] = {"entry": f"e{e}", "ts": format_timestamp(T0 + t),
                                       "op": op, "before": before}  # fmt: skip
                rec |= {"after": None if op == "delete" else row}
                before = row
                lines.append(json.dumps(rec))
        return sorted(lines, key=lambda line: json.loads(line)["ts"])  # (refused otherwise)
    rng.shuffle(lines)
    return lines


def _store_rows(path: Path, tmp: Path) -> dict[str, Any]:
    """Every row of the store, but the wall-clock times of its runs and ledger and the
    source's fingerprint (its modification time); the folder ``tmp`` is left out of paths."""
    con = sqlite3.connect(path)
    try:
        out: dict[str, Any] = {}
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = "
                                            "'table' ORDER BY name")]  # fmt: skip
        for table in tables:
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
            keep = [c for c in cols if c not in ("released_at", "started", "finished")]
            rows = con.execute(f"SELECT {', '.join(keep)} FROM {table} ORDER BY "
                               f"{', '.join(keep)}").fetchall()  # fmt: skip
            out[table] = [tuple(v.replace(str(tmp), "") if isinstance(v, str) else v
                                for v in r) for r in rows
                          if table != "meta" or r[0] != "source_fingerprint"]  # fmt: skip
        return out
    finally:
        con.close()


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


def _runs(
    tmp: Path, lines: list[str], make: Callable[[Path], Any], *, quiet_path: bool,
    monkeypatch: pytest.MonkeyPatch, between: Callable[[int, Any], None] | None = None,
) -> tuple[list[Any], list[int]]:  # fmt: skip
    """Each step of :data:`STEPS`: what it gave (or the error), and the steps that took the
    quiet path."""
    tmp.mkdir()
    release = make(tmp)
    (tmp / "log.jsonl").write_text("")
    out: list[Any] = []
    taken: list[int] = []
    real = quiet.quiet_step
    with monkeypatch.context() as m:

        def spy(*args: Any, **kw: Any) -> Any:
            step = real(*args, **kw) if quiet_path else None
            if step is not None:
                taken.append(len(out))
            return step

        m.setattr(loop, "quiet_step", spy)
        done = 0
        for i, (share, day) in enumerate(STEPS):
            cut = round(share * len(lines))
            with (tmp / "log.jsonl").open("a", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in lines[done:cut])
            done = cut
            if between is not None:
                between(i, release)
            until = dataclasses.replace(release, until=format_timestamp(T0 + day * DAY + HOUR))
            try:
                result = until.run(rng=simulation_randomness(100 + i))
            except dpcr.DpcrError as exc:  # the same refusal on both paths
                out.append(("error", type(exc).__name__, str(exc).replace(str(tmp), "")))
                continue
            q = release.quarantine_path
            out.append((result.rows, _strip(result.diagnostics),
                        q.read_bytes() if q.exists() else b"",
                        _files(tmp / "out" / "simulation"),
                        _store_rows(release.store_path, tmp)))  # fmt: skip
    return out, taken


def _strip(diag: Any) -> Any:
    if isinstance(diag, dict):
        return {k: _strip(v) for k, v in diag.items() if k != "quarantine_file"}
    return diag


def _same(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b) == len(STEPS)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert len(x) == len(y), f"step {i}: {x[:3]} / {y[:3]}"
        for what, u, v in zip(("rows", "diagnostics", "quarantine", "outputs", "store"), x, y,
                              strict=False):  # fmt: skip
            assert u == v, f"step {i}: {what} differ"


#: Seeds 0 .. 6 cover every constraint kind, both unit modes, the tree, open keys and
#: ``on_error = "raise"``; 7 .. 13 the same again on other changelogs (slow).
SEEDS = [*range(7), *(pytest.param(s, marks=pytest.mark.slow) for s in range(7, 14))]


@pytest.mark.parametrize("seed", SEEDS)
def test_quiet_steps_equal_steps_through_the_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    lines = _lines(seed)

    def make(tmp: Path) -> Any:
        return _release(tmp, seed)

    fast, taken = _runs(tmp_path / "quiet", lines, make, quiet_path=True,
                        monkeypatch=monkeypatch)  # fmt: skip
    slow, none = _runs(tmp_path / "state", lines, make, quiet_path=False,
                       monkeypatch=monkeypatch)  # fmt: skip
    _same(fast, slow)
    assert none == []
    # steps 5, 6 and 8 close intervals over a file that holds nothing new, every record long
    # settled: the quiet path (step 7 is a rerun with nothing new: the store answers)
    assert {5, 6, 8} <= set(taken), taken
    assert 7 not in taken and 0 not in taken


def test_quiet_steps_catch_the_state_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Quiet steps leave the state file behind; the next step that reads brings it forward
    (its seed version advanced once per quiet step) and reads only what is new."""
    import duckdb

    from dpcr.engines import state as state_file
    from dpcr.release._outputs import state_path

    lines = _lines(2)
    release = _release(tmp_path, 2)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(line + "\n" for line in lines[:20]))

    def head() -> tuple[int, str]:
        with duckdb.connect(str(state_path(release)), read_only=True) as con:
            v = con.execute("SELECT value FROM counters WHERE name = 'version'").fetchone()
            i = con.execute("SELECT value FROM meta WHERE key = 'interval'").fetchone()
        assert v is not None and i is not None
        return int(v[0]), str(i[0])

    def run(day: int) -> None:
        dataclasses.replace(release, until=format_timestamp(T0 + day * DAY)).run(
            rng=simulation_randomness(day))

    run(8)
    v0, _ = head()
    run(9)
    run(10)
    assert head() == (v0, "8")  # (left behind by two quiet steps)
    summary = json.loads(quiet.quiet_path(release).read_text())
    assert (summary["lag"], summary["head"]["interval"]) == (2, 10)
    with log.open("a") as f:
        f.writelines(line + "\n" for line in lines[20:])
    flags: list[bool] = []
    attach = state_file.attach

    def attaching(con: Any, path: Path, **kw: Any) -> bool:
        flags.append(kw["fresh"])
        return attach(con, path, **kw)

    with monkeypatch.context() as m:
        m.setattr(state_file, "attach", attaching)
        run(11)
    assert flags and not any(flags), flags  # resumed, not rebuilt
    assert head() == (v0 + 3, "11")
    assert json.loads(quiet.quiet_path(release).read_text())["lag"] == 0


def _tamper(kind: str) -> Callable[[int, Any], None]:
    """What happens before a step that would be quiet (:data:`QUIET`)."""

    def between(i: int, release: Any) -> None:
        if i != QUIET:
            return
        if kind == "quarantine":
            with release.quarantine_path.open("a") as f:
                f.write("edited by hand\n")
        elif kind == "summary":
            path = quiet.quiet_path(release)
            summary = json.loads(path.read_text())
            summary["counters"]["kept"] += 1
            summary["head"]["interval"] -= 1  # (a summary of another head)
            path.write_text(json.dumps(summary))
        elif kind == "state":
            from dpcr.release._outputs import state_path

            state_path(release).unlink()
        elif kind == "partial":
            with Path(release.source.path).open("a") as f:
                f.write('{"entry": "late", "ts": ')  # (a record still being written)
        elif kind in ("rewritten", "truncated"):
            path = Path(release.source.path)
            data = path.read_bytes()
            path.write_bytes(data[:-2] + b"\n" if kind == "truncated" else
                             data[:10] + b"X" + data[11:])  # fmt: skip

    return between


@pytest.mark.parametrize("kind", ["quarantine", "summary", "rewritten",
                                  *(pytest.param(k, marks=pytest.mark.slow)
                                    for k in ("state", "partial", "truncated"))])  # fmt: skip
def test_a_tampered_step_reads_as_without_the_quiet_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A quarantine file edited by hand, a summary of another head, a lost state file, a line
    being written, a rewritten or shortened source: the same bytes (or refusal) as the step
    through the state; the quiet path is not taken at that step (but for a lost state file,
    which it does not need)."""
    lines = _lines(1)

    def make(tmp: Path) -> Any:
        return _release(tmp, 1)

    fast, taken = _runs(tmp_path / "quiet", lines, make, quiet_path=True,
                        monkeypatch=monkeypatch, between=_tamper(kind))  # fmt: skip
    slow, _ = _runs(tmp_path / "state", lines, make, quiet_path=False,
                    monkeypatch=monkeypatch, between=_tamper(kind))  # fmt: skip
    _same(fast, slow)
    assert (QUIET in taken) == (kind == "state"), taken
    if kind in ("rewritten", "truncated"):
        assert fast[QUIET][:2] == ("error", "RewrittenError"), fast[QUIET][:2]
    if kind in ("quarantine", "summary"):
        assert QUIET + 1 in taken, taken  # (the summary the step through the state kept)
    if kind == "partial":  # (the consumed bytes now end inside a line: every step reads)
        assert [t for t in taken if t >= QUIET] == [], taken


def test_a_release_read_whole_takes_no_quiet_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``on_exhausted = "retire"`` reads the whole source at every run (the state does not
    keep every unit's cut): it keeps no summary and never takes the quiet path."""
    lines = _lines(4)

    def make(tmp: Path) -> Any:
        return _release(tmp, 4, on_exhausted="retire")

    fast, taken = _runs(tmp_path / "quiet", lines, make, quiet_path=True,
                        monkeypatch=monkeypatch)  # fmt: skip
    slow, _ = _runs(tmp_path / "state", lines, make, quiet_path=False,
                    monkeypatch=monkeypatch)  # fmt: skip
    _same(fast, slow)
    assert taken == []
    assert not quiet.quiet_path(make(tmp_path / "quiet")).exists()


def test_a_quiet_step_imports_no_duckdb(tmp_path: Path) -> None:
    """``dpcr run`` of a real release closing intervals over a file that holds nothing new:
    it releases them, and DuckDB is never imported (numpy is, by the plans)."""
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"entry": i, "ts": T0 + HOUR * (1 + i), "op": "insert",
                                       "after": {"v": i}}) + "\n" for i in range(10)))
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"""
[source]
format = "jsonl"
path = "{log}"
epoch_unit = "us"
[privacy]
unit = "entry"
epsilon = 1.0
[constraint]
at_most_k = 3
[release]
plan = "disjoint"
start = "{format_timestamp(T0)}"
period = "1d"
[[query]]
name = "count"
kind = "count"
[[query]]
name = "v"
kind = "sum"
column = "v"
lower = 0
upper = 100
[output]
dir = "{tmp_path / 'out'}"
on_error = "quarantine"
""")
    code = (
        "import json, sys\nfrom dpcr.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "print(json.dumps({'rc': rc, 'duckdb': 'duckdb' in sys.modules}))\n"
    )

    def run(day: int) -> dict[str, Any]:
        args = ["run", str(cfg), "--until", format_timestamp(T0 + day * DAY), "--quiet",
                "--no-report"]  # fmt: skip
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, check=True)  # fmt: skip
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return out

    assert run(1) == {"rc": 0, "duckdb": True}  # (the first run reads the file)
    assert run(3) == {"rc": 0, "duckdb": False}
    summary = json.loads((tmp_path / "out" / "public" / "summary.json").read_text())
    assert summary["released_intervals"] == 3
    with log.open("a") as f:
        f.write(json.dumps({"entry": 99, "ts": T0 + 3 * DAY + HOUR, "op": "insert",
                            "after": {"v": 5}}) + "\n")  # fmt: skip
    assert run(5) == {"rc": 0, "duckdb": True}
    assert run(6) == {"rc": 0, "duckdb": False}


def test_a_summary_that_cannot_be_written_costs_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The summary is written after the release is out: a full disk then leaves none (the run
    succeeds, the operator is warned, naming the file), the next step reads the source and
    writes it, and the one after is quiet."""
    release = _release(tmp_path, 2)
    (tmp_path / "log.jsonl").write_text("".join(line + "\n" for line in _lines(2)))
    real = quiet.quiet_step
    taken: list[int] = []

    def spy(*args: Any, **kw: Any) -> Any:
        step = real(*args, **kw)
        taken.append(step is not None)
        return step

    def full(*_args: Any) -> None:
        raise OSError(28, "No space left on device")

    def run(day: int) -> Any:
        return dataclasses.replace(release, until=format_timestamp(T0 + day * DAY)).run(
            rng=simulation_randomness(day))

    monkeypatch.setattr(loop, "quiet_step", spy)
    with monkeypatch.context() as m, caplog.at_level(logging.WARNING, logger="dpcr"):
        m.setattr(quiet, "_write", full)
        assert run(8).new_intervals == 8
    assert not quiet.quiet_path(release).exists()
    warned = [r.getMessage() for r in caplog.records if r.name == "dpcr"]
    assert len(warned) == 1 and str(quiet.quiet_path(release)) in warned[0]
    assert "No space left on device" in warned[0]
    caplog.clear()
    assert run(9).new_intervals == 1
    assert run(10).new_intervals == 1
    assert taken == [False, False, True], taken
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_quiet_rule_is_the_duckdb_state_rule(tmp_path: Path) -> None:
    """``_quiet.eligible`` (which imports no DuckDB) decides as the DuckDB engine's own rule
    (:func:`dpcr.engines.duckdb_incremental.eligible` for the DuckDB engine) over the source
    formats, ``on_exhausted`` and the engine; both answers occur."""
    from dpcr.engines import EngineConfig
    from dpcr.engines.duckdb_incremental import eligible as duckdb_rule
    from dpcr.errors import ConfigError
    from dpcr.release._engine import engine_request

    sources = [
        dpcr.sources.Jsonl(path=tmp_path / "log.jsonl"),
        dpcr.sources.Parquet(path=tmp_path / "log.parquet"),
        dpcr.sources.Csv(path=tmp_path / "log.csv"),
        dpcr.sources.Debezium(path=tmp_path / "log.debezium.jsonl", key="id"),
        dpcr.sources.Wal2json(path=tmp_path / "log.wal2json.jsonl", key="id"),
    ]
    seen = set()
    for source in sources:
        for retire in (False, True):
            for name in ("duckdb", "spark"):
                kw: dict[str, Any] = {"source": source, "engine": EngineConfig(name=name)}
                if retire:
                    kw["on_exhausted"] = "retire"
                try:
                    settings = _release(tmp_path, 1, **kw)
                except ConfigError:  # (Spark refuses retirement)
                    continue
                want = name == "duckdb" and duckdb_rule(engine_request(settings))
                assert quiet.eligible(settings) == want, (source, retire, name)
                seen.add(want)
    assert seen == {True, False}


def test_a_step_that_quarantines_nothing_new_reads_no_quarantine_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step through the state that quarantines no new line (it reads valid records, or none:
    a file whose last line has no line end never takes the quiet path) keeps what the summary
    it replaces showed of the quarantine: the file, written again from the same lines, is not
    read back. A step that quarantines a line reads it; the summary names the file as it is
    after every step."""
    from dpcr.release._outputs import quiet_path

    release = _release(tmp_path, 2)
    log, q = tmp_path / "log.jsonl", release.quarantine_path
    log.write_text("".join(line + "\n" for line in _lines(2)))
    real, read_bytes = quiet.quiet_step, Path.read_bytes
    taken: list[bool] = []
    reads: list[Path] = []

    def spy(*args: Any, **kw: Any) -> Any:
        step = real(*args, **kw)
        taken.append(step is not None)
        return step

    def reading(path: Path) -> bytes:
        reads.append(path)
        return read_bytes(path)

    monkeypatch.setattr(loop, "quiet_step", spy)
    monkeypatch.setattr(Path, "read_bytes", reading)

    def run(day: int, append: str = "") -> bool:
        """Whether the step (after ``append`` was appended to the log) read the quarantine."""
        with log.open("a") as f:
            f.write(append)
        reads.clear()
        dataclasses.replace(release, until=format_timestamp(T0 + day * DAY)).run(
            rng=simulation_randomness(day))  # fmt: skip
        summary = json.loads(quiet_path(release).read_text())
        assert summary["quarantine"] == quiet._stat(q)  # (the file is the state's)
        return q in reads

    valid = json.dumps({"entry": "e99", "ts": format_timestamp(T0 + 8 * DAY + HOUR),
                        "op": "insert", "after": {"owner": "u1", "v": 3}})  # fmt: skip
    assert run(8)
    before = read_bytes(q)
    assert not run(9, valid + "\n")  # (a valid record)
    assert read_bytes(q) == before
    assert run(10, "not a record")  # (quarantined, the file left without a line end)
    kept = read_bytes(q)
    assert kept.startswith(before) and len(kept) > len(before)
    assert [run(11), run(12)] == [False, False]
    assert read_bytes(q) == kept
    assert taken == [False] * 5, taken
