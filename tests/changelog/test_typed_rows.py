"""The typed twin of a Parquet view (``load(..., materialize=False)``): integer entry ids stay
integers and the numbers a query reads are DOUBLE columns instead of JSON text, and the
aggregation over it gives exactly what it gives over the canonical table."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import duckdb
import numpy as np
import pytest

from dpcr.bounding.constraints import AtMostK, TimeBounded
from dpcr.changelog import ParquetSource, load, typed_source
from dpcr.engines.duckdb import aggregate
from dpcr.queries import Count, Histogram, Query, Sum

T0 = 1_735_689_600  # seconds
NUMBERS = [None, 0.0, -0.0, 12.5, 99.99, 100.5, -3.25, 1e308, -1e308, 5e-324, math.nan,
           math.inf, -math.inf, 0.1 + 0.2]  # fmt: skip


def _records(seed: int, n: int) -> list[tuple[object, ...]]:
    """Histories of a few entries with odd values and some invalid records (double inserts,
    updates of entries not live, unknown ops, missing times)."""
    rng = random.Random(seed)
    live: set[int] = set()
    out = []
    for i in range(n):
        entry = rng.randrange(15) if rng.random() < 0.8 else 1000 + i  # (some of one record)
        if rng.random() < 0.15:
            op = rng.choice(["insert", "update", "delete", "upsert"])
        else:
            op = "insert" if entry not in live else rng.choice(["update", "delete"])
        row = {
            "value": rng.choice(NUMBERS),
            "n": rng.choice([None, -7, 0, 42, 2**40]),
            "f": rng.choice([None, 0.1, 33.3]),
            "s": rng.choice([None, "a", "b", "12"]),
        }
        ts = None if rng.random() < 0.03 else T0 + rng.randrange(40 * 3600)
        before = None if op == "insert" else row
        after = None if op == "delete" else row
        if op == "insert":
            live.add(entry)
        elif op == "delete":
            live.discard(entry)
        out.append((entry + 10**12 * (i % 2 and seed % 2), ts, op, before, after))
    return out


def _write(tmp: Path, records: list[tuple[object, ...]], entry_type: str) -> Path:
    path = tmp / f"c-{entry_type}.parquet"
    row = "STRUCT(value DOUBLE, n BIGINT, f FLOAT, s VARCHAR)"
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (entry {entry_type}, ts BIGINT, op VARCHAR, before {row}, "
                f"after {row})")  # fmt: skip
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", [list(r) for r in records])
    con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
    con.close()
    return path


QUERIES = [
    Count(name="n"),
    Sum(name="value", column="value", lower=-50, upper=100),
    Sum(name="int", column="n", lower=0, upper=50),
    Sum(name="float", column="f", lower=0, upper=50),
    Sum(name="text", column="s", lower=0, upper=50),
    Count(name="where", where={"s": ("a", 12)}),
    Histogram(name="h", column="s", categories=("a", "b")),
]


def _aggregate(
    path: Path, tmp: Path, *, typed: bool, constraint: object, queries: list[Query] = QUERIES
) -> tuple[object, ...]:
    con = duckdb.connect()
    options: dict[str, object] = {"ordered": False, "raw_digests": False}
    if typed:
        options |= {"materialize": False, "before_rows": False}
    report = load(ParquetSource(path=path, epoch_unit="s"), con, on_error="quarantine",
                  quarantine_path=tmp / "q.jsonl", numbers=("value", "n", "f", "s"),
                  **options)  # type: ignore[arg-type]  # fmt: skip
    found = typed_source(con, "changelog")
    assert (found is not None) == typed
    if found is not None:  # the numbers of exact DOUBLE value: the numeric fields but FLOAT
        assert sorted(k for k in found if k) == ["n", "value"]
    agg = aggregate(
        con, table="changelog", queries=queries, constraint=constraint,  # type: ignore[arg-type]
        release_times=[(T0 + j * 3600) * 1_000_000 for j in range(1, 41)], first_interval=1,
        unit_is_entry=True,
    )  # fmt: skip
    con.close()
    values = {k: np.asarray(v).tolist() for k, v in agg.values.items()}
    return report.valid, dict(report.quarantined), values, agg.report


@pytest.mark.parametrize("entry_type", ["BIGINT", "INTEGER", "VARCHAR"])
@pytest.mark.parametrize("seed", range(3))
def test_typed_rows_aggregate_as_the_canonical_table(tmp_path: Path, seed: int,
                                                     entry_type: str) -> None:  # fmt: skip
    records = _records(seed, 400)
    if entry_type == "INTEGER":
        records = [(e % 2**31, *rest) for e, *rest in records]  # type: ignore[operator]
    path = _write(tmp_path, records, entry_type)
    for constraint in (AtMostK(k=3), TimeBounded(bound=5 * 3_600_000_000)):
        typed = _aggregate(path, tmp_path, typed=True, constraint=constraint)
        table = _aggregate(path, tmp_path, typed=False, constraint=constraint)
        assert typed == table
        assert table[1]  # some records are invalid
        # Counts and sums alone: the totals and the report in one pass over the ranked rows
        simple = [q for q in QUERIES if not isinstance(q, Histogram)]
        for typed_rows in (True, False):
            valid, quarantined, values, report = _aggregate(
                path, tmp_path, typed=typed_rows, constraint=constraint, queries=simple
            )
            assert (valid, quarantined) == table[:2]
            expected = dict(table[2])  # type: ignore[call-overload]
            del expected["h"]
            assert values == expected
            assert report == dataclasses.replace(table[3], unknown_keys={})  # type: ignore[type-var]


def test_no_typed_twin_for_rows_given_as_text(tmp_path: Path) -> None:
    """A Parquet file whose rows are JSON text has no typed twin; a later load of another
    file into the same connection drops the earlier one's."""
    records = _records(5, 50)
    typed = _write(tmp_path, records, "BIGINT")
    text = tmp_path / "text.parquet"
    con = duckdb.connect()
    con.execute(
        f"COPY (SELECT entry, ts, op, to_json(before)::VARCHAR AS before, "
        f"to_json(after)::VARCHAR AS after FROM '{typed}') TO '{text}' (FORMAT parquet)"
    )
    options = {"ordered": False, "raw_digests": False, "materialize": False,
               "before_rows": False, "on_error": "quarantine",
               "quarantine_path": tmp_path / "q.jsonl"}  # fmt: skip
    load(ParquetSource(path=typed, epoch_unit="s"), con, **options)  # type: ignore[arg-type]
    assert typed_source(con, "changelog") is not None
    load(ParquetSource(path=text, epoch_unit="s"), con, **options)  # type: ignore[arg-type]
    assert typed_source(con, "changelog") is None
    con.close()
