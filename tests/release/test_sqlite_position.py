"""The position of a SQLite log in a store: new stores hold a ``raw2:`` digest of the consumed
records; stores that hold a ``raw1:`` digest are checked in that format and move to ``raw2:``.
Either way a rewritten consumed record is refused and an untouched log continues."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pytest

import dpcr
from dpcr.changelog import CLOCK_TABLE, SqliteSource, install_triggers, load, raw_digest
from dpcr.errors import StoreError
from dpcr.noise import simulation_randomness
from release.helpers import zones_release

CUT = "2025-01-03T00:00:00Z"
END = "2025-01-06T00:00:00Z"


def _log(db: Path, days: range) -> None:
    """Tickets bought, changed and cancelled on the given days of January 2025."""
    new = not db.exists()
    with sqlite3.connect(db) as con:
        if new:
            con.execute("CREATE TABLE t (id TEXT PRIMARY KEY, zone TEXT)")
    if new:
        install_triggers(db, "t", key="id")
    with sqlite3.connect(db) as con:
        for day in days:
            for i in range(6):
                con.execute(f"DELETE FROM {CLOCK_TABLE}")
                con.execute(f"INSERT INTO {CLOCK_TABLE} (ts) VALUES (?)",
                            (f"2025-01-0{day}T0{i}:00:00Z",))  # fmt: skip
                key = f"{day}-{i}"
                con.execute("INSERT INTO t VALUES (?, ?)", (key, "ABC"[i % 3]))
                if i % 2:
                    con.execute("UPDATE t SET zone = 'C' WHERE id = ?", (key,))
                if i % 3 == 2:
                    con.execute("DELETE FROM t WHERE id = ?", (key,))
    con.close()


def _release(tmp: Path) -> dpcr.ContinualRelease:
    return zones_release(dpcr.sources.Sqlite(path=tmp / "app.sqlite"), tmp)


def _digest(release: dpcr.ContinualRelease) -> str:
    with sqlite3.connect(release.store_path) as con:
        row = con.execute("SELECT value FROM meta WHERE key = 'source_digest'").fetchone()
    con.close()
    return str(row[0])


def _to_raw1(release: dpcr.ContinualRelease) -> None:
    """Make the store one written before raw2 digests: its position the raw1 digest of the
    records it consumed."""
    with sqlite3.connect(release.store_path) as con:
        records = int(con.execute(
            "SELECT value FROM meta WHERE key = 'source_records'").fetchone()[0])  # fmt: skip
    ddb = duckdb.connect()
    load(SqliteSource(path=Path(release.source.path)), ddb)  # type: ignore[attr-defined]
    digest = "raw1:" + raw_digest(ddb, "changelog", records)
    with sqlite3.connect(release.store_path) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'source_digest'", (digest,))
    con.close()


def _rewrite(db: Path, sql: str) -> None:
    with sqlite3.connect(db) as con:
        con.execute(sql)
    con.close()


REWRITES = {
    "a field": "UPDATE dpcr_changelog SET after = replace(after, '\"A\"', '\"B\"') WHERE seq = 1",
    "NULL to empty": "UPDATE dpcr_changelog SET before = '' WHERE seq = 1",
    "a swapped pair": "UPDATE dpcr_changelog SET entry = CASE seq WHEN 1 THEN (SELECT entry "
    "FROM dpcr_changelog WHERE seq = 2) ELSE (SELECT entry FROM dpcr_changelog WHERE seq = 1) "
    "END, after = CASE seq WHEN 1 THEN (SELECT after FROM dpcr_changelog WHERE seq = 2) ELSE "
    "(SELECT after FROM dpcr_changelog WHERE seq = 1) END WHERE seq IN (1, 2)",
}


@pytest.mark.parametrize("old", [False, True], ids=["raw2 store", "raw1 store"])
def test_an_untouched_log_continues(tmp_path: Path, old: bool) -> None:
    _log(tmp_path / "app.sqlite", range(1, 3))
    release = _release(tmp_path)
    release.run(until=CUT, rng=simulation_randomness(1))
    assert _digest(release).startswith("raw2:")
    if old:
        _to_raw1(release)
    _log(tmp_path / "app.sqlite", range(3, 6))
    result = release.run(until=END, rng=simulation_randomness(2))
    assert result.rows and _digest(release).startswith("raw2:")
    # A store that moved from raw1 holds what a raw2 store holds.
    if old:
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        (fresh / "app.sqlite").write_bytes((tmp_path / "app.sqlite").read_bytes())
        again = _release(fresh)
        again.run(until=CUT, rng=simulation_randomness(1))
        again.run(until=END, rng=simulation_randomness(2))
        assert _digest(again) == _digest(release)


@pytest.mark.parametrize("old", [False, True], ids=["raw2 store", "raw1 store"])
@pytest.mark.parametrize("how", sorted(REWRITES))
def test_a_rewritten_consumed_record_is_refused(tmp_path: Path, old: bool, how: str) -> None:
    db = tmp_path / "app.sqlite"
    _log(db, range(1, 3))
    release = _release(tmp_path)
    release.run(until=CUT, rng=simulation_randomness(1))
    if old:
        _to_raw1(release)
    before = _digest(release)
    _log(db, range(3, 6))
    _rewrite(db, REWRITES[how])
    with pytest.raises(StoreError, match="rewritten history"):
        release.run(until=END, rng=simulation_randomness(2))
    assert _digest(release) == before


def test_a_first_runs_fingerprint_describes_no_more_than_it_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run takes the log's fingerprint while the log loads. A row appended after the
    fingerprint's snapshot (here: before the load begins) is not described by it, so the next
    run loads it rather than taking the log for unchanged."""
    from dpcr.engines import duckdb_step
    from dpcr.release import _loop

    db = tmp_path / "app.sqlite"
    _log(db, range(1, 3))
    release = _release(tmp_path)
    beside = _loop._fingerprint_beside

    def then_append(settings: dpcr.ContinualRelease) -> object:
        taking = beside(settings)
        _log(db, range(3, 4))
        return taking

    monkeypatch.setattr(_loop, "_fingerprint_beside", then_append)
    release.run(until=END, rng=simulation_randomness(1))
    monkeypatch.undo()
    with sqlite3.connect(release.store_path) as con:
        stored = con.execute("SELECT value FROM meta WHERE key = 'source_fingerprint'").fetchone()
    con.close()
    now = _loop.source_fingerprint(release)
    assert stored[0] and now and stored[0] != now
    assert "[22, 22]" in stored[0] and "[33, 33]" in now  # (rows, largest rowid)
    # The next run is no rerun of an unchanged log: it loads the appended rows.
    loads: list[int] = []
    real = duckdb_step.load_positioned

    def counting(*args: object, **kw: object) -> object:
        loads.append(1)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(duckdb_step, "load_positioned", counting)
    release.run(until=END, rng=simulation_randomness(2))
    assert loads
    # Then it is unchanged: a rerun loads nothing.
    loads.clear()
    release.run(until=END, rng=simulation_randomness(3))
    assert not loads


