"""A session's steps from memory (:mod:`dpcr.release._memory`) release what the SQL steps
release, byte for byte with the same seed, and leave the same incremental state: random
changelogs of every shape the fast path takes (inserts, updates, deletes, re-inserts, integer
and text entries, values clamped, halves, null, missing, out of time order, drops past k),
with days of records it refuses (bad lines, quarantined mutations, late and pending records,
sequence numbers, repeated keys) in between, which the SQL step reads."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import duckdb
import pytest

import dpcr
import dpcr.engines.duckdb_memory as memory
from dpcr.engines.state import DICT_BASE, SCHEMA
from dpcr.noise import simulation_randomness
from dpcr.release._engine import engine_request
from dpcr.timeutil import format_timestamp

from .memory_helpers import assert_same_steps, session_steps

DAY = 86_400_000_000
T0 = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
DAYS = 16
#: Days whose records include one the fast path refuses.
ODD = {3: "blank", 5: "quarantined", 7: "pending", 10: "malformed", 13: "repeated", 15: "seq",
       16: "late"}  # fmt: skip


def _value(rng: random.Random) -> dict[str, Any]:
    kind = rng.random()
    if kind < 0.08:
        return {}
    if kind < 0.14:
        return {"v": None}
    if kind < 0.3:
        return {"v": rng.choice([-4.5, -2.5, -1.25, 0.5, 1.5, 2.5, 9.5, 10.5, 1e18])}
    if kind < 0.5:
        return {"v": rng.randint(-20, 20), "w": "x"}
    return {"v": round(rng.uniform(-8, 14), 3)}


def _days(seed: int) -> list[list[str]]:
    """The changelog's lines per day (1 .. DAYS), each day's in time order but a few."""
    rng = random.Random(seed)
    live: dict[Any, dict[str, Any]] = {}
    gone: list[Any] = []
    out = []
    serial = 0
    for day in range(1, DAYS + 1):
        records = []
        count = rng.randint(20, 60)
        times = sorted(T0 + (day - 1) * DAY + rng.randrange(DAY) for _ in range(count))
        for ts in times:
            roll = rng.random()
            if roll < 0.35 or not live:
                if gone and rng.random() < 0.2:
                    entry = gone.pop(rng.randrange(len(gone)))
                else:
                    serial += 1
                    entry = serial if serial % 3 else f"e-{serial}"
                after = _value(rng)
                rec = {"entry": entry, "ts": ts, "op": "insert", "before": None, "after": after}
                live[entry] = after
            elif roll < 0.85:
                entry = rng.choice(sorted(live, key=str))
                after = _value(rng)
                rec = {"entry": entry, "ts": ts, "op": "update", "before": live[entry],
                       "after": after}  # fmt: skip
                if rng.random() < 0.2:
                    del rec["before"]
                live[entry] = after
            else:
                entry = rng.choice(sorted(live, key=str))
                rec = {"entry": entry, "ts": ts, "op": "delete", "before": live.pop(entry)}
                if rng.random() < 0.5:
                    rec["after"] = None
                gone.append(entry)
            records.append(rec)
        for _ in range(3):  # a few lines out of time order (the histories go by time)
            i = rng.randrange(len(records) - 1)
            records[i], records[i + 1] = records[i + 1], records[i]
        lines = [json.dumps(r, separators=(",", ":")) for r in records]
        odd = ODD.get(day)
        if odd == "blank":
            lines.insert(3, "")
        elif odd == "quarantined":
            lines.append(json.dumps({"entry": "never", "ts": T0 + day * DAY - 5, "op": "update",
                                     "after": {"v": 1}}))  # fmt: skip
        elif odd == "late":
            lines.append(json.dumps({"entry": "late", "ts": T0 + DAY, "op": "insert",
                                     "after": {"v": 1}}))  # fmt: skip
        elif odd == "pending":
            lines.append(json.dumps({"entry": "soon", "ts": T0 + day * DAY + 7, "op": "insert",
                                     "after": {"v": 2}}))  # fmt: skip
        elif odd == "malformed":
            lines.insert(1, '{"entry": 5, "ts": ')
        elif odd == "seq":
            lines.append(json.dumps({"entry": "s", "ts": T0 + day * DAY - 9, "op": "insert",
                                     "seq": 4, "after": {"v": 3}}))  # fmt: skip
        elif odd == "repeated":
            ts = T0 + day * DAY - 3
            lines.append(f'{{"entry":"r","ts":{ts},"op":"insert","after":{{"v":1,"v":2}}}}')
        out.append(lines)
    return out


def _release(tmp: Path, k: int, queries: list[Any] | None = None) -> dpcr.ContinualRelease:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl", epoch_unit="us"),
        constraint=dpcr.AtMostK(k=k),
        plan=dpcr.DisjointRelease(start=format_timestamp(T0), period="1d"),
        queries=queries or [
            dpcr.Count(name="live"),
            dpcr.Sum(name="v", column="v", lower=0, upper=10),
            dpcr.Sum(name="neg", column="v", lower=-4, upper=-1, grid=0.5),
        ],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
        on_error="quarantine",
    )


def _state(release: dpcr.ContinualRelease) -> dict[str, Any]:
    """The state file's newest seeds (by the texts of their ids), its dictionary's texts and
    every other table, sorted."""
    path = release.store_path.with_name(release.store_path.name + ".state") / "state.duckdb"
    con = duckdb.connect()
    con.execute(f"ATTACH '{path}' AS {SCHEMA} (READ_ONLY)")
    out = {}
    s = SCHEMA

    def text(column: str, names: str) -> str:  # (an integer text is its own id)
        return f"CASE WHEN x.{column} < {DICT_BASE} THEN x.{column}::VARCHAR " \
            f"ELSE {names}.name END"  # fmt: skip

    out["seeds"] = sorted(con.execute(
        f"SELECT {text('u', 'un')}, {text('e', 'en')}, x.* EXCLUDE (u, e, v) FROM (SELECT * "
        f"FROM {s}.seeds QUALIFY row_number() OVER (PARTITION BY u, e ORDER BY v DESC) = 1) x "
        f"LEFT JOIN {s}.names un ON un.id = x.u LEFT JOIN {s}.names en ON en.id = x.e"
    ).fetchall(),
        key=repr)  # fmt: skip
    out["names"] = sorted(con.execute(f"SELECT name FROM {s}.names").fetchall())
    for table in ("meta", "counters", "totals", "clamps", "pending", "qlines", "keys"):
        out[table] = sorted(con.execute(f"SELECT * FROM {SCHEMA}.{table}").fetchall(), key=repr)
    con.close()
    return out


#: The files compared byte for byte after every step: the public releases (a simulation's
#: folder) and the quarantine file.
_COMPARED = ("simulation/releases.csv", "simulation/releases.json",
             "simulation/release-head.json", "operator/quarantine.jsonl")  # fmt: skip


def _year(tmp: Path, days: list[list[str]], *, fast: bool, k: int,
          monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], dict[str, Any], int]:  # fmt: skip
    """Each day's step in one session: per step the rows, diagnostics and public files; the
    state at the end; the steps that ran from memory."""
    tmp.mkdir()
    release = _release(tmp, k)
    out, taken = session_steps(release, days, fast=fast, compared=_COMPARED,
                               until=lambda day: format_timestamp(T0 + day * DAY),
                               monkeypatch=monkeypatch)  # fmt: skip
    return out, _state(release), sum(taken)


@pytest.mark.parametrize(("seed", "k"), [(0, 3), (1, 2), (2, 50)])
def test_memory_steps_equal_sql_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      seed: int, k: int) -> None:  # fmt: skip
    days = _days(seed)
    fast, fast_state, taken = _year(tmp_path / "fast", days, fast=True, k=k,
                                    monkeypatch=monkeypatch)  # fmt: skip
    sql, sql_state, _ = _year(tmp_path / "sql", days, fast=False, k=k, monkeypatch=monkeypatch)
    assert_same_steps(fast, sql, fast_state, sql_state, DAYS)
    # from memory: every day but the first, those with a refused record and the day after the
    # pending record (whose state keeps it pending): days 2, 4, 6, 9, 11, 12 and 14 (after
    # an explicit sequence number, or a freeze point, every step takes the SQL step)
    assert taken == 7, taken


def test_a_fresh_process_continues_from_the_state(tmp_path: Path) -> None:
    """A run without a session (``dpcr run``) after steps from memory releases what it
    releases after SQL steps."""
    days = _days(5)[:7]
    results = []
    for name, fast in (("fast", True), ("sql", False)):
        tmp = tmp_path / name
        tmp.mkdir()
        release = _release(tmp, 3)
        log = tmp / "log.jsonl"
        log.write_bytes(b"")
        real = memory.accepts
        memory_accepts: Any = real if fast else (lambda settings: False)
        import dpcr.engines.duckdb_incremental as inc

        inc.accepts = memory_accepts
        try:
            with release.session() as session:
                for day, lines in enumerate(days[:-1], start=1):
                    with log.open("a", encoding="utf-8") as f:
                        f.write("".join(line + "\n" for line in lines))
                    session.run(until=format_timestamp(T0 + day * DAY),
                                rng=simulation_randomness(2))  # fmt: skip
        finally:
            inc.accepts = real
        with log.open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in days[-1]))
        run = dataclasses.replace(release, until=format_timestamp(T0 + 7 * DAY))
        results.append(run.run(rng=simulation_randomness(2)).rows)
    assert results[0] == results[1]
    assert results[0]


def test_accepts() -> None:
    base = _release(Path("/nonexistent"), 3)
    assert memory.accepts(engine_request(base))
    bounded = dataclasses.replace(base, constraint=dpcr.TimeBounded(bound="2d"))
    assert not memory.accepts(engine_request(bounded))
    nowhere = Path("/nonexistent")
    where = dpcr.Count(name="a", where={"k": ["x"]})
    assert not memory.accepts(engine_request(_release(nowhere, 3, [where])))
    hist = dpcr.Histogram(name="h", column="z", categories=("A",))
    assert not memory.accepts(engine_request(_release(nowhere, 3, [hist])))
    assert memory.accepts(engine_request(_release(nowhere, 3, [dpcr.Count(name="a")])))
