"""The durable changelog file, the Kafka line format and missing extras (no servers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dpcr.cdc import kafka, postgres
from dpcr.cdc._durable import DurableLog, tail_lines
from dpcr.cli import main
from dpcr.errors import ConfigError, MissingExtraError


def test_torn_last_line_is_cut_and_lines_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    with DurableLog(path) as log:
        log.append(["a", "b"])
    with path.open("ab") as f:
        f.write(b'{"half')  # a write a crash interrupted
    with DurableLog(path) as log:
        assert log.torn == 6
        log.append(["c"])
        assert list(log.lines()) == [b"a", b"b", b"c"]
    assert tail_lines(path, stop=b"b") == [b"c", b"b"]
    assert tail_lines(path, chunk=2) == [b"c", b"b", b"a"]
    with pytest.raises(ConfigError, match="no such changelog"):
        DurableLog(tmp_path / "missing.jsonl", create=False)


def test_kafka_lines_carry_their_offset(tmp_path: Path) -> None:
    line = kafka.envelope_line(b'{"payload": {"op": "c"}}', topic="t", partition=0, offset=7)
    assert json.loads(line) == {"payload": {"op": "c"}, "dpcr_kafka":
                                {"topic": "t", "partition": 0, "offset": 7}}  # fmt: skip
    assert (
        json.loads(kafka.envelope_line(None, topic="t", partition=0, offset=8))["payload"] is None
    )
    assert json.loads(kafka.envelope_line(b"not\njson", topic="t", partition=0, offset=9)) == (
        "not\njson"
    )  # fmt: skip
    path = tmp_path / "k.jsonl"
    path.write_text(line + "\n")
    assert kafka.last_offset(path, topic="t", partition=0) == 7
    with pytest.raises(ConfigError, match="one changelog file follows one partition"):
        kafka.last_offset(path, topic="t", partition=1)


def test_lsn_text() -> None:
    assert postgres.lsn_int("16/B374D848") == (0x16 << 32) + 0xB374D848
    assert postgres.lsn_text(postgres.lsn_int("16/B374D848")) == "16/B374D848"


def test_missing_extras_name_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    monkeypatch.setitem(sys.modules, "kafka", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'dpcr\[postgres\]'"):
        postgres.drop_slot("host=127.0.0.1", slot="s")
    with pytest.raises(MissingExtraError, match=r"pip install 'dpcr\[kafka\]'"):
        kafka.capture("127.0.0.1:1", topic="t", partition=0, out=Path("x"))


def test_cli_needs_a_connection_string(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DPCR_PG_DSN", raising=False)
    assert main(["capture", "postgres", "--slot", "s", "--drop-slot"]) == 2
    assert "DPCR_PG_DSN" in capsys.readouterr().err


def test_kafka_values_that_are_not_utf8_reach_the_file_and_never_stop_the_capture(
    tmp_path: Path,
) -> None:
    """A value that is not UTF-8 is written as it came (the loader quarantines it whole with
    its bytes), or with escapes when it holds a line break; a JSON value escaping a lone
    surrogate is written escaped (it once stopped the capture with UnicodeEncodeError)."""
    latin1 = b'{"payload": {"op": "c", "after": {"id": 1, "z": "caf\xe9"}}}'
    lines = [
        kafka.envelope_line(latin1, topic="t", partition=0, offset=1),
        kafka.envelope_line(b"a\xe9\nb", topic="t", partition=0, offset=2),
        kafka.envelope_line(b'{"payload": {"z": "\\ud800"}}', topic="t", partition=0, offset=3),
        kafka.envelope_line(b'{"payload": {"z": "\\udce9"}}', topic="t", partition=0, offset=4),
    ]
    path = tmp_path / "k.jsonl"
    log = DurableLog(path)
    log.append(lines)
    log.close()
    written = path.read_bytes().split(b"\n")
    assert written[0] == latin1
    assert json.loads(written[1]) == "a\\xe9\nb"
    assert json.loads(written[2])["payload"] == {"z": "\ud800"}
    assert json.loads(written[3])["payload"] == {"z": "\udce9"}
    assert kafka.last_offset(path, topic="t", partition=0) == 4
