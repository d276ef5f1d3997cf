#!/usr/bin/env python3
"""Generate the synthetic transit ticket database of the demo (paper section 4.6).

A year (2025-01-01 .. 2025-12-31, UTC) of a public-transport ticket table
``tickets(ticket_id, rider_id, kind, zone, fare, rides, status)`` with two kinds of entries:

* **multi-ride tickets** (``kind = "multi"``): inserted at purchase, one update per ride
  (``rides`` + 1), at most 10 rides, then deleted -- right after the 10th ride, or 180 days after
  purchase (an update to ``status = "expired"``, then the delete). At most 12 mutations. About 1 %
  are used 11-14 times (13-16 mutations) so that at-most-k bounding has something to drop.
* **monthly passes** (``kind = "monthly"``): inserted at purchase, 0-3 rides a day for 30 days, an
  update to ``status = "expired"`` at 30 days and the delete within the next day: every mutation is
  within 31 days of purchase. About 1 % ride once more 31-38 days after purchase (and are deleted
  after that ride), outside the 31-day bound.

Events after the end of the year are cut off (those entries are still live at the end). At
``--scale 1`` there are 100,000 tickets (93 % multi-ride) of 40,000 riders and about 10^6 mutations.

Outputs in ``--out`` (default ``examples/transit/data``):

* ``transit.sqlite`` -- the ``tickets`` table after the year, whose every change went through the
  triggers of ``dpcr.changelog.install_triggers`` into ``dpcr_changelog`` (simulated times via the
  ``dpcr_clock`` table);
* ``changelog.jsonl`` -- the canonical changelog (``entry``, ``ts``, ``seq``, ``op``, ``before``,
  ``after``);
* ``debezium.jsonl`` -- the same changes as Debezium envelopes (``fare`` in Debezium's
  ``{"scale", "value"}`` decimal encoding, ``source.lsn`` = the sequence number, a tombstone after
  every delete);
* ``malformed.jsonl`` -- a short canonical changelog with two invalid records of each reason
  (``missing_unit`` with the unit column ``rider_id``).

Same ``--seed`` and ``--scale``: byte-identical text files.
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing as mp
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from dpcr.changelog import CLOCK_TABLE, install_triggers

MS_PER_DAY = 86_400_000
YEAR_START_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
YEAR_END_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
OUTPUTS = ("transit.sqlite", "changelog.jsonl", "debezium.jsonl", "malformed.jsonl")

ZONES = np.array(["A", "B", "C"])
ZONE_P = [0.5, 0.3, 0.2]
MULTI_FARE_CENTS = np.array([1400, 1950, 2600])  # ten rides, by zone
MONTHLY_FARE_CENTS = np.array([4900, 6900, 8900])
CONCESSION_P = 0.25  # half price
MULTI_SHARE = 0.93
MULTI_VALID_DAYS = 180
RIDE_LIMIT = 10
VIOLATION_P = 0.01

OP_INSERT, OP_UPDATE, OP_DELETE = 0, 1, 2
UPD_NONE, UPD_RIDE, UPD_EXPIRE = 0, 1, 2


@dataclass
class Events:
    """All mutations in (ts, seq) order; per event the ticket and the row after (or before)."""

    ticket: np.ndarray  # index into the ticket arrays
    ts_ms: np.ndarray
    op: np.ndarray
    upd: np.ndarray  # for updates: ride or expire
    rides: np.ndarray  # rides after the event (before, for deletes)
    expired: np.ndarray  # status after the event (before, for deletes)
    iso: list[str]  # ts_ms as ISO 8601 text


@dataclass
class Tickets:
    ticket_id: np.ndarray
    rider_id: np.ndarray
    monthly: np.ndarray  # bool
    zone: np.ndarray  # 0..2
    fare_cents: np.ndarray


def _group_cumsum(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Cumulative sums restarting at each group (groups are consecutive, sizes ``counts``)."""
    total = np.cumsum(values)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    offset = np.concatenate(([0.0], total))[starts]
    return total - offset


def _day_time_ms(rng: np.random.Generator, n: int) -> np.ndarray:
    """Times of day with morning and evening peaks, in ms."""
    peak = rng.choice([7.5, 12.5, 17.5], size=n, p=[0.45, 0.15, 0.40])
    hours = rng.normal(peak, 1.5)
    outside = (hours < 5.0) | (hours >= 23.5)  # service hours 05:00-23:30
    hours[outside] = rng.uniform(5.0, 23.5, int(outside.sum()))
    return (hours * 3_600_000).astype(np.int64)


