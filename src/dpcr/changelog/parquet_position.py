"""The position of a Parquet source: how many rows earlier runs read, and the proof that they
are still there.

A Parquet file is rewritten whole when rows are added, so its bytes as a whole cannot be
compared with those an earlier run read; its row groups can. A writer that appends rows to a
file (DuckDB's ``COPY`` of the rows in their order, pyarrow's ``write_table`` with a fixed
``row_group_size``) writes its earlier full row groups again byte for byte, and only the last
one, which it fills further, changes. A run records a *row-group position*
``pq2:<duckdb>:<size>:<digest>:<rows>:<tail>:<tail hash>:<root>``: the file's size and
digest (each byte hashed once: the SHA-256 of the digests of its column chunks and of the
bytes between them), its rows, the first row of its last row group (``tail``), the sum of DuckDB's
``hash`` of each of that group's rows with its row number (``tail hash``), and ``root``, the
SHA-256 of every row group's digest. A row group's digest is the SHA-256 of the file's
schema, and for each of its column chunks its metadata (column, type, values, compression,
encodings, sizes) and the bytes its metadata spans. The digests are kept beside the release's
state (``<store>.state/source-blocks``, rewritten by every run, trusted only when they give
``root``; with the digests of the position the store held, so that a run that ends before its
commit leaves them). What a run checks, before anything is read (:func:`parquet_position`):

* the file's digest is the one recorded: nothing more (the file is as earlier runs read it);
* otherwise every row group but the last that earlier runs read must be in the file as it
  was: the same rows, the same digest (a change to any byte of a value, a row moved between
  row groups, a group re-encoded or re-chunked are all refused, as are missing or stale kept
  digests: then nothing tells what the earlier rows were); the rows of the last one are
  compared by their hashes (``tail hash``), which DuckDB computes for this one group only
  (a file rewritten under another DuckDB version is refused then, naming the version that
  hashed them);
* ``dpcr verify`` (:mod:`dpcr.release._verify`) makes the same check, writing nothing.

Stores written before row-group positions hold ``pq1:<duckdb>:<size>:<sha256>:<rows>:<row
hash>`` (the sum of the hashes of every row): checked so once, then replaced by a row-group
position. Every run reads the whole file (the file is read whole to release anyway): a change
of a consumed row is found by the first run after it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from dpcr.changelog.position import SourceRewritten

__all__ = [
    "PARQUET_GROUPS",
    "PARQUET_POSITION",
    "ParquetPosition",
    "load_groups",
    "parquet_position",
    "parse_parquet_token",
]

#: Prefix of a Parquet position of stores written before row-group positions.
PARQUET_POSITION = "pq1:"
#: Prefix of a row-group position.
PARQUET_GROUPS = "pq2:"
_GROUPS_HEADER = "dpcr-parquet-groups"
_CHUNK = 1 << 22


@dataclass(frozen=True, slots=True)
class ParquetPosition:
    """A Parquet file as a run read it: the DuckDB version that hashed its rows, its size and
    SHA-256, its number of rows and the sum of the hashes of its rows from ``tail`` on (each
    row hashed with its row number, so that reordering shows); ``tail`` None: of every row
    (an older store's ``pq1`` position). ``root``: the SHA-256 of ``groups``, the (rows,
    digest) of each row group, which the token leaves out (they are kept beside the state)."""

    duckdb_version: str
    size: int
    sha256: str
    rows: int
    row_hash: int
    tail: int | None = None
    root: str = ""
    groups: tuple[tuple[int, bytes], ...] = field(default=(), compare=False)

    @property
    def token(self) -> str:
        if self.tail is None:
            return (
                f"{PARQUET_POSITION}{self.duckdb_version}:{self.size}:{self.sha256}:"
                f"{self.rows}:{self.row_hash}"
            )
        return (
            f"{PARQUET_GROUPS}{self.duckdb_version}:{self.size}:{self.sha256}:{self.rows}:"
            f"{self.tail}:{self.row_hash}:{self.root}"
        )


def parse_parquet_token(token: str) -> ParquetPosition | None:
    """The Parquet position in ``token`` (``pq2``, or the ``pq1`` of an older store), or
    None when it is not one."""
    if token.startswith(PARQUET_GROUPS):
        parts = token[len(PARQUET_GROUPS):].split(":")
        if (
            len(parts) != 7 or not all(p.isdigit() for p in parts[1:2] + parts[3:6])
            or len(parts[2]) != 64 or len(parts[6]) != 64
        ):  # fmt: skip
            return None
        return ParquetPosition(parts[0], int(parts[1]), parts[2], int(parts[3]), int(parts[5]),
                               int(parts[4]), parts[6])  # fmt: skip
    if not token.startswith(PARQUET_POSITION):
        return None
    parts = token[len(PARQUET_POSITION):].split(":")
    if len(parts) != 5 or not all(p.isdigit() for p in parts[1:2] + parts[3:]):
        return None
    return ParquetPosition(parts[0], int(parts[1]), parts[2], int(parts[3]), int(parts[4]))


def _root(groups: tuple[tuple[int, bytes], ...]) -> str:
    return hashlib.sha256(b"".join(n.to_bytes(8, "big") + d for n, d in groups)).hexdigest()


def load_groups(path: Path | None, root: str) -> tuple[tuple[int, bytes], ...]:
    """The row groups' (rows, digest) kept at ``path`` whose root is ``root`` (none when there
    is no such file, it is not one dpcr wrote, or it keeps no such groups)."""
    if path is None:
        return ()
    from dpcr._fs import read_nofollow
    from dpcr.errors import OutputError

    try:
        lines = read_nofollow(path).decode("ascii").split("\n")
        if lines[0] != _GROUPS_HEADER or lines[-1] != "":
            return ()
        kept: dict[str, list[tuple[int, bytes]]] = {}
        groups: list[tuple[int, bytes]] = []
        for line in lines[1:-1]:
            first, second = line.split(" ")
            if first == "root":
                groups = kept.setdefault(second, [])
            else:
                groups.append((int(first), bytes.fromhex(second)))
    except (OutputError, ValueError, UnicodeDecodeError):
        return ()
    return tuple(kept.get(root, ()))


def _save_groups(path: Path, *lists: tuple[tuple[int, bytes], ...]) -> None:
    """Keep the row groups ``lists`` at ``path`` (owner-only, in an owner-only folder; replaced
    atomically): the position the store holds and the one this run read, so that a run that
    ends before its commit leaves the store's own."""
    from dpcr._fs import ensure_dir, write_atomic

    ensure_dir(path.parent, 0o700)
    text = f"{_GROUPS_HEADER}\n" + "".join(
        f"root {_root(groups)}\n" + "".join(f"{n} {d.hex()}\n" for n, d in groups)
        for groups in dict.fromkeys(lists)
    )
    write_atomic(path, text, mode=0o600, durable=False)


