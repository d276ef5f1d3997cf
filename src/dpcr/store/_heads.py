"""The store's digests over its rows (the content head, the digest of the values it keeps and
does not publish), and what spares the content head from being computed again: the rows it
hashes, encoded in batches, and the stores this process closed and has not seen changed since."""

from __future__ import annotations

import json
from collections.abc import Sequence
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcr.store._schema import PUBLISHED, UNPUBLISHED, has_table

if TYPE_CHECKING:
    import sqlite3

    from dpcr.store._schema import NodeEvent, ReleasedNode

#: The rows a content head hashes, each as (its order key, its JSON text), in the head's order:
#: the released values', then the ledger's.
Rows = tuple[list[tuple[Any, str]], list[tuple[Any, str]]]

__all__ = [
    "ROWS", "VERIFIED", "committed_head", "content_head", "digest", "file_key", "files_state",
    "grown_rows", "hashed_rows", "head_of", "json_rows", "unchanged_since",
    "unpublished_digest",
]


def json_rows(rows: Sequence[tuple[Any, ...]], encoder: Any) -> str:
    """``"".join(json.dumps(r) for r in rows)``, through the C encoder when there is one."""
    if encoder is None:
        return "".join(json.dumps(r) for r in rows)
    default = json.JSONEncoder().default
    it = encoder(None, default, json.encoder.encode_basestring_ascii, None,
                 ": ", ", ", False, False, True)  # fmt: skip
    return "".join("".join(it(r, 0)) for r in rows)


def digest(con: sqlite3.Connection, queries: Sequence[str]) -> str:
    """SHA-256 over the plan's fingerprint, the mode (of the store at ``con``) and the rows of
    ``queries``."""
    import hashlib

    h = hashlib.sha256()
    h.update(json.dumps(_bound_to(con)).encode())
    # The bytes of json.dumps(row) for every row, encoded in batches.
    encode = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    for sql in queries:
        cursor = con.execute(sql)
        while rows := cursor.fetchmany(10_000):
            h.update(json_rows(rows, encode).encode())
    return h.hexdigest()


def content_head(con: sqlite3.Connection) -> str:
    """:meth:`dpcr.store.Store.content_head` of the store at ``con``."""
    # The values of an open histogram's keys that are not published (yet) are left out:
    # the head is public (release-head.json), a function of what is published only. (A
    # store written before open histograms, read as a snapshot, has no open_keys table.)
    opened = has_table(con, "open_keys")
    return digest(con, (
        "SELECT layer, idx, t_lo, t_hi, query, key, value FROM released r "
        f"WHERE {PUBLISHED if opened else 'TRUE'} ORDER BY query, key, layer, idx",
        "SELECT layer, idx, query, event FROM release_ledger ORDER BY layer, idx, query",
        *(["SELECT query, key, selected FROM open_keys WHERE selected IS NOT NULL "
           "ORDER BY query, key"] if opened else []),
    ))  # fmt: skip


def unpublished_digest(con: sqlite3.Connection) -> str:
    """The digest of the released rows that are not published (the values of open histograms'
    keys not selected, in the layout that kept them as rows)."""
    return digest(con, (UNPUBLISHED,))


def _bound_to(con: sqlite3.Connection) -> list[str | None]:
    """[the plan's fingerprint, the mode] of the store at ``con`` (what every digest begins
    with)."""
    meta = dict(con.execute(
        "SELECT key, value FROM meta WHERE key IN ('fingerprint', 'mode')").fetchall())  # fmt: skip
    return [meta.get("fingerprint"), meta.get("mode")]


#: Stores this process verified or committed and then closed: the key of the file -> (the
#: state of its files when it was closed, the content head it held then). A store opened again
#: whose files are exactly as they were is not hashed again (a session's steps, the report
#: after a run): any write since changes their size or modification time.
VERIFIED: dict[tuple[int, int], tuple[tuple[tuple[int, int, int], ...], str]] = {}


#: The rows the content head of a store this process committed hashes (of a store without open
#: histograms' keys), so that its next commit hashes them without reading them again: the key
#: of the file -> (the head, the released rows, the ledger rows), each row as (its order key,
#: its JSON text) in the head's order. Trusted only for a store opened as it was closed.
ROWS: dict[tuple[int, int], tuple[str, list[tuple[Any, str]], list[tuple[Any, str]]]] = {}


#: The most rows (values and ledger rows) :data:`ROWS` keeps of a store (a few MB); a larger
#: store's commits hash every row.
ROW_LIMIT = 100_000


