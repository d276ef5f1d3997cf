"""A session over a Debezium changelog (what ``dpcr follow`` over Kafka steps over) releases
from memory what the SQL steps release, byte for byte with the same seed, and leaves the same
incremental state (table ``keys`` of the LSNs included): random changelogs as the connector
writes them (a snapshot of ``r`` reads, then creates, updates with and without their row
before, deletes followed by tombstones, re-inserts, integer and text keys, envelopes bare,
under ``payload`` with and without a schema, with the Kafka capture's ``dpcr_kafka``; values
clamped, halves, null, missing; LSNs below and above 2^53), with days holding a record the
fast path refuses (a replayed LSN, a key moved by an update, a decimal object, a Decimal
column of the schema, a value given as text, a truncate, an envelope time only, a late
change) that the SQL step reads, and a change dated after the interval its day releases, which
the state keeps pending (held from memory, as wal2json's)."""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

import dpcr
import dpcr.engines.duckdb_memory as memory
from dpcr.engines import _debezium
from dpcr.release._engine import engine_request

from .test_memory_wal2json import _Log as wal2json_log
from .test_memory_wal2json import _release as wal2json_release
from .test_memory_wal2json import _value, killed_follow_is_replayed, memory_equals_sql

DAY_S = 86_400
T0_S = 1_767_225_600  # 2026-01-01T00:00:00Z
DAYS = 16
ODD = {3: "replayed", 4: "again", 5: "moved", 6: "decimal", 7: "pending", 9: "truncate",
       10: "text", 11: "schema", 12: "envelope time", 14: "quiet", 15: "tombstones",
       16: "late"}  # fmt: skip
_SCHEMA = {"type": "struct", "name": "t.Envelope", "fields": [
    {"type": "struct", "field": "before", "optional": True, "fields": [
        {"type": "int64", "field": "id"}, {"type": "double", "field": "v", "optional": True}]},
    {"type": "struct", "field": "after", "optional": True, "fields": [
        {"type": "int64", "field": "id"}, {"type": "double", "field": "v", "optional": True}]},
    {"type": "string", "field": "op"}]}  # fmt: skip


class _Log(wal2json_log):
    """The connector's lines: LSNs rising, a tombstone after most deletes."""

    def __init__(self, rng: random.Random, lsn: int) -> None:
        super().__init__(rng)
        self.lsn = lsn
        self.seen: dict[Any, int] = {}  # type: ignore[assignment]  (an entry's last LSN)

    def line(self, op: str, ms: int, before: Any, after: Any, **more: Any) -> str:
        self.lsn += self.rng.randint(40, 400)
        source = {"version": "2.7.0.Final", "connector": "postgresql", "name": "db",
                  "ts_ms": ms, "snapshot": "true" if op == "r" else "false", "db": "app",
                  "schema": "public", "table": "t", "txId": 700, "lsn": self.lsn}  # fmt: skip
        source.update(more.pop("source", {}))
        env = {"before": before, "after": after, "source": source, "op": op,
               "ts_ms": ms + self.rng.randint(1, 900), **more}  # fmt: skip
        row = after or before
        if row is not None and "id" in row:
            self.seen[row["id"]] = source["lsn"]
        form = self.rng.random()
        if form < 0.4:
            return json.dumps(env, separators=(",", ":"))
        line: dict[str, Any] = {"payload": env}
        if form < 0.6:
            line = {"schema": _SCHEMA, **line}
        if form > 0.8:
            line["dpcr_kafka"] = {"topic": "db.public.t", "partition": 0, "offset": self.lsn}
        return json.dumps(line, separators=(",", ":") if form < 0.9 else None)

    def change(self, ms: int) -> list[str]:
        rng, live = self.rng, self.live
        roll = rng.random()
        if roll < 0.35 or not live:
            entry = self.inserted()
            return [self.line("c", ms, None, {"id": entry, **live[entry]})]
        entry = rng.choice(sorted(live, key=str))
        if roll < 0.85:
            old, live[entry] = live[entry], _value(rng)
            before = {"id": entry, **old} if rng.random() < 0.8 else None
            return [self.line("u", ms, before, {"id": entry, **live[entry]})]
        self.gone.append(entry)
        out = [self.line("d", ms, {"id": entry, **live.pop(entry)}, None)]
        if rng.random() < 0.7:  # (the tombstone, as the connector or the Kafka capture writes it)
            out.append(rng.choice(["null", '{"payload":null}', '{"schema":null,"payload":null,'
                                   '"dpcr_kafka":{"topic":"t","partition":0,"offset":1}}']))
        return out


