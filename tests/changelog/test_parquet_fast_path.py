"""Differential test of the Parquet path with STRUCT rows and a typed time column (rows read
through a view, the canonical table read again with phase 1's verdicts instead of joined)
against the same records as JSON lines (rows table, join): the same canonical table, report,
quarantine reasons and aggregates, on generated changelogs with and without invalid records."""

from __future__ import annotations

import json
import random
from pathlib import Path

import duckdb
import numpy as np
import pytest

from dpcr.bounding.constraints import AtMostK
from dpcr.changelog import JsonlSource, ParquetSource, load
from dpcr.engines.duckdb import aggregate
from dpcr.queries import Count, Sum

OPS = ("insert", "update", "delete")


def _records(seed: int, n: int, *, invalid: bool) -> list[dict[str, object]]:
    """Random histories of a few entries; with ``invalid``, also double inserts, updates and
    deletes of entries not live, unknown ops and missing entries or times."""
    rng = random.Random(seed)
    live: dict[str, float | None] = {}
    out: list[dict[str, object]] = []
    for i in range(n):
        entry = f"e{rng.randrange(12)}"
        ts = 1_735_689_600 + i * 3_600 * 40 // n  # increasing along the history
        value = rng.choice([None, float(rng.randrange(-20, 150)), rng.random() * 100])
        if invalid and rng.random() < 0.3:
            op = rng.choice(OPS)
        elif entry in live:
            op = rng.choice(OPS[1:])
        else:
            op = "insert"
        before = None if op == "insert" else {"value": live.get(entry)}
        after = None if op == "delete" else {"value": value}
        record: dict[str, object] = {"entry": entry, "ts": ts, "op": op, "before": before,
                                     "after": after}  # fmt: skip
        if invalid and rng.random() < 0.05:
            record[rng.choice(["entry", "ts"])] = None
        if invalid and rng.random() < 0.03:
            record["op"] = "upsert"
        if op == "delete":
            live.pop(entry, None)
        else:
            live[entry] = value
        out.append(record)
        if i % 7 == 0:
            rng.shuffle(out)  # out of time order, as files often are
    return out


def _write(tmp: Path, records: list[dict[str, object]]) -> tuple[Path, Path]:
    jsonl = tmp / "c.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    parquet = tmp / "c.parquet"
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t (entry VARCHAR, ts BIGINT, op VARCHAR, "
        "before STRUCT(value DOUBLE), after STRUCT(value DOUBLE))"
    )
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?, ?, ?)",
        [[r["entry"], r["ts"], r["op"], r["before"], r["after"]] for r in records],
    )
    con.execute(f"COPY t TO '{parquet}' (FORMAT parquet)")
    con.close()
    return jsonl, parquet


def _outcome(
    source: JsonlSource | ParquetSource, quarantine: Path, *, materialize: bool = True
) -> tuple[object, ...]:
    con = duckdb.connect()
    report = load(source, con, on_error="quarantine", quarantine_path=quarantine,
                  ordered=False, raw_digests=False, materialize=materialize,
                  before_rows=materialize)  # fmt: skip
    table = con.execute(
        "SELECT record, unit, entry, ts, seq, op, before::VARCHAR, after::VARCHAR "
        "FROM changelog ORDER BY record"
    ).fetchall()
    kinds = con.execute(
        "SELECT table_name, 'table' FROM duckdb_tables() WHERE table_name LIKE 'changelog%' "
        "UNION ALL SELECT view_name, 'view' FROM duckdb_views() WHERE view_name = 'changelog'"
    ).fetchall()
    if not materialize and isinstance(source, ParquetSource):
        # The output is a view over the file, and changelog_ts holds the ts of its rows.
        assert ("changelog", "view") in kinds and ("changelog", "table") not in kinds
        ts = sorted(r[0] for r in con.execute("SELECT ts FROM changelog_ts").fetchall())
        assert ts == sorted(row[3] for row in table)
    else:
        assert ("changelog", "table") in kinds and ("changelog_ts", "table") not in kinds
    bad = [
        (row["record"], row["reason"], row["field"])
        for row in map(json.loads, quarantine.read_text(encoding="utf-8").splitlines())
    ]
    t0 = 1_735_689_600_000_000
    agg = aggregate(
        con, table="changelog", queries=[Count(name="n"), Sum(name="s", column="value",
                                                              lower=0, upper=100)],
        constraint=AtMostK(k=3), release_times=[t0 + j * 3_600_000_000 for j in range(1, 41)],
        first_interval=1, unit_is_entry=True,
    )  # fmt: skip
    values = {k: np.asarray(v).tolist() for k, v in agg.values.items()}
    con.close()
    return (report.records, report.valid, dict(report.quarantined), table, bad, values,
            agg.report)  # fmt: skip


