"""Phase 1's verdicts counted on the typed columns of a Parquet file (both rows STRUCTs, a typed
time, every unit its entry) agree with phase 1's own verdicts, one defect at a time: the count
decides whether a clean file skips the per-record tables, so it must reject what phase 1
rejects, no more and no less."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import ParquetSource
from dpcr.changelog._phase1 import phase1_sql
from dpcr.changelog._stage import Staged, stage
from dpcr.changelog._stage_tabular import typed_parquet_sql, typed_verdicts_sql

GOOD = [
    ("a", 100, "insert", None, 1.0),
    ("a", 200, "update", 1.0, 2.0),
    ("b", 150, "insert", None, 5.0),
    ("a", 300, "delete", 2.0, None),
]

# One record each, appended to GOOD: (entry, ts, op, before value, after value), or a
# missing row (NO_ROW) where a row is given or not given.
NO_ROW = object()
DEFECTS = {
    "clean": None,
    "op unknown": ("c", 400, "upsert", NO_ROW, 1.0),
    "op null": ("c", 400, None, NO_ROW, 1.0),
    "op spelled": ("c", 400, " U ", 1.0, 2.0),  # (accepted: a spelling of update)
    "op short": ("c", 400, "d", 1.0, NO_ROW),  # (accepted)
    "insert with before": ("c", 400, "insert", 1.0, 1.0),
    "insert without after": ("c", 400, "insert", NO_ROW, NO_ROW),
    "update without after": ("c", 400, "update", 1.0, NO_ROW),
    "update without before": ("c", 400, "update", NO_ROW, 1.0),  # (accepted)
    "delete with after": ("c", 400, "delete", 1.0, 1.0),
    "after of nulls": ("c", 400, "insert", NO_ROW, None),  # (a row: accepted)
    "entry null": (None, 400, "insert", NO_ROW, 1.0),
    "entry blank": ("  ", 400, "insert", NO_ROW, 1.0),
    "entry empty": ("", 400, "insert", NO_ROW, 1.0),
    "entry tab": ("\t", 400, "insert", NO_ROW, 1.0),
    "entry spaced": (" c ", 400, "insert", NO_ROW, 1.0),  # (accepted)
    "ts null": ("c", None, "insert", NO_ROW, 1.0),
    "ts out of range": ("c", 300_000_000_000, "insert", NO_ROW, 1.0),
}


def _write(path: Path, rows: list[tuple[object, ...]], entry_type: str) -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (entry {entry_type}, ts BIGINT, op VARCHAR, "
                "before STRUCT(value DOUBLE), after STRUCT(value DOUBLE))")  # fmt: skip
    for entry, ts, op, b, a in rows:
        if entry_type != "VARCHAR" and entry is not None:
            entry = sum(map(ord, str(entry)))
        con.execute("INSERT INTO t VALUES (?, ?, ?, ?, ?)", [
            entry, ts, op, None if b is NO_ROW else {"value": b},
            None if a is NO_ROW else {"value": a}])  # fmt: skip
    con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
    con.close()


def _staged(tmp_path: Path, defect: str, entry_type: str) -> tuple[ParquetSource, Any, Staged]:
    """GOOD and the record of ``defect`` written with entries of ``entry_type`` and staged:
    the source, the connection and what :func:`stage` returns (skipped: an entry defect of
    a type that cannot hold it)."""
    bad = DEFECTS[defect]
    if entry_type != "VARCHAR" and defect.startswith("entry") and defect != "entry null":
        pytest.skip("text entries only")
    path = tmp_path / "c.parquet"
    _write(path, GOOD + ([bad] if bad is not None else []), entry_type)
    source = ParquetSource(path=path, epoch_unit="s")
    con = duckdb.connect()
    return source, con, stage(source, con, "_t", None, [])


@pytest.mark.parametrize("entry_type", ["VARCHAR", "BIGINT", "INTEGER"])
@pytest.mark.parametrize("defect", list(DEFECTS))
def test_typed_verdicts_are_phase_ones(tmp_path: Path, defect: str, entry_type: str) -> None:
    bad = DEFECTS[defect]
    source, con, staged = _staged(tmp_path, defect, entry_type)
    verdicts = typed_verdicts_sql(con, source, "_t_src", staged)
    assert verdicts is not None
    records, rejected = con.execute(verdicts).fetchone() or (0, 0)
    p1 = phase1_sql(staged, None)
    expected = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE chk IS NOT NULL) FROM ({p1})"
    ).fetchone()
    assert (records, rejected) == expected
    assert records == len(GOOD) + (bad is not None)


def test_no_typed_verdicts_for_rows_that_are_not_structs(tmp_path: Path) -> None:
    """A file whose row before is not a STRUCT is checked by phase 1 itself."""
    path = tmp_path / "c.parquet"
    con = duckdb.connect()
    con.execute("CREATE TABLE t (entry VARCHAR, ts BIGINT, op VARCHAR, before VARCHAR, "
                "after STRUCT(value DOUBLE))")  # fmt: skip
    con.execute("INSERT INTO t VALUES ('a', 1, 'insert', NULL, {'value': 1.0})")
    con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
    source = ParquetSource(path=path, epoch_unit="s")
    staged = stage(source, con, "_t", None, [])
    assert typed_verdicts_sql(con, source, "_t_src", staged) is None


@pytest.mark.parametrize("entry_type", ["VARCHAR", "BIGINT"])
@pytest.mark.parametrize("defect", list(DEFECTS))
def test_each_typed_rows_verdict_is_phase_ones(
    tmp_path: Path, defect: str, entry_type: str
) -> None:
    """The typed rows that carry phase 1's verdicts (left to the reader of a deferred load)
    hold every record, each rejected exactly when phase 1 rejects it."""
    bad = DEFECTS[defect]
    source, con, staged = _staged(tmp_path, defect, entry_type)
    typed = typed_parquet_sql(con, source, "_t_src", (), by_entry=True, seq=True,
                              verdicts=staged)  # fmt: skip
    assert typed is not None
    got = con.execute(f"SELECT record, rejected FROM ({typed}) ORDER BY record").fetchall()
    p1 = phase1_sql(staged, None)
    expected = con.execute(
        f"SELECT record, chk IS NOT NULL FROM ({p1}) ORDER BY record"
    ).fetchall()
    assert got == expected
    assert len(got) == len(GOOD) + (bad is not None)


@pytest.mark.parametrize("column_type", ["INTEGER", "BIGINT", "UBIGINT", "HUGEINT"])
def test_a_typed_integer_time_is_phase_ones_time_of_its_text(column_type: str) -> None:
    """The time of an integer column (its range checked on the integer) is the time phase 1
    reads from the integer's text, at each end of the range, for every epoch unit."""
    from dpcr.changelog._sources import EPOCH_FACTORS
    from dpcr.changelog._sql import MAX_US, MIN_US, ts_expr
    from dpcr.changelog._stage_tabular import _typed_ts

    con = duckdb.connect()
    for factor in sorted(set(EPOCH_FACTORS.values())):
        lo, hi = -(-MIN_US // factor), MAX_US // factor
        values = [0, 1, -1, lo - 1, lo, hi, hi + 1, 2**31 - 1, -(2**31), 2**62, -(2**62), None]
        con.execute(f"CREATE OR REPLACE TABLE t (ts {column_type})")
        for v in values:
            con.execute(f"INSERT INTO t SELECT TRY_CAST(TRY_CAST(? AS HUGEINT) AS {column_type})",
                        [v])  # fmt: skip
        typed = _typed_ts("ts", {"ts": column_type}, factor)
        assert typed is not None
        got = con.execute(
            f"SELECT {typed}, {ts_expr('CAST(ts AS VARCHAR)', factor)} FROM t"
        ).fetchall()
        assert all(a == b for a, b in got), (factor, got)
        assert any(a is not None for a, _ in got) and any(a is None for a, _ in got)