def _read(con: Any, path: Path) -> tuple[int, str, tuple[tuple[int, bytes], ...]]:
    """(size, digest, row groups) of the Parquet file at ``path``, reading it once: each byte
    is hashed once, into its column chunk's digest or, outside every chunk (the footer that
    places the chunks, the page indexes), into the digest of the rest; the file's digest is
    the SHA-256 of that and of the chunks' digests in order."""
    p = str(path)
    schema = repr(con.execute(
        "SELECT * EXCLUDE (file_name) FROM parquet_schema(?)", [p]).fetchall()).encode()
    chunks = con.execute(
        "SELECT row_group_id, row_group_num_rows, "
        "column_id, path_in_schema, type, num_values, compression, encodings, "
        "total_uncompressed_size, CASE WHEN 0 < dictionary_page_offset AND "
        "dictionary_page_offset < data_page_offset THEN dictionary_page_offset "
        "ELSE coalesce(data_page_offset, 0) END, coalesce(total_compressed_size, 0) "
        "FROM parquet_metadata(?) ORDER BY row_group_id, column_id",
        [p],
    ).fetchall()  # fmt: skip
    spans = sorted((int(c[9]), int(c[9]) + int(c[10]), k) for k, c in enumerate(chunks))
    hashes = [hashlib.sha256() for _ in chunks]
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if any(a[1] > b[0] for a, b in pairwise(spans)):
            rest = _overlapping(f, spans, hashes)  # (not as a writer lays chunks out)
        else:
            rest = _laid_out(f, spans, hashes)
    per_group: dict[int, Any] = {}
    rows: dict[int, int] = {}
    for c, h in zip(chunks, hashes, strict=True):
        g = per_group.setdefault(int(c[0]), hashlib.sha256(schema))
        rows[int(c[0])] = int(c[1])
        g.update(repr(c[2:9]).encode() + h.digest())
    groups = tuple((rows[g], per_group[g].digest()) for g in sorted(per_group))
    digest = hashlib.sha256(rest.digest() + b"".join(h.digest() for h in hashes)).hexdigest()
    return size, digest, groups


def _laid_out(f: Any, spans: list[tuple[int, int, int]], hashes: list[Any]) -> Any:
    """Hash the file ``f`` in one pass: the bytes of each span ``(start, end, k)`` (apart,
    in order) into ``hashes[k]``, the others into the hash returned."""
    rest, done = hashlib.sha256(), 0
    first = 0  # (the first span not wholly before the bytes read so far)
    # (read into one buffer: a new 4 MiB block per read costs its pages' faults, about as
    # much as copying the bytes)
    buffer = memoryview(bytearray(_CHUNK))
    while read := f.readinto(buffer):
        data = buffer[:read]  # (slices without copies)
        end = done + len(data)
        while first < len(spans) and spans[first][1] <= done:
            first += 1
        at = done  # (the bytes before ``at`` are hashed)
        for lo, hi, k in spans[first:]:
            if lo >= end:
                break
            if lo > at:
                rest.update(data[at - done:lo - done])
                at = lo
            stop = min(hi, end)
            hashes[k].update(data[at - done:stop - done])
            at = stop
        rest.update(data[at - done:])
        done = end
    return rest