def _days(seed: int) -> list[list[str]]:
    """The changelog's lines per day: day 1 begins with the table's snapshot."""
    rng = random.Random(seed)
    log = _Log(rng, 2**53 - 6_000 if seed % 2 else 0x1000000)
    out = []
    snapshot = []
    for _ in range(30):
        entry = log.inserted()
        snapshot.append(log.line("r", (T0_S - 5) * 1000, None, {"id": entry, **log.live[entry]}))
    for day in range(1, DAYS + 1):
        lines = snapshot if day == 1 else []
        if ODD.get(day) in ("quiet", "tombstones"):  # (nothing new; tombstones alone)
            out.append([] if ODD[day] == "quiet" else ["null", '{"payload":null}'])
            continue
        times = sorted(T0_S + (day - 1) * DAY_S + rng.random() * (DAY_S - 60)
                       for _ in range(rng.randint(8, 20)))  # fmt: skip
        for t in times:
            for _ in range(rng.randint(1, 3)):
                lines.extend(log.change(int(t * 1000)))
        lines.extend(_odd(ODD.get(day), log, T0_S + day * DAY_S))
        out.append(lines)
    return out


def _decimal(unscaled: int, scale: int) -> str:
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def _odd(kind: str | None, log: _Log, end: int) -> list[str]:
    """A change the fast path refuses (and the SQL step reads), at the end of a day."""
    ms = (end - 9) * 1000
    entry = sorted(log.live, key=str)[0] if log.live else None
    if kind is None or entry is None:
        return []
    row = {"id": entry, **log.live[entry]}
    if kind == "replayed":  # (the change before, sent again: a duplicate of its entry)
        first = log.line("u", ms, None, {"id": entry, "v": 1})
        again = json.loads(first)
        (again.get("payload") or again)["after"]["v"] = 2
        log.live[entry] = {"v": 2}
        return [first, json.dumps(again)]
    if kind == "again":  # (an LSN an earlier day gave the entry: a duplicate of the state's)
        log.live[entry] = {"v": 5}
        return [log.line("u", ms, None, {"id": entry, "v": 5},
                         source={"lsn": log.seen[entry]})]  # fmt: skip
    if kind == "moved":
        log.serial += 1
        values = log.live.pop(entry)
        log.live[log.serial] = values
        return [log.line("u", ms, row, {"id": log.serial, **values})]
    if kind == "pending":
        log.serial += 1
        log.live[log.serial] = {"v": 2}
        return [log.line("c", (end + 7) * 1000, None, {"id": log.serial, "v": 2})]
    if kind == "truncate":
        return [log.line("t", ms, None, None)]
    if kind == "text":
        log.live[entry] = {"v": "3"}
        return [log.line("u", ms, row, {"id": entry, "v": "3"})]
    if kind == "decimal":  # (variable scale: an object the stage decodes, 2.57)
        log.live[entry] = {"v": 2.57}
        return [log.line("u", ms, row, {"id": entry, "v": {"scale": 2, "value": _decimal(257, 2)}})]
    if kind == "schema":  # (a Decimal column of the schema: a bare base64 value, 7.5)
        schema = json.loads(json.dumps(_SCHEMA))
        for part in schema["fields"][:2]:
            part["fields"][1] = {"type": "bytes", "field": "v", "optional": True,
                                 "name": "org.apache.kafka.connect.data.Decimal",
                                 "parameters": {"scale": "1"}}  # fmt: skip
        env = json.loads(log.line("u", ms, None, {"id": entry, "v": _decimal(75, 1)}))
        log.live[entry] = {"v": 7.5}
        return [json.dumps({"schema": schema, "payload": env.get("payload") or env})]
    if kind == "envelope time":  # (no source.ts_ms: the envelope's is the change's time)
        line = json.loads(log.line("u", ms, None, {"id": entry, "v": 6}))
        env = line.get("payload") or line
        del env["source"]["ts_ms"]
        env["ts_ms"] = ms
        log.live[entry] = {"v": 6}
        return [json.dumps(line)]
    assert kind == "late"
    log.serial += 1
    log.live[log.serial] = {"v": 1}
    return [log.line("c", (T0_S + 100) * 1000, None, {"id": log.serial, "v": 1})]


