"""The pgoutput decoder on hand-built protocol version 1 messages: every message kind, every
kind of column value, and the lines a ``format = "wal2json"`` file reads."""

from __future__ import annotations

import json
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.cdc.pgoutput import PgoutputDecoder, publication_name, stream_options
from dpcr.changelog import load
from dpcr.changelog._sources import Wal2jsonSource
from dpcr.errors import DpcrError

TICKETS, OTHER = 16_390, 16_400
TS = 817_342_035_316_880  # 2025-11-24 23:27:15.31688 UTC, in µs since 2000-01-01
TS_TEXT = "2025-11-24 23:27:15.31688+00"
# (flags, name, type oid, typmod); flag 1 marks a replica identity column
COLUMNS = [(1, "id", 23, -1), (0, "zone", 25, -1), (0, "fare", 1700, 655366),
           (0, "note", 25, -1)]  # fmt: skip


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def begin(final_lsn: int = 0x16B2D80, ts: int = TS, xid: int = 746) -> bytes:
    return b"B" + struct.pack(">QqI", final_lsn, ts, xid)


def commit(commit_lsn: int = 0x16B2D80, end_lsn: int = 0x16B2DB0, ts: int = TS) -> bytes:
    return b"C" + struct.pack(">BQQq", 0, commit_lsn, end_lsn, ts)


def relation(oid: int = TICKETS, schema: str = "public", name: str = "tickets",
             columns: list[tuple[int, str, int, int]] = COLUMNS, identity: bytes = b"f"
             ) -> bytes:  # fmt: skip
    out = b"R" + struct.pack(">I", oid) + _s(schema) + _s(name) + identity
    out += struct.pack(">H", len(columns))
    for flags, column, type_oid, typmod in columns:
        out += bytes([flags]) + _s(column) + struct.pack(">Ii", type_oid, typmod)
    return out