def _overlapping(f: Any, spans: list[tuple[int, int, int]], hashes: list[Any]) -> Any:
    """:func:`_laid_out` for spans that overlap: each span's bytes read for it, and every byte
    of the file into the hash returned."""
    for lo, hi, k in spans:
        f.seek(lo)
        hashes[k].update(f.read(max(0, hi - lo)))
    f.seek(0)
    rest = hashlib.sha256()
    while data := f.read(_CHUNK):
        rest.update(data)
    return rest


def _row_hash(con: Any, path: Path, start: int, rows: int | None) -> tuple[int, int]:
    """(rows, sum of row hashes) of the rows ``start ..`` (up to row ``rows``, all: None) of a
    Parquet file."""
    columns = [
        str(r[0])
        for r in con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(path)]).fetchall()
    ]
    args = ", ".join(['file_row_number'] + ['"' + c.replace('"', '""') + '"' for c in columns])
    where = f"WHERE file_row_number >= {int(start)}"
    if rows is not None:
        where += f" AND file_row_number < {int(rows)}"
    row = con.execute(
        f"SELECT count(*), coalesce(sum(hash({args})), 0)::VARCHAR FROM "
        f"read_parquet(?, file_row_number = true) {where}",
        [str(path)],
    ).fetchone()
    return int(row[0]), int(row[1])


def _check(
    con: Any, path: Path, check: ParquetPosition, groups: tuple[tuple[int, bytes], ...],
    kept: tuple[tuple[int, bytes], ...], version: str,
) -> None:  # fmt: skip
    """Raise :class:`SourceRewritten` unless the file at ``path``, whose bytes differ from
    those ``check`` describes and whose row groups are ``groups``, begins with the rows
    ``check`` describes (``kept``: its row groups as kept beside the state)."""
    rows = sum(n for n, _ in groups)
    if rows < check.rows:
        raise SourceRewritten(
            f"the Parquet file now has {rows} rows but earlier runs read {check.rows}; dpcr "
            "needs the whole append-only changelog"
        )
    start = 0
    if check.tail is not None:  # (pq1: every row by its hash)
        last = len(kept) - 1  # (the last row group read, whose rows are compared by hash)
        if (
            _root(kept) != check.root or last < 0 or sum(n for n, _ in kept) != check.rows
            or check.rows - kept[-1][0] != check.tail
        ):  # fmt: skip
            raise SourceRewritten(
                "the Parquet file changed and the digests of the row groups earlier runs read "
                "(kept beside the store's state) are missing or stale, so its first "
                f"{check.rows} rows cannot be compared with those released; restore them, or "
                "the file as the last run read it"
            )
        at = 0
        for i in range(last):
            if i >= len(groups) or groups[i] != kept[i]:
                raise SourceRewritten(
                    f"row group {i} of the Parquet file (rows {at}..{at + kept[i][0] - 1}) is "
                    "not as earlier runs read it: a row they read changed (rewritten history), "
                    "or the writer encoded the group otherwise (another row group size, "
                    "compression or writer version), which dpcr cannot tell apart. Put back "
                    "the file the last run read, then grow it keeping its earlier row groups "
                    "as written (DuckDB COPY of the rows in order; pyarrow with a fixed "
                    "row_group_size, same version and compression)"
                )
            at += kept[i][0]
        if last < len(groups) and groups[last] == kept[last]:
            return  # (the last group read is there as it was, too)
        start = check.tail
    if check.duckdb_version != version:
        raise SourceRewritten(
            f"the Parquet file was rewritten and DuckDB changed from {check.duckdb_version} "
            f"to {version} since the last run, so its first {check.rows} rows cannot be "
            f"compared with those released; run once more with duckdb=={check.duckdb_version}"
        )
    if _row_hash(con, path, start, check.rows)[1] != check.row_hash:
        raise SourceRewritten("rows earlier runs read have changed (rewritten history)")


def parquet_position(
    con: Any, path: Path, *, check: ParquetPosition | None = None, blocks: Path | None = None,
    save: bool = True,
) -> ParquetPosition:  # fmt: skip
    """The row-group position of the Parquet file at ``path`` (read through the DuckDB
    connection ``con``; module docstring). With ``check`` (an earlier position), raise
    :class:`SourceRewritten` unless the file's first ``check.rows`` rows are the rows
    ``check`` describes. ``blocks``: where the row groups' digests are kept between runs
    (read, then replaced unless ``save`` is false); ``check.groups``, when it has them, are
    read instead."""
    import duckdb

    version = duckdb.__version__
    size, sha, groups = _read(con, path)
    rows = sum(n for n, _ in groups)
    same = check is not None and sha == check.sha256
    kept = () if check is None else check.groups or load_groups(blocks, check.root)
    if check is not None and check.rows and not same:
        _check(con, path, check, groups, kept, version)
    tail = rows - (groups[-1][0] if groups else 0)
    if same and check is not None and check.tail == tail and check.duckdb_version == version:
        row_hash = check.row_hash
    else:
        row_hash = _row_hash(con, path, tail, None)[1]
    if blocks is not None and save:
        _save_groups(blocks, *((kept,) if kept else ()), groups)
    return ParquetPosition(version, size, sha, rows, row_hash, tail, _root(groups), groups)
