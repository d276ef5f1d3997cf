"""A cron step's read of the touched units' seeds (dpcr.engines.duckdb_partial): the newest row
of each (unit, entry) key taken from the rows read must be the row the SQL window of the state
(``QUALIFY row_number() OVER (PARTITION BY u, e ORDER BY v DESC) = 1``) takes; and the count of
distinct values a step from memory reports (dpcr.engines.duckdb_memory) must be numpy's."""

from __future__ import annotations

import random

import duckdb
import numpy as np

from dpcr.engines.duckdb_held import seed_columns
from dpcr.engines.duckdb_memory import _distinct
from dpcr.engines.duckdb_partial import _newest_rows, _newest_seeds
from dpcr.engines.state import SCHEMA, create_tables


def _window(con: duckdb.DuckDBPyConnection, queries: int, ids: np.ndarray) -> list[tuple]:
    """The rows the SQL window takes (the read the step made before), sorted."""
    con.register("_ids", {"id": ids})
    try:
        rows = con.execute(
            f"SELECT {seed_columns(queries)} FROM {SCHEMA}.seeds x WHERE x.u IN (SELECT id "
            "FROM _ids) QUALIFY row_number() OVER (PARTITION BY x.u, x.e ORDER BY x.v DESC) = 1"
        ).fetchall()
    finally:
        con.unregister("_ids")
    return sorted(rows)


def test_newest_seeds_are_the_windows_rows() -> None:
    rng = random.Random(11)
    for trial in range(60):
        queries = rng.choice([1, 2, 3])
        con = duckdb.connect()
        con.execute(f"ATTACH ':memory:' AS {SCHEMA}")
        create_tables(con, queries, 0)
        units = rng.choice([1, 5, 40, 300])
        rows = []
        for u in range(units):
            entries = [u] if rng.random() < 0.8 else [u, u + 1000]
            for e in entries:
                for v in rng.sample(range(1, 30), rng.randint(1, 4)):  # (versions: distinct)
                    n = None if rng.random() < 0.2 else rng.randint(0, 9)
                    fs = [None if rng.random() < 0.1 else rng.randint(-50, 50)
                          for _ in range(queries)]  # fmt: skip
                    rows.append((u, e, n, rng.choice([None, None, 7]), rng.choice(["", "", "c"]),
                                 rng.choice([None, 0, 0, 2]), *fs,
                                 rng.choice([None, True, False]),
                                 rng.choice([None, rng.randint(0, 10**6)]), v))  # fmt: skip
        rng.shuffle(rows)
        columns = {
            f"c{j}": np.array(c, dtype=object) for j, c in enumerate(zip(*rows, strict=True))
        }
        con.register("_rows", columns)
        con.execute(f"INSERT INTO {SCHEMA}.seeds SELECT * FROM _rows")
        con.unregister("_rows")
        ids = np.array([rng.randrange(units + 5) for _ in range(rng.randint(0, 2 * units))],
                       dtype=np.int64)  # fmt: skip
        got = _newest_seeds(con, queries, ids)
        names = list(got)
        assert names == [
            d[0]
            for d in con.execute(
                f"SELECT {seed_columns(queries)} FROM {SCHEMA}.seeds x LIMIT 0"
            ).description
        ]
        keys = list(zip(*(got[k].tolist() for k in names), strict=True))
        assert sorted(keys) == _window(con, queries, ids), trial
        assert got["u"].tolist() == sorted(got["u"].tolist())
        con.close()


def test_distinct_counts_what_unique_counts() -> None:
    rng = np.random.default_rng(3)
    cases = [np.zeros(0, dtype=np.int64), np.array([5]), np.full(7, 2), np.arange(9)[::-1]]
    for _ in range(500):
        size = int(rng.integers(0, 60))
        dtype = rng.choice([np.int64, np.int32, np.float64])
        cases.append(rng.integers(-5, int(rng.integers(1, 40)), size).astype(dtype))
    for values in cases:
        assert _distinct(values) == len(np.unique(values)), values


def test_newest_rows_is_the_row_of_the_highest_version_of_each_key() -> None:
    """The rows :func:`_newest_rows` takes (a sort by unit when each unit has one row, the
    usual case, else by unit, entry and version) are those of a sort by the three keys."""
    rng = np.random.default_rng(17)
    for trial in range(400):
        size = int(rng.integers(0, 60))
        if trial % 2:  # (each unit one row)
            u = rng.permutation(int(rng.integers(size, 3 * size + 2)))[:size].astype(np.int64)
            e = u.copy() if trial % 4 == 1 else rng.integers(0, 5, size)
        else:
            u = rng.integers(0, max(1, size // 3), size)
            e = rng.integers(0, 3, size)
        v = rng.integers(1, 6, size)
        order = np.lexsort((v, e, u))
        last = np.ones(size, dtype=bool)
        last[:-1] = (u[order][1:] != u[order][:-1]) | (e[order][1:] != e[order][:-1])
        assert _newest_rows(u, e, v).tolist() == order[last].tolist(), trial