def row(*values: str | bytes | None) -> bytes:
    """A tuple: None is a null, b"u" an unchanged TOAST value, a str a text value."""
    out = struct.pack(">H", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif isinstance(v, bytes):
            out += v
        else:
            data = v.encode()
            out += b"t" + struct.pack(">I", len(data)) + data
    return out


def insert(new: bytes, oid: int = TICKETS) -> bytes:
    return b"I" + struct.pack(">I", oid) + b"N" + new


def update(new: bytes, old: bytes | None = None, kind: bytes = b"O", oid: int = TICKETS
           ) -> bytes:  # fmt: skip
    head = b"U" + struct.pack(">I", oid)
    return head + (kind + old if old is not None else b"") + b"N" + new


def delete(old: bytes, kind: bytes = b"O", oid: int = TICKETS) -> bytes:
    return b"D" + struct.pack(">I", oid) + kind + old


def truncate(*oids: int) -> bytes:
    return b"T" + struct.pack(">IB", len(oids), 0) + b"".join(struct.pack(">I", o) for o in oids)


def message(prefix: str, content: bytes, *, transactional: bool = True, lsn: int = 0x16B2D00
            ) -> bytes:  # fmt: skip
    return (b"M" + struct.pack(">BQ", int(transactional), lsn) + _s(prefix)
            + struct.pack(">I", len(content)) + content)  # fmt: skip


def decoder(table: str = "public.tickets") -> PgoutputDecoder:
    return PgoutputDecoder(table=table)


def run(d: PgoutputDecoder, *messages: tuple[bytes, int]) -> list[str | None]:
    return [d.decode(payload, start) for payload, start in messages]


def test_a_transaction_reads_as_wal2json_lines() -> None:
    d = decoder()
    lines = run(
        d,
        (begin(), 0x16B2000),
        (relation(), 0),
        (insert(row("1", "A", "2.50", None)), 0x16B2100),
        (update(row("1", "A", "9.99", None), old=row("1", "A", "2.50", None)), 0x16B2200),
        (delete(row("1", "A", "9.99", None)), 0x16B2300),
        (commit(), 0x16B2DB0),
    )
    assert lines[1] is None  # a Relation message makes no line
    head = '"xid":746,"timestamp":"2025-11-24 23:27:15.31688+00"'
    cols = ('{"name":"id","value":1},{"name":"zone","value":"A"},{"name":"fare","value":%s},'
            '{"name":"note","value":null}')  # fmt: skip
    table = '"schema":"public","table":"tickets"'
    assert lines == [
        f'{{"action":"B",{head},"lsn":"0/16B2D80"}}',
        None,
        f'{{"action":"I",{head},"lsn":"0/16B2100",{table},"columns":[{cols % "2.50"}]}}',
        f'{{"action":"U",{head},"lsn":"0/16B2200",{table},"columns":[{cols % "9.99"}],'
        f'"identity":[{cols % "2.50"}]}}',
        f'{{"action":"D",{head},"lsn":"0/16B2300",{table},"identity":[{cols % "9.99"}]}}',
        f'{{"action":"C",{head},"lsn":"0/16B2D80","nextlsn":"0/16B2DB0"}}',
    ]


def test_values_are_typed_as_wal2json_types_them() -> None:
    columns = [(1, "id", 23, -1), (0, "n", 1700, -1), (0, "b", 16, -1), (0, "f", 701, -1),
               (0, "big", 20, -1), (0, "raw", 17, -1), (0, "doc", 3802, -1),
               (0, "note", 25, -1), (0, "mood", 16_500, -1), (0, "moods", 16_499, -1)]  # fmt: skip
    digits = "-123456789012345678901234567890.123456789012345678901"
    note = 'say "hi"\\ \n\ttab \x01 ünï 😀 €'
    d = decoder()
    run(d, (begin(), 1), (relation(columns=columns), 0))
    line = d.decode(insert(row("7", digits, "t", "1e+100", "9007199254740993", "\\x00ff",
                               '{"a": [1, 2]}', note, "ok", "{ok,sad}")), 2)  # fmt: skip
    assert line is not None and "\n" not in line
    values = {c["name"]: c["value"] for c in json.loads(line, parse_float=Decimal)["columns"]}
    assert values == {"id": 7, "n": Decimal(digits), "b": True, "f": Decimal("1e+100"),
                      "big": 9007199254740993, "raw": "00ff", "doc": '{"a": [1, 2]}',
                      "note": note, "mood": "ok", "moods": "{ok,sad}"}  # fmt: skip
    assert f'"value":{digits}}}' in line  # the server's digits, never through a float
    assert all(set(c) == {"name", "value"} for c in json.loads(line)["columns"])
    special = d.decode(insert(row("8", "NaN", "f", "-Infinity", None, None, None, None, None,
                                  None)), 3)  # fmt: skip
    assert special is not None
    values = {c["name"]: c["value"] for c in json.loads(special)["columns"]}
    assert (values["n"], values["b"], values["f"], values["big"]) == (None, False, None, None)


def test_unchanged_toast_is_left_out_and_a_key_keeps_only_identity_columns() -> None:
    d = decoder()
    run(d, (begin(), 1), (relation(identity=b"d"), 0))
    line = d.decode(update(row("1", "B", "2.50", b"u")), 2)  # key kept: no old tuple
    assert line is not None
    msg = json.loads(line)
    assert [c["name"] for c in msg["columns"]] == ["id", "zone", "fare"]  # 'note' unchanged
    assert msg["identity"] == [{"name": "id", "value": 1}]  # from the new row
    line = d.decode(update(row("5", "B", "2.50", None), old=row("1", None, None, None),
                           kind=b"K"), 3)  # fmt: skip
    assert line is not None
    assert json.loads(line)["identity"] == [{"name": "id", "value": 1}]
    line = d.decode(delete(row("5", None, None, None), kind=b"K"), 4)
    assert line is not None
    assert json.loads(line)["identity"] == [{"name": "id", "value": 5}]
    # No identity column at all (REPLICA IDENTITY NOTHING): an update without identity.
    run(d, (relation(columns=[(0, c[1], c[2], c[3]) for c in COLUMNS], identity=b"n"), 0))
    line = d.decode(update(row("5", "C", "1.00", None)), 5)
    assert line is not None and "identity" not in json.loads(line)


def test_other_tables_truncate_messages_types_and_origins() -> None:
    d = decoder()
    lines = run(
        d,
        (begin(), 1),
        (b"O" + struct.pack(">Q", 0x10) + _s("node_a"), 1),  # origin
        (b"Y" + struct.pack(">I", 16_500) + _s("public") + _s("Mood"), 0),  # type
        (relation(), 0),
        (relation(oid=OTHER, name="other", columns=[(1, "k", 23, -1)]), 0),
        (insert(row("1"), oid=OTHER), 2),  # another table: no line (add-tables)
        (truncate(OTHER, TICKETS), 3),
        (message("dpcr_heartbeat", b""), 4),
        (message("p", b"a\0b"), 5),
        (commit(), 6),
        (message("nt", b"hello", transactional=False, lsn=0x20), 7),
    )
    assert lines[:6] == [lines[0], None, None, None, None, None]
    assert json.loads(lines[6] or "") == {
        "action": "T", "xid": 746, "timestamp": TS_TEXT, "lsn": "0/3", "schema": "public",
        "table": "tickets",
    }  # fmt: skip
    assert json.loads(lines[7] or "") == {
        "action": "M", "xid": 746, "timestamp": TS_TEXT, "lsn": "0/16B2D00",
        "transactional": True, "prefix": "dpcr_heartbeat", "content": "",
    }  # fmt: skip
    assert json.loads(lines[8] or "")["content"] == "a"  # wal2json stops at a NUL
    assert json.loads(lines[10] or "") == {
        "action": "M", "xid": None, "timestamp": None, "lsn": "0/20", "transactional": False,
        "prefix": "nt", "content": "hello",
    }  # fmt: skip
    assert d.decode(truncate(OTHER), 8) is None


def test_pg_catalog_relation() -> None:
    d = PgoutputDecoder(table="pg_catalog.t")
    run(d, (begin(), 1), (relation(schema="", name="t"), 0), (relation(schema="", name="t"), 0))
    line = d.decode(insert(row("1", "A", "1.00", None)), 2)
    assert line is not None and json.loads(line)["schema"] == "pg_catalog"


@pytest.mark.parametrize(
    ("ts", "text"),
    [(0, "2000-01-01 00:00:00+00"), (1_500_000, "2000-01-01 00:00:01.5+00"),
     (-1, "1999-12-31 23:59:59.999999+00"), (TS, TS_TEXT)],
)  # fmt: skip
def test_commit_times(ts: int, text: str) -> None:
    line = decoder().decode(begin(ts=ts), 1)
    assert line is not None and json.loads(line)["timestamp"] == text


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([b"S" + b"\0" * 8], "kind 'S'"),
        ([b""], "empty"),
        ([begin(), insert(row("1", "A", "1", None))], "before describing it"),
        ([relation(), insert(row("1", "A", "1", None))], "outside a transaction"),
        ([begin(), relation(), insert(row("1", "A"))], "row of 2 columns"),
        ([begin(), relation(), insert(row("1", "A", b"b\0\0\0\x01x", None))], "kind 'b'"),
        ([begin(), relation(), insert(row("1", "A", "1", None))[:-3]], "malformed 'I'"),
        ([begin(), relation(), b"I" + struct.pack(">I", TICKETS) + b"X"], "'X' where one of"),
        ([begin()[:5]], "malformed 'B'"),
        ([commit()], "outside a transaction"),
    ],
)
def test_bad_messages_are_refused(messages: list[bytes], match: str) -> None:
    d = decoder()
    with pytest.raises(DpcrError, match=match):
        run(d, *((m, 1) for m in messages))


