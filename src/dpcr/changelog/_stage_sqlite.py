"""Staging of the SQLite change-log table (:func:`dpcr.changelog.install_triggers` fills it).

The log is read through Python's ``sqlite3`` (DuckDB reads SQLite files only through an
extension it would download) by one statement in ``seq`` order (one snapshot of the log). A
reader thread fetches the rows in small pieces and copies each piece into the object matrix of
the current batch (C loops, while the piece is still in the processor's cache); DuckDB reads the
matrix's columns as arrays. While the reader fetches the next batch (Python work, holding the
interpreter lock), DuckDB (which releases it) parses the previous batch into the rows table and
digests its records on the other core: the ``raw2`` digest of every record
(:func:`~dpcr.changelog._sql.log_record_digest`, the log's position) and, when asked, the ``raw1``
digest that older stores hold (:func:`~dpcr.changelog._sql.record_digest`).

A text value that is not UTF-8 (SQLite stores whatever bytes it is given) makes the reader
refuse the log; only then is the log read again with each such value replaced by
:data:`NOT_UTF8` followed by ``:E:`` and the value's bytes in base64, and the record is
quarantined whole (``bad_encoding``, its value's bytes kept; :mod:`dpcr.changelog._set_aside`).
The replacement is a function of the bytes alone, so the record's digests (the log's position)
are the same in every run.

The rows table is built as for any text source, with one shortcut: most of a log's rows hold
objects with exactly the watched table's columns, so the keys of the first object are given to
:func:`~dpcr.changelog._stage_rows.row_columns` and objects with exactly those keys skip the
search for a repeated key (the verdict is the same). The log's ``seq`` is the record number
and the sequence number (``seq_raw`` is left NULL, which means exactly that).
"""

from __future__ import annotations

import base64
import queue
import sqlite3
import threading
from collections.abc import Generator
from contextlib import closing
from typing import cast

import duckdb
import numpy as np

from dpcr._duck import afterwards
from dpcr._sql import ident
from dpcr.changelog._sources import SqliteSource, describe
from dpcr.changelog._sql import log_record_digest, record_digest
from dpcr.changelog._stage_rows import Staged, _rows_from_text, _run, common_keys
from dpcr.errors import ConfigError

#: Rows per batch moved from SQLite into DuckDB: two of DuckDB's row groups (122,880 rows), so
#: that DuckDB works on each batch with two threads; the first batch is one row group (DuckDB
#: starts sooner). Rows per fetch from SQLite: ``_PIECE``.
BATCH = 2 * 122_880
_PIECE = 1024

_NAMES = ("record", "entry", "ts", "op", "before", "after")
_DONE = object()
#: What a text value that is not UTF-8 reads as (then ``:E:`` and its bytes in base64).
NOT_UTF8 = "__dpcr_not_utf8__"


class _NotUtf8(Exception):
    """The log holds a text value that is not UTF-8."""


