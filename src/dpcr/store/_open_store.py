"""How the store keeps open histograms' candidate keys (:mod:`dpcr.store._store` uses it).

``open_keys`` holds every candidate key that is not declared, with the reporting interval it
appeared in and the one it is published from. Their values are kept columnar, by key id: each
query's keys are numbered 0, 1, ... in the order the store first kept values of them, and
``open_keysets`` holds that list in pieces, each the keys a commit added (at most
:data:`ID_BLOCK` keys, aligned to multiples of it), never a key twice. ``open_values`` holds
one row per node and range of key ids (within one multiple of :data:`ID_BLOCK`): the values of
those keys as little-endian int64 bytes. A run writes the keys new to it and the values it
drew, nothing it wrote before. Every row carries the commit that wrote it (``n``,
:mod:`dpcr.store._open_heads`). Operator-only: the published values are rows of ``released``
too.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpcr.errors import StoreError
from dpcr.store._schema import ReleasedNode, has_table

__all__ = [
    "ID_BLOCK",
    "OPEN_SCHEMA",
    "OpenBlock",
    "OpenKey",
    "id_pieces",
    "iter_open_values",
    "key_list",
    "open_blocks",
    "read_open_keys",
    "read_open_values",
    "released_count",
    "values_kept",
    "write_open_blocks",
    "write_open_keys",
]

#: The most keys a piece of a key list or a row of values holds (pieces and rows never cross
#: a multiple of it): reading values holds one such row at a time.
ID_BLOCK = 1 << 16

#: The tables of the values of open histograms' keys (created when the store is opened, after
#: a store of the earlier layout is migrated: :mod:`dpcr.store._open_heads`).
OPEN_SCHEMA = """
CREATE TABLE IF NOT EXISTS open_keysets (
    query TEXT NOT NULL, first INTEGER NOT NULL, n INTEGER NOT NULL, keys TEXT NOT NULL,
    PRIMARY KEY (query, first)
);
CREATE INDEX IF NOT EXISTS open_keysets_by_commit ON open_keysets (n, query, first);
CREATE TABLE IF NOT EXISTS open_values (
    query TEXT NOT NULL, layer INTEGER NOT NULL, idx INTEGER NOT NULL, lo INTEGER NOT NULL,
    hi INTEGER NOT NULL, t_lo INTEGER, t_hi INTEGER NOT NULL, n INTEGER NOT NULL,
    vals BLOB NOT NULL, PRIMARY KEY (query, layer, idx, lo)
);
CREATE INDEX IF NOT EXISTS open_values_by_commit ON open_values (n, query, layer, idx, lo);
CREATE TABLE IF NOT EXISTS open_commits (
    n INTEGER PRIMARY KEY, before INTEGER NOT NULL, after INTEGER NOT NULL,
    digest TEXT NOT NULL, head TEXT NOT NULL
);
"""


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
    ``keys``, in that order. Kept operator-only in the store, whether or not a key is
    published: the published ones are written as :class:`ReleasedNode` rows too."""

    query: str
    keys: tuple[str, ...]
    nodes: tuple[tuple[int, int], ...]
    ranges: tuple[tuple[int | None, int], ...]
    values: Any  # np.ndarray of int64, shape (len(nodes), len(keys))


def key_list(con: sqlite3.Connection, query: str) -> list[str]:
    """The keys of ``query`` the store keeps values of, in id order."""
    keys: list[str] = []
    for first, text in con.execute(
        "SELECT first, keys FROM open_keysets WHERE query = ? ORDER BY first", (query,)
    ):
        if first != len(keys):
            raise ValueError(f"the key list of {query!r} has a gap at key id {len(keys)}")
        keys.extend(json.loads(text))
    return keys