def test_the_lines_load_as_a_wal2json_file(tmp_path: Path) -> None:
    d = decoder()
    lines = run(
        d,
        (begin(), 1), (relation(), 0),
        (insert(row("1", "A", "2.50", "x")), 0x100),
        (insert(row("2", "B", "3.00", None)), 0x200),
        (update(row("1", "A", "4.00", b"u"), old=row("1", "A", "2.50", "x")), 0x300),
        (delete(row("2", "B", "3.00", None)), 0x400),
        (truncate(TICKETS), 0x500),
        (commit(), 0x600),
    )  # fmt: skip
    path = tmp_path / "c.wal2json.jsonl"
    path.write_text("".join(f"{x}\n" for x in lines if x is not None))
    con = duckdb.connect()
    report: Any = load(Wal2jsonSource(path=path, key="id", table="public.tickets"), con,
                       on_error="quarantine", quarantine_path=tmp_path / "q.jsonl")  # fmt: skip
    rows = con.execute("SELECT entry, op, seq, before::VARCHAR, after::VARCHAR FROM changelog "
                       "ORDER BY seq").fetchall()  # fmt: skip
    assert [(e, op, seq) for e, op, seq, _, _ in rows] == [
        ("1", "insert", 0x100), ("2", "insert", 0x200), ("1", "update", 0x300),
        ("2", "delete", 0x400),
    ]  # fmt: skip
    assert json.loads(rows[2][3]) == {"id": 1, "zone": "A", "fare": 2.5, "note": "x"}
    assert json.loads(rows[2][4]) == {"id": 1, "zone": "A", "fare": 4.0}  # note: unchanged
    assert report.tombstones == 2 and report.quarantined == {"unknown_op": 1}  # B, C; truncate


def test_publication_and_stream_options() -> None:
    assert publication_name("dpcr_tickets") == "dpcr_dpcr_tickets"
    assert stream_options("s") == {"proto_version": "1", "publication_names": "dpcr_s",
                                   "messages": "true"}  # fmt: skip
