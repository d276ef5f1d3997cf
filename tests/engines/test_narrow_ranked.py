"""The narrow ranking window (dpcr.engines._ranked.narrow_ranked: every column it passes on in
one sort key, the record and a short code in one key) gives the rows of the general one
(ranked_sql), row for row, on random histories with ties in time, with and without the
liveness check, explicit sequence numbers and records that phase 1 rejects."""

from __future__ import annotations

import random

import duckdb
import pytest

from dpcr.bounding.constraints import AtMostK
from dpcr.bounding.sql import bounding_sql
from dpcr.engines._ranked import ITEM, narrow_ranked, ranked_sql, settle_marks, settled_units
from dpcr.queries import Count, Sum

QUERIES = {
    "short": (Count(name="n"), Sum(name="s", column="v", lower=0, upper=100)),  # packed
    "long": (Count(name="n"), Sum(name="s", column="v", lower=-(10**9), upper=10**9)),
}


def _rows(con: duckdb.DuckDBPyConnection, seed: int, wide: bool) -> None:
    rng = random.Random(seed)
    rows = []
    for record in range(1, 400):
        op = rng.choice(["insert", "update", "update", "delete"])
        value = rng.randrange(-(10**9), 10**9) if wide else rng.randrange(101)
        rows.append((record, rng.randrange(30), 100 + rng.randrange(40), 10 * record + 7, op,
                     op == "delete", int(op != "delete"), 0 if op == "delete" else value,
                     rng.random() < 0.05, rng.random() < 0.02))  # fmt: skip
    con.execute(
        "CREATE TABLE r (record BIGINT, unit BIGINT, ts BIGINT, seq BIGINT, op VARCHAR, "
        "deleted BOOLEAN, f0 INTEGER, f1 BIGINT, nn1 BOOLEAN, rejected BOOLEAN)"
    )
    con.executemany("INSERT INTO r VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", sorted(QUERIES))
@pytest.mark.parametrize(("seq", "record", "check"),
                         [(False, True, False), (False, True, True), (True, True, False),
                          (True, False, True)])  # fmt: skip