def _release(tmp: Path, k: int) -> dpcr.ContinualRelease:
    """``test_memory_wal2json``'s release over a Debezium file."""
    return dataclasses.replace(wal2json_release(tmp, k),
                               source=dpcr.sources.Debezium(path=tmp / "log.jsonl", key="id"))


@pytest.mark.parametrize(("seed", "k"), [(0, 3), (1, 2), (2, 50)])
def test_debezium_memory_steps_equal_sql_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               seed: int, k: int) -> None:  # fmt: skip
    sql_state, taken = memory_equals_sql(tmp_path, monkeypatch, _days(seed), k, _release)
    assert sql_state["keys"]  # (the LSNs are kept: the state's sequence numbers are explicit)
    assert sql_state["qlines"]  # (the refused days' quarantined records)
    # from memory: every day after the first (14: nothing new, 15: tombstones alone) but
    # those with a record refused (3-6, 9-12, 16); the pending record's day (7) holds it and
    # the next (8) judges it again
    from_memory = [day for day, got in enumerate(taken[1:], start=2) if got]
    assert from_memory == [2, 7, 8, 13, 14, 15], from_memory


def test_accepts() -> None:
    base = _release(Path("/nonexistent"), 3)
    assert memory.accepts(engine_request(base))
    for source in (dpcr.sources.Debezium(path=Path("/nonexistent"), key=("id", "zone")),
                   dpcr.sources.Debezium(path=Path("/nonexistent"), key="id",
                                         decimal_scales={"v": 2})):  # fmt: skip
        assert not memory.accepts(engine_request(dataclasses.replace(base, source=source)))


_OK = '{"op":"c","before":null,"after":{"id":"a b","v":2.5,"w":"x"},' \
    '"source":{"ts_ms":1767225600500,"lsn":2},"ts_ms":1767225601000}'  # fmt: skip


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"op":"c","after":{"v":1},"source":{"ts_ms":1,"lsn":1}}', "no key"),
        ('{"op":"c","op":"c","after":{"id":1},"source":{"ts_ms":1,"lsn":1}}', "repeated key"),
        ('{"op":"c","after":{"id":1},"source":{"ts_ms":1}}', "no lsn"),
        ('{"op":"c","after":{"id":1},"source":{"ts_ms":1,"lsn":"1"}}', "lsn as text"),
        ('{"op":"c","after":{"id":1},"source":{"ts_ms":1,"lsn":-1}}', "a negative lsn"),
        ('{"op":"c","after":{"id":1},"source":{"lsn":1},"ts_ms":1}', "the envelope's time"),
        ('{"op":"c","after":{"id":1},"source":{"ts_ms":1.5,"lsn":1}}', "a fractional time"),
        ('{"op":"c","after":{"id":1},"source":{"ts_ms":253402300800000,"lsn":1}}', "year 10000"),
        ('{"op":"c","after":{"id":-0},"source":{"ts_ms":1,"lsn":1}}', "-0"),
        ('{"op":"c","after":{"id":1.5},"source":{"ts_ms":1,"lsn":1}}', "a fraction"),
        ('{"op":"c","after":{"id":true},"source":{"ts_ms":1,"lsn":1}}', "a boolean key"),
        ('{"op":"c","after":{"id":1,"v":NaN},"source":{"ts_ms":1,"lsn":1}}', "NaN"),
        ('{"op":"c","after":{"id":1,"v":true},"source":{"ts_ms":1,"lsn":1}}', "a boolean"),
        ('{"op":"c","after":{"id":1,"v":"2"},"source":{"ts_ms":1,"lsn":1}}', "text"),
        ('{"op":"c","after":{"id":1,"x":{"scale":0,"value":"AQ=="}},"source":{"ts_ms":1,'
         '"lsn":1}}', "a decimal in another column"),
        ('{"op":"c","after":{"id":1,"x":[1]},"source":{"ts_ms":1,"lsn":1}}', "an array"),
        ('{"op":"d","after":{"id":1},"source":{"ts_ms":1,"lsn":1}}', "a delete's row after"),
        ('{"op":"d","source":{"ts_ms":1,"lsn":1}}', "a delete without its row"),
        ('{"op":"c","before":{"id":1},"after":{"id":1},"source":{"ts_ms":1,"lsn":1}}',
         "an insert's before"),
        ('{"op":"u","before":{"id":2},"after":{"id":1},"source":{"ts_ms":1,"lsn":1}}',
         "a key moved"),
        ('{"op":"u","before":5,"after":{"id":1},"source":{"ts_ms":1,"lsn":1}}', "a before"),
        ('{"op":"t","source":{"ts_ms":1,"lsn":1}}', "a truncate"),
        ('{"op":"C","after":{"id":1},"source":{"ts_ms":1,"lsn":1}}', "an op in capitals"),
        ('{"payload":null,"op":"c"}', "a null payload with a top-level op"),
        ('{"payload":"x"}', "a payload that is no object"),
        ('{"schema":{"fields":[{"field":"after","fields":[{"field":"v","name":'
         '"org.apache.kafka.connect.data.Decimal"}]}]},"payload":' + _OK + "}", "a Decimal"),
        ('{"schema":{"fields":{"a":1}},"payload":' + _OK + "}", "schema fields that are no array"),
        ("[1]", "an array line"),
        (" null", "a blank first"),
        ("nul", "no JSON"),
    ],
)
def test_lines_refused(line: str, why: str) -> None:
    got = _debezium.read(f"{_OK}\nnull\n".encode(), key="id", columns=("v",))
    assert got is not None and got.entries == ["a b"] and got.ts.tolist() == [
        1_767_225_600_500_000] and got.seq.tolist() == [2] and got.values["v"].tolist() == [2.5]
    assert (got.records, got.tombstones, got.lines, got.line.tolist()) == (2, 1, 2, [1])
    assert _debezium.read(f"{_OK}\n{line}\n".encode(), key="id", columns=("v",)) is None, why


