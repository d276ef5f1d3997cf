"""Nothing one record holds stops or delays a release: a record that is not UTF-8, one longer
than the source's limit, or a CSV row that does not match the header -- in the middle of a
log, at its end, or appended between runs -- is quarantined and counted, every run goes on,
and the released values are those of the same changelog without that record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import dpcr
import dpcr.changelog._set_aside as set_aside
import dpcr.release._engine as data_step
from dpcr.changelog import CsvSource, DebeziumSource, JsonlSource, Wal2jsonSource
from dpcr.noise import simulation_randomness
from dpcr.release._outputs import scratch_dir
from dpcr.timeutil import parse_timestamp
from e2e.helpers import mutations

Row = dict[str, Any]
#: Three runs: the records dated before each cut, released up to it.
CUTS = ("2025-01-05T00:00:00Z", "2025-01-09T00:00:00Z", "2025-01-16T00:00:00Z")
LIMIT = 2048


def _row(values: Row | None) -> list[Row] | None:
    if values is None:
        return None
    return [{"name": k, "type": "text", "value": v} for k, v in values.items()]


def _line(fmt: str, m: Row) -> bytes:
    """Mutation ``m`` as a record of format ``fmt``."""
    if fmt == "jsonl":
        return json.dumps(m).encode()
    if fmt == "debezium":
        ms = parse_timestamp(m["ts"]) // 1000
        op = {"insert": "c", "update": "u", "delete": "d"}[m["op"]]
        payload = {
            "op": op,
            "before": m["before"],
            "after": m["after"],
            "source": {"ts_ms": ms, "lsn": m["seq"]},
        }
        return json.dumps({"payload": payload}).encode()
    if fmt == "wal2json":
        action = {"insert": "I", "update": "U", "delete": "D"}[m["op"]]
        msg = {
            "action": action,
            "lsn": f"0/{m['seq']:X}",
            "timestamp": m["ts"],
            "schema": "public",
            "table": "tickets",
        }
        if m["after"] is not None:
            msg["columns"] = _row(m["after"])
        if m["before"] is not None:
            msg["identity"] = _row(m["before"])
        return json.dumps(msg).encode()

    def text(row: Row | None) -> str:
        return "" if row is None else '"' + json.dumps(row).replace('"', '""') + '"'

    fields = [m["entry"], m["ts"], str(m["seq"]), m["op"], text(m["before"]), text(m["after"])]
    return ",".join(fields).encode()


def _source(fmt: str, path: Path, limit: int | None) -> Any:
    kw: Row = {} if limit is None else {"max_record_bytes": limit}
    if fmt == "jsonl":
        return JsonlSource(path=path, **kw)
    if fmt == "csv":
        return CsvSource(path=path, **kw)
    if fmt == "debezium":
        return DebeziumSource(path=path, key="ticket_id", **kw)
    return Wal2jsonSource(path=path, key="ticket_id", **kw)


def _bad(fmt: str, kind: str, ts: str, n: int) -> bytes:
    """A record of a new entry, dated ``ts``, that is not UTF-8 / too long / a bad CSV row."""
    zone = "x" * (LIMIT + 10) if kind == "too_long" else "MARK"
    m = {
        "entry": f"bad{n}",
        "ts": ts,
        "seq": 10_000 + n,
        "op": "insert",
        "before": None,
        "after": {
            "ticket_id": f"bad{n}",
            "rider_id": "r1",
            "kind": "multi",
            "zone": zone,
            "fare": 5.0,
            "rides": 0,
        },
    }
    line = _line(fmt, m).replace(b"MARK", b"caf\xe9" if kind == "bad_encoding" else b"A")
    return line + b",extra" if kind == "bad_csv" else line


def _release(
    tmp: Path, fmt: str, on_error: str = "quarantine", limit: int | None = None
) -> dpcr.ContinualRelease:
    return dpcr.ContinualRelease(
        source=_source(fmt, tmp / f"log.{fmt}", limit),
        constraint=dpcr.AtMostK(k=3),
        plan=dpcr.DisjointRelease(start="2025-01-01", period="1d"),
        queries=[
            dpcr.Count(name="active"),
            dpcr.Sum(name="fares", column="fare", lower=0, upper=100),
        ],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
        on_error=on_error,  # type: ignore[arg-type]
    )


def _runs(
    tmp: Path, fmt: str, parts: list[list[bytes]], *, end: bytes = b"\n", limit: int | None = None
) -> list[Any]:
    """Append each part (the last one ending with ``end``) and run up to its cut."""
    tmp.mkdir()
    path = tmp / f"log.{fmt}"
    path.write_bytes(b"entry,ts,seq,op,before,after\n" if fmt == "csv" else b"")
    release, out = _release(tmp, fmt, limit=limit), []
    for i, (part, cut) in enumerate(zip(parts, CUTS, strict=True)):
        last = i == len(parts) - 1
        with path.open("ab") as f:
            f.write(b"\n".join(part) + (end if last else b"\n"))
        result = release.run(until=cut, rng=simulation_randomness(10 + i))
        diag = dict(result.diagnostics["changelog"])
        diag.pop("quarantine_file", None)  # (the path, in the run's own folder)
        diag["non_numeric"] = result.diagnostics["bounding"]["non_numeric_values"]
        out.append((result.rows, diag))
    return out


def _parts(fmt: str) -> list[list[bytes]]:
    log = mutations(n_entries=30, days=12)
    cuts = [parse_timestamp(c) for c in CUTS]
    parts: list[list[bytes]] = [[], [], []]
    for m in log:
        parts[next(i for i, c in enumerate(cuts) if parse_timestamp(m["ts"]) < c)].append(
            _line(fmt, m)
        )
    return parts


KINDS = [
    (fmt, kind)
    for fmt in ("jsonl", "debezium", "wal2json", "csv")
    for kind in ("bad_encoding", "too_long")
] + [("csv", "bad_csv")]


@pytest.mark.parametrize(("fmt", "kind"), KINDS)
@pytest.mark.parametrize("where", ["middle", "end", "appended"])
def test_a_bad_record_is_quarantined_and_the_release_is_that_of_the_log_without_it(
    tmp_path: Path, fmt: str, kind: str, where: str
) -> None:
    parts = _parts(fmt)
    with_bad = [list(p) for p in parts]
    if where == "middle":  # read by the first run, between two records
        with_bad[0].insert(len(parts[0]) // 2, _bad(fmt, kind, "2025-01-02T12:00:00Z", 1))
    elif where == "end":  # the last record of the log, without a line end after it
        with_bad[2].append(_bad(fmt, kind, "2025-01-12T12:00:00Z", 1))
    else:  # appended after the first run, with good records after it, read by the second
        with_bad[1].insert(0, _bad(fmt, kind, "2025-01-06T12:00:00Z", 1))
        with_bad[1].append(_bad(fmt, kind, "2025-01-07T12:00:00Z", 2))
    end = b"" if where == "end" else b"\n"
    limit = LIMIT if kind == "too_long" else None
    bad = _runs(tmp_path / "bad", fmt, with_bad, end=end, limit=limit)
    good = _runs(tmp_path / "good", fmt, parts, end=end, limit=limit)
    n_bad = 2 if where == "appended" else 1
    for i, ((rows_b, diag_b), (rows_g, diag_g)) in enumerate(zip(bad, good, strict=True)):
        assert rows_b == rows_g, f"run {i}: released rows differ"
        assert diag_b["valid"] == diag_g["valid"], f"run {i}"
    assert bad[-1][1]["quarantined"] == {kind: n_bad}
    assert bad[-1][1]["records"] == good[-1][1]["records"] + n_bad
    quarantine = tmp_path / "bad" / "out" / "operator" / "quarantine.jsonl"
    lines = [json.loads(x) for x in quarantine.read_text().splitlines()]
    assert [x["reason"] for x in lines] == [kind] * n_bad


@pytest.mark.parametrize("fmt", ["jsonl", "wal2json"])
def test_the_incremental_runs_equal_full_recomputations_around_bad_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """Each run reads only what is new (a bad record among it) or the whole file: same rows,
    same diagnostics, same quarantine file; no later run reads the bad record as new."""
    parts = _parts(fmt)
    parts[1][1:1] = [
        _bad(fmt, "bad_encoding", "2025-01-06T12:00:00Z", 1),
        _bad(fmt, "too_long", "2025-01-06T13:00:00Z", 2),
    ]
    parts[2].append(_bad(fmt, "bad_encoding", "2025-01-10T12:00:00Z", 3))
    inc = _runs(tmp_path / "inc", fmt, parts, limit=LIMIT)
    q_inc = (tmp_path / "inc" / "out" / "operator" / "quarantine.jsonl").read_bytes()
    with monkeypatch.context() as m:
        m.setattr(data_step, "eligible", lambda settings: False)
        full = _runs(tmp_path / "full", fmt, parts, limit=LIMIT)
    q_full = (tmp_path / "full" / "out" / "operator" / "quarantine.jsonl").read_bytes()
    assert inc == full
    assert q_inc == q_full and q_inc.count(b"\n") == 3
    assert inc[-1][1]["quarantined"] == {"too_long": 1, "bad_encoding": 2}


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_raise_stops_every_run_at_the_record_with_one_line(tmp_path: Path, fmt: str) -> None:
    tmp_path.joinpath(f"log.{fmt}").write_bytes(
        (b"entry,ts,seq,op,before,after\n" if fmt == "csv" else b"")
        + b"\n".join([*_parts(fmt)[0][:3], _bad(fmt, "bad_encoding", "2025-01-02T00:00:00Z", 1)])
        + b"\n"
    )
    release = _release(tmp_path, fmt, on_error="raise")
    with pytest.raises(dpcr.DpcrError) as info:
        release.run(until=CUTS[0], rng=simulation_randomness(1))
    message = str(info.value)
    assert "\n" not in message and "record 4" in message and "not UTF-8" in message


@pytest.mark.parametrize("name", ['ri"der', "ri\\der"])
@pytest.mark.parametrize("malformed", [False, True])
def test_a_unit_column_name_with_a_quote_is_refused_with_one_line_on_every_path(
    tmp_path: Path, name: str, malformed: bool
) -> None:
    """A clean file is read by DuckDB's JSON reader, one with a malformed line line by line:
    both refuse the name the same way (it once reached the SQL of the second), and so does the
    release's configuration (before any data is read)."""
    import duckdb

    from dpcr.changelog import load

    row = {"ticket_id": "t1", name: "r1", "kind": "multi", "zone": "A", "fare": 1.0}
    line = json.dumps({"entry": "t1", "ts": "2025-01-01T10:00:00Z", "op": "insert", "after": row})
    path = tmp_path / "log.jsonl"
    path.write_text(line + "\n" + ("not json\n" if malformed else ""))
    messages = []
    with pytest.raises(dpcr.DpcrError) as info:
        load(JsonlSource(path=path), duckdb.connect(), unit_column=name, on_error="quarantine",
             quarantine_path=tmp_path / "q.jsonl")  # fmt: skip
    messages.append(str(info.value))
    with pytest.raises(dpcr.DpcrError) as info:
        dpcr.ContinualRelease(
            source=JsonlSource(path=path),
            constraint=dpcr.AtMostK(k=3),
            plan=dpcr.DisjointRelease(start="2025-01-01", period="1d"),
            queries=[dpcr.Count(name="active")],
            budget=dpcr.Budget(epsilon=1.0),
            output_dir=tmp_path / "out",
            unit=name,
            on_error="quarantine",
        )
    messages.append(str(info.value))
    for message in messages:
        assert "\n" not in message and "[privacy] unit" in message
        assert "rename the column" in message