def test_the_narrow_window_gives_the_general_ones_rows(
    seed: int, kind: str, seq: bool, record: bool, check: bool
) -> None:
    con = duckdb.connect()
    _rows(con, seed, kind == "long")
    bsql = bounding_sql(AtMostK(k=3))
    queries = QUERIES[kind]
    # (without the check every row is valid; seq=False: every row's seq is its record)
    rows = (f"(SELECT * REPLACE ({'seq' if seq else 'record'} AS seq) FROM r "
            f"{'' if check else 'WHERE NOT rejected'})")  # fmt: skip
    narrow = narrow_ranked(bsql, queries, rows, seq=seq, record=record, check=check)
    assert narrow is not None
    assert ("rc >> " in narrow) == (kind == "short" and record)  # (packed)
    general = ranked_sql(bsql, queries, rows, seeded=False, unit_is_entry=True, seq=seq,
                         record=record, check=check)  # fmt: skip
    columns = "record, unit, ts, seq, op_code, deleted, f0, f1, nn1, p0, p1, rank_u" + (
        ", np" if check else "")  # fmt: skip
    got, expected = (
        con.execute(f"SELECT {columns} FROM ({sql}) ORDER BY record").fetchall()
        for sql in (narrow, general)
    )
    if check:  # (a rejected record's other fields are not read: its np alone)
        rejected = {r for (r,) in con.execute("SELECT record FROM r WHERE rejected").fetchall()}
        assert rejected and all(g[-1] for x in (got, expected) for g in x if g[0] in rejected)
        got, expected = ([g for g in x if g[0] not in rejected] for x in (got, expected))
    assert got == expected
    assert len(got) > 350


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", sorted(QUERIES))
@pytest.mark.parametrize(("seq", "record"), [(False, True), (True, True), (True, False)])
def test_the_settle_marks_are_each_units_last_settled_row_and_first_record(
    seed: int, kind: str, seq: bool, record: bool
) -> None:
    """``settles_last`` marks each unit's last row dated at or before the time, and
    ``first_record`` is the record of its first row, in the window's order: from the narrow
    window's own sort and from a second one over the general window's rows
    (``settle_marks``), checked against the rows sorted here."""
    con = duckdb.connect()
    _rows(con, seed, kind == "long")
    bsql = bounding_sql(AtMostK(k=3))
    queries = QUERIES[kind]
    rows = f"(SELECT * REPLACE ({'seq' if seq else 'record'} AS seq) FROM r WHERE NOT rejected)"
    t = 120  # (times are 100 .. 139: some units have no row at or before it, some none after)
    narrow = narrow_ranked(bsql, queries, rows, seq=seq, record=record, check=False,
                           settle_at=t)  # fmt: skip
    assert narrow is not None
    general = settle_marks(ranked_sql(bsql, queries, rows, seeded=False, unit_is_entry=True,
                                      seq=seq, record=record, check=False), t,
                           seq=seq, record=record)  # fmt: skip
    by_unit: dict[int, list[tuple[int, int, int]]] = {}
    for rec, unit, ts, s in con.execute(f"SELECT record, unit, ts, seq FROM {rows}").fetchall():
        by_unit.setdefault(unit, []).append((ts, s, rec))
    expected = {}
    for history in by_unit.values():
        history.sort()
        settled = [h for h in history if h[0] <= t]
        for h in history:
            expected[h[2]] = (bool(settled) and h is settled[-1], history[0][2])
    assert sum(last for last, _ in expected.values()) > 10
    for sql in (narrow, general):
        got = {r: (last, first) for r, last, first in con.execute(
            f"SELECT record, settles_last, first_record FROM ({sql})").fetchall()}  # fmt: skip
        assert got == expected


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", sorted(QUERIES))
@pytest.mark.parametrize(
    ("seq", "record", "check"), [(False, True, False), (True, True, True), (True, False, True)]
)
def test_the_packed_settle_item_unpacks_to_each_units_summary(
    seed: int, kind: str, seq: bool, record: bool, check: bool
) -> None:
    """The item of a unit's last settled row (``ITEM``: its liveness record, rank and code in
    one HUGEINT) unpacks (``settled_units``) to the summary the general window's row gives:
    its rank, each query's f, whether it is live and the record of its insert or delete."""
    con = duckdb.connect()
    _rows(con, seed, kind == "long")
    bsql = bounding_sql(AtMostK(k=3))
    queries = QUERIES[kind]
    rows = f"(SELECT * REPLACE ({'seq' if seq else 'record'} AS seq) FROM r WHERE NOT rejected)"
    t = 120
    narrow = narrow_ranked(bsql, queries, rows, seq=seq, record=record, check=check,
                           settle_at=t)  # fmt: skip
    assert narrow is not None and ITEM in narrow
    pairs = f"SELECT unit, {ITEM} AS it FROM ({narrow}) WHERE settles_last"
    got = con.execute(f"SELECT * FROM ({settled_units(queries, check=check, pairs=pairs)}) "
                      "ORDER BY unit").fetchall()  # fmt: skip
    general = settle_marks(ranked_sql(bsql, queries, rows, seeded=False, unit_is_entry=True,
                                      seq=seq, record=record, check=False), t,
                           seq=seq, record=record)  # fmt: skip
    expected = con.execute(
        "SELECT unit, rank_u, NULL::BIGINT, '', f0, f1, op_code <> 2, CASE WHEN op_code = 2 "
        f"THEN record ELSE first_record END FROM ({general}) WHERE settles_last ORDER BY unit"
    ).fetchall()
    assert len(expected) > 10 and any(not g[6] for g in expected)
    assert got == expected


@pytest.mark.parametrize("kind", sorted(QUERIES))
@pytest.mark.parametrize(("record", "check"), [(True, False), (True, True), (False, True)])
@pytest.mark.parametrize("bad", ["f0 = 2", "f1 = f1 + 2000000001", "f1 = NULL", "record = -1"])
def test_a_field_outside_its_range_is_an_internal_error(
    kind: str, record: bool, check: bool, bad: str
) -> None:
    """One test of every field of a row's code (and, where the record shares the sort key, of
    its record) stops the statement with an internal error for a row where one is outside its
    range or NULL, rejected or not, instead of sorting on a code that overlaps its neighbour."""
    con = duckdb.connect()
    _rows(con, 0, kind == "long")
    bsql = bounding_sql(AtMostK(k=3))
    narrow = narrow_ranked(bsql, QUERIES[kind], "(SELECT *, record AS seq FROM r)", seq=False,
                           record=record, check=check)  # fmt: skip
    assert narrow is not None
    # (the rank needs the window's sort, whose keys hold the code: a count alone would not)
    counted = f"SELECT count(*), max(rank_u) FROM ({narrow})"
    assert con.execute(counted).fetchone()[0] == 399
    packed = "rc >> " in narrow
    con.execute(f"UPDATE r SET {bad} WHERE record = 200")
    if bad == "record = -1" and not packed:  # (a record of its own sort key: not in the code)
        assert con.execute(counted).fetchone()[0] == 399
        return
    with pytest.raises(duckdb.Error, match="internal error: a record number or a field"):
        con.execute(counted).fetchall()