def test_a_schema_without_decimals_and_kafka_fields_are_read() -> None:
    line = json.dumps({"schema": _SCHEMA, "payload": json.loads(_OK),
                       "dpcr_kafka": {"topic": "t", "partition": 0, "offset": 3}})  # fmt: skip
    got = _debezium.read(f"{line}\n".encode(), key="id", columns=("v",))
    assert got is not None and got.entries == ["a b"] and got.values["v"].tolist() == [2.5]


@pytest.mark.parametrize("stop", [2, 6])
def test_a_killed_follower_is_replayed(tmp_path: Path, monkeypatch: Any, stop: int) -> None:
    """As ``test_memory_wal2json``'s killed session, over a Debezium file."""
    monkeypatch.setattr(sys.modules[__name__], "ODD", {})
    killed_follow_is_replayed(tmp_path, monkeypatch, stop, _days(5)[:10], __name__, _release)


#: Phase-1 verdicts of a record on its own (a chunk the reader takes has none of them).
_OWN = {"bad_json", "bad_seq", "bad_timestamp", "missing_entry", "unknown_op", "bad_encoding",
        "too_long", "missing_unit", "tombstone"}  # fmt: skip


#: :data:`_SCHEMA` with a Decimal column ``w`` (whose bare text the stage decodes as base64).
_DECIMAL_W = json.loads(json.dumps(_SCHEMA))
for _part in _DECIMAL_W["fields"][:2]:
    _part["fields"].append({"type": "bytes", "field": "w", "optional": True, "parameters":
                            {"scale": "1"}, "name": "org.apache.kafka.connect.data.Decimal"})


def _fuzz_value(rng: random.Random, bad: bool) -> Any:
    if bad:
        return rng.choice([2**53 + 1, -(2**53) - 1, "3", True, {"scale": 2, "value": "AQE="},
                           [1], 1e400])  # fmt: skip
    return rng.choice([0, 7, -12, 0.5, -2.5, 1e3, 2.675, 123456789012345, 2**53, None,
                       round(rng.uniform(-50, 150), rng.randint(0, 6)), rng.randint(-99, 99)])


