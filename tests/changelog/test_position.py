"""Byte positions of append-only source files (dpcr.changelog._position)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog._position import (
    FilePosition,
    SourceRewritten,
    parquet_position,
    parse_parquet_token,
    parse_token,
    read_position,
)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_token_round_trip_and_digest_is_sha256_of_the_prefix(tmp_path: Path) -> None:
    data = b'{"a": 1}\n{"a": 2}\n'
    path = _write(tmp_path / "c.jsonl", data)
    pos = read_position(path, len(data))
    assert pos.sha256 == hashlib.sha256(data).hexdigest()
    assert parse_token(pos.token) == FilePosition(len(data), pos.sha256)
    assert parse_token("raw1:3:4") is None
    assert parse_token("file1:x:" + "0" * 64) is None


def test_appended_records_are_accepted(tmp_path: Path) -> None:
    first = b'{"a": 1}\n'
    path = _write(tmp_path / "c.jsonl", first)
    old = read_position(path, len(first))
    _write(path, first + b'{"a": 2}\n' * 1000)
    new = read_position(path, path.stat().st_size, check=old)
    assert new.size > old.size


@pytest.mark.parametrize(
    ("before", "after", "reason"),
    [
        (b'{"a": 1}\n{"a": 2}\n', b'{"a": 1}\n{"a": 3}\n{"a": 4}\n', "changed"),
        (b'{"a": 1}\n{"a": 2}\n', b'{"a": 1}\n', "gone"),
        (b'{"a": 1}\n{"a": 2', b'{"a": 1}\n{"a": 23}\n', "extended"),
    ],
)
def test_rewritten_prefixes_are_refused(
    tmp_path: Path, before: bytes, after: bytes, reason: str
) -> None:
    path = _write(tmp_path / "c.jsonl", before)
    old = read_position(path, len(before))
    _write(path, after)
    with pytest.raises(SourceRewritten, match=reason):
        read_position(path, len(after), check=old)


def test_a_last_line_without_newline_may_be_ended_later(tmp_path: Path) -> None:
    before = b'{"a": 1}\n{"a": 2}'
    path = _write(tmp_path / "c.jsonl", before)
    old = read_position(path, len(before))
    for tail in (b'\n{"a": 3}\n', b'\r\n{"a": 3}\r\n'):
        _write(path, before + tail)
        assert read_position(path, len(before + tail), check=old).size == len(before + tail)


def test_large_files_hash_in_chunks(tmp_path: Path) -> None:
    line = b"x" * 1000 + b"\n"
    data = line * 9000  # about 2.1 chunks
    path = _write(tmp_path / "big.jsonl", data)
    old = read_position(path, len(line) * 4321)
    new = read_position(path, len(data), check=old)
    assert new.sha256 == hashlib.sha256(data).hexdigest()


def _parquet(con: Any, path: Path, rows: list[tuple[int, str]]) -> None:
    con.execute("CREATE OR REPLACE TABLE t (n BIGINT, s VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?, ?)", rows)
    con.execute(f"COPY (SELECT * FROM t ORDER BY n) TO '{path}' (FORMAT parquet)")


def test_parquet_rewritten_with_appended_rows_is_accepted(tmp_path: Path) -> None:
    con = duckdb.connect()
    path = tmp_path / "c.parquet"
    rows = [(i, f"v{i}") for i in range(100)]
    _parquet(con, path, rows)
    old = parquet_position(con, path)
    assert old.rows == 100
    same = parquet_position(con, path, check=old)
    assert same == old
    _parquet(con, path, [*rows, (100, "new")])
    new = parquet_position(con, path, check=old)
    assert new.rows == 101 and new.sha256 != old.sha256
    assert parse_parquet_token(new.token) == new


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ([(i, f"v{i}") for i in range(99)], "now has 99 rows"),
        ([(i, "x" if i == 50 else f"v{i}") for i in range(101)], "changed"),
    ],
)
def test_parquet_rewritten_history_is_refused(
    tmp_path: Path, rows: list[tuple[int, str]], reason: str
) -> None:
    con = duckdb.connect()
    path = tmp_path / "c.parquet"
    _parquet(con, path, [(i, f"v{i}") for i in range(100)])
    old = parquet_position(con, path)
    _parquet(con, path, rows)
    with pytest.raises(SourceRewritten, match=reason):
        parquet_position(con, path, check=old)


def test_parquet_rewritten_under_another_duckdb_version_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    con = duckdb.connect()
    path = tmp_path / "c.parquet"
    rows = [(i, f"v{i}") for i in range(10)]
    _parquet(con, path, rows)
    old = parquet_position(con, path)
    monkeypatch.setattr(duckdb, "__version__", "0.0.1")
    # Unchanged bytes: accepted, and re-keyed to the running version.
    assert parquet_position(con, path, check=old).duckdb_version == "0.0.1"
    _parquet(con, path, [*rows, (10, "new")])
    with pytest.raises(SourceRewritten, match="DuckDB changed"):
        parquet_position(con, path, check=old)


def test_a_process_continues_its_own_hash_and_still_sees_rewritten_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dpcr.changelog._position as position

    line = b"y" * 999 + b"\n"
    data = line * 300  # 300 kB: ends of 64 KiB leave a middle
    path = _write(tmp_path / "c.jsonl", data)
    old = read_position(path, len(data))
    with path.open("ab") as f:
        f.write(line * 5)
    read: list[int] = []

    class Counting:
        def __init__(self, f: Any) -> None:
            self.f = f

        def read(self, n: int = -1) -> bytes:
            block: bytes = self.f.read(n)
            read.append(len(block))
            return block

        def __getattr__(self, name: str) -> Any:
            return getattr(self.f, name)

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

    monkeypatch.setattr(position, "open", lambda *a: Counting(open(*a)),  # noqa: SIM115
                        raising=False)
    new = read_position(path, len(data) + 5 * len(line), check=old)
    assert new.sha256 == hashlib.sha256(data + line * 5).hexdigest()
    # the ends (2 x 64 KiB, twice) and the new bytes; never the 300 kB prefix again
    assert sum(read) <= 4 * (1 << 16) + 5 * len(line) < len(data)
    monkeypatch.undo()
    _write(path, b"z" + data[1:] + line * 5)  # the first byte rewritten
    with pytest.raises(SourceRewritten, match="changed"):
        read_position(path, len(data) + 5 * len(line), check=old)