def _new_entry(fmt: str, ts: str, n: int, fare: object) -> bytes:
    """An insert of a new entry, dated ``ts``, whose fare is ``fare``."""
    after = {"ticket_id": f"new{n}", "rider_id": "r1", "kind": "multi", "zone": "A",
             "fare": fare, "rides": 0}  # fmt: skip
    m = {"entry": f"new{n}", "ts": ts, "seq": 20_000 + n, "op": "insert", "before": None,
         "after": after}  # fmt: skip
    return _line(fmt, m)


@pytest.mark.parametrize("where", ["middle", "appended"])
def test_base64_text_in_a_summed_debezium_column_never_stops_a_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """``"fare": "none"`` is base64 (what a decimal sent without its scale looks like) in one
    record: it counts as non-numeric, as any text does (the release equals that of the log with
    ``"fare": null``), every run goes on, the run that reads it warns the operator, and the
    incremental runs equal full recomputations."""

    def log(fare: object) -> list[list[bytes]]:
        parts = _parts("debezium")
        if where == "middle":  # read by the first run
            parts[0].insert(len(parts[0]) // 2, _new_entry("debezium", "2025-01-02T12:00:00Z",
                                                           1, fare))  # fmt: skip
        else:  # appended after the first run, with good records around it
            parts[1].insert(1, _new_entry("debezium", "2025-01-06T12:00:00Z", 1, fare))
            parts[1].append(_new_entry("debezium", "2025-01-07T12:00:00Z", 2, fare))
        return parts

    bad = _runs(tmp_path / "bad", "debezium", log("none"))
    null = _runs(tmp_path / "null", "debezium", log(None))
    with monkeypatch.context() as m:
        m.setattr(data_step, "eligible", lambda settings: False)
        full = _runs(tmp_path / "full", "debezium", log("none"))
    n, read = (1, 0) if where == "middle" else (2, 1)  # the records, the run that reads them
    warnings = [b[1].pop("warnings") for b in bad]
    for i, (b, g, f) in enumerate(zip(bad, null, full, strict=True)):
        assert b[0] == g[0] == f[0], f"run {i}: released rows differ"
        assert g[1].pop("warnings") == []
        # (a full recomputation reads the records again every run)
        assert bool(f[1].pop("warnings")) == (i >= read), f"run {i}"
        assert b[1] == g[1] == f[1], f"run {i}"
    assert [bool(w) for w in warnings] == [i == read for i in range(len(CUTS))]
    (warning,) = warnings[read]
    assert f"'fare' holds base64 text where a number is read in {n} row(s)" in warning
    assert "decimal_scales" in warning
    assert bad[-1][1]["non_numeric"]["fares"] >= n


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_the_copy_with_records_set_aside_is_made_in_the_operators_scratch_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """The copy holds raw records: it is made owner-only in ``operator/scratch`` (never the
    system's temporary folder), on a first run and on one that reads only what was appended,
    and deleted once read."""
    made: list[Path] = []
    mkstemp = set_aside.tempfile.mkstemp

    def spy(*args: Any, **kw: Any) -> tuple[int, str]:
        fd, name = mkstemp(*args, **kw)
        if Path(name).name.startswith("dpcr-set-aside-"):
            made.append(Path(name))
        return fd, name

    monkeypatch.setattr(set_aside.tempfile, "mkstemp", spy)
    parts = _parts(fmt)
    parts[0].insert(2, _bad(fmt, "bad_encoding", "2025-01-02T12:00:00Z", 1))
    parts[1].insert(1, _bad(fmt, "bad_encoding", "2025-01-06T12:00:00Z", 2))
    runs = _runs(tmp_path / "r", fmt, parts)
    assert runs[-1][1]["quarantined"] == {"bad_encoding": 2}
    scratch = scratch_dir(_release(tmp_path / "r", fmt)).resolve()
    assert len(made) == (2 if fmt == "jsonl" else 3)  # (a CSV file is read whole every run)
    assert {p.resolve().parent for p in made} == {scratch}
    assert not any(p.exists() for p in made)
    assert scratch.stat().st_mode & 0o777 == 0o700


