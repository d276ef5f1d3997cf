"""wal2json format-version 2 files: real output of PostgreSQL 15 + wal2json 2.5
(tests/fixtures/cdc/wal2json_tickets.jsonl, see the README there) and edge cases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from dpcr.changelog import from_config, load
from dpcr.changelog._sources import Wal2jsonSource
from dpcr.errors import ChangelogError, ConfigError

from .conftest import FIXTURES

TICKETS = FIXTURES / "wal2json_tickets.jsonl"


def _load(
    path: Path, tmp_path: Path, key: str = "id", **kw: object
) -> tuple[object, list[tuple], list[dict]]:
    con = duckdb.connect()
    q = tmp_path / "q.jsonl"
    source = Wal2jsonSource(path=path, key=key, **kw)  # type: ignore[arg-type]
    report = load(source, con, on_error="quarantine", quarantine_path=q)
    rows = con.execute(
        "SELECT record, entry, op, before::VARCHAR, after::VARCHAR FROM changelog"
    ).fetchall()
    bad = [json.loads(line) for line in q.read_text().splitlines()]
    return report, rows, bad


def test_real_capture_gives_mutations_with_before_rows(tmp_path: Path) -> None:
    report, rows, bad = _load(TICKETS, tmp_path, table="public.tickets")
    # 6 transactions: 12 begin/commit markers skipped and counted, never inserts.
    assert report.tombstones == 12  # type: ignore[attr-defined]
    # (Entries 2 and 5, the key change, are in test_key_change_is_a_delete_and_an_insert.)
    kept = [r for r in rows if r[1] in ("1", "3")]
    assert [(r[1], r[2]) for r in kept] == [
        ("1", "insert"), ("1", "update"), ("1", "delete"), ("3", "insert"),
    ]  # fmt: skip
    update, delete = kept[1], kept[2]
    assert json.loads(update[3]) == {"id": 1, "zone": "A", "fare": 2.5, "note": None}
    assert json.loads(update[4])["fare"] == 9.99
    assert json.loads(delete[3])["fare"] == 9.99 and delete[4] is None
    assert json.loads(rows[1][4]) == {"id": 2, "zone": "B", "fare": -3.1, "note": 'x "q"'}
    # The truncate cannot be charged to entries: refused, here quarantined and counted.
    truncate = [b for b in bad if b["reason"] == "unknown_op"]
    assert [(b["field"], b["value"]) for b in truncate] == [("action", "T")]


def test_timestamp_and_lsn(tmp_path: Path) -> None:
    con = duckdb.connect()
    load(Wal2jsonSource(path=TICKETS, key="id", table="public.tickets"), con,
         on_error="quarantine", quarantine_path=tmp_path / "q.jsonl")  # fmt: skip
    ts, seq = con.execute("SELECT ts, seq FROM changelog ORDER BY record LIMIT 1").fetchone()
    first = json.loads(TICKETS.read_text().splitlines()[1])
    hi, lo = first["lsn"].split("/")
    assert seq == (int(hi, 16) << 32) + int(lo, 16)
    assert ts % 1_000_000 == int(first["timestamp"][20:26])


def test_truncate_is_refused_in_raise_mode(tmp_path: Path) -> None:
    lines = TICKETS.read_text().splitlines()
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(lines[:4] + lines[-3:]) + "\n")  # a tx with inserts, a truncate
    with pytest.raises(ChangelogError) as info:
        load(Wal2jsonSource(path=path, key="id", table="public.tickets"), duckdb.connect())
    assert (info.value.reason, info.value.field, info.value.record) == ("unknown_op", "action", 6)


def test_other_tables_are_left_out_or_read(tmp_path: Path) -> None:
    report, rows, _ = _load(TICKETS, tmp_path, key="k", table="public.other")
    assert [(r[1], r[2]) for r in rows] == [("1", "insert")]
    assert report.records == 13  # type: ignore[attr-defined]  # 12 markers + 1 change
    with pytest.raises(ChangelogError, match="missing or empty"):
        load(Wal2jsonSource(path=TICKETS, key="id"), duckdb.connect())  # `other` has no id


def test_replayed_message_is_a_duplicate(tmp_path: Path) -> None:
    lines = TICKETS.read_text().splitlines()
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(lines[:8] + lines[5:8]) + "\n")  # transaction 2 sent again
    report, rows, bad = _load(path, tmp_path, table="public.tickets")
    assert [b["reason"] for b in bad] == ["duplicate"]
    assert bad[0]["record"] == 10 and "lsn" in bad[0]["message"]
    assert [r[2] for r in rows] == ["insert", "insert", "update"]
    assert report.tombstones == 6  # type: ignore[attr-defined]


def test_malformed_messages(tmp_path: Path) -> None:
    head = {"timestamp": "2025-01-01 00:00:00+00", "schema": "public", "table": "t"}
    lines = [
        "not json",
        json.dumps({**head, "action": "I", "lsn": "0/10", "columns": {"id": 1}}),  # an object
        json.dumps({**head, "action": "I", "lsn": "0/11", "columns": [{"value": 1}]}),  # no name
        json.dumps({**head, "action": "I", "lsn": "x/y", "columns": [{"name": "id", "value": 2}]}),
        json.dumps({**head, "action": "I", "lsn": "0/13", "columns": [{"name": "id", "value": 3}]}),
        json.dumps({**head, "action": "M", "lsn": "0/14", "prefix": "p", "content": "c"}),
    ]
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report, rows, bad = _load(path, tmp_path, table="public.t")
    assert [(b["record"], b["reason"], b["field"]) for b in bad] == [
        (1, "bad_json", "record"), (3, "bad_json", "columns"), (4, "bad_seq", "lsn"),
    ]  # fmt: skip
    assert [(r[0], r[1]) for r in rows] == [(2, "1"), (5, "3")]
    assert report.tombstones == 1  # type: ignore[attr-defined]


def test_key_change_is_a_delete_and_an_insert(tmp_path: Path) -> None:
    _, rows, bad = _load(TICKETS, tmp_path, table="public.tickets")
    assert [b["reason"] for b in bad] == ["unknown_op"]  # the truncate only
    moved = [(r[1], r[2]) for r in rows if r[1] in ("2", "5")]
    assert moved == [("2", "insert"), ("2", "delete"), ("5", "insert")]
    delete = next(r for r in rows if r[1] == "2" and r[2] == "delete")
    insert = next(r for r in rows if r[1] == "5")
    assert json.loads(delete[3])["id"] == 2 and delete[4] is None
    assert insert[3] is None and json.loads(insert[4])["id"] == 5


def test_config(tmp_path: Path) -> None:
    shutil.copy(TICKETS, tmp_path / "c.jsonl")
    source = from_config({"format": "wal2json", "path": "c.jsonl", "key": ["id"],
                          "table": "public.tickets"}, base_dir=tmp_path)  # fmt: skip
    assert isinstance(source, Wal2jsonSource) and source.key_columns == ("id",)
    with pytest.raises(ConfigError, match="needs key"):
        from_config({"format": "wal2json", "path": "c.jsonl"})
    with pytest.raises(ConfigError, match=r"schema\.table"):
        from_config({"format": "wal2json", "path": "c.jsonl", "key": "id", "table": "tickets"})


def _msg(action: str, lsn: int, columns: dict | None = None, identity: dict | None = None) -> str:
    when = f"2025-01-01 00:00:0{lsn}+00"
    body: dict = {"action": action, "lsn": f"0/{lsn:X}", "timestamp": when}
    body |= {"schema": "public", "table": "t"}
    for name, row in (("columns", columns), ("identity", identity)):
        if row is not None:
            body[name] = [{"name": k, "type": "text", "value": v} for k, v in row.items()]
    return json.dumps(body)


def test_an_update_whose_columns_lack_the_key_names_no_entry(tmp_path: Path) -> None:
    """The entry is the key of the row after: an update without it is missing_entry (it used
    to take the key of identity, the row before), a delete takes identity's."""
    path = tmp_path / "w.jsonl"
    messages = [
        _msg("I", 1, {"id": 1, "z": "a"}),
        _msg("U", 2, {"z": "b"}, {"id": 1}),
        _msg("U", 3, {"id": 1, "z": "c"}),
        _msg("D", 4, None, {"id": 1}),
    ]
    path.write_text("\n".join(messages) + "\n")
    _report, rows, bad = _load(path, tmp_path)
    assert [(b["record"], b["reason"], b["field"]) for b in bad] == [
        (2, "missing_entry", "columns.id")
    ]
    kept = [(r[0], r[1], r[2]) for r in rows]
    assert kept == [(1, "1", "insert"), (3, "1", "update"), (4, "1", "delete")]


def test_a_key_change_of_an_entry_that_is_not_live_lists_its_rejected_half(
    tmp_path: Path,
) -> None:
    """The delete half (entry 2, never inserted) is rejected and says so; the insert half (entry
    5, another unit when the unit is the entry) is judged on its own and applied."""
    path = tmp_path / "w.jsonl"
    messages = [_msg("I", 1, {"id": 1, "z": "a"}), _msg("U", 2, {"id": 5, "z": "b"}, {"id": 2})]
    path.write_text("\n".join(messages) + "\n")
    report, rows, bad = _load(path, tmp_path)
    assert [(r[0], r[1], r[2]) for r in rows] == [(1, "1", "insert"), (2, "5", "insert")]
    [line] = bad
    assert (line["record"], line["half"], line["reason"]) == (2, "delete", "delete_before_insert")
    assert "delete half" in line["message"] and "other half is judged on its own" in line["message"]
    assert report.split == 1  # type: ignore[attr-defined]
    assert report.quarantined == {"delete_before_insert": 1}  # type: ignore[attr-defined]
