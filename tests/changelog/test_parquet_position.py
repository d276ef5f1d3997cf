"""Row-group positions of Parquet files (dpcr.changelog.parquet_position): a file rewritten with
rows appended keeps its earlier full row groups byte for byte, which are compared so; the rows
of the last row group read are compared by their hashes; a re-encoded or edited earlier group,
and lost digests of a changed file, are refused."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from dpcr.changelog.parquet_position import (
    ParquetPosition,
    load_groups,
    parquet_position,
    parse_parquet_token,
)
from dpcr.changelog.position import SourceRewritten

GROUP = 2048  # rows per row group (DuckDB writes groups of a multiple of 2048 rows)


def _write(path: Path, rows: int, *, group: int = GROUP, edit: int | None = None) -> None:
    value = f"CASE WHEN i = {edit} THEN 'x' ELSE 'v' || i END" if edit is not None else "'v' || i"
    duckdb.sql(
        f"COPY (SELECT i AS n, {value} AS s FROM range({rows}) t(i) ORDER BY i) TO '{path}' "
        f"(FORMAT parquet, ROW_GROUP_SIZE {group})"
    )


def _groups(path: Path) -> list[int]:
    return [r[0] for r in duckdb.sql(
        f"SELECT row_group_num_rows FROM parquet_metadata('{path}') WHERE column_id = 0 "
        "ORDER BY row_group_id").fetchall()]  # fmt: skip


def test_a_file_grown_by_a_writer_that_keeps_its_row_groups_is_accepted(tmp_path: Path) -> None:
    path, blocks = tmp_path / "c.parquet", tmp_path / "state" / "source-blocks"
    con = duckdb.connect()
    _write(path, 3 * GROUP + 100)
    assert _groups(path) == [GROUP] * 3 + [100]
    old = parquet_position(con, path, blocks=blocks)
    assert (old.rows, old.tail) == (3 * GROUP + 100, 3 * GROUP)
    assert load_groups(blocks, old.root) == old.groups
    _write(path, 4 * GROUP + 7)
    checked = parse_parquet_token(old.token)  # (as a run reads it from the store)
    assert checked == old and not checked.groups
    new = parquet_position(con, path, check=checked, blocks=blocks)
    assert (new.rows, new.tail) == (4 * GROUP + 7, 4 * GROUP)
    # the store's position and the new one are kept until the next run
    assert load_groups(blocks, old.root) == old.groups
    assert load_groups(blocks, new.root) == new.groups
    # rows only appended within the last group read: compared by their hashes
    _write(path, 4 * GROUP + 9)
    assert parquet_position(con, path, check=parse_parquet_token(new.token), blocks=blocks).rows \
        == 4 * GROUP + 9  # fmt: skip


@pytest.mark.parametrize("edit", [5, GROUP + 1, 3 * GROUP + 50])  # a full group, the last read
def test_an_edited_row_read_earlier_is_refused(tmp_path: Path, edit: int) -> None:
    path, blocks = tmp_path / "c.parquet", tmp_path / "source-blocks"
    con = duckdb.connect()
    _write(path, 3 * GROUP + 100)
    old = parse_parquet_token(parquet_position(con, path, blocks=blocks).token)
    assert old is not None
    _write(path, 4 * GROUP, edit=edit)
    match = "row group" if edit < 3 * GROUP else "changed"
    with pytest.raises(SourceRewritten, match=match):
        parquet_position(con, path, check=old, blocks=blocks)
    # an edit after the rows read is not theirs
    _write(path, 4 * GROUP, edit=3 * GROUP + 100)
    assert parquet_position(con, path, check=old, blocks=blocks).rows == 4 * GROUP


def test_a_file_whose_earlier_rows_are_grouped_otherwise_is_refused(tmp_path: Path) -> None:
    path, blocks = tmp_path / "c.parquet", tmp_path / "source-blocks"
    con = duckdb.connect()
    _write(path, 3 * GROUP + 100)
    old = parse_parquet_token(parquet_position(con, path, blocks=blocks).token)
    assert old is not None
    _write(path, 4 * GROUP, group=2 * GROUP)  # the same rows, other row groups
    with pytest.raises(SourceRewritten, match="row group 0"):
        parquet_position(con, path, check=old, blocks=blocks)


def test_a_changed_file_without_its_kept_digests_is_refused(tmp_path: Path) -> None:
    path, blocks = tmp_path / "c.parquet", tmp_path / "source-blocks"
    con = duckdb.connect()
    _write(path, 3 * GROUP + 100)
    old = parse_parquet_token(parquet_position(con, path, blocks=blocks).token)
    assert old is not None
    # unchanged: nothing to compare, with or without them
    blocks.unlink()
    assert parquet_position(con, path, check=old, blocks=blocks).root == old.root
    blocks.write_text("dpcr-parquet-groups\n", encoding="ascii")  # (stale)
    _write(path, 4 * GROUP)
    with pytest.raises(SourceRewritten, match="missing or stale"):
        parquet_position(con, path, check=old, blocks=blocks)


def test_an_older_stores_position_is_checked_by_every_rows_hash(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    con = duckdb.connect()
    _write(path, 3 * GROUP + 100)
    new = parquet_position(con, path)
    rows, total = con.execute(
        f"SELECT count(*), sum(hash(file_row_number, n, s))::VARCHAR FROM "
        f"read_parquet('{path}', file_row_number = true)").fetchone() or (0, 0)  # fmt: skip
    pq1 = ParquetPosition(new.duckdb_version, new.size, "0" * 64, int(rows), int(total))
    assert parse_parquet_token(pq1.token) == pq1 and pq1.token.startswith("pq1:")
    _write(path, 4 * GROUP)
    assert parquet_position(con, path, check=pq1).token.startswith("pq2:")
    _write(path, 4 * GROUP, edit=10)
    with pytest.raises(SourceRewritten, match="changed"):
        parquet_position(con, path, check=pq1)


def test_each_chunks_bytes_are_hashed_into_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one pass over the file (read in pieces smaller than a chunk here) gives each column
    chunk the digest of its own bytes, and the rest the bytes outside every chunk."""
    import hashlib

    import dpcr.changelog.parquet_position as pp

    path = tmp_path / "c.parquet"
    _write(path, 3 * GROUP + 100)
    data = path.read_bytes()
    spans = sorted(
        (int(lo), int(lo) + int(n), k) for k, (lo, n) in enumerate(duckdb.sql(
            "SELECT coalesce(dictionary_page_offset, data_page_offset), total_compressed_size "
            f"FROM parquet_metadata('{path}') ORDER BY row_group_id, column_id").fetchall())
    )  # fmt: skip
    monkeypatch.setattr(pp, "_CHUNK", 997)
    hashes = [hashlib.sha256() for _ in spans]
    with open(path, "rb") as f:
        rest = pp._laid_out(f, spans, hashes)
    assert [h.digest() for h in hashes] == [
        hashlib.sha256(data[lo:hi]).digest() for lo, hi, _ in sorted(spans, key=lambda s: s[2])
    ]
    outside, at = b"", 0
    for lo, hi, _ in spans:
        outside, at = outside + data[at:lo], hi
    assert rest.digest() == hashlib.sha256(outside + data[at:]).digest()


def test_a_file_grown_by_pyarrow_with_a_fixed_row_group_size_is_accepted(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path, blocks = tmp_path / "c.parquet", tmp_path / "source-blocks"
    con = duckdb.connect()

    def write(rows: int, edit: int | None = None) -> None:
        table = pa.table({"n": list(range(rows)),
                          "s": ["x" if i == edit else f"v{i % 7}" for i in range(rows)]})
        pq.write_table(table, path, row_group_size=1000)  # (dictionary pages: repeated s)

    write(3500)
    old = parse_parquet_token(parquet_position(con, path, blocks=blocks).token)
    assert old is not None and old.tail == 3000
    write(4200)
    assert parquet_position(con, path, check=old, blocks=blocks).rows == 4200
    write(4200, edit=10)
    with pytest.raises(SourceRewritten, match="row group 0"):
        parquet_position(con, path, check=old, blocks=blocks)
