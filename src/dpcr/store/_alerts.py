"""The store's alert rows and states, and its frozen points, read and written on a connection
(:mod:`dpcr.store._store` uses them)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from dpcr.store._schema import AlertRow

__all__ = ["read_alert_states", "read_alerts", "read_frozen", "write_alerts"]


def write_alerts(
    con: sqlite3.Connection, states: dict[str, dict[str, Any]], rows: Sequence[AlertRow]
) -> None:
    """The new alert answers and every rule's sparse-vector state."""
    con.executemany(
        "INSERT INTO alerts (rule, interval, key, answer, value) VALUES (?, ?, ?, ?, ?)",
        rows,
    )
    con.executemany(
        "INSERT INTO alert_state (rule, state) VALUES (?, ?) "
        "ON CONFLICT(rule) DO UPDATE SET state = excluded.state",
        [(r, json.dumps(st, sort_keys=True)) for r, st in states.items()],
    )


def read_alert_states(con: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    return {r: json.loads(s) for r, s in con.execute("SELECT rule, state FROM alert_state")}


def read_alerts(con: sqlite3.Connection) -> list[AlertRow]:
    return [
        (r, i, k, a, v)
        for r, i, k, a, v in con.execute(
            "SELECT rule, interval, key, answer, value FROM alerts ORDER BY rule, interval, key"
        ).fetchall()
    ]


def read_frozen(con: sqlite3.Connection) -> tuple[tuple[str, str, int], ...]:
    return tuple(
        (str(u), str(e), int(r))
        for u, e, r in con.execute(
            "SELECT unit, entry, record FROM frozen ORDER BY unit, entry"
        ).fetchall()
    )
