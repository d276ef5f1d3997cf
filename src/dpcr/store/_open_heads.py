"""The head of what the store keeps of open histograms and does not publish (the candidates
head, :meth:`dpcr.store.Store.candidates_head`), and the migration of a store of the earlier
layout of their values.

The head is a chain over the commits that wrote such state: commit ``n`` records, in
``open_commits``, the reporting intervals (before, after] it released, the digest of what it
added (:func:`commit_digest`: the key-list pieces and value rows it wrote, which carry ``n``,
and the records of ``open_keys`` whose first interval, or whose selection interval, lies in
(before, after]) and head_n = SHA-256(head_{n-1}, digest_n), head_0 a digest of the plan's
fingerprint and the mode. A commit hashes only what it adds. Opening the store checks the
newest link alone (:func:`newest_link`: the newest commit's rows against its digest, its head
against the one before it, no row past it), at the cost of what that commit wrote; ``dpcr
verify`` (:func:`chain_fault`) recomputes every commit's digest from the rows, checks every
link, and that every row is attributed to a commit.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dpcr.store._open_store import (
    ID_BLOCK,
    OPEN_SCHEMA,
    OpenBlock,
    OpenKey,
    id_pieces,
    write_open_blocks,
    write_open_keys,
)

__all__ = [
    "LEGACY_KEYS",
    "chain_fault",
    "chain_recorded",
    "chain_start",
    "commit_digest",
    "commit_open",
    "has_legacy_layout",
    "legacy_digest",
    "migrate_legacy",
    "newest_link",
    "open_chain",
    "write_open",
]


def chain_start(fingerprint: str | None, mode: str | None) -> str:
    return hashlib.sha256(json.dumps(["open", fingerprint, mode]).encode()).hexdigest()


def _link(head: str, digest: str) -> str:
    return hashlib.sha256(f"{head}:{digest}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class _Counts:
    """The rows a commit's digest covered: key-list pieces, value rows, keys that appeared,
    keys selected."""

    keysets: int
    values: int
    appeared: int
    selected: int


def commit_digest(con: sqlite3.Connection, n: int, before: int, after: int) -> tuple[str, _Counts]:
    """The digest of what commit ``n`` (reporting intervals (before, after]) added, and how
    many rows of each kind it covers."""
    parts: list[str] = []
    counts: list[int] = []
    for sql, args, blob in (
        ("SELECT query, first, keys FROM open_keysets WHERE n = ? ORDER BY n, query, first",
         (n,), 2),
        ("SELECT query, layer, idx, lo, hi, t_lo, t_hi, vals FROM open_values WHERE n = ? "
         "ORDER BY n, query, layer, idx, lo", (n,), 7),
        ("SELECT query, key, appeared FROM open_keys WHERE appeared > ? AND appeared <= ? "
         "ORDER BY appeared, query, key", (before, after), -1),
        ("SELECT query, key, selected FROM open_keys WHERE selected > ? AND selected <= ? "
         "ORDER BY selected, query, key", (before, after), -1),
    ):  # fmt: skip
        h = hashlib.sha256()
        count = 0
        cursor = con.execute(sql, args)
        while rows := cursor.fetchmany(10_000):
            count += len(rows)
            for row in rows:
                if blob < 0:
                    h.update(json.dumps(row).encode())
                else:
                    text = row[blob]
                    h.update(json.dumps([*row[:blob], len(text)]).encode())
                    h.update(text if isinstance(text, bytes) else text.encode())
        parts.append(h.hexdigest())
        counts.append(count)
    digest = hashlib.sha256(json.dumps([n, before, after, *parts]).encode()).hexdigest()
    return digest, _Counts(*counts)


def _unpublished(rows_digest: str, chain: str) -> str:
    """The candidates head: the chain's and the digest of the rows of ``released`` that are
    not published (a store written before values were kept columnar holds such rows)."""
    return hashlib.sha256(f"{chain}:{rows_digest}".encode()).hexdigest()


def commit_open(
    con: sqlite3.Connection, n: int, span: tuple[int, int], start: str, rows_digest: str,
    written: tuple[int, int] | None = None,
) -> str:
    """Record commit ``n`` over reporting intervals ``span`` = (before, after] (the rows it
    wrote carry ``n``) in the chain; the new candidates head. ``start``: :func:`chain_start`;
    ``rows_digest``: see :func:`_unpublished`; ``written``: (keys new to ``open_keys``, keys
    selected) by this commit, which its intervals must cover (refused otherwise: no later
    check could attribute them)."""
    before, after = span
    last = con.execute("SELECT n, after, head FROM open_commits ORDER BY n DESC LIMIT 1").fetchone()
    if last is not None and (n <= last[0] or before < last[1]):
        raise ValueError("a commit of open histograms' values overlaps the last one")
    digest, counts = commit_digest(con, n, before, after)
    if written is not None and written != (counts.appeared, counts.selected):
        raise ValueError(f"records of open keys lie outside the reporting intervals {before + 1}"
                         f"..{after} of the commit that writes them")  # fmt: skip
    head = _link(last[2] if last is not None else start, digest)
    con.execute("INSERT INTO open_commits (n, before, after, digest, head) VALUES (?, ?, ?, ?, ?)",
                (n, before, after, digest, head))  # fmt: skip
    return _unpublished(rows_digest, head)


def chain_recorded(con: sqlite3.Connection) -> bool:
    """Whether a commit recorded a link of the chain."""
    return _has_commits(con) and (
        con.execute("SELECT 1 FROM open_commits LIMIT 1").fetchone() is not None
    )


def write_open(
    con: sqlite3.Connection, keys: Sequence[OpenKey], blocks: Sequence[OpenBlock],
    meta: dict[str, str], rows_digest: Callable[[], str],
) -> Callable[[int], str] | None:
    """Write a commit's records of open keys and blocks of values (``meta``: the store's, as
    the last commit left it); the function that records the commit's link once its reporting
    intervals end at ``after`` and returns the candidates head (None: the commit writes
    nothing of open histograms)."""
    before = int(meta.get("last_interval") or 0)
    n = int(con.execute("SELECT coalesce(max(n), 0) + 1 FROM open_commits").fetchone()[0])
    written = write_open_keys(con, keys)
    write_open_blocks(con, blocks, n)
    if not keys and not any(b.keys for b in blocks):
        return None
    start = chain_start(meta.get("fingerprint"), meta.get("mode"))
    return lambda after: commit_open(con, n, (before, after), start, rows_digest(), written)


#: The recorded commits, oldest first (``DESC`` appended: newest first).
_COMMITS = "SELECT n, before, after, digest, head FROM open_commits ORDER BY n"


def _has_commits(con: sqlite3.Connection) -> bool:
    """Whether the store has the table of commits (a snapshot of a store written before open
    histograms has none)."""
    return con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                       ("open_commits",)).fetchone() is not None  # fmt: skip


def _walk(con: sqlite3.Connection, start: str) -> tuple[str, str | None]:
    """The chain's head recomputed from every row, and one line naming the first difference
    from what the commits recorded (None: none)."""
    head = start
    total = _Counts(0, 0, 0, 0)
    last_after = 0
    for n, before, after, digest, recorded in con.execute(_COMMITS).fetchall():
        span = f"commit {n} (reporting intervals {before + 1}..{after})"
        if before < last_after or after < before:
            return head, f"{span} overlaps the commit before it"
        last_after = after
        got, counts = commit_digest(con, n, before, after)
        head = _link(head, got)
        if got != digest:
            return head, f"the rows {span} wrote no longer match its recorded digest"
        if head != recorded:
            return head, f"the recorded head of {span} does not follow from the commits before it"
        total = _Counts(*(a + b for a, b in zip(
            (total.keysets, total.values, total.appeared, total.selected),
            (counts.keysets, counts.values, counts.appeared, counts.selected), strict=True)))
    held = _Counts(*(int(con.execute(sql).fetchone()[0]) for sql in (
        "SELECT count(*) FROM open_keysets", "SELECT count(*) FROM open_values",
        "SELECT count(*) FROM open_keys", "SELECT count(*) FROM open_keys "
        "WHERE selected IS NOT NULL")))  # fmt: skip
    if held != total:
        return head, (f"the store holds {held.keysets} key-list pieces, {held.values} value "
                      f"rows, {held.appeared} keys and {held.selected} selections; its commits "
                      f"cover {total.keysets}, {total.values}, {total.appeared} and "
                      f"{total.selected}")  # fmt: skip
    return head, None


def open_chain(
    con: sqlite3.Connection, start: str, rows_digest: Callable[[], str]
) -> str | None:
    """The candidates head recomputed from every row (None: a commit's recorded digest or
    head, or a row no commit covers, does not match: the store was edited). ``rows_digest``:
    see :func:`_unpublished`."""
    if not _has_commits(con):
        return None  # (a snapshot of a store written before open histograms)
    head, fault = _walk(con, start)
    return None if fault is not None else _unpublished(rows_digest(), head)


def chain_fault(
    con: sqlite3.Connection, start: str, rows_digest: Callable[[], str], recorded: str | None
) -> str | None:
    """The whole chain checked against the rows and against ``recorded`` (the candidates head
    the last commit recorded; None: no commit recorded one): one line naming the first
    difference, None when intact."""
    if not _has_commits(con):
        return None if not recorded else "the store records a candidates head but no commits"
    head, fault = _walk(con, start)
    if fault is None and (recorded or chain_recorded(con)) and (
        recorded != _unpublished(rows_digest(), head)
    ):
        fault = "the candidates head recorded at the last commit does not match its chain"
    return fault


def newest_link(
    con: sqlite3.Connection, start: str, rows_digest: Callable[[], str]
) -> str | None:
    """The candidates head checked at the newest commit alone: its rows against its recorded
    digest, its recorded head against the link from the commit before it (``start`` for the
    first), its intervals after that commit's, and no row past it (a key-list piece or value
    row of a later commit, a key that appeared or was selected after its intervals). None when
    any of these differs. It costs what the newest commit wrote; what older commits hold is
    checked by :func:`chain_fault`."""
    if not _has_commits(con):
        return None
    newest = con.execute(_COMMITS + " DESC LIMIT 2").fetchall()
    head, n, after = start, 0, 0
    if newest:
        n, before, after, digest, recorded = newest[0]
        prior = newest[1] if len(newest) > 1 else None
        if after < before or (prior is not None and before < prior[2]):
            return None
        got, _ = commit_digest(con, n, before, after)
        if got != digest or _link(prior[4] if prior is not None else start, got) != recorded:
            return None
        head = recorded
    for sql, bound in (
        ("SELECT 1 FROM open_keysets WHERE n > ? LIMIT 1", n),
        ("SELECT 1 FROM open_values WHERE n > ? LIMIT 1", n),
        ("SELECT 1 FROM open_keys WHERE appeared > ? LIMIT 1", after),
        ("SELECT 1 FROM open_keys WHERE selected > ? LIMIT 1", after),
    ):
        if con.execute(sql, (bound,)).fetchone() is not None:
            return None
    return _unpublished(rows_digest(), head)


# --- the earlier layout: a run's whole tuple of keys per key set ----------------------------


#: The rows of ``open_keys`` as the earlier layout's candidates head hashed them.
LEGACY_KEYS = "SELECT query, key, appeared, selected FROM open_keys ORDER BY query, key"


def has_legacy_layout(con: sqlite3.Connection) -> bool:
    """Whether the store keeps open values in the earlier layout (``open_keysets.keyset``)."""
    columns = {r[1] for r in con.execute("PRAGMA table_info(open_keysets)")}
    return "keyset" in columns


def legacy_digest(con: sqlite3.Connection, rows: str) -> str:
    """The candidates head of the earlier layout: ``rows`` (the digest of the rows of
    ``released`` that are not published and of ``open_keys``) extended by every key set and
    its values in (key set, layer, index) order; ``rows`` itself without a key set."""
    if con.execute("SELECT 1 FROM open_keysets LIMIT 1").fetchone() is None:
        return rows
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


def migrate_legacy(
    con: sqlite3.Connection, after: int, start: str, rows_digest: Callable[[], str]
) -> str | None:
    """Rewrite the earlier layout (checked by the caller) as key lists and rows by key id, in
    the open transaction ``con``: everything becomes commit 1 over reporting intervals (0,
    ``after``]. The new candidates head (None: the store keeps no open values)."""
    con.execute("ALTER TABLE open_keysets RENAME TO legacy_open_keysets")
    con.execute("ALTER TABLE open_values RENAME TO legacy_open_values")
    for statement in OPEN_SCHEMA.split(";"):
        if statement.strip():
            con.execute(statement)
    sets: dict[int, tuple[str, list[str]]] = {
        ks: (q, json.loads(keys))
        for ks, q, keys in con.execute("SELECT keyset, query, keys FROM legacy_open_keysets")
    }
    for query in sorted({q for q, _ in sets.values()}):
        names = list(dict.fromkeys(k for ks in sorted(sets) if sets[ks][0] == query
                                   for k in sets[ks][1]))  # fmt: skip
        for lo, hi in id_pieces(0, len(names)):
            con.execute("INSERT INTO open_keysets (query, first, n, keys) VALUES (?, ?, 1, ?)",
                        (query, lo, json.dumps(names[lo:hi])))  # fmt: skip
        _migrate_values(con, query, names, sets)
    con.execute("DROP TABLE legacy_open_keysets")
    con.execute("DROP TABLE legacy_open_values")
    if con.execute("SELECT 1 FROM open_keysets LIMIT 1").fetchone() is None and (
        con.execute("SELECT 1 FROM open_keys LIMIT 1").fetchone() is None
    ):
        return None
    return commit_open(con, 1, (0, after), start, rows_digest())


def _migrate_values(
    con: sqlite3.Connection, query: str, names: list[str], sets: dict[int, tuple[str, list[str]]]
) -> None:
    """The values of ``query``'s key sets, one node at a time, as rows by key id."""
    at = {k: i for i, k in enumerate(names)}
    ids = {ks: np.array([at[k] for k in keys], dtype=np.int64)
           for ks, (q, keys) in sets.items() if q == query}  # fmt: skip
    node: tuple[int, int, int | None, int] | None = None
    values = np.zeros(len(names), dtype=np.int64)
    held = np.zeros(len(names), dtype=bool)
    cursor = con.execute(
        "SELECT keyset, layer, idx, t_lo, t_hi, vals FROM legacy_open_values "
        "WHERE keyset IN (SELECT keyset FROM legacy_open_keysets WHERE query = ?) "
        "ORDER BY layer, idx, keyset",
        (query,),
    )
    for ks, layer, idx, t_lo, t_hi, vals in cursor:
        if node is None or node[:2] != (layer, idx):
            if node is not None:
                _write_node(con, query, node, values, held)
            node = (layer, idx, t_lo, t_hi)
            held[:] = False
        got = np.frombuffer(vals, dtype="<i8")
        cols = ids[ks]
        if got.size != cols.size or held[cols].any():
            raise ValueError(f"values of key set {ks} do not match its keys")
        values[cols] = got
        held[cols] = True
    if node is not None:
        _write_node(con, query, node, values, held)


def _write_node(
    con: sqlite3.Connection, query: str, node: tuple[int, int, int | None, int],
    values: np.ndarray, held: np.ndarray,
) -> None:
    """The rows of one node's ``values`` where ``held``, by ranges of key ids (commit 1)."""
    where = np.flatnonzero(held)
    cut = np.flatnonzero((np.diff(where) != 1) | (where[1:] % ID_BLOCK == 0)) + 1
    for part in np.split(where, cut):
        if part.size:
            lo, hi = int(part[0]), int(part[-1]) + 1
            con.execute(
                "INSERT INTO open_values (query, layer, idx, lo, hi, t_lo, t_hi, n, vals) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)",
                (query, node[0], node[1], lo, hi, node[2], node[3],
                 values[lo:hi].astype("<i8").tobytes()),
            )  # fmt: skip
