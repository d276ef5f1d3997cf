"""The raw2 digests of a SQLite log's records (``log_digest``): every load of a log computes
them; they change when a consumed record changes in any field, a NULL becomes an empty text,
or two records trade places, and never because of appended records."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest

from dpcr.changelog import JsonlSource, SqliteSource, load, raw_digest
from dpcr.changelog._resume import log_digest
from dpcr.errors import ConfigError

from .helpers import write_log_table

TS = "2025-01-01T00:00:0{}Z"
ROWS: list[tuple[object, ...]] = [
    (1, "1", TS.format(1), "insert", None, '{"id":1,"zone":"A"}'),
    (2, "2", TS.format(2), "insert", None, '{"id":2,"zone":"B"}'),
    (3, "1", TS.format(3), "update", '{"id":1,"zone":"A"}', '{"id":1,"zone":"C"}'),
    (4, "3", TS.format(4), "insert", "", '{"id":3,"zé":"A"}'),
    (5, "2", TS.format(5), "delete", '{"id":2,"zone":"B"}', None),
]


def _write(db: Path, rows: list[tuple[object, ...]]) -> None:
    db.unlink(missing_ok=True)
    write_log_table(db, rows)


def _digests(
    db: Path, records: int = len(ROWS), **kw: object
) -> tuple[str, duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    load(SqliteSource(path=db), con, on_error="quarantine",
         quarantine_path=db.with_suffix(".q.jsonl"), **kw)  # type: ignore[arg-type]  # fmt: skip
    return log_digest(con, "changelog", records), con


def _reference(row: tuple[object, ...]) -> int:
    """The raw2 digest of one record as its definition states it: the high half of the MD5
    digest (bytes 9-16, little-endian) of number ':' byte lengths (-1 for NULL) ':' texts."""
    fields = [None if f is None else str(f).encode() for f in row[1:]]
    lengths = ",".join(str(-1 if f is None else len(f)) for f in fields)
    x = f"{row[0]}:{lengths}:".encode() + b"".join(f or b"" for f in fields)
    return int.from_bytes(hashlib.md5(x).digest()[8:16], "little")


def test_the_raw2_digest_is_fixed(tmp_path: Path) -> None:
    """Its value is part of every store's position: it must not change between versions."""
    db = tmp_path / "log.sqlite"
    _write(db, ROWS)
    digest, con = _digests(db)
    assert digest == "5:59690087301403590938"
    assert digest == f"5:{sum(_reference(r) for r in ROWS)}"
    assert log_digest(con, "changelog", 2) == f"2:{sum(_reference(r) for r in ROWS[:2])}"
    assert log_digest(con, "changelog", 0) == "0:0"


def test_the_raw2_digest_sees_every_change_of_a_consumed_record(tmp_path: Path) -> None:
    db = tmp_path / "log.sqlite"
    _write(db, ROWS)
    digest = _digests(db)[0]

    def changed(i: int, field: int, value: object) -> list[tuple[object, ...]]:
        rows = list(ROWS)
        rows[i] = tuple(value if k == field else v for k, v in enumerate(rows[i]))
        return rows

    edits = {
        "entry": changed(0, 1, "9"),
        "ts": changed(1, 2, TS.format(7)),
        "op": changed(2, 3, "upsert"),
        "after": changed(2, 5, '{"id":1,"zone":"D"}'),
        "after, same JSON": changed(2, 5, '{"id":1, "zone":"C"}'),
        "NULL before to empty": changed(0, 4, ""),
        "empty before to NULL": changed(3, 4, None),
        "NULL after to empty": changed(4, 5, ""),
        # The same bytes in all, split otherwise between two fields.
        "before's end moved to after": [
            *ROWS[:2], (3, "1", TS.format(3), "update", '{"id":1,"zone":"A"',
                        '}{"id":1,"zone":"C"}'), *ROWS[3:]],
        "entry's end moved to ts": [(1, "", "1" + TS.format(1), *ROWS[0][3:]), *ROWS[1:]],
        "removed": [*ROWS[:-1], (6, *ROWS[-1][1:])],
        "renumbered": [(r[0] * 10, *r[1:]) for r in ROWS],
    }
    # Two records trade places (their numbers stay).
    swapped = list(ROWS)
    swapped[0], swapped[1] = (1, *ROWS[1][1:]), (2, *ROWS[0][1:])
    edits["swapped pair"] = swapped
    for name, rows in edits.items():
        _write(db, rows)
        assert _digests(db)[0] != digest, name
    # Records appended after the consumed ones change nothing.
    _write(db, [*ROWS, (6, "4", TS.format(6), "insert", None, '{"id":4}')])
    assert _digests(db, len(ROWS))[0] == digest


def test_raw2_digests_come_with_or_without_raw1(tmp_path: Path) -> None:
    db = tmp_path / "log.sqlite"
    _write(db, ROWS)
    with_raw1, con = _digests(db)
    raw1 = raw_digest(con, "changelog", len(ROWS))
    without, con = _digests(db, raw_digests=False)
    assert without == with_raw1 and raw1 != with_raw1
    with pytest.raises(ConfigError, match="raw_digests=False"):
        raw_digest(con, "changelog", len(ROWS))


def test_only_a_sqlite_log_has_raw2_digests(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"entry":"1","ts":1,"op":"insert","after":{"id":1}}\n', encoding="utf-8")
    con = duckdb.connect()
    load(JsonlSource(path=path), con)
    assert raw_digest(con, "changelog", 1).startswith("1:")
    with pytest.raises(ConfigError, match="SQLite"):
        log_digest(con, "changelog", 1)
