"""How ``dpcr capture postgres`` reads a wal2json message off the wire (no server): the fixed
head of the messages it writes as they came, the full parse of every other message, and where
a restart resumes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpcr.cdc import _stream, postgres
from dpcr.cdc._durable import DurableLog
from dpcr.errors import ConfigError, DpcrError

HEAD = '{"action":"%s","xid":746,"timestamp":"2026-11-24 17:55:35.154549+00","lsn":"%s"'
BEGIN = (HEAD % ("B", "0/15319C0") + ',"nextlsn":"0/15319F0"}').encode()
COMMIT = (HEAD % ("C", "0/15319C0") + ',"nextlsn":"0/15319F0"}').encode()


def _change(action: str, lsn: str, value: Any) -> bytes:
    """A change as wal2json writes it: compact JSON, non-ASCII text as UTF-8."""
    row = [{"name": "id", "value": 1}, {"name": "note", "value": value}]
    body = {"schema": "public", "table": "tickets", "columns": row, "identity": row}
    tail = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return (HEAD % (action, lsn) + "," + tail[1:]).encode()


def _full(data: bytes) -> tuple[bytes, int, int]:
    """What the message says, by a full parse: action, LSN, and a commit's end LSN."""
    msg = json.loads(data)
    end = msg.get("nextlsn", msg["lsn"]) if msg["action"] == "C" else msg["lsn"]
    return msg["action"].encode(), postgres.lsn_int(msg["lsn"]), postgres.lsn_int(end)


def test_changes_and_markers_are_read_from_their_head_and_kept_as_they_came() -> None:
    for data in (BEGIN, COMMIT, _change("U", "16/B374D848", 'a "quoted"\nline \\ é')):
        action, lsn, end, parsed, line = _stream.message(data, "s")
        assert parsed is None and line is data  # the fast path: not parsed, not re-encoded
        assert (action, lsn, end) == _full(data)
    assert _stream.message(COMMIT, "s")[2] == postgres.lsn_int("0/15319F0")
    assert _stream.message(_change("D", "16/B374D848", None), "s")[1] == (0x16 << 32) + 0xB374D848
    # The body after the head is not checked: a message the server's wal2json cannot write
    # reaches the file as it came, and the loader reports it (bad_json).
    bad = b'{"action":"I","xid":1,"timestamp":"t","lsn":"0/10","columns":[}'
    assert _stream.message(bad, "s")[3:] == (None, bad)


@given(st.text(), st.sampled_from("IUD"), st.integers(0, 2**64 - 1))
def test_the_head_says_what_the_full_parse_says(value: str, action: str, lsn: int) -> None:
    data = _change(action, postgres.lsn_text(lsn), value)
    got = _stream.message(data, "s")
    assert got[3] is None and got[4] is data and got[:3] == _full(data)


@pytest.mark.parametrize(
    "data",
    [
        # fields in another order, spaces after colons, no xid: not the head the capture asks for
        b'{"xid":746,"action":"I","lsn":"0/1531768","columns":[]}',
        b'{"action": "I", "lsn": "0/1531768", "columns": []}',
        b'{"action":"I","timestamp":"2026-11-24 17:55:35+00","lsn":"0/1531768","columns":[]}',
        b'{"action":"I","xid":1,"timestamp":"t","lsn":"0/1531768","columns":[]} ',  # not "}"
        b'{"action":"C","xid":1,"timestamp":"t","lsn":"0/1531768"}',  # a commit without nextlsn
        b'{"action":"C","xid":1,"timestamp":"t","lsn":"0/1531768","nextlsn":"0/15317A0","x":1}',
        b'{"action":"T","xid":1,"timestamp":"t","lsn":"0/1531768","schema":"s","table":"t"}',
        b'{"action":"M","xid":1,"timestamp":"t","lsn":"0/1531768","transactional":true,'
        b'"prefix":"dpcr_heartbeat","content":""}',
    ],
)
def test_any_other_message_is_parsed_in_full(data: bytes) -> None:
    action, lsn, end, parsed, line = _stream.message(data, "s")
    assert parsed == json.loads(data) and line is data
    assert (action, lsn, end) == _full(data)


def test_a_message_on_several_lines_is_written_on_one() -> None:
    data = (b'{"action":"I","xid":1,"timestamp":"t","lsn":"0/10",\n"columns":[{"name":"a",\n'
            b'"value":"x\\ny"}]}')  # fmt: skip
    action, lsn, _, parsed, line = _stream.message(data, "s")
    assert (action, lsn) == (b"I", 16) and b"\n" not in line
    assert json.loads(line) == json.loads(data) == parsed


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b'{"action":"I","xid":1,"timestamp":"t","lsn":"0/10","columns":[',  # cut short
        b'{"action":"I","columns":[]}',  # no lsn
        b'{"action":1,"lsn":"0/10"}',
        b'{"action":"I","lsn":"zz"}',
        b'["I", "0/10"]',
        b"\xff\xfe",
    ],
)
def test_garbage_is_refused_with_the_plugin_hint(data: bytes) -> None:
    with pytest.raises(DpcrError, match=r"not wal2json format-version 2 .*another plugin"):
        _stream.message(data, "s")


def _snapshot_line(aid: int) -> str:
    head = json.dumps({"action": "I", "lsn": "0/FF", "timestamp": "2026-11-24 00:00:00+00",
                       "schema": "public", "table": "t", "snapshot": True})[:-1]  # fmt: skip
    return f'{head}, "columns": [{{"name" : "aid", "value" : {aid}}}]}}'


def test_a_restart_reads_back_to_the_last_commit_or_to_the_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    with DurableLog(path) as log:
        log.append(["garbage that a full scan would trip over"])
        log.append([_snapshot_line(i) for i in range(1000)])
    assert _stream.SNAPSHOT_MARK in path.read_bytes().splitlines()[-1]
    state = _stream.resume_point(path)  # stops at the last snapshot row
    assert (state.last_commit, state.partial) == (-1, Counter())
    with DurableLog(path, create=False) as log:
        log.append_bytes([BEGIN, _change("I", "0/1531768", "x")])  # a transaction cut short
    state = _stream.resume_point(path)
    assert (state.last_commit, state.partial) == (-1, Counter({(b"B", 0x15319C0): 1,
                                                                (b"I", 0x1531768): 1}))
    with DurableLog(path, create=False) as log:
        log.append_bytes([COMMIT, BEGIN])
    state = _stream.resume_point(path)
    assert (state.last_commit, state.partial) == (0x15319C0, Counter({(b"B", 0x15319C0): 1}))
    with DurableLog(path, create=False) as log:
        log.append(['{"action":"I","lsn":"nope"}'])
    with pytest.raises(ConfigError, match="not a wal2json message with an lsn"):
        _stream.resume_point(path)
