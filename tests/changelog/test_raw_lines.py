"""Lines read on demand (dpcr.changelog._raw_lines): a JSON-lines file whose lines DuckDB's
JSON reader numbers as the file does is not copied line by line; the text of the records that
need it (quarantined, pending) is fetched from the file. The fetch agrees with Python's own
split, the numbering conditions send every other file to the line reader, and a release through
the incremental path gives the same released rows, diagnostics, quarantine file and pending
state with and without the shortcut."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import duckdb
import pytest

import dpcr
import dpcr.changelog._raw_lines as raw_lines
import dpcr.changelog._stage as stage_mod
from dpcr.noise import simulation_randomness
from dpcr.release._outputs import state_path
from dpcr.timeutil import format_timestamp
from engines.helpers import CONSTRAINTS, DAY, HOUR, QUERIES, T0, generate


def _random_text(rng: random.Random) -> bytes:
    pieces = [b"", b"a", b"{}", b"null", b" ", b"\xc3\xa9t\xc3\xa9", b'{"k": "v"}', b"x" * 50]
    lines = [rng.choice(pieces) * rng.randint(0, 3) for _ in range(rng.randint(0, 60))]
    body = b"\n".join(lines)
    return body + (b"\n" if rng.random() < 0.5 else b"")


@pytest.mark.parametrize("seed", range(40))
def test_fetch_lines_agrees_with_a_plain_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               seed: int) -> None:  # fmt: skip
    rng = random.Random(seed)
    monkeypatch.setattr(raw_lines, "_BLOCK", rng.choice([1, 2, 3, 7, 64]))  # lines span blocks
    monkeypatch.setattr(raw_lines, "_COUNT", rng.choice([1, 2, 5, 1 << 24]))
    data = _random_text(rng)
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    expected = data.split(b"\n") if data else []
    if data.endswith(b"\n"):
        expected.pop()  # the last line feed ends the last line
    assert raw_lines.plain_lines(path) == len(expected)
    wanted = sorted(rng.sample(range(1, len(expected) + 3), min(len(expected) + 2, 5)))
    got = raw_lines.fetch_lines(path, wanted)
    assert got == {n: expected[n - 1].decode() for n in wanted if n <= len(expected)}


@pytest.mark.parametrize("text", [b"{}\r\n{}\r\n", b"{}\r{}", b"\xef\xbb\xbf{}\n"])
def test_carriage_returns_and_a_byte_order_mark_are_not_plain(tmp_path: Path,
                                                              text: bytes) -> None:  # fmt: skip
    path = tmp_path / "f.jsonl"
    path.write_bytes(text)
    assert raw_lines.plain_lines(path) is None


def _clean_lines(seed: int) -> list[str]:
    """generate()'s changelog without the lines that are not JSON objects (which send a file
    to the line-by-line reader), plus records that read `null` and `{}`."""
    out = []
    for line in generate(seed, unit_column=False):
        try:
            if isinstance(json.loads(line), dict):
                out.append(line)
        except ValueError:
            pass
    rng = random.Random(seed)
    for extra in ("null", "  null\t", "{}"):
        out.insert(rng.randrange(len(out) + 1), extra)
    return out


def _release(tmp: Path, c: int) -> Any:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=CONSTRAINTS[c],
        plan=dpcr.DisjointRelease(start=format_timestamp(T0), period="1d"),
        queries=list(QUERIES),
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
        on_error="quarantine",
    )


def _runs(tmp: Path, lines: list[str], cuts: list[int], clocks: list[int], c: int,
          rebuild: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:  # fmt: skip
    import dataclasses

    tmp.mkdir()
    release = _release(tmp, c)
    out = []
    for i, (cut, clock) in enumerate(zip(cuts, clocks, strict=True)):
        with (tmp / "log.jsonl").open("a", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines[cuts[i - 1] if i else 0 : cut])
        if rebuild and i:  # every run reads the whole file again (a first run each time)
            state_path(release).unlink()
        r = dataclasses.replace(release, until=format_timestamp(clock))
        result = r.run(rng=simulation_randomness(7 + i))
        with duckdb.connect(str(state_path(release)), read_only=True) as con:
            pending = con.execute("SELECT * FROM pending ORDER BY record, part").fetchall()
        q = release.quarantine_path
        out.append((result.rows, result.diagnostics, q.read_bytes() if q.exists() else b"",
                    pending))  # fmt: skip
    return out


def _strip(diag: Any) -> Any:
    """Diagnostics without the quarantine file's path (the two releases write to two folders)."""
    if isinstance(diag, dict):
        return {k: _strip(v) for k, v in diag.items() if k != "quarantine_file"}
    return diag


