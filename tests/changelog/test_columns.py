"""The columns of a source's head, read without loading it (``dpcr check``, ``dpcr plan``)."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import duckdb
import pytest

from dpcr.changelog import (
    CsvSource,
    DebeziumSource,
    JsonlSource,
    ParquetSource,
    SqliteSource,
    Wal2jsonSource,
    install_triggers,
    sample_columns,
)
from dpcr.errors import ConfigError

ROWS = [{"id": i, "zone": "AB"[i % 2], "fare": 1.5 * i} for i in range(5)]
COLUMNS = frozenset({"id", "zone", "fare"})


def _canonical() -> list[dict[str, object]]:
    return [{"entry": str(r["id"]), "ts": f"2025-01-0{1 + i}T00:00:00Z", "seq": i + 1,
             "op": "insert", "before": None, "after": r} for i, r in enumerate(ROWS)]  # fmt: skip


def _lines(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _sources(tmp: Path) -> dict[str, object]:
    jsonl = _lines(tmp / "log.jsonl", list(_canonical()))
    with (tmp / "log.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["entry", "ts", "seq", "op", "before", "after"])
        for r in _canonical():
            w.writerow([r["entry"], r["ts"], r["seq"], r["op"], "", json.dumps(r["after"])])
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * FROM read_json_auto('{jsonl}')) TO '{tmp / 'struct.parquet'}'")
    con.execute(f"COPY (SELECT entry, ts, seq, op, NULL::VARCHAR AS before, "
                f"to_json(after)::VARCHAR AS after FROM read_json_auto('{jsonl}')) "
                f"TO '{tmp / 'text.parquet'}'")  # fmt: skip
    con.close()
    debezium = _lines(tmp / "dbz.jsonl", [
        {"payload": {"op": "c", "before": None, "after": r, "source": {"ts_ms": 1}}}
        for r in ROWS] + [None])  # fmt: skip
    wal = _lines(
        tmp / "wal.jsonl",
        [{"action": "B"}]
        + [
            {
                "action": "I",
                "schema": "public",
                "table": "t",
                "columns": [{"name": k, "type": "text", "value": v} for k, v in r.items()],
            }
            for r in ROWS
        ]
        + [
            {
                "action": "I",
                "schema": "public",
                "table": "other",
                "columns": [{"name": "elsewhere", "type": "text", "value": 1}],
            }
        ],
    )
    db = tmp / "app.sqlite"
    raw = sqlite3.connect(db)
    raw.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, zone TEXT, fare REAL)")
    raw.commit()
    raw.close()
    install_triggers(str(db), "t", key="id")
    raw = sqlite3.connect(db)
    raw.executemany("INSERT INTO t VALUES (:id, :zone, :fare)", ROWS)
    raw.commit()
    raw.close()
    return {
        "jsonl": JsonlSource(path=jsonl),
        "csv": CsvSource(path=tmp / "log.csv"),
        "parquet-struct": ParquetSource(path=tmp / "struct.parquet"),
        "parquet-text": ParquetSource(path=tmp / "text.parquet"),
        "debezium": DebeziumSource(path=debezium, key="id"),
        "wal2json": Wal2jsonSource(path=wal, key="id", table="public.t"),
        "sqlite": SqliteSource(path=db),
    }  # fmt: skip


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet-struct", "parquet-text", "debezium",
                                 "wal2json", "sqlite"])  # fmt: skip
def test_the_head_of_every_format_gives_its_row_columns(tmp_path: Path, fmt: str) -> None:
    source = _sources(tmp_path)[fmt]
    whole = sample_columns(source)  # type: ignore[arg-type]
    assert whole is not None
    records = 7 if fmt == "wal2json" else 5  # (a begin, and a message of another table)
    assert (whole.columns, whole.records, whole.complete) == (COLUMNS, records, True)
    head = sample_columns(source, records=2)  # type: ignore[arg-type]
    assert head is not None and head.records == 2
    # (a STRUCT schema holds for every row: complete however little was read)
    assert head.complete == (fmt == "parquet-struct")


def test_a_byte_limit_reads_whole_lines_only(tmp_path: Path) -> None:
    path = _lines(tmp_path / "log.jsonl", list(_canonical()))
    head = sample_columns(JsonlSource(path=path), max_bytes=path.stat().st_size // 2)
    assert head is not None and not head.complete and 1 <= head.records < 5


def test_a_source_that_cannot_be_read_is_one_error(tmp_path: Path) -> None:
    missing = JsonlSource(path=tmp_path / "nope.jsonl")
    with pytest.raises(ConfigError, match=r"cannot read the source .*nope\.jsonl"):
        sample_columns(missing)
    assert sample_columns(missing, missing_ok=True) is None
    with pytest.raises(ConfigError, match="cannot read the source"):
        sample_columns(ParquetSource(path=_lines(tmp_path / "bad.parquet", [1])))
