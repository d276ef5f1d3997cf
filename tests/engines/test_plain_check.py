"""The liveness check of a clean Parquet file folded into the aggregation's ranking window
(``load(..., liveness="defer")``): the window's verdict per history is the aggregation's
(:data:`NOT_PLAIN_SQL`), a deferred load is checked by the one-pass aggregation (the rows
after the last release time too), which refuses what it cannot check."""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import numpy as np
import pytest

from dpcr.bounding.constraints import AtMostK
from dpcr.changelog import NotPlain, ParquetSource, load, plain_break, unchecked
from dpcr.changelog._liveness import NOT_PLAIN_SQL
from dpcr.engines.duckdb import aggregate
from dpcr.queries import Count, Histogram, Sum

T0 = 1_735_689_600  # 2025-01-01, seconds


def _histories(seed: int, entries: int) -> list[tuple[int, int, int, str]]:
    """(entry, ts, record, op) rows: short random histories, with ties in time, repeated
    inserts and deletes, and plain ones."""
    rng = random.Random(seed)
    rows = []
    record = 0
    for e in range(entries):
        n = rng.randrange(1, 6)
        if rng.random() < 0.5:  # plain: an insert, updates, perhaps a delete last
            ops = ["insert"] + ["update"] * (n - 1)
            if n > 1 and rng.random() < 0.5:
                ops[-1] = "delete"
        else:
            ops = [rng.choice(["insert", "update", "delete"]) for _ in range(n)]
        ts = T0 + rng.randrange(100)
        for op in ops:
            record += 1
            rows.append((e, ts, record, op))
            ts += rng.choice([0, 0, 1, 5])
    rng.shuffle(rows)
    return rows


@pytest.mark.parametrize("seed", range(20))
def test_the_window_finds_the_histories_the_aggregation_finds(seed: int) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE h (entry BIGINT, ts BIGINT, record BIGINT, op VARCHAR)")
    con.executemany("INSERT INTO h VALUES (?, ?, ?, ?)", _histories(seed, 60))
    window = "(PARTITION BY entry ORDER BY ts, record)"
    code = "(CASE op WHEN 'insert' THEN 0 WHEN 'update' THEN 1 ELSE 2 END)"
    marked = con.execute(
        f"SELECT DISTINCT entry FROM (SELECT entry, {plain_break(window, op_code=code)} AS b "
        "FROM h) WHERE b ORDER BY entry"
    ).fetchall()
    found = con.execute(
        f"SELECT * FROM ({NOT_PLAIN_SQL.format(key='entry', rows='h', inserts=1)}) ORDER BY 1"
    ).fetchall()
    assert marked == found
    assert 0 < len(found) < 60


def _file(tmp: Path, rows: list[tuple[int, int, int, str]]) -> ParquetSource:
    path = tmp / "c.parquet"
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t (record BIGINT, entry BIGINT, ts BIGINT, op VARCHAR, "
        "before STRUCT(v DOUBLE), after STRUCT(v DOUBLE))"
    )
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?, ?, NULL, CASE WHEN ? = 'delete' THEN NULL "
        "ELSE {'v': ?::DOUBLE} END)",
        [[r, e, ts, op, op, r % 50] for e, ts, r, op in rows],
    )
    con.execute(f"COPY (SELECT * EXCLUDE (record) FROM t ORDER BY record) TO '{path}'")
    return ParquetSource(path=path, epoch_unit="s")


QUERIES = (Count(name="n"), Sum(name="s", column="v", lower=0, upper=40))


def _run(source: ParquetSource, tmp: Path, liveness: str, days: int,
         queries: tuple[object, ...] = QUERIES) -> tuple[object, ...]:  # fmt: skip
    con = duckdb.connect()
    report = load(source, con, on_error="quarantine", quarantine_path=tmp / "q.jsonl",
                  ordered=False, raw_digests=False, before_rows=False, materialize=False,
                  numbers=("v",), liveness=liveness)  # type: ignore[arg-type]  # fmt: skip
    deferred = unchecked(con, "changelog")
    times = [(T0 + 20 * j) * 1_000_000 for j in range(1, days + 1)]
    agg = aggregate(con, table="changelog", queries=queries,  # type: ignore[arg-type]
                    constraint=AtMostK(k=3), release_times=times, first_interval=1,
                    unit_is_entry=True)  # fmt: skip
    values = {k: np.asarray(v).tolist() for k, v in agg.values.items()}
    return deferred, report.valid, dict(report.quarantined), values, agg.report


