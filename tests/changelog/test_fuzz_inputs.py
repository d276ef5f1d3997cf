"""Fuzzed changelog files: every input loads with bad records quarantined and counted, or stops
with a ChangelogError/ConfigError naming the problem; never a traceback or a hang."""

from __future__ import annotations

import copy
import csv
import io
import json
import random
import signal
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import CsvSource, JsonlSource, load
from dpcr.errors import DpcrError
from e2e.helpers import mutations

EDGES: list[Any] = [
    None, "", "x", 0, -1, 1e308, float("nan"), "0000-01-01T00:00:00Z", "10000-01-01",
    "-0001-01-01", "2025-01-01T00:00:00+25:00", "2025-13-01", 2**63, -(2**63), [], {}, "\u0000",
    "é", True, "1e999", "  2025-01-01  ",
]
BASE = mutations()[:40]


def _edge(rnd: random.Random) -> Any:
    return copy.deepcopy(rnd.choice(EDGES))


def _flip_byte(rnd: random.Random, line: str) -> str:
    raw = bytearray(line.encode())
    raw[rnd.randrange(len(raw))] = rnd.randrange(256)
    return raw.decode("latin-1")


def _truncate(rnd: random.Random, line: str) -> str:
    return line[: rnd.randrange(len(line))]


def _mutated_lines(rnd: random.Random) -> list[str]:
    lines = [json.dumps(m) for m in BASE]
    for _ in range(rnd.randint(1, 4)):
        i = rnd.randrange(len(lines))
        r = rnd.random()
        if r < 0.3:  # a random byte
            lines[i] = _flip_byte(rnd, lines[i])
        elif r < 0.45:  # truncated
            lines[i] = _truncate(rnd, lines[i])
        elif r < 0.5:  # CR CR LF, duplicate keys
            lines[i] = lines[i] + "\r\r" if rnd.random() < 0.5 else lines[i][:-1] + ', "op": "x"}'
        else:
            try:
                obj = json.loads(lines[i])
            except ValueError:  # already broken by an earlier mutation
                continue
            if not isinstance(obj, dict):
                continue
            obj[rnd.choice(["entry", "ts", "seq", "op", "before", "after"])] = _edge(rnd)
            if isinstance(obj.get("after"), dict) and rnd.random() < 0.4:
                obj["after"][rnd.choice(["fare", "zone", "rider_id"])] = _edge(rnd)
            lines[i] = json.dumps(obj)
    return lines


def _csv_text(lines: list[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["entry", "ts", "seq", "op", "before", "after"])
    for line in lines:
        try:
            m = json.loads(line)
        except ValueError:
            writer.writerow([line[:20], line[20:40], "", "", "", ""])
            continue
        if not isinstance(m, dict):
            continue
        writer.writerow([m.get("entry"), m.get("ts"), m.get("seq"), m.get("op"),
                         json.dumps(m.get("before")), json.dumps(m.get("after"))])
    return out.getvalue()


class _Timeout(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _Timeout


def _never_crash(tmp_path: Path, cases: int, make: Any) -> None:
    """Load ``cases`` inputs from ``make(case) -> (path, source, unit column, text)``: each
    must load (bad records quarantined) or raise a DpcrError, within 10 s."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    failures: dict[str, str] = {}
    con = duckdb.connect()
    try:
        for case in range(cases):
            source, unit_column, text = make(case)
            signal.alarm(10)
            try:
                load(source, con, on_error="quarantine", quarantine_path=tmp_path / "q.jsonl",
                     unit_column=unit_column)
            except DpcrError:
                pass
            except _Timeout:
                failures.setdefault("hang", text[:300])
            except Exception as exc:  # any other exception is the defect
                failures.setdefault(f"{type(exc).__name__}: {exc}"[:200], text[:300])
            finally:
                signal.alarm(0)
    finally:
        con.close()
        signal.signal(signal.SIGALRM, previous)
    assert failures == {}


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "seed", "cases"), [("jsonl", 1, 250), ("jsonl", 2, 250),
                                                    ("csv", 3, 150)])
def test_fuzzed_inputs_never_crash(tmp_path: Path, fmt: str, seed: int, cases: int) -> None:
    rnd = random.Random(seed)

    def make(case: int) -> tuple[Any, str | None, str]:
        lines = _mutated_lines(rnd)
        path = tmp_path / f"c{case}.{fmt}"
        text = "\n".join(lines) + "\n" if fmt == "jsonl" else _csv_text(lines)
        encoding = "latin-1" if rnd.random() < 0.1 else "utf-8"
        path.write_text(text, encoding=encoding, errors="replace")
        source = JsonlSource(path=path) if fmt == "jsonl" else CsvSource(path=path)
        return source, rnd.choice([None, "rider_id"]), text

    _never_crash(tmp_path, cases, make)

CDC = Path(__file__).resolve().parents[1] / "fixtures" / "cdc"
CDC_FILES = {
    "debezium": ["debezium_precise.jsonl", "debezium_string.jsonl", "debezium_double.jsonl"],
    "wal2json": ["wal2json_tickets.jsonl"],
}
CDC_FIELDS = {
    "debezium": ["op", "before", "after", "source", "ts_ms", "payload", "schema"],
    "wal2json": ["action", "lsn", "timestamp", "columns", "identity", "schema", "table"],
}


def _mutated_cdc(rnd: random.Random, fmt: str) -> list[str]:
    lines: list[str] = []
    for name in CDC_FILES[fmt]:
        lines += (CDC / name).read_text().splitlines()
    for _ in range(rnd.randint(1, 5)):
        i = rnd.randrange(len(lines))
        r = rnd.random()
        if not lines[i]:
            continue
        if r < 0.25:  # a random byte
            lines[i] = _flip_byte(rnd, lines[i])
        elif r < 0.4:  # truncated
            lines[i] = _truncate(rnd, lines[i])
        elif r < 0.5:  # repeated (a redelivery), or a line end of its own
            lines.insert(i, lines[i] if rnd.random() < 0.5 else lines[i] + "\r\r")
        else:
            try:
                obj = json.loads(lines[i])
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            target = obj.get("payload") if isinstance(obj.get("payload"), dict) else obj
            target[rnd.choice(CDC_FIELDS[fmt])] = _edge(rnd)
            lines[i] = json.dumps(obj)
    return lines


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "seed", "cases"), [("debezium", 4, 120), ("wal2json", 5, 120)])
def test_fuzzed_cdc_inputs_never_crash(tmp_path: Path, fmt: str, seed: int, cases: int) -> None:
    from dpcr.changelog import DebeziumSource, Wal2jsonSource

    rnd = random.Random(seed)

    def make(case: int) -> tuple[Any, str | None, str]:
        text = "\n".join(_mutated_cdc(rnd, fmt)) + "\n"
        path = tmp_path / f"c{case}.jsonl"
        path.write_text(text, encoding="latin-1" if rnd.random() < 0.1 else "utf-8",
                        errors="replace")  # fmt: skip
        source: Any = (
            DebeziumSource(path=path, key="id") if fmt == "debezium"
            else Wal2jsonSource(path=path, key="id", table="public.tickets")
        )  # fmt: skip
        return source, rnd.choice([None, "zone"]), text

    _never_crash(tmp_path, cases, make)
