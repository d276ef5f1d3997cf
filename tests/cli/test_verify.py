"""``dpcr verify``: every consumed source byte, the store and the public outputs, in full; exit
status 0 intact, 1 something differs, 2 nothing to check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpcr.changelog.position import BLOCK
from dpcr.cli import main

CONFIG = """
[source]
format = "jsonl"
path = "log.jsonl"
[privacy]
epsilon = 1.0
[constraint]
at_most_k = 4
[release]
plan = "disjoint"
start = "2025-01-01T00:00:00Z"
period = "7d"
[[query]]
name = "active"
kind = "count"
[output]
dir = "out"
"""


def _line(i: int, day: int) -> str:
    return json.dumps({
        "entry": f"t{i}", "ts": f"2025-01-{day:02d}T08:00:00Z", "op": "insert",
        "after": {"zone": "A", "pad": "x" * 150},
    }) + "\n"  # fmt: skip


@pytest.fixture
def released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A release over a log of about 3.5 MiB (3 full blocks), run twice."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dpcr.toml").write_text(CONFIG)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(_line(i, 2 + i % 5) for i in range(18_000)))
    assert log.stat().st_size > 3 * BLOCK
    assert main(["run", "dpcr.toml", "--until", "2025-01-08", "--quiet", "--no-report"]) == 0
    with log.open("a") as f:
        f.write("".join(_line(20_000 + i, 9) for i in range(10)))
    assert main(["run", "dpcr.toml", "--until", "2025-01-15", "--quiet", "--no-report"]) == 0
    return tmp_path


def test_an_intact_release_verifies(released: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["verify", "dpcr.toml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[:2] for line in out] == [
        ["store", " intact"],
        ["source", " intact"],
        ["outputs", " intact"],
    ]
    assert main(["verify", "dpcr.toml", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["intact"] and [c["what"] for c in report["checks"]] == [
        "store",
        "source",
        "outputs",
    ]


def test_a_rewritten_first_block_differs(
    released: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = released / "log.jsonl"
    data = log.read_bytes()
    log.write_bytes(data.replace(b'"zone": "A"', b'"zone": "B"', 1))  # the first record
    capsys.readouterr()
    assert main(["verify", "dpcr.toml"]) == 1
    out = capsys.readouterr().out
    assert "source: DIFFERS" in out and f"in bytes 0 .. {BLOCK}" in out


def test_lost_block_digests_are_rebuilt_by_a_full_check(
    released: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (released / "out" / "store.sqlite.state" / "source-blocks").unlink()
    capsys.readouterr()
    assert main(["verify", "dpcr.toml"]) == 0
    assert "missing or stale" in capsys.readouterr().out
    assert main(["run", "dpcr.toml", "--until", "2025-01-22", "--quiet", "--no-report"]) == 0
    assert main(["verify", "dpcr.toml"]) == 0
    assert "missing or stale" not in capsys.readouterr().out


def test_edited_public_outputs_differ(released: Path, capsys: pytest.CaptureFixture[str]) -> None:
    public = released / "out" / "public" / "releases.json"
    rows = json.loads(public.read_text())
    rows[0]["change"] += 1
    public.write_text(json.dumps(rows, indent=1))
    capsys.readouterr()
    assert main(["verify", "dpcr.toml"]) == 1
    assert "outputs: DIFFERS" in capsys.readouterr().out


def test_a_public_file_a_power_cut_emptied_differs_and_the_next_run_repairs_it(
    released: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    public = released / "out" / "public" / "summary.json"
    written = public.read_bytes()
    public.write_bytes(b"")
    capsys.readouterr()
    assert main(["verify", "dpcr.toml"]) == 1
    out = capsys.readouterr().out
    assert "outputs: DIFFERS" in out and "summary.json: empty or cut short" in out
    assert main(["run", "dpcr.toml", "--until", "2025-01-15", "--quiet", "--no-report"]) == 0
    assert public.read_bytes() == written
    assert main(["verify", "dpcr.toml"]) == 0


def test_nothing_to_verify_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dpcr.toml").write_text(CONFIG)
    (tmp_path / "log.jsonl").write_text(_line(1, 2))
    assert main(["verify", "dpcr.toml"]) == 2
    assert "nothing was released to verify" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_unreadable_parquet_source_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A consumed Parquet source cut short (no footer) is reported as changed, not a traceback."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.chdir(tmp_path)
    (tmp_path / "dpcr.toml").write_text(CONFIG.replace('"jsonl"', '"parquet"').replace(
        "log.jsonl", "log.parquet"))  # fmt: skip
    rows = [json.loads(_line(i, 2 + i % 5)) for i in range(20)]
    table = pa.table({
        "entry": [r["entry"] for r in rows], "ts": [r["ts"] for r in rows],
        "op": [r["op"] for r in rows], "before": [None] * 20,
        "after": [json.dumps(r["after"]) for r in rows],
    })  # fmt: skip
    pq.write_table(table, tmp_path / "log.parquet")
    assert main(["run", "dpcr.toml", "--until", "2025-01-08", "--quiet", "--no-report"]) == 0
    data = (tmp_path / "log.parquet").read_bytes()
    (tmp_path / "log.parquet").write_bytes(data[: len(data) // 2])
    capsys.readouterr()
    assert main(["verify", "dpcr.toml"]) == 1
    out = capsys.readouterr().out
    assert "source: DIFFERS" in out and "not readable as Parquet" in out
