"""Incremental runs against full recomputation: a JSON-lines changelog that grows between runs
(records out of time order, late records, every quarantine reason, moving updates, ties) is
released run after run twice, once reading only what is new (the state file) and once loading
the whole file every time; with the same simulation seeds both give identical released rows,
diagnostics and quarantine files, for every constraint kind, unit mode and plan. The state's
seed tables gain a version of a key at every run that touches it; half of the cases rewrite
them with the newest versions only at every run (compaction), the others never do at this
size, and both must equal the full path."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import dpcr
import dpcr.engines.duckdb_incremental as incremental
import dpcr.engines.incremental as inc_state
import dpcr.engines.state as state_file
import dpcr.release._engine as data_step
import dpcr.release._loop as loop
from dpcr.noise import simulation_randomness
from dpcr.release._outputs import state_path
from dpcr.timeutil import format_timestamp
from engines.helpers import CONSTRAINTS, DAY, HOUR, QUERIES, T0, generate


def _release(tmp: Path, constraint: Any, unit: str, plan: Any, on_error: str) -> Any:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=constraint,
        plan=plan,
        queries=list(QUERIES),
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
        unit=unit,
        on_error=on_error,  # type: ignore[arg-type]
    )


def _runs(tmp: Path, lines: list[str], cuts: list[int], clocks: list[int], make: Any,
          full: bool, monkeypatch: pytest.MonkeyPatch,
          lose_state: int = -1, unended: bool = False,
          end: str = "\n") -> list[Any]:  # fmt: skip
    """``unended``: each line is written after a line end instead of before one (the file's
    last line has none); ``end``: the line end written."""
    tmp.mkdir()
    release = make(tmp)
    out = []
    with monkeypatch.context() as m:
        if full:
            m.setattr(data_step, "eligible", lambda settings: False)
        for i, (cut, clock) in enumerate(zip(cuts, clocks, strict=True)):
            with (tmp / "log.jsonl").open("a", encoding="utf-8") as f:
                new = lines[cuts[i - 1] if i else 0 : cut]
                if unended:
                    f.write("".join((end if i or k else "") + line for k, line in enumerate(new)))
                else:
                    f.writelines(line + end for line in new)
            if i == lose_state:  # a crash between the store's commit and the state's
                state_path(release).unlink()
            try:
                result = _with_until(release, clock).run(rng=simulation_randomness(100 + i))
            except dpcr.DpcrError as exc:  # the same refusal on both paths
                out.append(("error", type(exc).__name__, str(exc).replace(str(tmp), "")))
                continue
            quarantine = release.quarantine_path
            out.append((result.rows, result.diagnostics,
                        quarantine.read_bytes() if quarantine.exists() else b""))  # fmt: skip
    return out


def _with_until(release: Any, clock: int) -> Any:
    import dataclasses

    return dataclasses.replace(release, until=format_timestamp(clock))


def _assert_same(inc: list[Any], full: list[Any]) -> None:
    """The same runs' results (:func:`_runs`) from two paths: the same refusal, or the same
    released rows, diagnostics and quarantine files."""
    for i, (a, b) in enumerate(zip(inc, full, strict=True)):
        if a[0] == "error" or b[0] == "error":
            assert a == b, f"run {i}"
            continue
        assert a[0] == b[0], f"run {i}: released rows differ"
        assert _strip(a[1]) == _strip(b[1]), f"run {i}: diagnostics differ"
        assert a[2] == b[2], f"run {i}: quarantine files differ"


def _strip(diag: Any) -> Any:
    if isinstance(diag, dict):
        return {k: _strip(v) for k, v in diag.items() if k != "quarantine_file"}
    return diag


CASES = [(seed, seed % len(CONSTRAINTS), seed % 3 == 1, seed % 4 == 3) for seed in range(12)]


@pytest.mark.parametrize(("seed", "c", "unit_column", "tree"), CASES)
def test_incremental_equals_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, c: int, unit_column: bool,
    tree: bool,
) -> None:  # fmt: skip
    rng = random.Random(seed)
    lines = generate(seed, unit_column=unit_column)
    n = len(lines)
    cuts = [*sorted(rng.sample(range(1, n), 3)), n]
    clocks = [T0 + DAY * d + rng.randrange(0, DAY, HOUR) for d in (1, 2, 4, 7)]
    if tree:
        end = format_timestamp(T0 + 8 * DAY)
        plan = dpcr.TreeRelease(start=format_timestamp(T0), period="1d", end=end)
    else:
        plan = dpcr.DisjointRelease(start=format_timestamp(T0), period="1d")

    def make(tmp: Path) -> Any:
        return _release(tmp, CONSTRAINTS[c], "owner" if unit_column else "entry", plan,
                        "quarantine")  # fmt: skip

    compact = seed % 2 == 0
    with monkeypatch.context() as m:
        m.setattr(inc_state, "COMPACT_GROWTH", 1.0 if compact else 1e9)
        inc = _runs(tmp_path / "inc", lines, cuts, clocks, make, False, monkeypatch,
                    lose_state=2 if seed % 5 == 2 else -1)
    full = _runs(tmp_path / "full", lines, cuts, clocks, make, True, monkeypatch)
    assert len(inc) == len(full) == 4
    _assert_same(inc, full)
    state = tmp_path / "inc" / "out" / "store.sqlite.state"
    assert (state / "state.duckdb").exists()
    assert state.stat().st_mode & 0o777 == 0o700  # its write-ahead log has the default mode
    import duckdb

    with duckdb.connect(str(state / "state.duckdb"), read_only=True) as con:
        rows, keys = con.execute(
            "SELECT count(*), count(DISTINCT (u, e)) FROM seeds").fetchall()[0]
    # compaction leaves one version per key; without it, keys touched again have several
    assert (rows == keys) if compact else (rows > keys), (rows, keys)


@pytest.mark.parametrize("seed", range(4))
def test_compacted_state_equals_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """A run a day for a week, the state rewritten at every run: each run reads seeds that the
    previous one compacted (a compaction that kept an older version would change them)."""
    rng = random.Random(1000 + seed)
    lines = generate(1000 + seed, unit_column=False)
    n = len(lines)
    cuts = [*sorted(rng.sample(range(1, n), 6)), n]
    clocks = [T0 + DAY * d + rng.randrange(0, DAY, HOUR) for d in range(1, 8)]
    plan = dpcr.DisjointRelease(start=format_timestamp(T0), period="1d")

    def make(tmp: Path) -> Any:
        return _release(tmp, CONSTRAINTS[seed % len(CONSTRAINTS)], "entry", plan, "quarantine")

    with monkeypatch.context() as m:
        m.setattr(inc_state, "COMPACT_GROWTH", 1.0)
        inc = _runs(tmp_path / "inc", lines, cuts, clocks, make, False, monkeypatch)
    full = _runs(tmp_path / "full", lines, cuts, clocks, make, True, monkeypatch)
    assert len(inc) == len(full) == 7
    for i, (a, b) in enumerate(zip(inc, full, strict=True)):
        assert a[0] == b[0], f"run {i}: released rows differ"
        assert _strip(a[1]) == _strip(b[1]), f"run {i}: diagnostics differ"


#: Texts of units and entries by ``n``, for ``m = n // 4``: the integer ``m`` (its own id in
#: the state), texts that read as ``m`` but are not its decimal form (kept in the
#: dictionary: ``"0m"``, ``"+m"``), a text that is not a number.
_KEYS = {0: lambda m: m, 1: lambda m: f"0{m}", 2: lambda m: f"+{m}", 3: lambda m: f"k{m}"}


def _key(n: int) -> Any:
    return _KEYS[n % 4](n // 4)


def _integer_keys(line: str) -> str:
    """``line`` with its entry ``"e<n>"`` and its rows' owner ``"u<n>"`` as :data:`_KEYS`
    says (``n`` + 1 for owners)."""
    try:
        rec = json.loads(line)
    except ValueError:
        return line
    if not isinstance(rec, dict):
        return line
    entry = rec.get("entry")
    if isinstance(entry, str) and entry[:1] == "e" and entry[1:].isdigit():
        rec["entry"] = _key(int(entry[1:]))
    for side in ("before", "after"):
        row = rec.get(side)
        owner = row.get("owner") if isinstance(row, dict) else None
        if isinstance(owner, str) and owner[:1] == "u" and owner[1:].isdigit():
            row["owner"] = _key(int(owner[1:]) + 1)
    return json.dumps(rec)


@pytest.mark.parametrize(("seed", "unit_column"), [(s, s % 2 == 1) for s in range(6)])
def test_integer_keys_equal_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int,
                                 unit_column: bool) -> None:  # fmt: skip
    """Units and entries that are integers (the state's ids of their own), texts of
    integers and texts that only read as integers (``"07"``, ``"+3"``: in the dictionary),
    mixed, over four runs: each releases what the full path releases, and the dictionary
    holds exactly the texts that are not the decimal form of an integer."""
    import duckdb

    rng = random.Random(2000 + seed)
    lines = [_integer_keys(line) for line in generate(2000 + seed, unit_column=unit_column)]
    n = len(lines)
    cuts = [*sorted(rng.sample(range(1, n), 3)), n]
    clocks = [T0 + DAY * d + rng.randrange(0, DAY, HOUR) for d in (1, 2, 4, 7)]
    plan = dpcr.DisjointRelease(start=format_timestamp(T0), period="1d")

    def make(tmp: Path) -> Any:
        return _release(tmp, CONSTRAINTS[seed % len(CONSTRAINTS)],
                        "owner" if unit_column else "entry", plan, "quarantine")  # fmt: skip

    with monkeypatch.context() as m:
        m.setattr(inc_state, "COMPACT_GROWTH", 1.0 if seed % 3 == 0 else 1e9)
        inc = _runs(tmp_path / "inc", lines, cuts, clocks, make, False, monkeypatch)
    full = _runs(tmp_path / "full", lines, cuts, clocks, make, True, monkeypatch)
    for i, (a, b) in enumerate(zip(inc, full, strict=True)):
        assert a[0] != "error", a
        assert a[0] == b[0], f"run {i}: released rows differ"
        assert _strip(a[1]) == _strip(b[1]), f"run {i}: diagnostics differ"
        assert a[2] == b[2], f"run {i}: quarantine files differ"
    path = tmp_path / "inc" / "out" / "store.sqlite.state" / "state.duckdb"
    with duckdb.connect(str(path), read_only=True) as con:
        names = [r[0] for r in con.execute("SELECT name FROM names").fetchall()]
        ids = con.execute("SELECT DISTINCT u FROM seeds UNION SELECT e FROM seeds").fetchall()
    assert names and all(state_file.own_id(name) is None for name in names), names
    own = [i for (i,) in ids if i < state_file.DICT_BASE]
    assert own and len(own) < len(ids), "integer and dictionary ids, both"


def test_a_seed_names_the_last_insert_or_delete_in_time_not_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file lists an entry's delete before its insert (records out of time order); after
    both settle, a second delete is rejected, and its message names the record of the delete
    that came last in time (the seed's record), as the full path does."""

    def rec(entry: str, day: int, op: str) -> str:
        row = {"owner": "u0", "status": "issued", "k": "a", "kind": "short", "v": 1}
        after = None if op == "delete" else row
        before = row if op == "delete" else None
        return json.dumps({"entry": entry, "ts": format_timestamp(T0 + day * DAY + HOUR),
                           "op": op, "before": before, "after": after})  # fmt: skip

    lines = [rec("e1", 2, "delete"), rec("e1", 1, "insert"), rec("e2", 1, "insert"),
             rec("e1", 4, "delete")]  # fmt: skip
    cuts, clocks = [3, 4], [T0 + 3 * DAY, T0 + 6 * DAY]
    plan = dpcr.DisjointRelease(start=format_timestamp(T0), period="1d")

    def make(tmp: Path) -> Any:
        return _release(tmp, CONSTRAINTS[0], "entry", plan, "quarantine")

    inc = _runs(tmp_path / "inc", lines, cuts, clocks, make, False, monkeypatch)
    full = _runs(tmp_path / "full", lines, cuts, clocks, make, True, monkeypatch)
    assert inc[1][2] == full[1][2]
    assert b"deleted at record 1" in inc[1][2], inc[1][2]


def _plain(seed: int) -> list[str]:
    """Lines of a valid changelog whose every history is plain (one insert, updates, at most
    one delete after them, in time order; no sequence numbers), in shuffled file order (a run
    that reads part of the file may see an update before its insert)."""
    rng = random.Random(seed)
    out = []
    for e in range(rng.randint(20, 40)):
        span = 2 * DAY if e % 2 else 6 * DAY  # (half within the first run's intervals)
        ts = sorted(rng.sample(range(0, span, HOUR), rng.randint(1, 6)))
        for i, t in enumerate(ts):
            op = "insert" if i == 0 else "update"
            if i and i == len(ts) - 1 and rng.random() < 0.4:
                op = "delete"
            row = {"k": rng.choice("ab"),
                   "v": rng.choice([rng.randint(-6, 14), round(rng.uniform(-5, 12), 2), "7"])}
            rec: dict[str, Any] = {"entry": f"e{e}", "ts": format_timestamp(T0 + t), "op": op}
            rec |= {"before": row} if op == "delete" else {"after": row}
            out.append(json.dumps(rec))
    rng.shuffle(out)
    return out


def _without_seq(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict):
            rec.pop("seq", None)
            line = json.dumps(rec)
        out.append(line)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_counts_and_sums_per_entry_equal_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Counts and sums with every unit one entry and no state machine: the first run (an
    empty state) totals and summarises the settling rows in one pass over the bounded rows,
    and fills the state from that summary; plain histories take their liveness seeds from it
    too, and without sequence numbers the order leaves them out. Later runs continue from
    that state exactly as the full path recomputes. Seeds 6 and 7 rank the rows with the
    general window (as a code too wide for the narrow one does), whose summary marks each
    unit's last settled row in a second sort."""
    rng = random.Random(2000 + seed)
    if seed % 2:
        lines = _plain(2000 + seed)
    else:
        lines = generate(2000 + seed, unit_column=False)
        lines = _without_seq(lines) if seed % 4 == 0 else lines
    n = len(lines)
    cuts = [*sorted(rng.sample(range(1, n), 2)), n]
    clocks = [T0 + DAY * d + rng.randrange(0, DAY, HOUR) for d in (2, 4, 7)]
    plan = dpcr.DisjointRelease(start=format_timestamp(T0), period="1d")
    constraint = CONSTRAINTS[(0, 1, 2)[seed % 3]]

    def make(tmp: Path) -> Any:
        return dpcr.ContinualRelease(
            source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"), constraint=constraint,
            plan=plan, queries=list(QUERIES[:4]), budget=dpcr.Budget(epsilon=1.0),
            output_dir=tmp / "out", unit="entry", on_error="quarantine",
        )

    with monkeypatch.context() as m:
        if seed >= 6:
            m.setattr("dpcr.engines.duckdb.narrow_ranked", lambda *args, **kwargs: None)
        inc = _runs(tmp_path / "inc", lines, cuts, clocks, make, False, monkeypatch,
                    lose_state=1 if seed % 3 == 1 else -1)  # fmt: skip
    full = _runs(tmp_path / "full", lines, cuts, clocks, make, True, monkeypatch)
    assert len(inc) == len(full) == 3
    for i, (a, b) in enumerate(zip(inc, full, strict=True)):
        assert a[0] != "error", a
        assert a[0] == b[0], f"run {i}: released rows differ"
        assert _strip(a[1]) == _strip(b[1]), f"run {i}: diagnostics differ"
        assert a[2] == b[2], f"run {i}: quarantine files differ"
    # The state the summary fills is the one the bounded rows give.
    with monkeypatch.context() as m:
        m.setattr(inc_state, "_summary", lambda con, t: False)
        _runs(tmp_path / "rows", lines, cuts, clocks, make, False, monkeypatch,
              lose_state=1 if seed % 3 == 1 else -1)  # fmt: skip
    assert _named_state(tmp_path / "inc") == _named_state(tmp_path / "rows")


def _named_state(tmp: Path) -> dict[str, Any]:
    """The state's tables, the seeds with the texts of their ids (which a state numbers as
    it meets them)."""
    import duckdb

    tables = _state_tables(tmp)
    path = tmp / "out" / "store.sqlite.state" / "state.duckdb"
    with duckdb.connect(str(path), read_only=True) as con:
        tables["seeds"] = sorted(con.execute(
            "SELECT u.name, e.name, s.* EXCLUDE (u, e) FROM seeds s JOIN names u ON u.id = s.u "
            "JOIN names e ON e.id = s.e").fetchall(), key=repr)  # fmt: skip
    del tables["names"]
    return tables


def _state_tables(tmp: Path) -> dict[str, Any]:
    import duckdb

    path = tmp / "out" / "store.sqlite.state" / "state.duckdb"
    with duckdb.connect(str(path), read_only=True) as con:
        return {
            table: sorted(con.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
            for table in ("meta", "counters", "pending", "names", "seeds", "totals", "clamps",
                          "qlines", "keys")
        }  # fmt: skip


@pytest.mark.parametrize("end", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("seed", range(len(CONSTRAINTS)))
def test_a_file_whose_last_line_has_no_end_is_resumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, end: str
) -> None:
    """A writer that ends each line when it writes the next leaves the file's last line without
    a line end: every run resumes the state (reading from the line end, a LF or a CR LF, that
    ended the last consumed line) instead of rebuilding it, and releases what loading the
    whole file does."""
    from dpcr.changelog import position

    rng = random.Random(seed)
    lines = generate(4000 + seed, unit_column=seed % 2 == 1)
    n = len(lines)
    cuts = [*sorted(rng.sample(range(1, n), 3)), n]
    clocks = [T0 + DAY * d for d in (1, 2, 4, 8)]
    plan = dpcr.DisjointRelease(start=format_timestamp(T0), period="1d")

    def make(tmp: Path) -> Any:
        return _release(tmp, CONSTRAINTS[seed], "owner" if seed % 2 else "entry", plan,
                        "quarantine")  # fmt: skip

    copy = position.copy_range

    def resumed(unended: bool) -> tuple[list[Any], int]:
        tails: set[int] = set()

        def counted(path: Path, start: int, end: int, **kw: Any) -> Any:
            tails.add(start)
            return copy(path, start, end, **kw)

        with monkeypatch.context() as m:
            m.setattr(position, "copy_range", counted)
            out = _runs(tmp_path / f"inc{unended:d}", lines, cuts, clocks, make, False,
                        monkeypatch, unended=unended, end=end)  # fmt: skip
        return out, len(tails)

    inc, tails = resumed(True)
    _, ended_tails = resumed(False)
    full = _runs(tmp_path / "full", lines, cuts, clocks, make, True, monkeypatch, unended=True,
                 end=end)  # fmt: skip
    assert tails == ended_tails >= 2  # (the runs that resume when every line is ended)
    _assert_same(inc, full)


@pytest.mark.parametrize(
    ("data", "start"),
    [
        (b'{"a":1}\n', 8), (b'{"a":1}', 7), (b'{"a":1}\n{"b":2}', 8), (b'{"a":1}\r\n', 9),
        (b'{"a":1}\r\n{"b":2}', 9), (b'{"a":1}\r', None), (b'{"a":1}\r{"b":2}', None),
        (b'{"a":1}\r\r\n{"b":2}', None), (b'{"a":1}x', None),
    ],
)
def test_where_the_lines_after_a_consumed_unended_line_start(
    tmp_path: Path, data: bytes, start: int | None
) -> None:
    """After the consumed ``{"a":1}`` (7 bytes, no line end): the next line starts after the
    LF or CR LF that ended it; a lone CR (which DuckDB's line reader ends a line at, and
    the whole-file fallback does not) and a CR CR LF (whose LF that reader reads into the
    next line) give None: the state is rebuilt from the whole file."""
    path = tmp_path / "log.jsonl"
    path.write_bytes(data)
    assert incremental._line_start(path, 7) == start
    assert incremental._line_start(path, 0) == 0


@pytest.mark.parametrize("seed", range(len(CONSTRAINTS)))
def test_runs_with_nothing_new_equal_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Runs that find no new record close one interval each. While the state keeps pending
    mutations (dated after the last released interval) they are loaded and bounded again; once
    it keeps none, the state alone answers. The released rows, diagnostics and quarantine
    files equal those of the full path, and the state those of runs that load the empty tail."""
    lines = generate(3000 + seed, unit_column=seed % 2 == 1)
    n = len(lines)
    cuts = [n // 2, n, n, n, n, n]
    clocks = [T0 + DAY * d for d in (2, 3, 5, 8, 9, 11)]  # (records are dated before day 7)
    plan = dpcr.DisjointRelease(start=format_timestamp(T0), period="1d")

    def make(tmp: Path) -> Any:
        return _release(tmp, CONSTRAINTS[seed], "owner" if seed % 2 else "entry", plan,
                        "quarantine")  # fmt: skip

    answered: list[int] = []
    unchanged = incremental._unchanged

    def counted(*args: Any, **kwargs: Any) -> Any:
        answered.append(1)
        return unchanged(*args, **kwargs)

    # (the engine's own answer: a step with nothing past the position otherwise runs without
    # an engine and brings the state forward at the next step, dpcr.release._quiet, whose
    # differential test is tests/release/test_quiet_step.py)
    monkeypatch.setattr(loop, "quiet_step", lambda *args, **kwargs: None)
    with monkeypatch.context() as m:
        m.setattr(incremental, "_unchanged", counted)
        inc = _runs(tmp_path / "inc", lines, cuts, clocks, make, False, monkeypatch)
    assert len(answered) >= 2  # (at least the runs at days 9 and 11)
    with monkeypatch.context() as m:
        m.setattr(state_file, "nothing_pending", lambda con: False)
        loaded = _runs(tmp_path / "loaded", lines, cuts, clocks, make, False, monkeypatch)
    full = _runs(tmp_path / "full", lines, cuts, clocks, make, True, monkeypatch)
    for i, (a, b, c) in enumerate(zip(inc, loaded, full, strict=True)):
        assert a[0] != "error", a
        assert a[0] == b[0] == c[0], f"run {i}: released rows differ"
        assert _strip(a[1]) == _strip(b[1]) == _strip(c[1]), f"run {i}: diagnostics differ"
        assert a[2] == b[2] == c[2], f"run {i}: quarantine files differ"
    assert _state_tables(tmp_path / "inc") == _state_tables(tmp_path / "loaded")


def _first_run_lines(kind: str) -> list[str]:
    """A JSON-lines log of plain histories, with (``kind``) a double insert dated inside the
    released days, or one dated after the last released day only."""
    rows = []
    for e in range(6):
        t = T0 + e * HOUR
        rows += [{"entry": f"e{e}", "ts": t + 1, "op": "insert", "after": {"n": e}},
                 {"entry": f"e{e}", "ts": t + DAY, "op": "update", "after": {"n": e + 1}}]
        if e % 2:
            rows.append({"entry": f"e{e}", "ts": t + 2 * DAY, "op": "delete",
                         "before": {"n": e + 1}})
    again = {"inside": T0 + DAY + 5, "after": T0 + 6 * DAY}.get(kind)
    if again is not None:
        rows.append({"entry": "e0", "ts": again, "op": "insert", "after": {"n": 9}})
    return [json.dumps(r | {"ts": format_timestamp(int(r["ts"]))}) for r in rows]  # fmt: skip


@pytest.mark.parametrize("kind", ["plain", "inside", "after"])
def test_a_first_run_checks_liveness_in_the_ranking_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The first run of a JSON-lines log leaves the liveness check to the ranking window: a
    log of plain histories is read once, without the aggregation that finds the histories
    that are not plain; one with a history that is not plain (in the released days or after
    them) is read again with the check. Either way the releases, diagnostics and quarantine
    file are those of the run that checks first."""
    import dpcr.changelog._increment as increment

    lines = _first_run_lines(kind)
    clock = T0 + 3 * DAY + HOUR
    plan = dpcr.DisjointRelease(start=format_timestamp(T0), period="1d")

    def make(tmp: Path) -> Any:  # (counts and sums: totalled in the ranking window's pass)
        return dpcr.ContinualRelease(
            source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"), constraint=dpcr.AtMostK(k=2),
            plan=plan, queries=[dpcr.Count(name="c"), dpcr.Sum(name="s", column="n",
                                                              lower=0, upper=10)],
            budget=dpcr.Budget(epsilon=1.0), output_dir=tmp / "out", on_error="quarantine",
        )  # fmt: skip

    reads: list[str] = []
    real = increment.load_increment

    def spy(*args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs.get("liveness", "check"))
        return real(*args, **kwargs)

    cx: list[str] = []
    real_run = increment._run

    def run_spy(con: Any, sql: str, *args: Any) -> None:
        if "_good_cx AS" in sql:
            cx.append(sql)
        real_run(con, sql, *args)

    with monkeypatch.context() as m:
        m.setattr(increment, "_run", run_spy)
        m.setattr("dpcr.changelog.load_increment", spy)
        deferred = _runs(tmp_path / "defer", lines, [len(lines)], [clock], make, False,
                         monkeypatch)  # fmt: skip
    assert reads == (["defer"] if kind == "plain" else ["defer", "check"])
    assert len(cx) == (0 if kind == "plain" else 1)
    with monkeypatch.context() as m:
        m.setattr(incremental, "_checks_liveness", lambda settings: False)
        checked = _runs(tmp_path / "check", lines, [len(lines)], [clock], make, False,
                        monkeypatch)  # fmt: skip
    assert deferred[0][0] == checked[0][0]  # the released rows
    assert _strip(deferred[0][1]) == _strip(checked[0][1])
    assert deferred[0][2] == checked[0][2]  # the quarantine files
    assert checked[0][1]["changelog"]["valid"] == len(lines) - (kind != "plain")
    if kind != "plain":
        assert b"double_insert" in checked[0][2]
    # The state from the aggregation's summary (each unit's last settled row marked by the
    # narrow window's sort, or by a second sort after the general window's) is the one the
    # bounded rows give.
    with monkeypatch.context() as m:
        m.setattr(inc_state, "_summary", lambda con, t: False)
        _runs(tmp_path / "rows", lines, [len(lines)], [clock], make, False, monkeypatch)
    with monkeypatch.context() as m:
        m.setattr("dpcr.engines.duckdb.narrow_ranked", lambda *args, **kwargs: None)
        _runs(tmp_path / "wide", lines, [len(lines)], [clock], make, False, monkeypatch)
    state = _named_state(tmp_path / "defer")
    assert state == _named_state(tmp_path / "rows") == _named_state(tmp_path / "wide")
    assert len(state["seeds"]) == 6


@pytest.mark.slow
def test_the_keys_are_written_in_full_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With explicit sequence numbers the state keeps a key per mutation, appended by one
    writer so that every row group but the last is full: appends from several threads leave
    partly filled groups, which the checkpoint of a later run merges by rewriting much of the
    table (at 10^7, 3.8 s at the first step after a full run, then about 1 s at each of the
    next few, where the step costs 2 s)."""
    import duckdb

    # (several threads whatever the machine: a run over many new bytes uses DuckDB's default)
    monkeypatch.setattr(incremental, "_threads_for", lambda con, _n: con.execute("SET threads = 4"))
    writers: list[str] = []  # the threads while the keys are appended

    class Spy:
        def __init__(self, con: Any) -> None:
            self.con = con

        def execute(self, sql: str, *args: Any) -> Any:
            if sql.startswith(f"INSERT INTO {state_file.SCHEMA}.keys"):
                threads = self.con.execute("SELECT current_setting('threads')").fetchone()
                writers.append(threads[0])
            return self.con.execute(sql, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.con, name)

    settle = inc_state.settle
    monkeypatch.setattr(inc_state, "settle", lambda con, *a, **k: settle(Spy(con), *a, **k))
    n, entries, group = 250_000, 60_000, 122_880
    with (tmp_path / "log.jsonl").open("w", encoding="utf-8") as f:
        for i in range(n):
            rec = {"entry": f"e{i % entries}", "ts": T0 + i * 100_000, "seq": 2 * i + 1,
                   "op": "insert" if i < entries else "update",
                   "after": {"k": "a", "v": i % 7}}  # fmt: skip
            f.write(json.dumps(rec) + "\n")
    release = dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp_path / "log.jsonl", epoch_unit="us"),
        constraint=CONSTRAINTS[1], plan=dpcr.DisjointRelease(start=format_timestamp(T0),
                                                             period="1d"),
        queries=list(QUERIES[:3]), budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp_path / "out", unit="entry",
    )  # fmt: skip
    _with_until(release, T0 + 2 * DAY).run(rng=simulation_randomness(1))
    path = tmp_path / "out" / "store.sqlite.state" / "state.duckdb"
    with duckdb.connect(str(path), read_only=True) as con:
        groups = con.execute(
            "SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('keys')"
        ).fetchone()
        assert con.execute("SELECT count(*) FROM keys").fetchone() == (n,)
    assert groups == (-(-n // group),), "partly filled row groups"
    assert [int(w) for w in writers] == [1]


def _integer_entry(line: str) -> str:
    """``line`` with its entry ``"e<n>"`` the integer ``n`` when ``n`` is even."""
    try:
        rec = json.loads(line)
    except ValueError:
        return line
    entry = rec.get("entry") if isinstance(rec, dict) else None
    if isinstance(entry, str) and entry[1:].isdigit() and int(entry[1:]) % 2 == 0:
        rec["entry"] = int(entry[1:])
        return json.dumps(rec)
    return line


def _as_state3(con: Any) -> None:
    """Turn the state file of ``con`` into the layout format ``state3`` had: every unit and
    entry text in ``names`` (integers too), numbered from 1."""
    base = state_file.DICT_BASE
    con.execute(
        "CREATE TABLE old_ids AS SELECT old, CASE WHEN old < ? THEN old::VARCHAR ELSE "
        "(SELECT name FROM names WHERE id = old) END AS name, row_number() OVER (ORDER BY old) "
        "AS id FROM (SELECT u AS old FROM seeds UNION SELECT e FROM seeds)", [base],
    )
    con.execute("CREATE TABLE seeds3 AS SELECT iu.id AS u, ie.id AS e, s.* EXCLUDE (u, e) "
                "FROM seeds s JOIN old_ids iu ON iu.old = s.u JOIN old_ids ie ON ie.old = s.e")
    con.execute("DROP TABLE seeds")
    con.execute("ALTER TABLE seeds3 RENAME TO seeds")
    con.execute("DELETE FROM names")
    con.execute("INSERT INTO names SELECT id, name FROM old_ids")
    con.execute("DROP TABLE old_ids")
    con.execute("UPDATE counters SET value = (SELECT count(*) FROM names) WHERE name = 'ids'")


def _as_state2(con: Any) -> None:
    """Turn the state file of ``con`` into the layout format ``state2`` had: seed tables
    ``units``, ``entries`` and ``live`` keyed by text."""
    con.execute("DROP TABLE seeds")
    con.execute("DROP TABLE names")
    for table in ("units (unit VARCHAR, n BIGINT, v BIGINT)",
                  "entries (unit VARCHAR, entry VARCHAR, v BIGINT)",
                  "live (unit VARCHAR, entry VARCHAR, live BOOLEAN, v BIGINT)"):
        con.execute(f"CREATE TABLE {table}")


@pytest.mark.parametrize("layout", ["state2", "state3"])
def test_a_state_of_the_older_layout_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """A state file an older dpcr wrote does not resume: the next run rebuilds it from the
    whole source in the current layout, and releases what the full path releases. Format
    ``state2`` had seed tables ``units``, ``entries`` and ``live`` keyed by text; ``state3``
    had every text in the dictionary, integers too (read as ``state4`` reads them, its ids
    would name other units)."""
    import duckdb

    rng = random.Random(77)
    lines = generate(77, unit_column=False)
    if layout == "state3":  # (entries "e<n>" with n even become the integers n)
        lines = [_integer_entry(line) for line in lines]
    n = len(lines)
    cuts = [*sorted(rng.sample(range(1, n), 2)), n]
    clocks = [T0 + DAY * d + rng.randrange(0, DAY, HOUR) for d in (1, 3, 6)]
    plan = dpcr.DisjointRelease(start=format_timestamp(T0), period="1d")

    def make(tmp: Path) -> Any:
        return _release(tmp, CONSTRAINTS[0], "entry", plan, "quarantine")

    real = dpcr.ContinualRelease.run
    rebuilt: list[bool] = []

    def older(self: Any, *args: Any, **kwargs: Any) -> Any:
        path = state_path(self)
        if path.exists():  # (as an older dpcr left it)
            with duckdb.connect(str(path)) as con:
                (_as_state2 if layout == "state2" else _as_state3)(con)
                con.execute("UPDATE meta SET value = ? WHERE key = 'format'", [layout])
        modes: list[bool] = []
        attach = state_file.attach

        def counted(con: Any, at: Path, *, fresh: bool) -> Any:
            modes.append(fresh)
            return attach(con, at, fresh=fresh)

        with monkeypatch.context() as m:
            m.setattr(state_file, "attach", counted)
            result = real(self, *args, **kwargs)
        rebuilt.append(any(modes))
        return result

    monkeypatch.setattr(dpcr.ContinualRelease, "run", older)
    inc = _runs(tmp_path / "inc", lines, cuts, clocks, make, False, monkeypatch)
    monkeypatch.setattr(dpcr.ContinualRelease, "run", real)
    full = _runs(tmp_path / "full", lines, cuts, clocks, make, True, monkeypatch)
    assert rebuilt == [True, True, True]  # (every run found an older state, or none)
    for i, (a, b) in enumerate(zip(inc, full, strict=True)):
        assert a[0] != "error", a
        assert a[0] == b[0], f"run {i}: released rows differ"
        assert _strip(a[1]) == _strip(b[1]), f"run {i}: diagnostics differ"
    with duckdb.connect(str(tmp_path / "inc" / "out" / "store.sqlite.state" / "state.duckdb"),
                        read_only=True) as con:  # fmt: skip
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        fmt = con.execute("SELECT value FROM meta WHERE key = 'format'").fetchall()
    assert {"seeds", "names"} <= tables and not tables & {"units", "entries", "live"}
    assert fmt == [(state_file.FORMAT,)] and state_file.FORMAT == "state4"
