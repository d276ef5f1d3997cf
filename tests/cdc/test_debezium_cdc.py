"""Debezium envelopes as the real engine writes them (tests/fixtures/cdc/debezium_*.jsonl: the
PostgreSQL connector, pgoutput, one file per decimal.handling.mode; see the README there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import DebeziumSource, from_config, load
from dpcr.changelog import _stage as stage_module
from dpcr.changelog._decimals import check_decimals
from dpcr.errors import ChangelogError, ConfigError

from .conftest import FIXTURES

# The table at the end of the changes, before the truncate: tickets 3 and 5.
FINAL = {"3": {"id": 3, "zone": "C", "fare": -0.01}, "5": {"id": 5, "zone": "B", "fare": -3.1}}


@pytest.fixture(params=["fast", "line by line"])
def con(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(stage_module, "_force_slow_path", request.param == "line by line")
    return duckdb.connect()


def _load(con: Any, source: DebeziumSource, tmp_path: Path) -> tuple[Any, list[tuple], list]:
    q = tmp_path / "q.jsonl"
    report = load(source, con, on_error="quarantine", quarantine_path=q)
    rows = con.execute(
        "SELECT entry, op, before::VARCHAR, after::VARCHAR FROM changelog"
    ).fetchall()
    return report, rows, [json.loads(x) for x in q.read_text().splitlines()]


def _rebuilt(rows: list[tuple]) -> dict[str, dict]:
    """The table rebuilt from the mutations (fare and zone, the exact columns)."""
    table: dict[str, dict] = {}
    for entry, op, _, after in rows:
        if op == "delete":
            del table[entry]
        else:
            a = json.loads(after)
            table[entry] = {"id": a["id"], "zone": a["zone"], "fare": float(a["fare"])}
    return table


@pytest.mark.parametrize("mode", ["precise", "string", "double"])
def test_every_decimal_mode_rebuilds_the_table(con: Any, tmp_path: Path, mode: str) -> None:
    path = FIXTURES / f"debezium_{mode}.jsonl"
    report, rows, bad = _load(con, DebeziumSource(path=path, key="id"), tmp_path)
    # Snapshot reads are inserts; the key change 2 -> 5 is a delete and an insert (Debezium
    # sends it so); tombstones are counted; the truncate is refused (it names no rows).
    assert [(e, op) for e, op, _, _ in rows] == [
        ("1", "insert"), ("2", "insert"), ("1", "update"), ("2", "delete"), ("5", "insert"),
        ("1", "delete"), ("3", "insert"),
    ]  # fmt: skip
    assert report.tombstones == 2
    assert [(b["reason"], b["field"], b["value"]) for b in bad] == [("unknown_op", "op", "t")]
    assert _rebuilt(rows) == FINAL
    update = rows[2]
    assert float(json.loads(update[2])["fare"]) == 2.5
    assert float(json.loads(update[3])["fare"]) == 9.99


def test_precise_decimals_are_exact_numbers(con: Any, tmp_path: Path) -> None:
    _, rows, _ = _load(con, DebeziumSource(path=FIXTURES / "debezium_precise.jsonl", key="id"),
                       tmp_path)  # fmt: skip
    after = json.loads(rows[-1][3])
    assert after["fare"] == -0.01  # schema scale 2, bare base64 "/w=="
    assert after["big"] == pytest.approx(123456789.123456789)  # variable scale, inline object


def _without_schema(tmp_path: Path) -> Path:
    out = tmp_path / "noschema.jsonl"
    with out.open("w") as f:
        for line in (FIXTURES / "debezium_precise.jsonl").read_text().splitlines():
            f.write(("null" if line == "null" else json.dumps(json.loads(line)["payload"])) + "\n")
    return out


def test_no_schema_needs_declared_scales(con: Any, tmp_path: Path) -> None:
    path = _without_schema(tmp_path)
    source = DebeziumSource(path=path, key="id", decimal_scales={"fare": 2})
    _, rows, _ = _load(con, source, tmp_path)
    assert _rebuilt(rows) == FINAL
    check_decimals(con, source, ["fare", "big"])  # declared / self-describing: fine
    # Undeclared: the values stay base64 text, and a release reading the column refuses it.
    plain = DebeziumSource(path=path, key="id")
    _load(con, plain, tmp_path)
    with pytest.raises(ChangelogError, match=r"decimal_scales = \{ fare = 2 \}") as info:
        check_decimals(con, plain, ["fare"])
    assert (info.value.field, info.value.record) == ("fare", 1)
    check_decimals(con, plain, ["id"])


def test_schema_wins_over_declared_scales(con: Any, tmp_path: Path) -> None:
    source = DebeziumSource(path=FIXTURES / "debezium_precise.jsonl", key="id",
                            decimal_scales={"fare": 5})  # fmt: skip
    _, rows, _ = _load(con, source, tmp_path)
    assert _rebuilt(rows) == FINAL


def test_decimal_scales_config() -> None:
    source = from_config({"format": "debezium", "path": "x.jsonl", "key": "id",
                          "decimal_scales": {"fare": 2}})  # fmt: skip
    assert isinstance(source, DebeziumSource) and dict(source.decimal_scales or {}) == {"fare": 2}
    with pytest.raises(ConfigError, match=r"decimal_scales\.fare must be an integer"):
        DebeziumSource(path=Path("x"), key="id", decimal_scales={"fare": "2"})  # type: ignore[dict-item]


def _mysql(op: str, pos: int, row: int, after: dict | None, before: dict | None = None) -> dict:
    source = {"ts_ms": 1_735_689_600_000, "file": "mysql-bin.000003", "pos": pos, "row": row}
    return {"payload": {"op": op, "before": before, "after": after, "source": source}}


def test_mysql_binlog_position_finds_replays(con: Any, tmp_path: Path) -> None:
    a, b = {"id": 1, "v": 1}, {"id": 2, "v": 2}
    events = [_mysql("c", 154, 0, a), _mysql("c", 154, 1, b), _mysql("u", 400, 0, dict(a, v=3), a),
              _mysql("u", 400, 0, dict(a, v=3), a)]  # fmt: skip  # the last one replayed
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    _, _, bad = _load(con, DebeziumSource(path=path, key="id"), tmp_path)
    assert [(b["record"], b["reason"]) for b in bad] == [(4, "duplicate")]
    seqs = con.execute("SELECT seq FROM changelog ORDER BY record").fetchall()
    assert [s for (s,) in seqs] == [3 * 2**43 + 154 * 2**13, 3 * 2**43 + 154 * 2**13 + 1,
                                    3 * 2**43 + 400 * 2**13]  # fmt: skip
