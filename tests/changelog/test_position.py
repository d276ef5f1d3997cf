"""Byte positions of append-only source files (dpcr.changelog.position)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog.parquet_position import parquet_position, parse_parquet_token
from dpcr.changelog.position import (
    BLOCK,
    RECHECK,
    BlockPosition,
    FilePosition,
    HeldPosition,
    SourceRewritten,
    advance,
    between,
    load_blocks,
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


class _Counting:
    """A file whose reads are counted (bytes per read, into ``log``)."""

    def __init__(self, f: Any, log: list[int]) -> None:
        self.f, self.log = f, log

    def read(self, n: int = -1) -> bytes:
        block: bytes = self.f.read(n)
        self.log.append(len(block))
        return block

    def __getattr__(self, name: str) -> Any:
        return getattr(self.f, name)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    import dpcr.changelog.position as position

    log: list[int] = []
    monkeypatch.setattr(position, "open", lambda *a: _Counting(open(*a), log),  # noqa: SIM115
                        raising=False)  # fmt: skip
    return log


_LINE = b"y" * 999 + b"\n"


def test_block_position_token_and_digests(tmp_path: Path) -> None:
    data = _LINE * 2500  # 2 full blocks and a partial one
    path = _write(tmp_path / "c.jsonl", data)
    pos = advance(path, len(data), check=None, blocks=tmp_path / "blocks")
    digests = [hashlib.sha256(data[i : i + BLOCK]).digest() for i in (0, BLOCK)]
    assert pos.root == hashlib.sha256(b"".join(digests)).hexdigest()
    assert pos.tail == hashlib.sha256(data[2 * BLOCK :]).hexdigest()
    assert parse_token(pos.token) == BlockPosition(len(data), pos.root, pos.tail)
    assert load_blocks(tmp_path / "blocks").digests == digests
    assert parse_token("file2:12:" + "0" * 64) is None


def test_a_check_reads_the_last_partial_block_some_full_blocks_and_the_new_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _LINE * 10_000  # 9 full blocks and a partial one
    path = _write(tmp_path / "c.jsonl", data)
    blocks = tmp_path / "blocks"
    old = advance(path, len(data), check=None, blocks=blocks)
    with path.open("ab") as f:
        f.write(_LINE * 5)
    log = _counted(monkeypatch)
    new = advance(path, len(data) + 5 * len(_LINE), check=old, blocks=blocks)
    partial = len(data) % BLOCK
    assert sum(log) <= RECHECK * BLOCK + partial + 5 * len(_LINE) + 1 < len(data)
    monkeypatch.undo()
    assert new == advance(path, len(data) + 5 * len(_LINE), check=None)  # same position


@pytest.mark.parametrize("where", ["first block", "partial block", "gone", "extended"])
def test_block_positions_refuse_rewritten_prefixes(tmp_path: Path, where: str) -> None:
    data = _LINE * 2500 + b'{"a": 2'
    path = _write(tmp_path / "c.jsonl", data)
    blocks = tmp_path / "blocks"
    old = advance(path, len(data), check=None, blocks=blocks)
    changed = {
        "first block": b"z" + data[1:],
        "partial block": data[:-3] + b"xx\n",
        "gone": data[:-1],
        "extended": data + b'3}\n',
    }[where]
    _write(path, changed)
    match = {"gone": "gone", "extended": "extended"}.get(where, "changed")
    with pytest.raises(SourceRewritten, match=match):
        advance(path, len(changed), check=old, blocks=blocks, every=True)
    if where != "first block":  # a check in turn finds these at once
        with pytest.raises(SourceRewritten, match=match):
            advance(path, len(changed), check=old, blocks=blocks)
    _write(path, data + b"\n" + _LINE)  # the last line ended later: accepted
    size = len(data) + 1 + len(_LINE)
    assert advance(path, size, check=old, blocks=blocks).size == size


def test_a_rewritten_full_block_is_found_in_turn_or_at_once_without_the_digests(
    tmp_path: Path,
) -> None:
    data = _LINE * 10_000  # 9 full blocks
    path = _write(tmp_path / "c.jsonl", data)
    blocks = tmp_path / "blocks"
    pos = advance(path, len(data), check=None, blocks=blocks)
    _write(path, data[: 7 * BLOCK] + b"z" + data[7 * BLOCK + 1 :])
    runs = 0
    with pytest.raises(SourceRewritten, match=f"bytes {7 * BLOCK} .. {8 * BLOCK}"):
        while True:  # each check re-hashes RECHECK full blocks in turn
            pos = advance(path, len(data), check=pos, blocks=blocks)
            runs += 1
    assert runs < -(-9 // RECHECK)
    # Lost or foreign digests are not trusted: the check re-hashes every consumed byte.
    (tmp_path / "lost").write_text("dpcr-source-blocks 1048576 0\n" + "00" * 32 + "\n")
    for kept in (None, tmp_path / "lost"):
        with pytest.raises(SourceRewritten, match="changed"):
            advance(path, len(data), check=pos, blocks=kept)


def test_a_file1_position_of_an_older_store_is_checked_whole_then_kept_in_blocks(
    tmp_path: Path,
) -> None:
    data = _LINE * 1500
    path = _write(tmp_path / "c.jsonl", data)
    old = read_position(path, len(data))
    with path.open("ab") as f:
        f.write(_LINE)
    new = advance(path, len(data) + len(_LINE), check=old, blocks=tmp_path / "b")
    assert new == advance(path, len(data) + len(_LINE), check=None)
    _write(path, b"z" + data[1:])
    with pytest.raises(SourceRewritten, match="changed"):
        advance(path, len(data), check=old, blocks=tmp_path / "b")


def test_a_held_position_checks_every_byte_once_then_the_last_block_and_the_new_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's position: its first check re-hashes every consumed byte; its later checks
    only the last, partial block and the new bytes (the positions are a process's); the kept
    digests are rewritten only when a full block is added, and a separate process's check in
    turn still finds a full block rewritten meanwhile."""
    data = _LINE * 10_000  # 9 full blocks and a partial one
    path = _write(tmp_path / "c.jsonl", data)
    blocks = tmp_path / "blocks"
    pos = advance(path, len(data), check=None, blocks=blocks)
    held = HeldPosition()
    log = _counted(monkeypatch)
    size = len(data) + len(_LINE)
    with path.open("ab") as f:
        f.write(_LINE)
    first = held.advance(path, size, check=pos, token=pos.token, blocks=blocks)
    assert sum(log) >= size  # every byte
    del log[:]
    kept = blocks.stat().st_mtime_ns, blocks.read_bytes()
    with path.open("ab") as f:
        f.write(_LINE * 3)
    second = held.advance(path, size + 3 * len(_LINE), check=first, token=first.token,
                          blocks=blocks)  # fmt: skip
    assert sum(log) <= len(data) % BLOCK + 4 * len(_LINE) + 1  # the partial block, the new
    monkeypatch.undo()
    assert second == advance(path, size + 3 * len(_LINE), check=None)  # bytes: the same position
    assert (blocks.stat().st_mtime_ns, blocks.read_bytes()) == kept
    # a full block added: the kept digests follow (what a separate process trusts)
    with path.open("ab") as f:
        f.write(_LINE * 1100)
    third = held.advance(path, path.stat().st_size, check=second, token=second.token,
                         blocks=blocks)  # fmt: skip
    assert len(load_blocks(blocks).digests) == 10 and third.root == advance(
        path, path.stat().st_size, check=None).root  # fmt: skip
    # a rewrite of the last consumed block: found at the session's next check
    grown = path.read_bytes()
    _write(path, grown[:-3] + b"xx\n" + _LINE)
    with pytest.raises(SourceRewritten, match="changed"):
        held.advance(path, len(grown) + len(_LINE), check=third, token=third.token,
                     blocks=blocks)  # fmt: skip
    # a rewrite of a full block: not looked at by the session, found by a process in turn
    _write(path, grown[: 2 * BLOCK] + b"z" + grown[2 * BLOCK + 1 :])
    held = HeldPosition()
    held._at = (str(path), (path.stat().st_dev, path.stat().st_ino), third.token,
                load_blocks(blocks))  # (as the session left it)  # fmt: skip
    assert held.advance(path, len(grown), check=third, token=third.token, blocks=blocks)
    runs = 0
    with pytest.raises(SourceRewritten, match=f"bytes {2 * BLOCK} .. {3 * BLOCK}"):
        while True:
            third = advance(path, len(grown), check=third, blocks=blocks)
            runs += 1
    assert runs < -(-10 // RECHECK)


@pytest.mark.parametrize("why", ["replaced", "other position", "first"])
def test_a_held_position_checks_every_byte_after_a_file_or_position_it_does_not_know(
    tmp_path: Path, why: str
) -> None:
    data = _LINE * 3000  # 2 full blocks and a partial one
    path = _write(tmp_path / "c.jsonl", data)
    blocks = tmp_path / "blocks"
    pos = advance(path, len(data), check=None, blocks=blocks)
    held = HeldPosition()
    pos = held.advance(path, len(data), check=pos, token=pos.token, blocks=blocks)
    changed = b"z" + data[1:]
    if why == "replaced":  # another file (inode) in its place, its first block rewritten
        _write(tmp_path / "new.jsonl", changed).replace(path)
    else:
        _write(path, changed)
    token = pos.token if why != "other position" else "file2:x"
    if why == "first":
        held = HeldPosition()
    with pytest.raises(SourceRewritten, match=f"bytes 0 .. {BLOCK}"):
        held.advance(path, len(data), check=pos, token=token, blocks=blocks)


@pytest.mark.parametrize("start", [3 * len(_LINE), BLOCK - BLOCK % len(_LINE), 1500 * len(_LINE)])
@pytest.mark.parametrize("kept", [True, False])
def test_the_bytes_between_two_positions_are_read_once_both_checked(
    tmp_path: Path, start: int, kept: bool
) -> None:
    """:func:`between`: the bytes from one position to a later one, after checking the file
    against both (with the kept digests of the later one's full blocks, or re-hashing them);
    a change anywhere in the bytes it reads, or before the first position when it re-hashes,
    is refused."""
    data = _LINE * 2500  # 2 full blocks and a partial one
    path = _write(tmp_path / "c.jsonl", data)
    blocks = tmp_path / "blocks"
    first = advance(path, start, check=None, blocks=tmp_path / "first")
    end = advance(path, len(data), check=None, blocks=blocks)
    kept_at = blocks if kept else None
    assert between(path, first, end, blocks=kept_at) == data[start:]
    assert between(path, end, end, blocks=kept_at) == b""
    with pytest.raises(SourceRewritten, match="gone"):
        between(path, end, first, blocks=kept_at)
    for at in (start - 5, start + 5, len(data) - 5, 3):
        _write(path, data[:at] + b"z" + data[at + 1:])
        if at == 3 and kept and start >= BLOCK:  # (a full block the kept digests vouch for)
            assert between(path, first, end, blocks=kept_at) == data[start:]
            continue
        with pytest.raises(SourceRewritten, match="changed"):
            between(path, first, end, blocks=kept_at)
    _write(path, data[:-1])
    with pytest.raises(SourceRewritten, match="gone"):
        between(path, first, end, blocks=kept_at)
