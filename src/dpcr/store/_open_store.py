"""How the store keeps open histograms' candidate keys (:mod:`dpcr.store._store` uses it).

``open_keys`` holds every candidate key that is not declared, with the reporting interval it
appeared in and the one it is published from. Its values are kept columnar: ``open_keysets``
holds a run's tuple of keys once (JSON), ``open_values`` one row per (key set, node) with the
values of all those keys as little-endian int64 bytes. Operator-only: the published values are
rows of ``released`` too.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcr.store._schema import ReleasedNode

__all__ = [
    "OpenBlock",
    "OpenKey",
    "keysets_digest",
    "read_open_keys",
    "read_open_values",
    "with_open_values",
    "write_open_blocks",
    "write_open_keys",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenKey:
    """A candidate key of an open histogram that is not declared: the reporting interval it
    ``appeared`` in (a kept row held it by the interval's end) and the one it is published
    from (``selected``; None: not published). Operator-only until selected."""

    query: str
    key: str
    appeared: int
    selected: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenBlock:
    """Released values of an open histogram's keys that are not declared, columnar: row ``r``
    of ``values`` holds node ``nodes[r]`` (over ``ranges[r]`` = (t_lo, t_hi)) of every key of
    ``keys``, in that order. Kept operator-only in the store (one row per node), whether or not
    a key is published: the published ones are written as :class:`ReleasedNode` rows too."""

    query: str
    keys: tuple[str, ...]
    nodes: tuple[tuple[int, int], ...]
    ranges: tuple[tuple[int | None, int], ...]
    values: Any  # np.ndarray of int64, shape (len(nodes), len(keys))


def keysets_digest(con: sqlite3.Connection, rows: str) -> str:
    """``rows`` (the digest of the rows of ``released`` that are not published) extended by
    every key set and its values in (key set, layer, index) order; ``rows`` itself when the
    store keeps no key set."""
    has = con.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'open_keysets'"
    ).fetchone()
    if has is None or con.execute("SELECT 1 FROM open_keysets LIMIT 1").fetchone() is None:
        return rows  # (a store whose values are all rows of `released`)
    h = hashlib.sha256(rows.encode())
    for keyset, query, keys in con.execute(
        "SELECT keyset, query, keys FROM open_keysets ORDER BY keyset"
    ):
        h.update(json.dumps([keyset, query, len(keys)]).encode())
        h.update(keys.encode())
    for keyset, layer, idx, t_lo, t_hi, vals in con.execute(
        "SELECT keyset, layer, idx, t_lo, t_hi, vals FROM open_values ORDER BY keyset, layer, idx"
    ):
        h.update(json.dumps([keyset, layer, idx, t_lo, t_hi, len(vals)]).encode())
        h.update(vals)
    return h.hexdigest()


def with_open_values(con: sqlite3.Connection, rows: list[ReleasedNode]) -> list[ReleasedNode]:
    """``rows`` and the values kept columnar that are not among them (the operator's view:
    one object per value), sorted by query, key, layer and index."""
    have = {(r.query, r.key, r.layer, r.index) for r in rows}
    query = "SELECT keyset, query, keys FROM open_keysets"
    sets = {ks: (q, json.loads(keys)) for ks, q, keys in con.execute(query)}
    for ks, lv, i, lo, hi, vals in con.execute(
        "SELECT keyset, layer, idx, t_lo, t_hi, vals FROM open_values"
    ):
        q, keys = sets[ks]
        got = np.frombuffer(vals, dtype="<i8").tolist()
        rows.extend(
            ReleasedNode(layer=lv, index=i, t_lo=lo, t_hi=hi, query=q, key=k, value=v)
            for k, v in zip(keys, got, strict=True)
            if (q, k, lv, i) not in have
        )
    rows.sort(key=lambda x: (x.query, x.key, x.layer, x.index))
    return rows


def read_open_values(
    con: sqlite3.Connection, query: str, keys: Sequence[str], nodes: Sequence[tuple[int, int]]
) -> tuple[np.ndarray, np.ndarray]:
    """(values, held) of ``keys`` of ``query`` at ``nodes`` (see
    :meth:`dpcr.store.Store.open_values`)."""
    values = np.zeros((len(nodes), len(keys)), dtype=np.int64)
    held = np.zeros((len(nodes), len(keys)), dtype=bool)
    if not keys or not nodes:
        return values, held
    column = {k: j for j, k in enumerate(keys)}
    row = {tuple(node): r for r, node in enumerate(nodes)}
    for keyset, text in con.execute(
        "SELECT keyset, keys FROM open_keysets WHERE query = ? ORDER BY keyset", (query,)
    ).fetchall():
        where = np.fromiter((column.get(k, -1) for k in json.loads(text)), dtype=np.int64)
        wanted = where >= 0
        cols = where[wanted]
        for layer, idx, vals in con.execute(
            "SELECT layer, idx, vals FROM open_values WHERE keyset = ?", (keyset,)
        ):
            r = row.get((layer, idx))
            if r is None:
                continue
            got = np.frombuffer(vals, dtype="<i8")
            if got.size != where.size:
                raise ValueError(f"values of key set {keyset} do not match its keys")
            if held[r, cols].any():
                raise ValueError(f"a value of {query!r} at node {(layer, idx)} is stored twice")
            values[r, cols] = got[wanted]
            held[r, cols] = True
    return values, held


def read_open_keys(con: sqlite3.Connection) -> dict[str, dict[str, OpenKey]]:
    """Per open histogram, its candidate keys that are not declared."""
    out: dict[str, dict[str, OpenKey]] = {}
    for q, k, a, s in con.execute(
        "SELECT query, key, appeared, selected FROM open_keys ORDER BY query, key"
    ).fetchall():
        out.setdefault(q, {})[k] = OpenKey(query=q, key=k, appeared=a, selected=s)
    return out


def write_open_keys(con: sqlite3.Connection, keys: Sequence[OpenKey]) -> None:
    """Insert the keys new to the store; set the selection interval of a key selected
    now (refused for a key selected already)."""
    if not keys:
        return
    stored = {
        (q, k) for q in {k.query for k in keys}
        for (k,) in con.execute("SELECT key FROM open_keys WHERE query = ?", (q,))
    }  # fmt: skip
    con.executemany(
        "INSERT INTO open_keys (query, key, appeared, selected) VALUES (?, ?, ?, ?)",
        [(k.query, k.key, k.appeared, k.selected) for k in keys
         if (k.query, k.key) not in stored],
    )  # fmt: skip
    chosen = [(k.selected, k.query, k.key) for k in keys
              if (k.query, k.key) in stored and k.selected is not None]  # fmt: skip
    before = con.total_changes
    con.executemany(
        "UPDATE open_keys SET selected = ? WHERE query = ? AND key = ? AND selected IS NULL",
        chosen,
    )
    if con.total_changes - before != len(chosen):
        raise sqlite3.IntegrityError("a key of an open histogram is selected already")


def write_open_blocks(con: sqlite3.Connection, blocks: Sequence[OpenBlock]) -> None:
    """One key set per tuple of keys and one row of values per node (little-endian
    int64)."""
    keysets: dict[tuple[str, int], int] = {}  # (blocks of one tuple of keys share one key set)
    for b in blocks:
        if not b.keys:
            continue
        if (b.query, id(b.keys)) not in keysets:
            cur = con.execute(
                "INSERT INTO open_keysets (query, keys) VALUES (?, ?)",
                (b.query, json.dumps(list(b.keys))),
            )
            keysets[b.query, id(b.keys)] = int(cur.lastrowid or 0)
        keyset = keysets[b.query, id(b.keys)]
        values = np.ascontiguousarray(b.values, dtype="<i8")
        con.executemany(
            "INSERT INTO open_values (keyset, layer, idx, t_lo, t_hi, vals) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            ((keyset, lv, i, lo, hi, values[r].tobytes())  # (a row's bytes at a time)
             for r, ((lv, i), (lo, hi)) in enumerate(zip(b.nodes, b.ranges, strict=True))),
        )  # fmt: skip