def file_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def files_state(path: Path) -> tuple[tuple[int, int, int], ...]:
    """(inode, size, modification time in ns) of the store and its write-ahead log (zeros
    for a file that does not exist)."""
    out = []
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            st = p.stat()
        except FileNotFoundError:
            out.append((0, 0, 0))
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def unchanged_since(
    path: Path, files: tuple[tuple[int, int, int], ...], recorded: str
) -> bool:
    """Whether this process closed the store at ``path`` holding ``recorded`` and its files
    were still as it left them (``files``, taken before they were opened again)."""
    seen = VERIFIED.get(file_key(path))
    return seen is not None and seen == (files, recorded)


def hashed_rows(con: sqlite3.Connection) -> Rows | None:
    """The rows the content head of the store at ``con`` hashes when it holds no open
    histograms' keys; None when one is not of the types a release writes."""
    encode = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    released = con.execute("SELECT layer, idx, t_lo, t_hi, query, key, value FROM released r "
                           "ORDER BY query, key, layer, idx").fetchall()  # fmt: skip
    ledger = con.execute(
        "SELECT layer, idx, query, event FROM release_ledger ORDER BY layer, idx, query"
    ).fetchall()
    if not all(map(_plain_released, released)) or not all(map(_plain_event, ledger)):
        return None
    return ([((r[4], r[5], r[0], r[1]), json_rows([r], encode)) for r in released],
            [((r[0], r[1], r[2]), json_rows([r], encode)) for r in ledger])  # fmt: skip


def grown_rows(known: tuple[str, list[tuple[Any, str]], list[tuple[Any, str]]],
               values: Sequence[ReleasedNode], events: Sequence[NodeEvent]) -> Rows | None:
    """``known`` rows (an entry of :data:`ROWS`) with those a commit of ``values`` and
    ``events`` adds, each where the head's order puts it, as :func:`hashed_rows` would read
    them back; None when one is not of the types it takes."""
    import bisect

    encode = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    released = [(n.layer, n.index, n.t_lo, n.t_hi, n.query, n.key, n.value) for n in values]
    ledger = [(lv, i, q, json.dumps(e, sort_keys=True)) for lv, i, q, e in events]
    if not all(map(_plain_released, released)) or not all(map(_plain_event, ledger)):
        return None
    rows = (list(known[1]), list(known[2]))
    for v in released:
        bisect.insort(rows[0], ((v[4], v[5], v[0], v[1]), json_rows([v], encode)))
    for e in ledger:
        bisect.insort(rows[1], ((e[0], e[1], e[2]), json_rows([e], encode)))
    return rows


def committed_head(
    con: sqlite3.Connection, path: Path, before: str | None,
    values: Sequence[ReleasedNode], events: Sequence[NodeEvent],
) -> str | None:
    """The content head of the store at ``path`` (``con``: its connection, in a commit) after
    a commit of ``values`` and ``events``: from the rows it hashed at the commit that left it at
    its head ``before``, when this process kept them (:data:`ROWS`), and the new rows; else
    from every row. ``before``: the head the store held when it was opened as this process
    closed it (or as a session left it), else None. None: a store with open histograms' keys
    (whose head leaves the values of keys not selected out), or rows not of the types a
    release writes: :func:`content_head` tells."""
    key = file_key(path)
    known = ROWS.pop(key, None)
    if has_table(con, "open_keys") and con.execute("SELECT 1 FROM open_keys LIMIT 1").fetchone():
        return None
    if known is not None and (before is None or known[0] != before or len(known[1])
                              + len(known[2]) + len(values) + len(events) > ROW_LIMIT):
        known = None
    if known is None:
        counts = con.execute("SELECT (SELECT count(*) FROM released), "
                             "(SELECT count(*) FROM release_ledger)").fetchone()  # fmt: skip
        if counts is None or sum(counts) > ROW_LIMIT:
            return None
    rows = hashed_rows(con) if known is None else grown_rows(known, values, events)
    if rows is None:
        return None
    head = head_of(json.dumps(_bound_to(con)), rows)
    ROWS[key] = (head, *rows)
    return head


def head_of(prefix: str, rows: Rows) -> str:
    """The SHA-256 of ``prefix`` and the JSON texts of ``rows`` in order (as the store's
    content head hashes its fingerprint and mode, then its rows)."""
    import hashlib

    h = hashlib.sha256(prefix.encode())
    for part in rows:
        h.update("".join(map(itemgetter(1), part)).encode())
    return h.hexdigest()


def _plain_released(r: tuple[Any, ...]) -> bool:
    """Whether a ``released`` row is of the types a release writes (so that its order in
    SQLite is that of its order key in Python, and its JSON that of the row read back)."""
    return (type(r[0]) is int and type(r[1]) is int and (r[2] is None or type(r[2]) is int)
            and type(r[3]) is int and type(r[4]) is str and type(r[5]) is str
            and type(r[6]) is int)  # fmt: skip


def _plain_event(r: tuple[Any, ...]) -> bool:
    return type(r[0]) is int and type(r[1]) is int and type(r[2]) is str and type(r[3]) is str