def test_load_calls_on_read_once_when_the_source_is_in_the_engine(tmp_path: Path) -> None:
    """``on_read`` comes once, after the log's rows are staged in the connection and before
    the output table exists; a source that cannot be read never calls it."""
    _log(tmp_path / "app.sqlite", range(1, 3))
    con = duckdb.connect()
    seen: list[tuple[int, bool]] = []

    def on_read() -> None:
        staged = con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name LIKE '%_rows'"
        ).fetchone()
        out = con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'changelog'"
        ).fetchone()
        seen.append((int(staged[0]) if staged else 0, bool(out and out[0])))

    report = load(SqliteSource(path=tmp_path / "app.sqlite"), con, on_read=on_read)
    assert report.valid > 0
    assert seen == [(1, False)]
    seen.clear()
    with pytest.raises(Exception, match="no such file"):
        load(SqliteSource(path=tmp_path / "missing.sqlite"), con, on_read=on_read)
    assert seen == []


def test_a_logs_run_computes_the_intervals_after_the_log_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The intervals of the rows a run publishes are computed beside the data step, but for a
    SQLite log (read by Python code) only once the log has been read: the two would share the
    interpreter. The warm-up, if it did not wait, starts at once, and the read waits up to half
    a second for it to start."""
    import threading

    from dpcr.changelog import _load
    from dpcr.release import _loop

    _log(tmp_path / "app.sqlite", range(1, 3))
    events: list[str] = []
    started = threading.Event()
    warm, stage = _loop.warm_intervals, _load.stage

    def warming(*args: object, **kw: object) -> None:
        events.append("warm")
        started.set()
        warm(*args, **kw)  # type: ignore[arg-type]

    def staging(*args: object, **kw: object) -> object:
        started.wait(0.5)
        out = stage(*args, **kw)  # type: ignore[arg-type]
        events.append("read")
        return out

    monkeypatch.setattr(_loop, "warm_intervals", warming)
    monkeypatch.setattr(_load, "stage", staging)
    result = _release(tmp_path).run(until=CUT, rng=simulation_randomness(1))
    assert result.rows and events == ["read", "warm"]


def test_a_failed_log_read_leaves_no_computation_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load that fails before the log is read still lets the waiting warm-up go: the worker
    is free for the next run (a worker left waiting would also hold the process at exit)."""
    from dpcr.changelog import _load
    from dpcr.release import _loop

    _log(tmp_path / "app.sqlite", range(1, 3))

    def failing(*args: object, **kw: object) -> object:
        raise OSError("disk gone")

    monkeypatch.setattr(_load, "stage", failing)
    with pytest.raises(OSError, match="disk gone"):
        _release(tmp_path).run(until=CUT, rng=simulation_randomness(1))
    assert _loop._WARMER.submit(lambda: 1).result(timeout=30) == 1