TOKENS = {"jsonl": b"NaN", "debezium": b"-Infinity", "wal2json": b"inf", "csv": b"nan"}


@pytest.mark.parametrize("fmt", sorted(TOKENS))
@pytest.mark.parametrize("where", ["middle", "appended"])
def test_a_bare_nan_token_in_a_summed_column_is_quarantined_as_not_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, where: str
) -> None:
    """``"fare": NaN`` (and ``-Infinity``, ``inf``...) is not JSON, though DuckDB's parser reads
    it as a number: the record is quarantined (``bad_json``, field after), every run goes on,
    the release is that of the log without it, and incremental runs equal full ones."""

    def record(ts: str, n: int) -> bytes:
        line = _new_entry(fmt, ts, n, 12345.5)
        assert line.count(b"12345.5") == 1
        return line.replace(b"12345.5", TOKENS[fmt])

    parts = _parts(fmt)
    with_bad = [list(p) for p in parts]
    if where == "middle":
        with_bad[0].insert(len(parts[0]) // 2, record("2025-01-02T12:00:00Z", 1))
    else:
        with_bad[1].insert(0, record("2025-01-06T12:00:00Z", 1))
        with_bad[1].append(record("2025-01-07T12:00:00Z", 2))
    n = 1 if where == "middle" else 2
    bad = _runs(tmp_path / "bad", fmt, with_bad)
    good = _runs(tmp_path / "good", fmt, parts)
    with monkeypatch.context() as m:
        m.setattr(data_step, "eligible", lambda settings: False)
        full = _runs(tmp_path / "full", fmt, with_bad)
    for i, (b, g, f) in enumerate(zip(bad, good, full, strict=True)):
        assert b[0] == g[0] == f[0], f"run {i}: released rows differ"
        assert b[1]["valid"] == g[1]["valid"] and b[1] == f[1], f"run {i}"
    assert bad[-1][1]["quarantined"] == {"bad_json": n}
    quarantine = tmp_path / "bad" / "out" / "operator" / "quarantine.jsonl"
    lines = [json.loads(x) for x in quarantine.read_text().splitlines()]
    assert [(x["reason"], x["field"]) for x in lines] == [
        ("bad_json", "columns" if fmt == "wal2json" else "after")
    ] * n
    assert all("bare NaN or infinity where a number is read" in x["message"] for x in lines)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda line: line.replace(b",insert,", b",insert\r,"),  # a CR outside quotes
        lambda line: line + b"\r",  # a CR LF line end in a file of LF line ends
        lambda line: line.replace(b",insert,", b',""insert,'),  # text after a quoted field
    ],
    ids=["cr", "crlf", "quoted then text"],
)
def test_a_csv_row_that_duckdb_cannot_split_is_quarantined(tmp_path: Path, corrupt: Any) -> None:
    """Rows DuckDB's CSV reader refuses for their line ends or quotes (it takes the header's
    line end for the file's) are set aside as bad_csv like any malformed row: they once made
    the copy unreadable too, and every run stopped."""
    parts = _parts("csv")
    with_bad = [list(p) for p in parts]
    with_bad[0].insert(2, corrupt(_new_entry("csv", "2025-01-02T12:00:00Z", 1, 1.0)))
    with_bad[1].insert(1, corrupt(_new_entry("csv", "2025-01-06T12:00:00Z", 2, 1.0)))
    bad = _runs(tmp_path / "bad", "csv", with_bad)
    good = _runs(tmp_path / "good", "csv", parts)
    for i, (b, g) in enumerate(zip(bad, good, strict=True)):
        assert b[0] == g[0], f"run {i}: released rows differ"
        assert b[1]["valid"] == g[1]["valid"], f"run {i}"
    assert bad[-1][1]["quarantined"] == {"bad_csv": 2}