@pytest.mark.parametrize("days", [0, 2, 7])  # the rows' times reach past the last release time
def test_a_deferred_load_of_plain_histories_aggregates_as_a_checked_one(
    tmp_path: Path, days: int
) -> None:
    rows = [r for r in _histories(4, 200) if r[0] % 2]
    plain = {e for (e,) in _not_plain(rows)}
    source = _file(tmp_path, [r for r in rows if r[0] not in plain])
    deferred = _run(source, tmp_path, "defer", days)
    checked = _run(source, tmp_path, "check", days)
    assert deferred[0] and not checked[0]
    assert deferred[1:] == checked[1:]


def _not_plain(rows: list[tuple[int, int, int, str]]) -> list[tuple[int]]:
    con = duckdb.connect()
    con.execute("CREATE TABLE h (entry BIGINT, ts BIGINT, record BIGINT, op VARCHAR)")
    con.executemany("INSERT INTO h VALUES (?, ?, ?, ?)", rows)
    return con.execute(NOT_PLAIN_SQL.format(key="entry", rows="h", inserts=1)).fetchall()


@pytest.mark.parametrize("late", [False, True])
def test_a_history_that_is_not_plain_is_refused_to_the_caller(
    tmp_path: Path, late: bool
) -> None:
    """A history that is not plain, inside the release times or only after the last one:
    :class:`NotPlain` (the caller loads the source again with the check)."""
    rows = [(1, T0 + 1, 1, "insert"), (1, T0 + 2, 2, "update"), (2, T0 + 3, 3, "insert"),
            (2, T0 + (90 if late else 4), 4, "insert")]  # fmt: skip
    source = _file(tmp_path, rows)
    with pytest.raises(NotPlain):
        _run(source, tmp_path, "defer", 2)
    assert _run(source, tmp_path, "check", 2)[2] == {"double_insert": 1}


def test_an_aggregation_that_cannot_check_refuses(tmp_path: Path) -> None:
    """A histogram is not totalled in the ranking window's pass: the deferred load is
    refused rather than aggregated unchecked."""
    source = _file(tmp_path, [(1, T0 + 1, 1, "insert"), (1, T0 + 2, 2, "update")])
    histogram = (Histogram(name="h", column="v", keys=("1", "2")),)
    with pytest.raises(NotPlain):
        _run(source, tmp_path, "defer", 2, histogram)
    assert not _run(source, tmp_path, "check", 2, histogram)[0]


def test_a_checked_table_is_not_checked_again(tmp_path: Path) -> None:
    """Once the one-pass aggregation found every history plain, the table counts as checked:
    an aggregation that cannot check (a histogram) then reads it as a checked table."""
    source = _file(tmp_path, [(1, T0 + 1, 1, "insert"), (1, T0 + 2, 2, "update")])
    con = duckdb.connect()
    load(source, con, ordered=False, raw_digests=False, before_rows=False, materialize=False,
         numbers=("v",), liveness="defer")  # fmt: skip
    assert unchecked(con, "changelog")
    times = [(T0 + 20 * j) * 1_000_000 for j in range(1, 3)]
    common = {"table": "changelog", "constraint": AtMostK(k=3), "release_times": times,
              "first_interval": 1, "unit_is_entry": True}  # fmt: skip
    aggregate(con, queries=QUERIES, **common)  # type: ignore[arg-type]
    assert not unchecked(con, "changelog")
    histogram = (Histogram(name="h", column="v", keys=("1.0", "2.0")),)
    agg = aggregate(con, queries=histogram, **common)  # type: ignore[arg-type]
    assert agg.report.kept == 2


def _seq_file(tmp: Path, rows: list[tuple[int, int, int, str, int | None]]) -> ParquetSource:
    """(entry, ts, record, op, seq) rows as a Parquet file with an integer ``seq`` column."""
    path = tmp / "s.parquet"
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t (record BIGINT, entry BIGINT, ts BIGINT, seq BIGINT, op VARCHAR, "
        "before STRUCT(v DOUBLE), after STRUCT(v DOUBLE))"
    )
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?, ?, ?, NULL, CASE WHEN ? = 'delete' THEN NULL "
        "ELSE {'v': ?::DOUBLE} END)",
        [[r, e, ts, s, op, op, r % 50] for e, ts, r, op, s in rows],
    )
    con.execute(f"COPY (SELECT * EXCLUDE (record) FROM t ORDER BY record) TO '{path}'")
    return ParquetSource(path=path, epoch_unit="s")


