"""A session over a wal2json changelog (what ``dpcr follow`` on PostgreSQL steps over) releases
from memory what the SQL steps release, byte for byte with the same seed, and leaves the same
incremental state (table ``keys`` of the LSNs included): random changelogs as the capture
writes them (a snapshot, then transactions with begin and commit lines, changes of another
table, inserts, updates with and without their old row, deletes, re-inserts, integer and text
keys, values clamped, halves, null, missing), with days holding a record the fast path refuses
(a replayed LSN, a key moved by an update, a truncate, a late or pending change, a value
given as text, a time in another form) that the SQL step reads; commit times in UTC and in
zones east and west of it."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

import dpcr
import dpcr.engines.duckdb_memory as memory
from dpcr.engines import _wal2json
from dpcr.noise import simulation_randomness
from dpcr.release._engine import engine_request
from dpcr.timeutil import format_timestamp

from .memory_helpers import assert_same_steps, noting, session_steps
from .test_memory_step import _COMPARED, _state

DAY_S = 86_400
T0_S = 1_767_225_600  # 2026-01-01T00:00:00Z
DAYS = 16
ODD = {3: "replayed", 4: "again", 5: "moved", 7: "pending", 9: "truncate", 10: "text",
       12: "iso", 14: "quiet", 15: "others", 16: "late"}  # fmt: skip


def _stamp(seconds: float, zone: int = 0) -> str:
    """The time as PostgreSQL prints it in a zone ``zone`` minutes east of UTC."""
    whole = int(seconds)
    us = round((seconds - whole) * 1e6)
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(whole + 60 * zone))
    hours, minutes = divmod(abs(zone), 60)
    offset = f"{'-' if zone < 0 else '+'}{hours:02d}" + (f":{minutes:02d}" if minutes else "")
    return f"{text}.{us:06d}".rstrip("0").rstrip(".") + offset


def _row(entry: Any, values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "id", "type": "integer", "value": entry},
            *({"name": k, "type": "numeric", "value": v} for k, v in values.items())]  # fmt: skip


def _value(rng: random.Random) -> dict[str, Any]:
    kind = rng.random()
    if kind < 0.08:
        return {}
    if kind < 0.14:
        return {"v": None}
    if kind < 0.3:
        return {"v": rng.choice([-4.5, -2.5, -1.25, 0.5, 1.5, 2.5, 9.5, 10.5])}
    if kind < 0.5:
        return {"v": rng.randint(-20, 20), "w": "x"}
    return {"v": round(rng.uniform(-8, 14), 3)}


class _Log:
    """The capture's lines: LSNs rising, a transaction's changes between its begin and
    commit."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lsn = 0x1000000
        self.live: dict[Any, dict[str, Any]] = {}
        self.gone: list[Any] = []
        self.serial = 0
        self.seen: dict[Any, str] = {}  # (an entry's last LSN)

    def lsn_text(self, step: int = 0) -> str:
        self.lsn += step or self.rng.randint(40, 400)
        return f"{self.lsn >> 32:X}/{self.lsn & 0xFFFFFFFF:X}"

    def message(self, action: str, ts: str, **more: Any) -> str:
        m = {"action": action, "xid": 7, "timestamp": ts, "lsn": self.lsn_text(), **more}
        row = more.get("columns") or more.get("identity")
        if more.get("table") == "t" and row:
            self.seen[row[0]["value"]] = str(m["lsn"])
        return json.dumps(m, separators=(",", ":"))

    def inserted(self) -> Any:
        """An entry inserted now (one deleted before, or a new one) with its values."""
        rng = self.rng
        if self.gone and rng.random() < 0.2:
            entry = self.gone.pop(rng.randrange(len(self.gone)))
        else:
            self.serial += 1
            entry = self.serial if self.serial % 3 else f"e-{self.serial}"
        self.live[entry] = _value(rng)
        return entry

    def change(self, ts: str) -> str:
        rng, live = self.rng, self.live
        roll = rng.random()
        where = {"schema": "public", "table": "t"}
        if roll < 0.35 or not live:
            entry = self.inserted()
            return self.message("I", ts, **where, columns=_row(entry, live[entry]))
        entry = rng.choice(sorted(live, key=str))
        if roll < 0.85:
            old, live[entry] = live[entry], _value(rng)
            identity = {"identity": _row(entry, old)} if rng.random() < 0.8 else {}
            return self.message("U", ts, **where, columns=_row(entry, live[entry]), **identity)
        self.gone.append(entry)
        return self.message("D", ts, **where, identity=_row(entry, live.pop(entry)))