def _text(data: bytes) -> str:
    """A text value of the log read leniently (:data:`NOT_UTF8`)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return f"{NOT_UTF8}:E:{base64.b64encode(data).decode()}"


def stage_sqlite(
    con: duckdb.DuckDBPyConnection,
    source: SqliteSource,
    prefix: str,
    staged: Staged,
    *,
    digests: bool = True,
) -> None:
    """The rows table of ``source`` and ``staged.digests``: per record its ``raw2`` digest
    (:func:`~dpcr.changelog._sql.log_record_digest`) and, with ``digests``, its ``raw1``
    digest (:func:`~dpcr.changelog._sql.record_digest`; else NULL). A log with a text value
    that is not UTF-8 is read again leniently (see the module docstring)."""
    try:
        _stage(con, source, prefix, staged, digests=digests, lenient=False)
        return
    except _NotUtf8:
        for table in (f"{prefix}_src", f"{prefix}_digests", staged.table):
            _run(con, f"DROP TABLE IF EXISTS {table}")
    _stage(con, source, prefix, staged, digests=digests, lenient=True)
    src = f"{prefix}_src"
    texts = ", ".join(f"CASE WHEN starts_with({c}, '{NOT_UTF8}') THEN {c} END" for c in _NAMES[1:])
    staged.mark = NOT_UTF8
    staged.marks = f"SELECT record, coalesce({texts}) AS text FROM {src}"


def _stage(
    con: duckdb.DuckDBPyConnection,
    source: SqliteSource,
    prefix: str,
    staged: Staged,
    *,
    digests: bool,
    lenient: bool,
) -> None:
    src, view = f"{prefix}_src", f"{prefix}_src_batch"
    staged.temp_tables.append(src)
    _run(
        con,
        f"CREATE TEMP TABLE {src} (record BIGINT, entry VARCHAR, ts VARCHAR, op VARCHAR, "
        "before VARCHAR, after VARCHAR)",
    )
    staged.digests = f"{prefix}_digests"
    staged.temp_tables.append(staged.digests)
    _run(
        con,
        f"CREATE TEMP TABLE {staged.digests} (record BIGINT, digest UBIGINT, digest2 UBIGINT)",
    )
    raw = (
        "json_object('seq', record, 'entry', entry, 'ts', ts, 'op', op, 'before', before, "
        "'after', after)"
    )
    staged.raw_sql = f"SELECT record, {raw} AS raw FROM {src}"
    # The raw2 digests always (a log's position); the raw1 digests only for ``digests``.
    raw1 = record_digest("record", raw) if digests else "NULL::UBIGINT"
    raw2 = log_record_digest("record", _NAMES[1:])
    common: list[str] | None = None
    done = 0  # rows of src so far; a batch's rows are the next rowids of src
    with closing(_batches(source, lenient=lenient)) as batches:
        for matrix in batches:
            n = len(matrix)
            arrays = {c: matrix[:, i] for i, c in enumerate(_NAMES)}
            arrays["record"] = matrix[:, 0].astype(np.int64)
            con.register(view, arrays)
            with afterwards(con, lambda: con.unregister(view)):
                _run(con, f"INSERT INTO {src} SELECT {', '.join(_NAMES)} FROM {view}")
            where = f"WHERE rowid >= {done} AND rowid < {done + n}"
            del arrays, matrix
            batch = f"(SELECT * FROM {src} {where})"
            if not done:
                common = common_keys(con, batch, "after")
            _rows(con, staged, batch, common, made=done > 0)
            _run(
                con,
                f"INSERT INTO {staged.digests} SELECT record, {raw1}, {raw2} FROM {src} {where}",
            )
            done += n
    if not done:
        _rows(con, staged, src, None, made=False)


def _rows(
    con: duckdb.DuckDBPyConnection,
    staged: Staged,
    relation: str,
    common: list[str] | None,
    *,
    made: bool,
) -> None:
    """Append the rows of ``relation`` (rows of the ``src`` table) to the rows table (create
    it unless ``made``)."""
    x = f"""(
        SELECT record, FALSE AS malformed, FALSE AS tombstone, entry, NULL::VARCHAR AS unit,
               ts AS ts_raw, NULL::VARCHAR AS seq_raw, op AS op_raw,
               before AS before_raw, after AS after_raw
        FROM {relation})"""
    rows = _rows_from_text(x, staged.unit_column, common=common)
    if made:
        _run(con, f"INSERT INTO {staged.table} {rows}")
    else:
        _run(con, f"CREATE TEMP TABLE {staged.table} AS {rows}")


def _batches(source: SqliteSource, *, lenient: bool) -> Generator[np.ndarray, None, None]:
    """The log's rows in ``seq`` order, as object matrices of up to :data:`BATCH` rows (columns
    in the order of ``_NAMES``), fetched by a reader thread one batch ahead. ``lenient``: text
    that is not UTF-8 reads as :data:`NOT_UTF8` (else the read stops: :class:`_NotUtf8`)."""
    name = describe(source)
    out: queue.Queue[object] = queue.Queue(maxsize=2)
    stop = threading.Event()
    reader = threading.Thread(
        target=_read, args=(source, out, stop, lenient), name="dpcr-sqlite-reader", daemon=True
    )
    reader.start()
    try:
        while (item := out.get()) is not _DONE:
            if isinstance(item, sqlite3.Error):
                if "decode" in str(item).lower() and not lenient:
                    raise _NotUtf8(str(item)) from item
                raise ConfigError(f"{name}: cannot read the change log ({item})") from item
            if isinstance(item, BaseException):
                raise item
            yield cast(np.ndarray, item)
    finally:
        stop.set()  # a reader waiting for room on the queue gives up
        reader.join()


def _read(
    source: SqliteSource, out: queue.Queue[object], stop: threading.Event, lenient: bool
) -> None:
    """The reader thread: put the batches on ``out``, then ``_DONE`` (or the exception that
    ended the read); stop early when ``stop`` is set. ``lenient``: see :func:`_batches`."""

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    try:
        db = sqlite3.connect(f"file:{source.path}?mode=ro", uri=True)
        if lenient:
            db.text_factory = _text
        try:
            exists = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (source.table,)
            ).fetchone()
            if exists is None:
                raise ConfigError(
                    f"{describe(source)}: the database has no table {source.table!r}; install "
                    f"the change log with `dpcr sqlite-install-triggers {source.path} TABLE "
                    "--key KEY` or set [source] table"
                )
            # One statement: the batches come from one snapshot of the log.
            cursor = db.execute(
                "SELECT seq, CAST(entry AS TEXT), CAST(ts AS TEXT), CAST(op AS TEXT), "
                "CAST(before AS TEXT), CAST(after AS TEXT) "
                f"FROM {ident(source.table)} ORDER BY seq"
            )
            size = max(1, BATCH // 2)
            while True:
                # Fetched in small pieces, each copied into the batch's matrix while it is
                # still in the processor's cache (a third faster than one large fetch).
                matrix = np.empty((size, len(_NAMES)), dtype=object)
                n = 0
                while n < size and (rows := cursor.fetchmany(min(_PIECE, size - n))):
                    matrix[n : n + len(rows)] = rows
                    n += len(rows)
                if n and not put(matrix[:n]):
                    return
                if n < size:
                    break
                size = BATCH
        finally:
            db.close()
    except BaseException as exc:  # handed to the staging thread, which raises it
        put(exc)
        return
    put(_DONE)
