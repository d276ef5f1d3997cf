"""Records the fast readers refuse (not UTF-8, too long, a CSV row that does not match the
header) are quarantined whole, counted, kept raw (losslessly, or as a bounded prefix with
length and digest), and every other record is read as if they were absent."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpcr.changelog import CsvSource, DebeziumSource, JsonlSource, Wal2jsonSource, load
from dpcr.changelog._set_aside import scan_csv, scan_lines
from dpcr.errors import ChangelogError, ConfigError

LATIN1 = b"caf\xe9"
LIMIT = 400


def _jsonl(i: int, zone: str = "A") -> bytes:
    return json.dumps(
        {
            "entry": f"e{i}",
            "ts": f"2025-01-01T{i % 24:02d}:00:00Z",
            "seq": i,
            "op": "insert",
            "after": {"zone": zone, "i": i},
        }
    ).encode()


def _debezium(i: int, zone: str = "A") -> bytes:
    return json.dumps(
        {
            "payload": {
                "op": "c",
                "before": None,
                "after": {"id": i, "zone": zone},
                "source": {"ts_ms": 1735689600000 + i, "lsn": i},
            }
        }
    ).encode()


def _wal2json(i: int, zone: str = "A") -> bytes:
    cols = [
        {"name": "id", "type": "integer", "value": i},
        {"name": "zone", "type": "text", "value": zone},
    ]
    return json.dumps(
        {
            "action": "I",
            "lsn": f"0/{i:X}",
            "timestamp": "2025-01-01 00:00:00+00",
            "schema": "public",
            "table": "t",
            "columns": cols,
        }
    ).encode()


def _csv(i: int, zone: str = "A") -> bytes:
    after = json.dumps({"zone": zone, "i": i}).replace('"', '""')
    return f'e{i},2025-01-01T00:00:00Z,{i},insert,"{after}"'.encode()


FORMATS: dict[str, Any] = {
    "jsonl": (_jsonl, lambda p, **kw: JsonlSource(path=p, **kw), b""),
    "debezium": (_debezium, lambda p, **kw: DebeziumSource(path=p, key="id", **kw), b""),
    "wal2json": (_wal2json, lambda p, **kw: Wal2jsonSource(path=p, key="id", **kw), b""),
    "csv": (_csv, lambda p, **kw: CsvSource(path=p, **kw), b"entry,ts,seq,op,after\n"),
}


def _bad(fmt: str, i: int) -> bytes:
    """Record ``i`` with a Latin-1 byte in a string value."""
    return FORMATS[fmt][0](i, "MARK").replace(b"MARK", LATIN1)


def _write(tmp: Path, fmt: str, records: list[bytes], *, end: bytes = b"\n") -> Path:
    path = tmp / f"log.{fmt}"
    path.write_bytes(FORMATS[fmt][2] + b"\n".join(records) + end)
    return path


def _load(path: Path, fmt: str, **kw: Any) -> tuple[Any, list[tuple[Any, ...]], list[Any]]:
    con = duckdb.connect()
    q = path.with_name("q.jsonl")
    report = load(FORMATS[fmt][1](path, **kw), con, on_error="quarantine", quarantine_path=q)
    rows = con.execute("SELECT record, entry, after FROM changelog ORDER BY record").fetchall()
    return report, rows, [json.loads(line) for line in q.read_text().splitlines()]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("where", ["middle", "end", "end without a line end"])
def test_a_record_that_is_not_utf8_is_quarantined_and_the_rest_is_read(
    tmp_path: Path, fmt: str, where: str
) -> None:
    make = FORMATS[fmt][0]
    good = [make(i) for i in range(1, 7)]
    bad_at = 3 if where == "middle" else 6
    records = [*good[: bad_at - 1], _bad(fmt, bad_at), *good[bad_at:]]
    path = _write(tmp_path, fmt, records, end=b"" if "without" in where else b"\n")
    report, rows, lines = _load(path, fmt)
    assert dict(report.quarantined) == {"bad_encoding": 1}
    assert report.records == 6 and report.valid == 5
    assert [r[0] for r in rows] == [i for i in range(1, 7) if i != bad_at]
    (line,) = lines
    assert line["record"] == bad_at and line["reason"] == "bad_encoding"
    assert base64.b64decode(line["raw_base64"]) == records[bad_at - 1]  # lossless
    assert "caf\\xe9" in line["raw"] and "0xe9" in line["message"]
    # The same file without that record gives the same rows (numbered alike).
    clean = tmp_path / "clean"
    clean.mkdir()
    _r, rows_clean, _l = _load(_write(clean, fmt, [*good[: bad_at - 1], *good[bad_at:]]), fmt)
    assert [r[1:] for r in rows] == [r[1:] for r in rows_clean]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_the_copy_goes_to_the_scratch_folder_given_else_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    import tempfile

    import dpcr.changelog._set_aside as set_aside

    made: list[Path] = []
    mkstemp = set_aside.tempfile.mkstemp

    def spy(*args: Any, **kw: Any) -> tuple[int, str]:
        fd, name = mkstemp(*args, **kw)
        made.append(Path(name))
        return fd, name

    monkeypatch.setattr(set_aside.tempfile, "mkstemp", spy)
    make = FORMATS[fmt][0]
    path = _write(tmp_path, fmt, [make(1), _bad(fmt, 2), make(3)])
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o700)
    q = tmp_path / "q.jsonl"
    for given in (scratch, None):
        load(FORMATS[fmt][1](path), duckdb.connect(), on_error="quarantine",
             quarantine_path=q, scratch=given)  # fmt: skip
    assert [p.parent for p in made] == [scratch, Path(tempfile.gettempdir())]
    assert not any(p.exists() for p in made)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_raise_stops_at_the_record_with_one_line(tmp_path: Path, fmt: str) -> None:
    make = FORMATS[fmt][0]
    path = _write(tmp_path, fmt, [make(1), _bad(fmt, 2), make(3)])
    with pytest.raises(ChangelogError) as info:
        load(FORMATS[fmt][1](path), duckdb.connect())
    assert info.value.reason == "bad_encoding" and info.value.record == 2
    message = str(info.value)
    assert "\n" not in message and "record 2" in message and "iconv" in message


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_record_longer_than_the_limit_is_quarantined_with_a_prefix_length_and_digest(
    tmp_path: Path, fmt: str
) -> None:
    make = FORMATS[fmt][0]
    huge = make(2, "x" * 5000)
    records = [make(1), huge, make(3), _bad(fmt, 4), make(5)]
    path = _write(tmp_path, fmt, records)
    report, rows, lines = _load(path, fmt, max_record_bytes=LIMIT)
    assert dict(report.quarantined) == {"too_long": 1, "bad_encoding": 1}
    assert [r[0] for r in rows] == [1, 3, 5]
    long = lines[0]
    assert long["reason"] == "too_long" and long["record"] == 2
    assert long["raw_bytes"] == len(huge)
    assert long["raw_sha256"] == hashlib.sha256(huge).hexdigest()
    assert huge.decode().startswith(long["raw"]) and len(long["raw"]) == 1024
    assert f"max_record_bytes = {LIMIT}" in long["message"]
    # A record of exactly the limit is read.
    exact = make(7, "y" * 1000)
    report, rows, _lines = _load(
        _write(tmp_path, fmt, [make(1), exact]), fmt, max_record_bytes=len(exact)
    )
    assert report.valid == 2 and not report.quarantined


def test_csv_rows_that_do_not_match_the_header_are_quarantined_and_numbered_in_place(
    tmp_path: Path,
) -> None:
    rows = [
        _csv(1),
        b'e2,2025-01-01T00:00:00Z,2,insert,"{}",extra',
        _csv(3),
        b'e4,2025-01-01T00:00:00Z,4,insert,"{""zone"":',
        b'""B""}"',  # one row, two lines
        b"",
        b"e5,2025-01-01T00:00:00Z",
        b'e6,2025-01-01T00:00:00Z,6,insert,"{}"x',
        _csv(7),
    ]
    path = _write(tmp_path, "csv", rows)
    report, loaded, lines = _load(path, "csv")
    assert dict(report.quarantined) == {"bad_csv": 3}
    assert [r[:2] for r in loaded] == [(1, "e1"), (3, "e3"), (4, "e4"), (7, "e7")]
    assert [(x["record"], x["raw"]) for x in lines] == [
        (2, rows[1].decode()),
        (5, "e5,2025-01-01T00:00:00Z"),
        (6, rows[7].decode()),
    ]
    with pytest.raises(ChangelogError, match="record 2: not a well-formed CSV row"):
        load(CsvSource(path=path), duckdb.connect())


def test_a_csv_header_that_is_not_utf8_still_stops_the_load(tmp_path: Path) -> None:
    """The header is the file's, not a unit's record: nothing can be read without it."""
    path = tmp_path / "c.csv"
    path.write_bytes(b"entry,ts,op,aft\xe9r\n" + _csv(1) + b"\n")
    with pytest.raises(ChangelogError, match="line 1 is not UTF-8"):
        load(
            CsvSource(path=path),
            duckdb.connect(),
            on_error="quarantine",
            quarantine_path=tmp_path / "q.jsonl",
        )


def test_a_marker_cannot_be_forged(tmp_path: Path) -> None:
    """A record that reads like a marker is an ordinary (malformed) record: markers carry a
    random nonce of each scan."""
    path = _write(tmp_path, "jsonl", [_jsonl(1), b"__dpcr_set_aside_00:E:eHg=", _bad("jsonl", 3)])
    report, _rows, lines = _load(path, "jsonl")
    assert dict(report.quarantined) == {"bad_json": 1, "bad_encoding": 1}
    assert lines[0]["record"] == 2 and lines[0]["reason"] == "bad_json"


@pytest.mark.parametrize("limit", [LIMIT, 1 << 21])
def test_scans_keep_every_other_byte_and_record_boundary(tmp_path: Path, limit: int) -> None:
    """The copies differ from the file only where a record is set aside: CR and LF bytes,
    blank lines and a last line without a line end are copied as they are."""
    path = tmp_path / "x.jsonl"
    data = b"a\r\n\r\nb\xe9\rc" + b"d" * (limit + 5) + b"\n\ne"
    path.write_bytes(data)
    aside = scan_lines(path, limit)
    assert aside.path is not None and aside.count == 2
    copy = aside.path.read_bytes()
    aside.path.unlink()
    mark = aside.mark.encode()
    assert copy.startswith(b"a\r\n\r\n" + mark + b":E:" + base64.b64encode(b"b\xe9") + b"\r")
    assert copy.endswith(b"\n\ne") and copy.count(mark) == 2
    aside = scan_lines(tmp_path / "x.jsonl", len(data))
    assert aside.path is not None and aside.count == 1  # (the Latin-1 byte)
    aside.path.unlink()
    path.write_bytes(b"a\nbcd\n")
    clean = scan_lines(path, limit)
    assert (clean.path, clean.count, clean.longest) == (None, 0, 3)  # (no copy is made)
    csv_path = tmp_path / "x.csv"
    csv_path.write_bytes(b"a,b\n1,2\n")
    clean = scan_csv(csv_path, delimiter=",", fields=2, limit=limit)
    assert (clean.path, clean.count, clean.longest, clean.rows) == (None, 0, 3, 1)


def test_max_record_bytes_is_checked(tmp_path: Path) -> None:
    for bad in (0, 10, True, "16MiB", 1 << 40):
        with pytest.raises(ConfigError, match="max_record_bytes"):
            JsonlSource(path=tmp_path / "x", max_record_bytes=bad)  # type: ignore[arg-type]