def _days(seed: int) -> list[list[str]]:
    """The changelog's lines per day: day 1 begins with the table's snapshot."""
    rng = random.Random(seed)
    log = _Log(rng)
    out = []
    snapshot = []
    for _ in range(30):
        log.serial += 1
        entry = log.serial if log.serial % 3 else f"e-{log.serial}"
        log.live[entry] = _value(rng)
        snapshot.append(json.dumps({"action": "I", "lsn": "0/FFFFFF", "timestamp":
                                    _stamp(T0_S - 5), "schema": "public", "table": "t",
                                    "snapshot": True, "columns": _row(entry, log.live[entry])}))
    for day in range(1, DAYS + 1):
        lines = snapshot if day == 1 else []
        if ODD.get(day) in ("quiet", "others"):  # (nothing new; tombstones and another table)
            ts = _stamp(T0_S + day * DAY_S - 99)
            out.append([] if ODD[day] == "quiet" else [
                log.message("B", ts), log.message("I", ts, schema="public", table="other",
                                                  columns=[{"name": "k", "value": 1}]),
                log.message("C", ts)])  # fmt: skip
            continue
        times = sorted(T0_S + (day - 1) * DAY_S + rng.random() * (DAY_S - 60)
                       for _ in range(rng.randint(8, 20)))  # fmt: skip
        for t in times:
            ts = _stamp(t, rng.choice([0, 0, 0, 330, -480]))
            lines.append(log.message("B", ts))
            for _ in range(rng.randint(1, 4)):
                lines.append(log.change(ts))
            if rng.random() < 0.2:
                lines.append(log.message("I", ts, schema="public", table="other",
                                         columns=[{"name": "k", "value": 1}]))  # fmt: skip
            lines.append(log.message("C", ts))
        lines.extend(_odd(ODD.get(day), log, T0_S + day * DAY_S))
        out.append(lines)
    return out


def _odd(kind: str | None, log: _Log, end: int) -> list[str]:
    """A transaction the fast path refuses (and the SQL step reads), at the end of a day."""
    where = {"schema": "public", "table": "t"}
    ts = _stamp(end - 9)
    entry = sorted(log.live, key=str)[0] if log.live else None
    if kind is None or entry is None:
        return []
    if kind == "replayed":  # (the change before, sent again: a duplicate of its entry)
        line = log.message("U", ts, **where, columns=_row(entry, {"v": 1}))
        log.lsn -= 1000
        again = json.loads(log.message("U", ts, **where, columns=_row(entry, {"v": 2})))
        first = json.loads(line)
        again["lsn"] = log.seen[entry] = first["lsn"]
        log.live[entry] = {"v": 2}
        return [line, json.dumps(again, separators=(",", ":"))]
    if kind == "again":  # (an LSN an earlier day gave the entry: a duplicate of the state's)
        lsn = log.seen[entry]
        again = json.loads(log.message("U", ts, **where, columns=_row(entry, {"v": 5})))
        again["lsn"] = lsn
        log.live[entry] = {"v": 5}
        return [json.dumps(again, separators=(",", ":"))]
    if kind == "moved":
        log.serial += 1
        values = log.live.pop(entry)
        log.live[log.serial] = values
        return [log.message("U", ts, **where, columns=_row(log.serial, values),
                            identity=_row(entry, values))]  # fmt: skip
    if kind == "pending":
        log.serial += 1
        log.live[log.serial] = {"v": 2}
        return [log.message("I", _stamp(end + 7), **where, columns=_row(log.serial, {"v": 2}))]
    if kind == "truncate":
        return [log.message("T", ts, **where)]
    if kind == "text":
        log.live[entry] = {"v": "3"}
        return [log.message("U", ts, **where, columns=_row(entry, {"v": "3"}))]
    if kind == "late":
        log.serial += 1
        log.live[log.serial] = {"v": 1}
        return [log.message("I", _stamp(T0_S + 100), **where,
                            columns=_row(log.serial, {"v": 1}))]  # fmt: skip
    assert kind == "iso"  # (a form the loader reads and the fast path does not)
    return [log.message("U", ts.replace(" ", "T"), **where, columns=_row(entry, {"v": 4}))]


def _release(tmp: Path, k: int) -> dpcr.ContinualRelease:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Wal2json(path=tmp / "log.jsonl", key="id", table="public.t"),
        constraint=dpcr.AtMostK(k=k),
        plan=dpcr.DisjointRelease(start=format_timestamp(T0_S * 10**6), period="1d"),
        queries=[
            dpcr.Count(name="live"),
            dpcr.Sum(name="v", column="v", lower=0, upper=10),
            dpcr.Sum(name="neg", column="v", lower=-4, upper=-1, grid=0.5),
        ],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
        on_error="quarantine",
    )