def _fuzz_line(rng: random.Random, n: int) -> str:
    """A Debezium line: with odds 1/4 one of its parts (``fault``) is picked among forms the
    reader refuses (most of which the loader refuses too), else each among forms it takes."""
    fault = rng.randrange(11) if rng.random() < 0.25 else -1

    def part(k: int, good: list[Any], worse: list[Any]) -> Any:
        return rng.choice(worse if k == fault else good)

    if rng.random() < 0.1 or fault == 0:
        return part(0, ["null", '{"payload":null}', '{"schema":null,"payload":null}'],
                    ['{"payload":null,"op":"c"}', "[1]", '{"payload":"x"}'])  # fmt: skip
    key = part(1, [n, f"k{n}", -n, 'a"b', "\u0041"], [1.5, True, " a", "\u00e9", None, 2**53 + n])
    row: dict[str, Any] = {"id": key}
    if rng.random() < 0.85 or fault == 2:
        row["v"] = _fuzz_value(rng, fault == 2)
    if rng.random() < 0.2 or fault == 3:
        row["w"] = part(3, ["x", 1, None, True], [{"scale": 0, "value": "AQ=="},
                                            {"scale": 1, "value": "*"}])  # fmt: skip
    op = part(4, ["c", "r", "u", "d"], ["t", "C", " c", "m"])
    before = dict(row) if op != "c" and (op == "d" or rng.random() < 0.7) else None
    if before is not None and (rng.random() < 0.1 or fault == 5):
        before["id"] = part(5, [None, key], [n + 1, f"k{n + 1}"])
    after = None if op == "d" else dict(row)
    if fault == 6:
        after, before = rng.choice([(None, None), (row, row), (5, None), (row, [1])])
    source: dict[str, Any] = {"connector": "postgresql", "ts_ms": 1_767_225_600_000 + n,
                              "lsn": 2**40 + n}  # fmt: skip
    for k, field in ((7, "ts_ms"), (8, "lsn")):
        source[field] = part(k, [source[field]], [None, "5", 1.5, -1, 2**63, True,
                                                  253_402_300_800_000])  # fmt: skip
    env: dict[str, Any] = {"before": before, "after": after, "source": source, "op": op}
    if rng.random() < 0.3:
        env["ts_ms"] = rng.choice([1_767_225_600_000, "x"])
    if fault == 9 and rng.random() < 0.3:
        del env["source"]
    line: Any = env
    if rng.random() < 0.5 or fault == 10:
        if fault == 10 and type(after) is dict:
            after["w"] = "x"  # (text the stage reads as base64 in a Decimal column)
        line = {"schema": part(10, [_SCHEMA, None], [_DECIMAL_W]), "payload": env,
                "dpcr_kafka": {"offset": n}}  # fmt: skip
    text = json.dumps(line, separators=(",", ":") if rng.random() < 0.7 else None)
    return text.replace('"after":', '"after":  ', 1) if rng.random() < 0.05 else text


@pytest.mark.parametrize("seed", range(4))
def test_lines_taken_are_read_as_the_loader_reads_them(tmp_path: Path, seed: int) -> None:
    """Chunks of random Debezium lines: each chunk :func:`_debezium.read` takes, the loader
    (the SQL step's) reads with no record refused on its own (only history verdicts: a
    double insert, an update of an entry not live, a replayed LSN), and each record it keeps
    with the entry, time, LSN, op and summed value the reader gives."""
    import duckdb

    from dpcr.changelog import load

    rng = random.Random(seed)
    taken = 0
    for trial in range(60):
        lines = [_fuzz_line(rng, 10 * trial + i) for i in range(rng.randint(1, 6))]
        data = "".join(line + "\n" for line in lines).encode()
        got = _debezium.read(data, key="id", columns=("v",))
        if got is None:
            continue
        taken += 1
        path = tmp_path / f"{trial}.jsonl"
        path.write_bytes(data)
        quarantine = tmp_path / f"{trial}.q.jsonl"
        con = duckdb.connect()
        report = load(dpcr.sources.Debezium(path=path, key="id"), con, table="changelog",
                      on_error="quarantine", quarantine_path=quarantine)  # fmt: skip
        assert (report.records, report.tombstones) == (got.records, got.tombstones), lines
        verdicts = [json.loads(q)["reason"] for q in quarantine.read_text().splitlines()] \
            if quarantine.exists() else []  # fmt: skip
        assert not set(verdicts) & _OWN, (verdicts, lines)
        rows = con.execute("SELECT record, entry, ts, seq, op, TRY_CAST(json_extract(after, "
                           "'$.v') AS DOUBLE) FROM changelog").fetchall()  # fmt: skip
        at = {int(line): i for i, line in enumerate(got.line)}
        ops = {"insert": 0, "update": 1, "delete": 2}
        for record, entry, ts, seq, op, v in rows:
            i = at[record]
            assert (entry, ts, seq, ops[op]) == (got.entries[i], got.ts[i], got.seq[i],
                                                 got.op[i]), lines  # fmt: skip
            mine = got.values["v"][i]
            assert (v is None and mine != mine) or op == "delete" or v == mine, lines
        con.close()
    assert taken >= 8, taken