def id_pieces(lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """[lo, hi) cut at the multiples of :data:`ID_BLOCK`."""
    while lo < hi:
        end = min(hi, (lo // ID_BLOCK + 1) * ID_BLOCK)
        yield lo, end
        lo = end


def _runs(ids: np.ndarray) -> list[tuple[int, int]]:
    """The positions [s, e) of the sorted ``ids`` that are consecutive and within one multiple
    of :data:`ID_BLOCK`."""
    if not ids.size:
        return []
    cut = np.flatnonzero((np.diff(ids) != 1) | (ids[1:] % ID_BLOCK == 0)) + 1
    edges = [0, *cut.tolist(), int(ids.size)]
    return list(itertools.pairwise(edges))


def write_open_blocks(con: sqlite3.Connection, blocks: Sequence[OpenBlock], n: int) -> None:
    """The keys of ``blocks`` new to the store (appended to their query's key list) and one
    row of values per node and range of key ids (little-endian int64), written by commit
    ``n``."""
    ids: dict[str, dict[str, int]] = {}
    columns: dict[tuple[str, int], np.ndarray] = {}  # (blocks of one tuple of keys share it)
    for b in blocks:
        if not b.keys:
            continue
        if b.query not in ids:
            ids[b.query] = {k: i for i, k in enumerate(key_list(con, b.query))}
        known = ids[b.query]
        if (b.query, id(b.keys)) not in columns:
            if len(set(b.keys)) != len(b.keys):
                raise ValueError(f"a block of values of {b.query!r} names a key twice")
            new = [k for k in b.keys if k not in known]
            start = len(known)
            for lo, hi in id_pieces(start, start + len(new)):
                con.execute(
                    "INSERT INTO open_keysets (query, first, n, keys) VALUES (?, ?, ?, ?)",
                    (b.query, lo, n, json.dumps(new[lo - start : hi - start])),
                )
            known.update((k, start + j) for j, k in enumerate(new))
            columns[b.query, id(b.keys)] = np.fromiter((known[k] for k in b.keys), np.int64,
                                                       len(b.keys))  # fmt: skip
        _write_values(con, b, columns[b.query, id(b.keys)], n)


def _write_values(con: sqlite3.Connection, b: OpenBlock, cols: np.ndarray, n: int) -> None:
    """The rows of ``b``'s values, its keys' ids ``cols`` (a row's bytes at a time)."""
    order = np.argsort(cols, kind="stable")
    ids = cols[order]
    plain = bool(np.array_equal(order, np.arange(order.size)))
    runs = _runs(ids)
    values = b.values
    con.executemany(
        "INSERT INTO open_values (query, layer, idx, lo, hi, t_lo, t_hi, n, vals) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        ((b.query, lv, i, int(ids[s]), int(ids[e - 1]) + 1, t_lo, t_hi, n,
          np.ascontiguousarray(values[r, s:e] if plain else values[r, order[s:e]],
                               dtype="<i8").tobytes())
         for r, ((lv, i), (t_lo, t_hi)) in enumerate(zip(b.nodes, b.ranges, strict=True))
         for s, e in runs),
    )  # fmt: skip


def read_open_values(
    con: sqlite3.Connection, query: str, keys: Sequence[str], nodes: Sequence[tuple[int, int]],
    *, kept: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(values, held) of ``keys`` of ``query`` at ``nodes`` (see
    :meth:`dpcr.store.Store.open_values`), reading one row of values at a time. ``kept``:
    whether the store keeps any (:func:`values_kept`)."""
    values = np.zeros((len(nodes), len(keys)), dtype=np.int64)
    held = np.zeros((len(nodes), len(keys)), dtype=bool)
    for positions, got, has in open_blocks(con, query, keys, nodes, kept=kept):
        values[:, positions] = got
        held[:, positions] = has
    return values, held


def open_blocks(
    con: sqlite3.Connection, query: str, keys: Sequence[str], nodes: Sequence[tuple[int, int]],
    *, kept: bool = True,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`read_open_values` a block of keys at a time: (positions, values, held), where
    ``positions`` are the ascending indices into ``keys`` of the keys whose ids lie within one
    multiple of :data:`ID_BLOCK` (read from the rows of those ids alone), then of the keys the
    store keeps no value of, :data:`ID_BLOCK` at a time (``held`` all False); ``values`` and
    ``held`` of shape (len(nodes), len(positions))."""
    names = key_list(con, query) if keys and nodes and kept else []
    at = {k: i for i, k in enumerate(names)}
    ids = np.fromiter((at.get(k, -1) for k in keys), np.int64, len(keys))
    del at
    row = {(node[0], node[1]): r for r, node in enumerate(nodes)}
    known = np.flatnonzero(ids >= 0)
    piece = ids[known] // ID_BLOCK
    for p in np.unique(piece).tolist():
        positions = known[piece == p]
        got, has = _piece_values(con, query, (p * ID_BLOCK, ids[positions]),
                                 (row, len(nodes)), len(names))  # fmt: skip
        yield positions, got, has
    missing = np.flatnonzero(ids < 0)
    for lo in range(0, missing.size, ID_BLOCK):
        part = missing[lo : lo + ID_BLOCK]
        shape = (len(nodes), part.size)
        yield part, np.zeros(shape, np.int64), np.zeros(shape, bool)


def _piece_values(
    con: sqlite3.Connection, query: str, piece: tuple[int, np.ndarray],
    rows: tuple[dict[tuple[int, int], int], int], count: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(values, held) of the keys of ``query`` whose ids ``piece`` = (base, ids) lie in [base,
    base + :data:`ID_BLOCK`), at the nodes ``rows`` = (row of each node, how many rows); the
    key list holds ``count`` keys."""
    (base, ids), (row, n) = piece, rows
    values = np.zeros((n, ids.size), dtype=np.int64)
    held = np.zeros((n, ids.size), dtype=bool)
    column = np.full(ID_BLOCK, -1, dtype=np.int64)
    column[ids - base] = np.arange(ids.size)
    for layer, idx, lo, hi, vals in con.execute(
        "SELECT layer, idx, lo, hi, vals FROM open_values WHERE query = ? AND lo >= ? AND lo < ?",
        (query, base, base + ID_BLOCK),
    ):
        r = row.get((layer, idx))
        if r is None:
            continue
        if hi > base + ID_BLOCK:
            raise ValueError(f"a row of values of {query!r} (key ids {lo}..{hi}) crosses key id "
                             f"{base + ID_BLOCK}")  # fmt: skip
        got = _row_values(query, lo, hi, vals, count)
        where = column[lo - base : hi - base]
        wanted = where >= 0
        cols = where[wanted]
        if held[r, cols].any():
            raise ValueError(f"a value of {query!r} at node {(layer, idx)} is stored twice")
        values[r, cols] = got[wanted]
        held[r, cols] = True
    return values, held


def _row_values(query: str, lo: int, hi: int, vals: bytes, count: int) -> np.ndarray:
    """The values of a row of ``open_values`` over key ids [lo, hi), checked against its key
    list's length ``count``."""
    got = np.frombuffer(vals, dtype="<i8")
    if not 0 <= lo < hi <= count or got.size != hi - lo:
        raise ValueError(f"a row of values of {query!r} (key ids {lo}..{hi}) does not match "
                         "its keys")  # fmt: skip
    return got


def iter_open_values(
    con: sqlite3.Connection, skip: set[tuple[str, str, int, int]]
) -> Iterator[ReleasedNode]:
    """Every value kept columnar whose (query, key, layer, index) is not in ``skip``, one row
    of values (at most :data:`ID_BLOCK` keys) read at a time."""
    for (query,) in con.execute("SELECT DISTINCT query FROM open_keysets ORDER BY query"):
        names = key_list(con, query)
        for layer, idx, lo, hi, t_lo, t_hi, vals in con.execute(
            "SELECT layer, idx, lo, hi, t_lo, t_hi, vals FROM open_values WHERE query = ? "
            "ORDER BY layer, idx, lo",
            (query,),
        ):
            got = _row_values(query, lo, hi, vals, len(names)).tolist()
            for key, value in zip(names[lo:hi], got, strict=True):
                if (query, key, layer, idx) not in skip:
                    yield ReleasedNode(layer=layer, index=idx, t_lo=t_lo, t_hi=t_hi,
                                       query=query, key=key, value=value)  # fmt: skip


def released_count(con: sqlite3.Connection) -> int:
    """How many released values the store keeps: the rows of ``released`` and the values kept
    columnar that are not among them (each published value of an open histogram's key is
    both), counted without reading them (the earlier layout's too)."""
    (count,) = con.execute("SELECT count(*) FROM released").fetchone()
    if has_table(con, "open_values") and has_table(con, "open_keys"):
        (kept,) = con.execute(
            "SELECT coalesce(sum(length(vals)), 0) / 8 FROM open_values"
        ).fetchone()
        (both,) = con.execute(
            "SELECT count(*) FROM released r WHERE EXISTS (SELECT 1 FROM open_keys o "
            "WHERE o.query = r.query AND o.key = r.key)"
        ).fetchone()
        count += int(kept) - int(both)
    return int(count)


def values_kept(con: sqlite3.Connection, *, legacy: bool, path: Path) -> bool:
    """Whether the store at ``path`` keeps values of open histograms' keys; refused (a
    :class:`StoreError`) while they are kept in the earlier layout (``legacy``: a run
    upgrades it)."""
    if not has_table(con, "open_keysets"):
        return False
    if con.execute("SELECT 1 FROM open_keysets LIMIT 1").fetchone() is None:
        return False
    if legacy:
        raise StoreError(f"{path} was written by an older dpcr: run `dpcr run` once to "
                         "upgrade it, then read it")  # fmt: skip
    return True


def read_open_keys(con: sqlite3.Connection) -> dict[str, dict[str, OpenKey]]:
    """Per open histogram, its candidate keys that are not declared."""
    out: dict[str, dict[str, OpenKey]] = {}
    for q, k, a, s in con.execute(
        "SELECT query, key, appeared, selected FROM open_keys ORDER BY query, key"
    ).fetchall():
        out.setdefault(q, {})[k] = OpenKey(query=q, key=k, appeared=a, selected=s)
    return out


def write_open_keys(con: sqlite3.Connection, keys: Sequence[OpenKey]) -> tuple[int, int]:
    """Insert the keys new to the store; set the selection interval of a key selected
    now (refused for a key selected already). (keys inserted, keys selected)."""
    if not keys:
        return 0, 0
    stored = {
        (q, k) for q in {k.query for k in keys}
        for (k,) in con.execute("SELECT key FROM open_keys WHERE query = ?", (q,))
    }  # fmt: skip
    fresh = [(k.query, k.key, k.appeared, k.selected) for k in keys
             if (k.query, k.key) not in stored]  # fmt: skip
    con.executemany(
        "INSERT INTO open_keys (query, key, appeared, selected) VALUES (?, ?, ?, ?)", fresh
    )
    chosen = [(k.selected, k.query, k.key) for k in keys
              if (k.query, k.key) in stored and k.selected is not None]  # fmt: skip
    before = con.total_changes
    con.executemany(
        "UPDATE open_keys SET selected = ? WHERE query = ? AND key = ? AND selected IS NULL",
        chosen,
    )
    if con.total_changes - before != len(chosen):
        raise sqlite3.IntegrityError("a key of an open histogram is selected already")
    return len(fresh), len(chosen) + sum(1 for f in fresh if f[3] is not None)