def _year(
    tmp: Path, days: list[list[str]], *, fast: bool, k: int, monkeypatch: pytest.MonkeyPatch,
    make: Any = None,
) -> tuple[list[Any], dict[str, Any], list[bool]]:
    """Each day's step in one session: per step the rows, diagnostics and public files; the
    state at the end; per step whether it ran from memory. ``make(tmp, k)``: the release
    (default :func:`_release`)."""
    tmp.mkdir()
    release = (make or _release)(tmp, k)
    out, taken = session_steps(release, days, fast=fast, compared=_COMPARED,
                               until=lambda day: format_timestamp((T0_S + day * DAY_S) * 10**6),
                               monkeypatch=monkeypatch)  # fmt: skip
    return out, _state(release), taken


def memory_equals_sql(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, days: list[list[str]],
                      k: int, make: Any) -> tuple[dict[str, Any], list[bool]]:  # fmt: skip
    """A session's steps over ``days`` of the release ``make(tmp, k)`` from memory where they
    are taken and in SQL every one: the same rows, diagnostics and public files every day,
    the same state at the end; that state and which steps ran from memory."""
    fast, fast_state, taken = _year(tmp_path / "fast", days, fast=True, k=k,
                                    monkeypatch=monkeypatch, make=make)  # fmt: skip
    sql, sql_state, _ = _year(tmp_path / "sql", days, fast=False, k=k, monkeypatch=monkeypatch,
                              make=make)  # fmt: skip
    assert_same_steps(fast, sql, fast_state, sql_state, len(days))
    return sql_state, taken


@pytest.mark.parametrize(("seed", "k"), [(0, 3), (1, 2), (2, 50)])
def test_wal2json_memory_steps_equal_sql_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               seed: int, k: int) -> None:  # fmt: skip
    sql_state, taken = memory_equals_sql(tmp_path, monkeypatch, _days(seed), k, _release)
    assert sql_state["keys"]  # (the LSNs are kept: the state's sequence numbers are explicit)
    # from memory: every day after the first (14: nothing new, 15: no change of the table)
    # but those with a record refused (3, 4, 5, 9, 10, 12, 16); day 7 leaves a record
    # pending (held), which day 8 settles
    from_memory = [day for day, got in enumerate(taken[1:], start=2) if got]
    assert from_memory == [2, 6, 7, 8, 11, 13, 14, 15], from_memory


def test_accepts() -> None:
    base = _release(Path("/nonexistent"), 3)
    assert memory.accepts(engine_request(base))
    import dataclasses

    two = dataclasses.replace(base, source=dpcr.sources.Wal2json(
        path=Path("/nonexistent"), key=("id", "zone"), table="public.t"))  # fmt: skip
    assert not memory.accepts(engine_request(two))


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"action":"I","lsn":"0/1","timestamp":"2026-01-01 00:00:00+00","columns":[]}', "key"),
        ('{"action":"I","lsn":"0/1","timestamp":"2026-01-01 00:00:00+00","columns":'
         '[{"name":"id","value":1},{"name":"id","value":2}]}', "repeated column"),
        ('{"action":"I","action":"I","lsn":"0/1","timestamp":"2026-01-01 00:00:00+00",'
         '"columns":[{"name":"id","value":1}]}', "repeated key"),
        ('{"action":"I","timestamp":"2026-01-01 00:00:00+00","columns":'
         '[{"name":"id","value":1}]}', "no lsn"),
        ('{"action":"I","lsn":"0/1","timestamp":"2026-02-30 00:00:00+00","columns":'
         '[{"name":"id","value":1}]}', "no such day"),
        ('{"action":"I","lsn":"0/1","timestamp":"2026-01-01 00:00:00+00","columns":'
         '[{"name":"id","value":-0}]}', "-0"),
        ('{"action":"I","lsn":"0/1","timestamp":"2026-01-01 00:00:00+00","columns":'
         '[{"name":"id","value":1.5}]}', "a fraction"),
        ('{"action":"I","lsn":"0/1","timestamp":"2026-01-01 00:00:00+00","columns":'
         '[{"name":"id","value":1},{"name":"v","value":NaN}]}', "NaN"),
        ('{"action":"I","lsn":"0/1","timestamp":"2026-01-01 00:00:00+00","columns":'
         '[{"name":"id","value":1},{"name":"v","value":true}]}', "a boolean"),
        ('{"action":"D","lsn":"0/1","timestamp":"2026-01-01 00:00:00+00","columns":'
         '[{"name":"id","value":1}]}', "a delete's row after"),
        ('{"action":"I","lsn":"0/1","timestamp":"2026-01-01 00:00:00+00","columns":'
         '[{"name":"id","value":1}],"identity":[{"name":"id","value":1}]}', "an insert's before"),
        (' {"action":"B","lsn":"0/1","timestamp":"2026-01-01 00:00:00+00"}', "a blank first"),
    ],
)
def test_lines_refused(line: str, why: str) -> None:
    ok = '{"action":"I","lsn":"0/2","timestamp":"2026-01-01 00:00:00.5+00","columns":' \
        '[{"name":"id","value":"a b"},{"name":"v","value":2.5}]}'  # fmt: skip
    got = _wal2json.read(f"{ok}\n".encode(), key="id", table=None, columns=("v",))
    assert got is not None and got.entries == ["a b"] and got.ts.tolist() == [
        1_767_225_600_500_000] and got.seq.tolist() == [2] and got.values["v"].tolist() == [2.5]
    assert _wal2json.read(f"{ok}\n{line}\n".encode(), key="id", table=None,
                          columns=("v",)) is None, why  # fmt: skip