@pytest.mark.parametrize("invalid", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_parquet_fast_path_matches_json_lines(tmp_path: Path, seed: int, invalid: bool) -> None:
    records = _records(seed, 300, invalid=invalid)
    jsonl, parquet = _write(tmp_path, records)
    from_lines = _outcome(JsonlSource(path=jsonl, epoch_unit="s"), tmp_path / "q1.jsonl")
    from_parquet = _outcome(ParquetSource(path=parquet, epoch_unit="s"), tmp_path / "q2.jsonl")
    assert from_parquet == from_lines
    assert (from_lines[1] < from_lines[0]) == invalid


@pytest.mark.parametrize("invalid", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_parquet_output_as_a_view_matches_the_table(tmp_path: Path, seed: int,
                                                    invalid: bool) -> None:  # fmt: skip
    """``materialize=False`` (the release path): the Parquet output is a view over the file
    that gives what the JSON-lines table gives, and ``changelog_ts`` the ts of its rows."""
    records = _records(seed + 100, 300, invalid=invalid)
    jsonl, parquet = _write(tmp_path, records)
    from_lines = _outcome(JsonlSource(path=jsonl, epoch_unit="s"), tmp_path / "q1.jsonl",
                          materialize=False)  # fmt: skip
    from_view = _outcome(ParquetSource(path=parquet, epoch_unit="s"), tmp_path / "q2.jsonl",
                         materialize=False)  # fmt: skip
    assert from_view == from_lines
    assert (from_lines[1] < from_lines[0]) == invalid


def test_a_view_and_a_table_replace_each_other(tmp_path: Path) -> None:
    """Loads into one connection: the view of one and the table of the next replace each other
    (no stale view, no stale ``changelog_ts``), and a table of the caller's named like the
    helper is left alone."""
    _, parquet = _write(tmp_path, _records(7, 200, invalid=True))
    source = ParquetSource(path=parquet, epoch_unit="s")
    con = duckdb.connect()
    con.execute("CREATE TABLE memory.main.changelog_ts AS SELECT 42 AS mine")

    def kinds() -> set[tuple[str, str, bool]]:
        return set(con.execute(
            "SELECT table_name, 'table', temporary FROM duckdb_tables() "
            "WHERE table_name LIKE 'changelog%' UNION ALL SELECT view_name, 'view', temporary "
            "FROM duckdb_views() WHERE view_name LIKE 'changelog%'"
        ).fetchall())  # fmt: skip

    options = {"on_error": "quarantine", "quarantine_path": tmp_path / "q.jsonl",
               "ordered": False, "raw_digests": False, "before_rows": False}  # fmt: skip
    rows = []
    for materialize in (True, False, True, False):
        load(source, con, materialize=materialize, **options)  # type: ignore[arg-type]
        rows.append(con.execute("SELECT * FROM changelog ORDER BY record").fetchall())
        helper = {("changelog_ts", "table", True)} if not materialize else set()
        output = ("changelog", "view", True) if not materialize else ("changelog", "table", False)
        # (the record numbers of a view's records: a view of the staged rows too)
        raw = ("changelog_raw", "view", True) if not materialize else (
            "changelog_raw", "table", False)  # fmt: skip
        assert kinds() == {output, raw, ("changelog_ts", "table", False)} | helper
    assert rows[0] == rows[1] == rows[2] == rows[3]
    assert con.execute("SELECT mine FROM memory.main.changelog_ts").fetchall() == [(42,)]


def _plain(seed: int, n: int) -> list[dict[str, object]]:
    """Plain histories only: each entry inserted once, then updated, perhaps deleted last, at
    times strictly after its insert and before its delete."""
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for e in range(n // 5):
        ts = 1_735_689_600 + rng.randrange(3_600 * 30)
        steps = rng.randrange(1, 6)
        for k in range(steps):
            op = "insert" if k == 0 else ("delete" if k == steps - 1 and rng.random() < 0.4
                                          else "update")  # fmt: skip
            value = float(rng.randrange(-20, 150))
            out.append({"entry": f"e{e}", "ts": ts + 60 * k, "op": op,
                        "before": None if op == "insert" else {"value": value},
                        "after": None if op == "delete" else {"value": value}})  # fmt: skip
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("plain", [True, False])
def test_a_clean_file_skips_the_per_record_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plain: bool
) -> None:
    """A file whose records all pass phase 1 with plain histories is read without phase 1's
    table (dpcr.changelog._clean), and gives what JSON lines give; with histories that are not
    plain the phases run from the liveness check on, with the same outcome."""
    import dpcr.changelog._load as load_module

    calls: list[int] = []
    real = load_module._clean_load

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(load_module, "_clean_load", spy)
    records = _plain(3, 400) if plain else _records(5, 300, invalid=False)
    jsonl, parquet = _write(tmp_path, records)
    from_lines = _outcome(JsonlSource(path=jsonl, epoch_unit="s"), tmp_path / "q1.jsonl",
                          materialize=False)  # fmt: skip
    from_view = _outcome(ParquetSource(path=parquet, epoch_unit="s"), tmp_path / "q2.jsonl",
                         materialize=False)  # fmt: skip
    assert from_view == from_lines
    assert from_lines[1] == from_lines[0]  # every record valid
    assert calls == ([1] if plain else [])
