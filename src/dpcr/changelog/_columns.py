"""The row columns a source's first records hold, read without loading the source: what
``dpcr check`` and ``dpcr plan`` compare with the columns a configuration names.

Only the head of the source is read: at most ``records`` records and ``max_bytes`` bytes of a
line file (JSON lines, CSV, Debezium, wal2json), the first ``records`` rows of a SQLite log or
a Parquet file. A Parquet file whose rows are STRUCT columns declares its columns in its schema;
every other source gives the keys of the row objects (``before`` and ``after``) it holds.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpcr.changelog._sources import (
    CsvSource,
    DebeziumSource,
    JsonlSource,
    ParquetSource,
    SourceConfig,
    SqliteSource,
    Wal2jsonSource,
)
from dpcr.errors import ConfigError

__all__ = ["ColumnSample", "sample_columns"]

#: How many records of the source's head are read (and, for a line file, at most how many bytes).
RECORDS = 1_000
MAX_BYTES = 8 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class ColumnSample:
    """The row columns of the first ``records`` records of a source. ``complete``: the sample
    is the whole source (or a schema every row follows), so a column it lacks is in no row."""

    columns: frozenset[str]
    records: int
    complete: bool


def sample_columns(
    source: SourceConfig,
    *,
    records: int | None = None,
    max_bytes: int | None = None,
    missing_ok: bool = False,
) -> ColumnSample | None:
    """The row columns of the head of ``source``: at most ``records`` records (default
    :data:`RECORDS`) and ``max_bytes`` bytes of a line file (default :data:`MAX_BYTES`). A
    source that cannot be read raises one :class:`ConfigError` naming it (``missing_ok``:
    None instead)."""
    try:
        return _sample(source, RECORDS if records is None else records,
                       MAX_BYTES if max_bytes is None else max_bytes)  # fmt: skip
    except ConfigError:
        if missing_ok:
            return None
        raise


def _sample(source: SourceConfig, records: int, max_bytes: int) -> ColumnSample:
    path = Path(str(source.path))
    try:
        if isinstance(source, SqliteSource):
            return _sqlite(path, source.table, records)
        if isinstance(source, ParquetSource):
            return _parquet(path, source, records)
        _regular(path)
        with path.open("rb") as fh:
            head = fh.read(max_bytes + 1)
    except (OSError, sqlite3.Error) as exc:
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"cannot read the source {str(path)!r} ({reason}); check [source] path"
        ) from None
    cut = len(head) > max_bytes
    if cut:  # (the last, partial line is left out)
        head = head[: head.rfind(b"\n", 0, max_bytes) + 1]
    text = head.decode("utf-8", errors="replace")
    rows = _csv_rows(text, source) if isinstance(source, CsvSource) else _line_rows(text, source)
    columns: set[str] = set()
    n = 0
    for row in rows:
        if n == records:
            return ColumnSample(columns=frozenset(columns), records=n, complete=False)
        n += 1
        columns.update(row)
    return ColumnSample(columns=frozenset(columns), records=n, complete=not cut)


def _regular(path: Path) -> None:
    """Refuse what is not a regular file (a folder; a pipe, whose read would never end)."""
    if not path.exists():
        raise OSError(2, "no such file")
    if not path.is_file():
        raise OSError(21, "not a regular file")


def _keys(value: Any) -> list[str]:
    """The keys of a row object (JSON text of one too); none for anything else."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return []
    return [str(k) for k in value] if isinstance(value, dict) else []


def _line_rows(text: str, source: SourceConfig) -> Iterator[list[str]]:
    """Per record of a JSON-lines file (canonical, Debezium or wal2json): its rows' columns."""
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            yield []
            continue
        if isinstance(source, DebeziumSource):
            if isinstance(record, dict) and "payload" in record:
                record = record["payload"]
            if not isinstance(record, dict):  # (a tombstone)
                continue
            yield _keys(record.get("before")) + _keys(record.get("after"))
        elif isinstance(source, Wal2jsonSource):
            yield _wal2json(record, source.table)
        elif isinstance(record, dict) and isinstance(source, JsonlSource):
            yield _keys(record.get(source.before)) + _keys(record.get(source.after))
        else:
            yield []


def _wal2json(record: Any, table: str | None) -> list[str]:
    if not isinstance(record, dict) or record.get("action") not in ("I", "U", "D"):
        return []
    if table is not None and f"{record.get('schema')}.{record.get('table')}" != table:
        return []
    out = []
    for part in ("columns", "identity"):
        for column in record.get(part) or ():
            if isinstance(column, dict) and "name" in column:
                out.append(str(column["name"]))
    return out


def _csv_rows(text: str, source: CsvSource) -> Iterator[list[str]]:
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=source.delimiter)
    try:
        for row in reader:
            yield _keys(row.get(source.before)) + _keys(row.get(source.after))
    except csv.Error:  # (a field longer than the csv module takes: the rows read so far)
        return


def _sqlite(path: Path, table: str, records: int) -> ColumnSample:
    _regular(path)
    uri = f"file:{path}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as con:
        quoted = '"' + table.replace('"', '""') + '"'
        rows = con.execute(
            f"SELECT before, after FROM {quoted} ORDER BY rowid LIMIT ?", (records + 1,)
        ).fetchall()
    columns = {c for before, after in rows[:records] for c in _keys(before) + _keys(after)}
    return ColumnSample(columns=frozenset(columns), records=min(len(rows), records),
                        complete=len(rows) <= records)  # fmt: skip


def _parquet(path: Path, source: ParquetSource, records: int) -> ColumnSample:
    """A STRUCT row column declares its fields (taken from one row that has it); the columns
    of a JSON text or MAP row column are the keys of the first ``records`` rows."""
    import duckdb

    from dpcr._sql import ident, lit

    _regular(path)
    scan = f"read_parquet({lit(str(path))})"
    columns: set[str] = set()
    with closing(duckdb.connect()) as con:
        try:
            types = dict(con.execute(f"SELECT column_name, column_type FROM "
                                     f"(DESCRIBE SELECT * FROM {scan})").fetchall())  # fmt: skip
            # (a column of NULL type holds no row)
            parts = [c for c in (source.before, source.after)
                     if c in types and types[c].strip('"') != "NULL"]  # fmt: skip
            structs = bool(parts) and all(types[c].startswith("STRUCT") for c in parts)
            for c in parts:
                limit = 1 if structs else int(records)
                head = f"(SELECT {ident(c)} AS c FROM {scan} WHERE {ident(c)} IS NOT NULL " \
                       f"LIMIT {limit})"  # fmt: skip
                rows = con.execute(
                    f"SELECT DISTINCT unnest(json_keys({_as_json('c', types[c])})) FROM {head}"
                ).fetchall()
                columns.update(str(r[0]) for r in rows)
            total = con.execute(f"SELECT count(*) FROM {scan}").fetchone()
        except duckdb.Error as exc:
            raise OSError(0, str(exc).splitlines()[0]) from None
    n = int(total[0]) if total else 0
    return ColumnSample(columns=frozenset(columns), records=min(n, records),
                        complete=structs or n <= records)  # fmt: skip


def _as_json(column: str, kind: str) -> str:
    """A Parquet row column as JSON: text parsed, a STRUCT or MAP converted."""
    return f"{column}::JSON" if kind in ("VARCHAR", "JSON") else f"to_json({column})"