def test_a_json_lines_step_with_nothing_new_runs_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's step over a JSON-lines file that gained nothing (a quiet interval) runs from
    memory too, and releases and leaves what the SQL step does (which settles no row)."""
    from . import test_memory_step as jsonl

    days = [*jsonl._days(0)[:2], [], []]
    monkeypatch.setattr(jsonl, "DAYS", len(days))
    got = {}
    for fast in (True, False):
        got[fast] = jsonl._year(tmp_path / str(fast), days, fast=fast, k=3,
                                monkeypatch=monkeypatch)  # fmt: skip
    assert got[True][0] == got[False][0]
    assert got[True][1] == got[False][1]
    assert got[True][2] == 3  # (days 2 to 4)


#: A session over wal2json days that dies without closing anything (as ``kill -9`` would)
#: after ``stop`` steps, the last ones settled in memory only.
_DIES = """
import json, os, sys
from pathlib import Path
sys.path[:0] = {paths!r}
from release import {module} as w
from dpcr.noise import simulation_randomness
from dpcr.timeutil import format_timestamp
tmp = Path({tmp!r})
session = w._release(tmp, 2).session()
days = json.loads((tmp / "days.json").read_text())
for day, lines in enumerate(days[:{stop}], start=1):
    with (tmp / "log.jsonl").open("a", encoding="utf-8") as f:
        f.write("".join(line + "\\n" for line in lines))
    session.run(until=format_timestamp((w.T0_S + day * w.DAY_S) * 10**6),
                rng=simulation_randomness(11))
    held = session.held._held
    print(len(held.pending) if held is not None else -1, flush=True)
os._exit(0)
"""


def _day(session: Any, tmp: Path, lines: list[str], day: int) -> tuple[Any, Any]:
    """Append ``lines`` to the changelog and release day ``day`` in ``session``: its rows
    and diagnostics (without the quarantine file's name and the timings)."""
    with (tmp / "log.jsonl").open("a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    result = session.run(until=format_timestamp((T0_S + day * DAY_S) * 10**6),
                         rng=simulation_randomness(11))  # fmt: skip
    diagnostics = json.loads(json.dumps(result.diagnostics, default=str))
    diagnostics["changelog"].pop("quarantine_file", None)
    diagnostics.pop("timing", None)
    return result.rows, diagnostics


def _killed(tmp: Path, days: list[list[str]], stop: int,
            module: str = __name__) -> list[int]:  # fmt: skip
    """Run :data:`_DIES` (the release of the test module ``module``) over ``days`` in a
    process killed after ``stop`` steps: per step, the steps it held not written (-1: it held
    none)."""
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    (tmp / "days.json").write_text(json.dumps(days))
    code = _DIES.format(paths=[str(here.parent), *sys.path], tmp=str(tmp), stop=stop,
                        module=module.rsplit(".", 1)[-1])  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [int(x) for x in proc.stdout.split()]


def _session(tmp: Path, days: list[list[str]], first: int, last: int,
             make: Any = None) -> tuple[Any, Any]:  # fmt: skip
    """A session releasing days ``first`` .. ``last``, then closed: per step its rows and
    diagnostics, and the state it leaves without the counts of settles (seed version, rows).
    ``make(tmp, k)``: the release (default :func:`_release`)."""
    release = (make or _release)(tmp, 2)
    out = []
    with release.session() as session:
        for day in range(first, last + 1):
            out.append(_day(session, tmp, days[day - 1], day))
    state = _state(release)
    state["counters"] = [(k, v) for k, v in state["counters"]
                         if k != "version" and not k.startswith("rows:")]  # fmt: skip
    return out, state


@pytest.mark.parametrize("stop", [2, 6])
def test_a_killed_follow_session_is_replayed_not_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: int
) -> None:
    """``dpcr follow`` killed after ``stop`` steps over a wal2json file, ``stop - 1`` of them
    from memory and not written: the next session replays the lines those steps read (no
    rebuild), and releases and leaves what a session that was never killed does."""
    import sys

    monkeypatch.setattr(sys.modules[__name__], "ODD", {})
    killed_follow_is_replayed(tmp_path, monkeypatch, stop, _days(5)[:10], __name__, _release)


