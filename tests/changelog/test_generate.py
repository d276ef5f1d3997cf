"""The transit demo generator: deterministic, valid in every format, and shaped like its story."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path
from types import ModuleType

import duckdb
import numpy as np
import pytest

from dpcr.changelog import REASONS, DebeziumSource, JsonlSource, SqliteSource, load
from dpcr.changelog._set_aside import SET_ASIDE_REASONS

from .helpers import table

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "transit" / "generate.py"
TEXT_FILES = ("changelog.jsonl", "debezium.jsonl", "malformed.jsonl")
DAY_MS = 86_400_000


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("transit_generate", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data(gen: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("transit")
    gen.generate(out, seed=3, scale=0.004)
    return out


def _log(db: Path) -> list[tuple[object, ...]]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT * FROM dpcr_changelog ORDER BY seq").fetchall()
    finally:
        con.close()


def test_same_seed_same_bytes(gen: ModuleType, data: Path, tmp_path: Path) -> None:
    again, other = tmp_path / "again", tmp_path / "other"
    argv = ["--out", str(again), "--seed", "3", "--scale", "0.004", "--quiet", "--serial"]
    assert gen.main(argv) == 0
    for name in TEXT_FILES:
        assert (again / name).read_bytes() == (data / name).read_bytes(), name
    assert _log(again / "transit.sqlite") == _log(data / "transit.sqlite")
    gen.generate(other, seed=4, scale=0.004)
    assert (other / "changelog.jsonl").read_bytes() != (data / "changelog.jsonl").read_bytes()


def test_if_missing_skips_existing_outputs(gen: ModuleType, data: Path, capsys) -> None:
    before = {n: (data / n).stat().st_mtime_ns for n in gen.OUTPUTS}
    assert gen.main(["--out", str(data), "--if-missing"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert {n: (data / n).stat().st_mtime_ns for n in gen.OUTPUTS} == before


def test_every_output_loads_to_the_same_valid_changelog(data: Path) -> None:
    con = duckdb.connect()
    reports = {
        "jsonl": load(JsonlSource(path=data / "changelog.jsonl"), con, table="j",
                      unit_column="rider_id"),
        "debezium": load(DebeziumSource(path=data / "debezium.jsonl", key="ticket_id"), con,
                         table="d", unit_column="rider_id"),
        "sqlite": load(SqliteSource(path=data / "transit.sqlite"), con, table="s",
                       unit_column="rider_id"),
    }  # fmt: skip
    n = reports["jsonl"].records
    assert all(r.valid == n and not r.quarantined for r in reports.values())
    deletes = con.execute("SELECT count(*) FROM j WHERE op = 'delete'").fetchall()[0][0]
    assert reports["debezium"].tombstones == deletes
    jsonl = table(con, "j")
    assert table(con, "s") == jsonl
    # Debezium's tombstone lines shift its record numbers; everything else is the same.
    assert [r[1:] for r in table(con, "d")] == [r[1:] for r in jsonl]
    kinds = con.execute("SELECT DISTINCT after ->> 'kind' FROM j WHERE op = 'insert'").fetchall()
    assert sorted(kinds) == [("monthly",), ("multi",)]


def test_malformed_has_two_records_of_every_reason(data: Path, tmp_path: Path) -> None:
    report = load(
        JsonlSource(path=data / "malformed.jsonl"),
        duckdb.connect(),
        on_error="quarantine",
        quarantine_path=tmp_path / "q.jsonl",
        unit_column="rider_id",
    )
    # (every reason but those of records set aside when read: too long, not UTF-8, CSV)
    assert dict(report.quarantined) == {reason: 2 for reason in REASONS
                                        if reason not in SET_ASIDE_REASONS}  # fmt: skip
    assert report.valid >= 30


def test_tickets_follow_their_constraints_except_about_one_percent(gen: ModuleType) -> None:
    tickets, ev = gen.make_events(11, 0.05)
    n = tickets.ticket_id.size
    counts = np.bincount(ev.ticket, minlength=n)
    first = np.full(n, np.iinfo(np.int64).max)
    last = np.zeros(n, dtype=np.int64)
    np.minimum.at(first, ev.ticket, ev.ts_ms)
    np.maximum.at(last, ev.ticket, ev.ts_ms)
    multi, monthly = ~tickets.monthly, tickets.monthly
    too_many = multi & (counts > 12)
    too_late = monthly & (last - first > 31 * DAY_MS)
    assert 0.002 < too_many.sum() / multi.sum() < 0.02
    assert 0 < too_late.sum() / monthly.sum() < 0.03
    assert (ev.ts_ms >= gen.YEAR_START_MS).all() and (ev.ts_ms < gen.YEAR_END_MS).all()
    assert (np.diff(ev.ts_ms) >= 0).all()  # in time order
    # About ten mutations per ticket: 10^6 mutations for 10^5 tickets at scale 1.
    assert 8 < ev.ts_ms.size / n < 13
    # Rides: multi-ride tickets at most 10 (violators more), monthly passes many.
    rides = np.zeros(n, dtype=np.int64)
    np.maximum.at(rides, ev.ticket, ev.rides)
    assert rides[multi & ~too_many].max() <= 10
    assert np.median(rides[monthly]) > 15