def _with_seq(rows: list[tuple[int, int, int, str]], seed: int,
              how: str) -> list[tuple[int, int, int, str, int | None]]:  # fmt: skip
    """``rows`` with sequence numbers: ``rising`` along each history in (ts, record) order
    (an LSN), ``random`` (small: repeats within a history, and ties), or ``some`` missing."""
    rng = random.Random(seed)
    order = sorted(rows, key=lambda r: (r[1], r[2]))
    lsn = {r[2]: 100 + 7 * i for i, r in enumerate(order)}
    out = []
    for e, ts, r, op in rows:
        s: int | None = lsn[r]
        if how == "random":
            s = rng.randrange(4)
        elif how == "some" and rng.random() < 0.3:
            s = None
        out.append((e, ts, r, op, s))
    return out


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("how", ["rising", "random", "some"])
def test_a_deferred_load_with_sequence_numbers_aggregates_as_a_checked_one_or_is_refused(
    tmp_path: Path, seed: int, how: str
) -> None:
    """A Parquet file with an integer sequence column: the deferred load leaves phase 2
    (duplicates) to the ranking window too, which refuses a history whose sequence numbers
    do not rise; what it does not refuse aggregates exactly as the checked load."""
    rows = _histories(seed, 80)
    plain = {e for (e,) in _not_plain(rows)}
    rows = [r for r in rows if r[0] not in plain]
    source = _seq_file(tmp_path, _with_seq(rows, seed, how))
    checked = _run(source, tmp_path, "check", 7)
    try:
        deferred = _run(source, tmp_path, "defer", 7)
    except NotPlain:
        assert how != "rising"  # (rising numbers, plain histories: nothing to refuse)
        return
    assert deferred[0] and not checked[0]
    assert deferred[1:] == checked[1:]
    if how == "random":  # (not refused: then no history has two rows, as checked finds)
        assert "duplicate" not in checked[2]


def test_a_repeated_sequence_number_is_refused_to_the_caller(tmp_path: Path) -> None:
    """Two mutations of a history with one sequence number (a duplicate, which phase 2
    rejects): the deferred load is refused, and the checked one quarantines it."""
    rows = [(1, T0 + 1, 1, "insert", 10), (1, T0 + 2, 2, "update", 11),
            (1, T0 + 3, 3, "update", 11), (2, T0 + 3, 4, "insert", 11)]  # fmt: skip
    source = _seq_file(tmp_path, rows)
    with pytest.raises(NotPlain):
        _run(source, tmp_path, "defer", 2)
    assert _run(source, tmp_path, "check", 2)[2] == {"duplicate": 1}


@pytest.mark.parametrize("liveness", ["defer", "check"])
def test_the_times_of_a_clean_file_counted_in_microseconds_are_its_time_column(
    tmp_path: Path, liveness: str
) -> None:
    """A clean file whose times are BIGINT microseconds: ``changelog_ts`` is a view of that
    column, whose extent and later rows are those of the typed rows."""
    import dataclasses

    from dpcr.changelog import ts_source, typed_source

    rows = [r for r in _histories(4, 200) if r[0] % 2]
    plain = {e for (e,) in _not_plain(rows)}
    seconds = _file(tmp_path, [r for r in rows if r[0] not in plain])
    path = tmp_path / "us.parquet"
    duckdb.sql(f"COPY (SELECT * REPLACE (ts * 1000000 AS ts) FROM '{seconds.path}') TO '{path}'")
    source = dataclasses.replace(seconds, path=path, epoch_unit="us")
    con = duckdb.connect()
    load(source, con, on_error="quarantine", quarantine_path=tmp_path / "q.jsonl",
         ordered=False, raw_digests=False, before_rows=False, materialize=False,
         numbers=("v",), liveness=liveness)  # type: ignore[arg-type]  # fmt: skip
    assert ts_source(con, "changelog") == '"changelog_ts"'
    assert con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'changelog_ts'"
                       ).fetchone() == (1,)  # fmt: skip
    typed = (typed_source(con, "changelog") or {})[""]
    clock = (T0 + 50) * 1_000_000
    extent = "SELECT min(ts), max(ts), count(*) FILTER (WHERE ts > ?) FROM {}"
    got = con.execute(extent.format("changelog_ts"), [clock]).fetchone()
    assert got == con.execute(extent.format(typed), [clock]).fetchone()
    assert got is not None and got[2] > 0