def killed_follow_is_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: int, days: list[list[str]],
    module: str, make: Any,
) -> None:
    """The test above over ``days`` of the release ``make(tmp, k)``, with the killed session
    run from the test module ``module`` (its ``_release``, ``T0_S`` and ``DAY_S``)."""
    import dpcr.engines.duckdb_replay as replayed
    from dpcr.engines import state as inc_state

    calls: list[bool] = []
    rebuilds: list[int] = []
    keep = noting(replayed.replay, calls, lambda got: got is not None)
    create = noting(inc_state.create_tables, rebuilds, lambda _: 1)
    monkeypatch.setattr(replayed, "REPLAY_SHARE", 1.0)
    results = {}
    for name in ("killed", "never"):
        tmp = tmp_path / name
        tmp.mkdir()
        (tmp / "log.jsonl").write_bytes(b"")
        if name == "never":
            _session(tmp, days, 1, stop, make)
        else:
            # (the first step reads the whole file in SQL; none of the next ones was written)
            assert _killed(tmp, days, stop, module) == [-1, *range(1, stop)]
        monkeypatch.setattr(replayed, "replay", keep)
        monkeypatch.setattr(inc_state, "create_tables", create)
        calls.clear()
        rebuilds.clear()
        first = _session(tmp, days, stop + 1, stop + 1, make)
        assert (calls, bool(rebuilds)) == {"killed": ([True], False),
                                           "never": ([], False)}[name], name  # fmt: skip
        results[name] = (first, _session(tmp, days, stop + 2, len(days), make))
        assert not rebuilds
    assert results["killed"] == results["never"]
    assert any(rows for rows, _ in results["killed"][1][0])


def test_commit_times_read_as_the_loader_reads_them() -> None:
    """Each commit time the fast path reads gives the µs the loader's SQL gives it
    (:func:`dpcr.changelog._sql.ts_expr`); those it refuses are other forms."""
    import duckdb

    from dpcr.changelog._sql import ts_expr

    texts = ["2026-01-01 00:00:00+00", "2026-01-01 00:00:00.5+00", "2024-02-29 23:59:59.999999+00",
             "1999-12-31 23:59:59.000001-08", "2026-06-30 12:00:00.31688+05:30",
             "2026-03-01 00:30:00+14", "2026-03-01 00:30:00-12:45", "0001-01-01 00:00:00+00",
             "9999-12-31 23:59:59.999999+00", "1970-01-01 00:00:00+14:59"]  # fmt: skip
    refused = ["2026-01-01T00:00:00+00", "2026-01-01 00:00:00 UTC", "2026-01-01 00:00:00+15",
               "2026-01-01 00:00:00+0530", "2026-01-01 00:00:00+00:60", "2026-13-01 00:00:00+00",
               "2026-01-01 24:00:00+00", "2026-01-01 00:00:00"]  # fmt: skip
    con = duckdb.connect()
    for text in texts:
        line = json.dumps({"action": "I", "lsn": "0/1", "timestamp": text,
                           "columns": [{"name": "id", "value": 1}]})  # fmt: skip
        got = _wal2json.read(f"{line}\n".encode(), key="id", table=None, columns=())
        want = con.execute(f"SELECT {ts_expr('x', 1_000_000)} FROM (SELECT ? AS x)",
                           [text]).fetchone()  # fmt: skip
        assert got is not None and want is not None and got.ts.tolist() == [want[0]], text
    for text in refused:
        line = json.dumps({"action": "I", "lsn": "0/1", "timestamp": text,
                           "columns": [{"name": "id", "value": 1}]})  # fmt: skip
        assert _wal2json.read(f"{line}\n".encode(), key="id", table=None, columns=()) is None