def _spy_on_the_shortcut(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, for every staging that tries the shortcut, whether it was taken."""
    taken: list[bool] = []
    real = stage_mod._lazy_records

    def spy(*args: Any) -> Any:
        relation, read = real(*args)
        taken.append(relation is not None)
        return relation, read

    monkeypatch.setattr(stage_mod, "_lazy_records", spy)
    return taken


@pytest.mark.parametrize("rebuild", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_lines_read_on_demand_give_the_same_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, rebuild: bool
) -> None:
    """Every run reads the whole file (``rebuild``), or a later run reads the appended lines
    from a copy, numbered after the consumed ones, and fetches the text of those it keeps as
    pending before the copy is deleted."""
    rng = random.Random(seed)
    lines = _clean_lines(seed)
    cuts = [*sorted(rng.sample(range(1, len(lines)), 2)), len(lines)]
    clocks = [T0 + DAY * d + rng.randrange(0, DAY, HOUR) for d in (2, 4, 7)]
    c = seed % len(CONSTRAINTS)
    taken = _spy_on_the_shortcut(monkeypatch)
    lazy = _runs(tmp_path / "lazy", lines, cuts, clocks, c, rebuild, monkeypatch)
    # every run read its lines on demand (the two later ones their appended lines)
    assert taken and all(taken) and (rebuild or len(taken) >= 2), taken
    monkeypatch.setattr(stage_mod, "_lazy_records", lambda *args: (None, ""))
    table = _runs(tmp_path / "table", lines, cuts, clocks, c, rebuild, monkeypatch)
    for i, (a, b) in enumerate(zip(lazy, table, strict=True)):
        assert a[0] == b[0], f"run {i}: released rows differ"
        assert _strip(a[1]) == _strip(b[1]), f"run {i}: diagnostics differ"
        assert a[2] == b[2], f"run {i}: quarantine files differ"
        assert a[3] == b[3], f"run {i}: pending rows differ"
    assert any(p[2] for p in lazy), "no run quarantined a record"
    assert any(p[3] for p in lazy), "no run kept a pending row"


def test_a_blank_line_sends_the_file_to_the_line_reader(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"entry": "a", "ts": 1, "op": "insert", "after": {}}\n\n', encoding="utf-8")
    con = duckdb.connect()
    staged = stage_mod.stage(dpcr.sources.Jsonl(path=path), con, "p", None, [], lazy_raw=True)
    assert staged.lazy is None
    assert con.execute(f"SELECT record FROM {staged.table}").fetchall() == [(1,)]


@pytest.mark.parametrize(
    ("text", "records", "reads"),
    [
        # the JSON reader's rows are kept, and numbered by the lines
        ('{"entry": "a", "ts": 1, "op": "insert", "after": {}}\n\n'
         '{"entry": "b", "ts": 2, "op": "insert", "after": {}}\n', [(1,), (3,)], [False, True]),
        # a carriage return: the JSON reader runs after the lines are read
        ('{"entry": "a", "ts": 1, "op": "insert", "after": {}}\r\n'
         '{"entry": "b", "ts": 2, "op": "insert", "after": {}}\r\n', [(1,), (2,)], [False]),
        # the JSON reader refuses the file: the lines are read one by one
        ('{"entry": "a", "ts": 1, "op": "insert", "after": {}}\nnot json\n', [(1,), (2,)],
         [False]),
    ],
)
def test_files_the_shortcut_does_not_fit_are_read_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, records: list[Any],
    reads: list[bool],
) -> None:  # fmt: skip
    path = tmp_path / "log.jsonl"
    path.write_bytes(text.encode())
    calls = []
    real = stage_mod.fast_records
    monkeypatch.setattr(stage_mod, "fast_records",
                        lambda *a, **k: calls.append(k.get("made", False)) or real(*a, **k))
    con = duckdb.connect()
    staged = stage_mod.stage(dpcr.sources.Jsonl(path=path), con, "p", None, [], lazy_raw=True)
    assert staged.lazy is None
    got = con.execute(f"SELECT record FROM {staged.table} ORDER BY record").fetchall()
    assert got == records
    # the JSON reader reads the file once (`made`: the table it made is reused)
    assert calls == reads


@pytest.mark.parametrize("seed", range(3))
def test_a_full_load_reads_lines_on_demand_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """`on_exhausted = "retire"` reads the whole file every run (changelog.load): the same
    release and quarantine file with and without the shortcut."""
    import dataclasses

    lines = _clean_lines(seed)

    def release(tmp: Path) -> Any:
        tmp.mkdir()
        (tmp / "log.jsonl").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
        r = dataclasses.replace(_release(tmp, seed % len(CONSTRAINTS)), on_exhausted="retire",
                                until=format_timestamp(T0 + 5 * DAY))  # fmt: skip
        result = r.run(rng=simulation_randomness(3))
        return result.rows, _strip(result.diagnostics), r.quarantine_path.read_bytes()

    taken = _spy_on_the_shortcut(monkeypatch)
    lazy = release(tmp_path / "lazy")
    assert taken == [True]
    monkeypatch.setattr(stage_mod, "_lazy_records", lambda *args: (None, ""))
    assert lazy == release(tmp_path / "table")
    assert lazy[2], "nothing was quarantined"


def test_the_first_bad_record_is_named_with_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """on_error = "raise": the refusal shows a malformed record's text, read from the file."""
    import dataclasses

    lines = ["  null", *_clean_lines(0)]  # record 1 is the first bad one
    messages = []
    for name, lazy in (("lazy", None), ("table", lambda *args: (None, ""))):
        tmp = tmp_path / name
        tmp.mkdir()
        (tmp / "log.jsonl").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
        if lazy is not None:
            monkeypatch.setattr(stage_mod, "_lazy_records", lazy)
        r = dataclasses.replace(_release(tmp, 0), on_error="raise", on_exhausted="retire")
        with pytest.raises(dpcr.DpcrError) as info:
            r.run(until=format_timestamp(T0 + 5 * DAY), rng=simulation_randomness(3))
        messages.append(str(info.value).replace(str(tmp), ""))
    assert messages[0] == messages[1]
    assert "record 1" in messages[0] and "null" in messages[0], messages[0]
