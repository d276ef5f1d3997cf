"""The text of chosen lines of a JSON-lines file, read when a reader needs it.

The loader keeps every record's original text for the records that need it: quarantined ones
(the quarantine file shows them as written) and pending ones (kept with the incremental state).
Usually these are few, so a file whose lines DuckDB's JSON reader numbers exactly as the file
does (:func:`plain_lines`: no carriage return, no byte-order mark, one record per line) is not
copied line by line into a table; :func:`ensure_raw` fetches the lines a reader is about to use
into ``{prefix}_rawlines`` (record, line), which ``Staged.raw_sql`` reads. A reader that forgot
to call it finds no such table (an error, never a missing text).

The file must keep the lines it had when it was staged (it is an append-only changelog, and
later runs check that it still begins with the bytes this run read). A copy of the lines a run
appended (a step's tail) is numbered after the records earlier runs consumed
(``LazyLines.offset``); its reader fetches what it will read before the copy is deleted, and
then closes it (``LazyLines.path`` None): a later read of a line not fetched is an error.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np

from dpcr._duck import afterwards
from dpcr.errors import DpcrError

_BLOCK = 1 << 22
_COUNT = 1 << 24  # bytes compared at a time when counting lines
_BOM = b"\xef\xbb\xbf"


@dataclass(slots=True)
class LazyLines:
    """Lines of ``path`` fetched on demand into table ``table`` (record, line: the line's
    number in ``path``). Readers ask for records numbered ``offset`` + that number (those
    at or below ``offset`` are not in ``path``). ``path`` None: the file is gone, every line
    a reader needs was fetched."""

    path: Path | None
    table: str
    fetched: set[int] = field(default_factory=set)
    made: bool = False
    offset: int = 0


def plain_lines(path: Path, limit: int | None = None) -> int | None:
    """The number of lines of ``path`` (a last line without a line feed counts), or None when
    the file holds a carriage return or begins with a byte-order mark (then only DuckDB's own
    line reader numbers its lines as the loader does), or, with ``limit``, a line longer than
    ``limit`` bytes (then the line reader sets it aside)."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if mm[:3] == _BOM or mm.find(b"\r") >= 0:
                return None
            data = np.frombuffer(mm, dtype=np.uint8)
            # Blocks of at most half the limit: a longer line covers a whole block.
            block = _COUNT if limit is None else min(_COUNT, max(limit // 2, 1 << 20))
            try:
                counts = [
                    int(np.count_nonzero(data[i : i + block] == 0x0A))
                    for i in range(0, len(data), block)
                ]
                last = int(data[-1])
                measure = limit is not None and (2 * block > limit or not all(counts))
                too_long = measure and _longest(data) > (limit or 0)
            finally:
                del data  # (the map cannot close while an array views it)
    return None if too_long else sum(counts) + (last != 0x0A)


def _longest(data: np.ndarray) -> int:
    """The length of the longest line of ``data`` (without its line feed)."""
    end, longest = -1, 0  # end: the last line feed so far
    for i in range(0, len(data), _COUNT):
        feeds = np.flatnonzero(data[i : i + _COUNT] == 0x0A)
        if len(feeds):
            inside = int(np.diff(feeds).max(initial=1)) - 1  # lines within the block
            longest = max(longest, i + int(feeds[0]) - end - 1, inside)
            end = i + int(feeds[-1])
    return max(longest, len(data) - end - 1)


def fetch_lines(path: Path, wanted: Sequence[int]) -> dict[int, str]:
    """The text of lines ``wanted`` (1-based numbers, ascending) of ``path``, split at line
    feeds only (see :func:`plain_lines`); numbers past the end are left out."""
    out: dict[int, bytes] = {}
    if not wanted:
        return {}
    i, number, carry = 0, 1, b""  # number: the line that ``carry`` begins
    with path.open("rb") as f:
        while i < len(wanted) and (block := f.read(_BLOCK)):
            data = carry + block if carry else block
            n = data.count(b"\n")
            if n and wanted[i] < number + n:
                parts = data.split(b"\n")
                while i < len(wanted) and wanted[i] < number + n:
                    out[wanted[i]] = parts[wanted[i] - number]
                    i += 1
                carry = parts[-1]
            elif n:
                carry = data[data.rfind(b"\n") + 1 :]
            else:
                carry = data
            number += n
    if carry and i < len(wanted) and wanted[i] == number:
        out[number] = carry
    return {k: v.decode("utf-8") for k, v in out.items()}


def ensure_raw(con: duckdb.DuckDBPyConnection, lazy: LazyLines | None, records_sql: str) -> None:
    """Make the text of the records ``records_sql`` selects (a column ``record``) available to
    ``Staged.raw_sql``; a no-op when the staged source keeps every line (``lazy`` None) and
    for records at or below ``lazy.offset``."""
    if lazy is None:
        return
    if not lazy.made:
        con.execute(f"CREATE TEMP TABLE {lazy.table} (record BIGINT, line VARCHAR)")
        lazy.made = True
    rows = con.execute(
        f"SELECT DISTINCT record FROM ({records_sql}) WHERE record IS NOT NULL ORDER BY record"
    ).fetchall()
    wanted = [n for r in rows if (n := int(r[0]) - lazy.offset) > 0 and n not in lazy.fetched]
    if not wanted:
        return
    if lazy.path is None:
        raise DpcrError("internal error: lines read after their file was closed; please "
                        "report this")
    lines = fetch_lines(lazy.path, wanted)
    if lines:
        view = f"{lazy.table}_new"
        con.register(
            view,
            {
                "record": np.fromiter(lines, dtype=np.int64, count=len(lines)),
                "line": np.array(list(lines.values()), dtype=object),
            },
        )
        with afterwards(con, lambda: con.unregister(view)):
            con.execute(f"INSERT INTO {lazy.table} SELECT record, line FROM {view}")
    lazy.fetched.update(wanted)