def make_events(seed: int, scale: float) -> tuple[Tickets, Events]:
    rng = np.random.default_rng(seed)
    n_tickets = max(2, round(100_000 * scale))
    n_riders = max(1, round(40_000 * scale))
    n_multi = round(n_tickets * MULTI_SHARE)
    monthly = np.zeros(n_tickets, dtype=bool)
    monthly[n_multi:] = True
    rng.shuffle(monthly)
    zone = rng.choice(3, size=n_tickets, p=ZONE_P)
    cents = np.where(monthly, MONTHLY_FARE_CENTS[zone], MULTI_FARE_CENTS[zone])
    cents = np.where(rng.random(n_tickets) < CONCESSION_P, cents // 2, cents)
    rider = np.floor(n_riders * rng.random(n_tickets) ** 2).astype(np.int64) + 1
    purchase_day = rng.integers(0, 365, size=n_tickets)
    purchase = YEAR_START_MS + purchase_day * MS_PER_DAY + _day_time_ms(rng, n_tickets)
    tickets = Tickets(
        ticket_id=np.arange(1, n_tickets + 1, dtype=np.int64),
        rider_id=rider,
        monthly=monthly,
        zone=zone,
        fare_cents=cents,
    )
    violator = rng.random(n_tickets) < VIOLATION_P

    parts: list[dict[str, np.ndarray]] = []

    def add(idx: np.ndarray, ts: np.ndarray, op: int, upd: int, order: np.ndarray) -> None:
        parts.append(
            {
                "ticket": idx,
                "ts": ts,
                "op": np.full(idx.size, op),
                "upd": np.full(idx.size, upd),
                "order": order,
            }
        )

    all_idx = np.arange(n_tickets)
    add(all_idx, purchase, OP_INSERT, UPD_NONE, np.zeros(n_tickets, dtype=np.int64))

    # Multi-ride tickets: rides spaced by exponential gaps (a personal mean of 1-10 days).
    m = all_idx[~monthly]
    target = np.where(rng.random(m.size) < 0.55, RIDE_LIMIT, rng.integers(0, RIDE_LIMIT, m.size))
    target = np.where(violator[m], rng.integers(RIDE_LIMIT + 1, RIDE_LIMIT + 5, m.size), target)
    mean_gap = rng.choice([1.0, 3.0, 10.0], size=m.size, p=[0.3, 0.5, 0.2]) * MS_PER_DAY
    ride_ticket = np.repeat(m, target)
    gaps = rng.exponential(np.repeat(mean_gap, target)) + 60_000  # at least a minute apart
    ride_ts = np.repeat(purchase[m], target) + _group_cumsum(gaps, target).astype(np.int64)
    valid_until = purchase[m] + MULTI_VALID_DAYS * MS_PER_DAY
    inside = ride_ts < np.repeat(valid_until, target)
    ride_ticket, ride_ts = ride_ticket[inside], ride_ts[inside]
    kept = np.bincount(ride_ticket, minlength=n_tickets)[m]
    add(ride_ticket, ride_ts, OP_UPDATE, UPD_RIDE, np.ones(ride_ticket.size, dtype=np.int64))
    used_up = kept >= RIDE_LIMIT
    last_ride = np.full(n_tickets, 0, dtype=np.int64)
    np.maximum.at(last_ride, ride_ticket, ride_ts)
    u = m[used_up]
    add(
        u,
        last_ride[u] + rng.integers(60_000, 7_200_000, u.size),
        OP_DELETE,
        UPD_NONE,
        np.full(u.size, 100),
    )
    e = m[~used_up]
    add(e, valid_until[~used_up], OP_UPDATE, UPD_EXPIRE, np.full(e.size, 98))
    add(
        e,
        valid_until[~used_up] + rng.integers(3_600_000, 2 * MS_PER_DAY, e.size),
        OP_DELETE,
        UPD_NONE,
        np.full(e.size, 100),
    )

    # Monthly passes: on each of 30 days, 0-3 rides (mostly commuting), then expiry and delete.
    p = all_idx[monthly]
    per_day = rng.choice(4, size=(p.size, 30), p=[0.45, 0.2, 0.3, 0.05])
    counts = per_day.sum(axis=1)
    day_of_ride = (
        np.concatenate([np.repeat(np.arange(30), row) for row in per_day])
        if p.size
        else np.zeros(0, dtype=np.int64)
    )
    # Ride times on their day, after the purchase and before 30 days after it.
    m_ride_ticket = np.repeat(p, counts)
    offsets = day_of_ride * MS_PER_DAY + rng.integers(
        60_000, MS_PER_DAY - 60_000, m_ride_ticket.size
    )
    add(
        m_ride_ticket,
        purchase[m_ride_ticket] + offsets,
        OP_UPDATE,
        UPD_RIDE,
        np.ones(m_ride_ticket.size, dtype=np.int64),
    )
    expiry = purchase[p] + 30 * MS_PER_DAY
    add(p, expiry, OP_UPDATE, UPD_EXPIRE, np.full(p.size, 98))
    late = violator[p]
    pl = p[late]
    late_ts = expiry[late] + rng.integers(MS_PER_DAY + 1, 8 * MS_PER_DAY, pl.size)
    add(pl, late_ts, OP_UPDATE, UPD_RIDE, np.full(pl.size, 99))
    delete_ts = np.where(late, 0, expiry + rng.integers(60_000, MS_PER_DAY, p.size))
    delete_ts[late] = late_ts + rng.integers(60_000, 3_600_000, pl.size)
    add(p, delete_ts, OP_DELETE, UPD_NONE, np.full(p.size, 100))

    ticket = np.concatenate([q["ticket"] for q in parts])
    ts = np.concatenate([q["ts"] for q in parts]).astype(np.int64)
    op = np.concatenate([q["op"] for q in parts])
    upd = np.concatenate([q["upd"] for q in parts])
    order = np.concatenate([q["order"] for q in parts])
    keep = ts < YEAR_END_MS
    ticket, ts, op, upd, order = ticket[keep], ts[keep], op[keep], upd[keep], order[keep]
    # Row state per ticket: process each ticket's events in time order.
    by_ticket = np.lexsort((order, ts, ticket))
    ticket, ts, op, upd = ticket[by_ticket], ts[by_ticket], op[by_ticket], upd[by_ticket]
    sizes = np.bincount(ticket, minlength=n_tickets)
    rides = _group_cumsum((upd == UPD_RIDE).astype(np.float64), sizes).astype(np.int64)
    expired = _group_cumsum((upd == UPD_EXPIRE).astype(np.float64), sizes) > 0
    # Global order: time, then ticket, then the ticket's own order (already sorted within ticket).
    pos = np.arange(ticket.size)
    final = np.lexsort((pos, ticket, ts))
    events = Events(
        ticket=ticket[final],
        ts_ms=ts[final],
        op=op[final],
        upd=upd[final],
        rides=rides[final],
        expired=expired[final],
        iso=_iso(ts[final]),
    )
    return tickets, events


def _iso(ts_ms: np.ndarray) -> list[str]:
    """ISO 8601 UTC with milliseconds, e.g. ``2025-01-01T07:57:37.982Z``."""
    text = np.datetime_as_string(ts_ms.astype("datetime64[ms]"), unit="ms").tolist()
    return [t + "Z" for t in text]


def _row_prefixes(t: Tickets, *, debezium: bool = False) -> list[str]:
    """``{"ticket_id":…,…,"fare":…,`` per ticket (the columns that never change)."""
    kinds = np.where(t.monthly, "monthly", "multi").tolist()
    fares = {c: (_decimal(c) if debezium else repr(c / 100)) for c in set(t.fare_cents.tolist())}
    return [
        f'{{"ticket_id":{tid},"rider_id":{rid},"kind":"{k}","zone":"{ZONES[z]}","fare":{fares[c]},'
        for tid, rid, k, z, c in zip(
            t.ticket_id.tolist(),
            t.rider_id.tolist(),
            kinds,
            t.zone.tolist(),
            t.fare_cents.tolist(),
            strict=True,
        )
    ]


def _decimal(cents: int) -> str:
    """Debezium's encoding of a NUMERIC with scale 2."""
    raw = cents.to_bytes(max(1, (cents.bit_length() + 8) // 8), "big", signed=True)
    return f'{{"scale":2,"value":"{base64.b64encode(raw).decode()}"}}'


def _suffixes(ev: Events) -> tuple[list[str | None], list[str | None]]:
    """The changing columns (``"rides":…,"status":…}``) of the row before and after each event;
    a row's text is its ticket's prefix followed by the suffix."""
    status = ['"status":"active"}', '"status":"expired"}']
    after: list[str | None] = []
    before: list[str | None] = []
    for op, upd, rides, exp in zip(
        ev.op.tolist(), ev.upd.tolist(), ev.rides.tolist(), ev.expired.tolist(), strict=True
    ):
        now = f'"rides":{rides},{status[exp]}'
        if op == OP_INSERT:
            after.append(now)
            before.append(None)
        elif op == OP_DELETE:
            after.append(None)
            before.append(now)
        else:
            after.append(now)
            if upd == UPD_RIDE:
                before.append(f'"rides":{rides - 1},{status[exp]}')
            else:
                before.append(f'"rides":{rides},{status[0]}')
    return before, after


OP_NAMES = ["insert", "update", "delete"]
DBZ_OPS = ["c", "u", "d"]
Rows = tuple[list[str | None], list[str | None]]


def _flush(f: TextIO, out: list[str]) -> None:
    f.write("".join(out))
    out.clear()


def write_jsonl(path: Path, t: Tickets, ev: Events, rows: Rows) -> None:
    prefixes = _row_prefixes(t)
    before, after = rows
    entries = t.ticket_id[ev.ticket].tolist()
    with path.open("w", encoding="utf-8", newline="\n") as f:
        out: list[str] = []
        for i, (tk, e, ts, op) in enumerate(
            zip(ev.ticket.tolist(), entries, ev.iso, ev.op.tolist(), strict=True)
        ):
            pre, b, a = prefixes[tk], before[i], after[i]
            b_text = "null" if b is None else pre + b
            a_text = "null" if a is None else pre + a
            out.append(
                f'{{"entry":"{e}","ts":"{ts}","seq":{i + 1},"op":"{OP_NAMES[op]}",'
                f'"before":{b_text},"after":{a_text}}}\n'
            )
            if len(out) >= 100_000:
                _flush(f, out)
        _flush(f, out)


def write_debezium(path: Path, t: Tickets, ev: Events, rows: Rows) -> None:
    prefixes = _row_prefixes(t, debezium=True)
    before, after = rows
    ts_list = ev.ts_ms.tolist()
    # The connector sees each change a little later than it happened.
    lag = np.random.default_rng(len(ts_list)).integers(3, 250, len(ts_list)).tolist()
    with path.open("w", encoding="utf-8", newline="\n") as f:
        out: list[str] = []
        for i, (tk, op, ts) in enumerate(
            zip(ev.ticket.tolist(), ev.op.tolist(), ts_list, strict=True)
        ):
            pre, b, a = prefixes[tk], before[i], after[i]
            b_text = "null" if b is None else pre + b
            a_text = "null" if a is None else pre + a
            out.append(
                f'{{"payload":{{"before":{b_text},"after":{a_text},"source":{{'
                f'"connector":"postgresql","name":"transit","ts_ms":{ts},"db":"transit",'
                f'"table":"tickets","txId":{1000 + i},"lsn":{i + 1}}},'
                f'"op":"{DBZ_OPS[op]}","ts_ms":{ts + lag[i]}}}}}\n'
            )
            if op == OP_DELETE:
                out.append('{"payload":null}\n')
            if len(out) >= 100_000:
                _flush(f, out)
        _flush(f, out)


def write_sqlite(path: Path, t: Tickets, ev: Events) -> None:
    """Replay the year through the real triggers, with simulated times from ``dpcr_clock``."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    con.execute(
        "CREATE TABLE tickets (ticket_id INTEGER PRIMARY KEY, rider_id INTEGER NOT NULL, "
        "kind TEXT NOT NULL, zone TEXT NOT NULL, fare REAL NOT NULL, rides INTEGER NOT NULL, "
        "status TEXT NOT NULL)"
    )
    con.commit()
    con.close()
    install_triggers(tmp, "tickets", key="ticket_id")
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA cache_size = -400000")
    con.execute("PRAGMA locking_mode = EXCLUSIVE")
    con.execute("PRAGMA temp_store = MEMORY")
    kinds = np.where(t.monthly, "monthly", "multi")
    iso = ev.iso
    ids = t.ticket_id.tolist()
    rider, zone = t.rider_id.tolist(), ZONES[t.zone].tolist()
    fare = (t.fare_cents / 100).tolist()
    kind = kinds.tolist()
    # A temporary view whose INSTEAD OF trigger sets the clock and runs the change on `tickets`
    # lets one executemany drive the replay; the change itself fires dpcr's triggers.
    con.executescript(
        f"""
        INSERT INTO {CLOCK_TABLE} VALUES (NULL);
        CREATE TEMP VIEW replay AS SELECT NULL AS ts, NULL AS op, NULL AS ticket_id,
            NULL AS rider_id, NULL AS kind, NULL AS zone, NULL AS fare;
        CREATE TEMP TRIGGER replay_insert INSTEAD OF INSERT ON replay WHEN NEW.op = 0 BEGIN
            UPDATE {CLOCK_TABLE} SET ts = NEW.ts;
            INSERT INTO tickets VALUES (NEW.ticket_id, NEW.rider_id, NEW.kind, NEW.zone,
                NEW.fare, 0, 'active');
        END;
        CREATE TEMP TRIGGER replay_ride INSTEAD OF INSERT ON replay WHEN NEW.op = 1 BEGIN
            UPDATE {CLOCK_TABLE} SET ts = NEW.ts;
            UPDATE tickets SET rides = rides + 1 WHERE ticket_id = NEW.ticket_id;
        END;
        CREATE TEMP TRIGGER replay_expire INSTEAD OF INSERT ON replay WHEN NEW.op = 2 BEGIN
            UPDATE {CLOCK_TABLE} SET ts = NEW.ts;
            UPDATE tickets SET status = 'expired' WHERE ticket_id = NEW.ticket_id;
        END;
        CREATE TEMP TRIGGER replay_delete INSTEAD OF INSERT ON replay WHEN NEW.op = 3 BEGIN
            UPDATE {CLOCK_TABLE} SET ts = NEW.ts;
            DELETE FROM tickets WHERE ticket_id = NEW.ticket_id;
        END;
        """
    )
    code = np.where(
        ev.op == OP_INSERT, 0, np.where(ev.op == OP_DELETE, 3, np.where(ev.upd == UPD_RIDE, 1, 2))
    )
    rows = (
        (ts, c, ids[k], rider[k], kind[k], zone[k], fare[k])
        for ts, c, k in zip(iso, code.tolist(), ev.ticket.tolist(), strict=True)
    )
    with con:
        con.executemany("INSERT INTO replay VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        con.execute(f"DELETE FROM {CLOCK_TABLE}")
    con.close()
    tmp.replace(path)


def write_malformed(path: Path, t: Tickets, ev: Events, rows: Rows) -> None:
    """A short changelog: the first valid events of the year, plus two bad records per reason."""
    prefixes = _row_prefixes(t)
    before, after = rows
    ok: list[dict[str, object]] = []
    for i in range(min(40, len(ev.iso))):
        tk, b, a = int(ev.ticket[i]), before[i], after[i]
        ok.append(
            {
                "entry": str(int(t.ticket_id[tk])),
                "ts": ev.iso[i],
                "seq": i + 1,
                "op": OP_NAMES[int(ev.op[i])],
                "before": None if b is None else json.loads(prefixes[tk] + b),
                "after": None if a is None else json.loads(prefixes[tk] + a),
            }
        )
    first = next(r for r in ok if r["op"] == "insert")
    row: dict[str, object] = dict(first["after"])  # type: ignore[call-overload]
    t0 = "2025-01-01T00:00:00.000Z"
    bad: list[object] = [
        "{not json at all",  # bad_json: the line
        {"entry": "x1", "ts": t0, "seq": 9001, "op": "insert", "after": "a string"},  # bad_json
        {"entry": "x2", "ts": t0, "seq": 9002, "op": "upsert", "after": row},  # unknown_op
        {"entry": "x3", "ts": t0, "seq": 9003, "op": None, "after": row},  # unknown_op
        {"entry": "", "ts": t0, "seq": 9004, "op": "insert", "after": row},  # missing_entry
        {"ts": t0, "seq": 9005, "op": "insert", "after": row},  # missing_entry
        {
            "entry": "x6",
            "ts": t0,
            "seq": 9006,
            "op": "insert",
            "after": {k: v for k, v in row.items() if k != "rider_id"},
        },  # missing_unit
        {
            "entry": "x7",
            "ts": t0,
            "seq": 9007,
            "op": "insert",
            "after": {**row, "rider_id": None},
        },  # missing_unit
        {"entry": "x8", "ts": "next tuesday", "seq": 9008, "op": "insert", "after": row},
        {"entry": "x9", "ts": "2025-02-30T10:00:00Z", "seq": 9009, "op": "insert", "after": row},
        {"entry": "x10", "ts": t0, "seq": "ten", "op": "insert", "after": row},  # bad_seq
        {"entry": "x11", "ts": t0, "seq": 1.5, "op": "insert", "after": row},  # bad_seq
        {**first, "after": {**row, "rides": 99}},  # duplicate (same entry and seq)
        {**first, "ts": "2025-01-01T00:00:01.000Z"},  # duplicate
        {"entry": "y1", "ts": t0, "seq": 9013, "op": "update", "before": row, "after": row},
        {"entry": "y2", "ts": t0, "seq": 9014, "op": "update", "before": row, "after": row},
        {"entry": "y3", "ts": t0, "seq": 9015, "op": "delete", "before": row},
        {"entry": "y4", "ts": t0, "seq": 9016, "op": "delete", "before": row},
        {**first, "seq": 9017},  # double_insert (same time, ordered after the first by seq)
        {**first, "seq": 9018},  # double_insert
    ]
    lines = [json.dumps(r, separators=(",", ":")) for r in ok]
    for k, record in enumerate(bad):
        text = record if isinstance(record, str) else json.dumps(record, separators=(",", ":"))
        lines.insert(min(len(lines), 3 + 2 * k), text)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def generate(
    out: Path, *, seed: int = 7, scale: float = 1.0, verbose: bool = False, fork: bool = False
) -> dict[str, float]:
    """Write every output into ``out``; return sizes and timings.

    ``fork=True`` writes the SQLite database in a forked child process meanwhile (the command line
    does; a library caller with threads running, DuckDB's for one, should not fork).
    """
    out.mkdir(parents=True, exist_ok=True)
    clock = time.perf_counter()
    stats: dict[str, float] = {}

    def step(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        stats[f"seconds_{name}"] = round(now - clock, 3)
        if verbose:
            print(f"  {name}: {now - clock:.1f} s", file=sys.stderr)
        clock = now

    tickets, events = make_events(seed, scale)
    stats["tickets"] = float(tickets.ticket_id.size)
    stats["mutations"] = float(events.ts_ms.size)
    step("events")
    # The SQLite replay is the slowest part and independent of the text files: run it in a
    # forked child process (the machines have two cores) while this process writes the text.
    sqlite_path = out / "transit.sqlite"
    child = None
    if fork and "fork" in mp.get_all_start_methods():
        child = mp.get_context("fork").Process(
            target=write_sqlite, args=(sqlite_path, tickets, events)
        )
        child.start()
    rows = _suffixes(events)
    step("rows")
    write_jsonl(out / "changelog.jsonl", tickets, events, rows)
    step("changelog.jsonl")
    write_debezium(out / "debezium.jsonl", tickets, events, rows)
    step("debezium.jsonl")
    write_malformed(out / "malformed.jsonl", tickets, events, rows)
    step("malformed.jsonl")
    if child is None:
        write_sqlite(sqlite_path, tickets, events)
    else:
        child.join()
        if child.exitcode != 0:
            raise RuntimeError(f"writing {sqlite_path} failed (exit code {child.exitcode})")
    step("transit.sqlite")
    return stats


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=here / "data", help="output directory")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="size factor: 1.0 = 100,000 tickets, about 10^6 mutations",
    )
    parser.add_argument(
        "--if-missing", action="store_true", help="do nothing when every output already exists"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument(
        "--serial", action="store_true", help="one process (by default SQLite is written by a fork)"
    )
    args = parser.parse_args(argv)
    if not args.scale > 0:
        parser.error(f"--scale must be > 0, got {args.scale}")
    if args.if_missing and all((args.out / name).exists() for name in OUTPUTS):
        if not args.quiet:
            print(f"transit data already in {args.out} (--if-missing): nothing to do")
        return 0
    started = time.perf_counter()
    if not args.quiet:
        print(f"generating transit data (seed {args.seed}, scale {args.scale}) into {args.out}")
    stats = generate(
        args.out, seed=args.seed, scale=args.scale, verbose=not args.quiet, fork=not args.serial
    )
    if not args.quiet:
        print(
            f"{int(stats['tickets'])} tickets, {int(stats['mutations'])} mutations "
            f"in {time.perf_counter() - started:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
