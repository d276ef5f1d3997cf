"""Public files a run of the store wrote are accounted for by their digests, without being
parsed; any other file is parsed and checked as before (dpcr.release._layout)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

import dpcr.release._layout as layout
from dpcr.cli import main
from dpcr.errors import RewrittenError
from dpcr.release._outputs import json_indented, json_records

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
period = "1d"
[[query]]
name = "active"
kind = "count"
[output]
dir = "out"
"""


def _line(i: int, day: int) -> str:
    return (
        json.dumps(
            {"entry": f"t{i}", "ts": f"2025-01-{day:02d}T08:00:00Z", "op": "insert", "after": {}}
        )
        + "\n"
    )


def _run(until: str) -> int:
    return main(["run", "dpcr.toml", "--until", until, "--quiet", "--no-report"])


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dpcr.toml").write_text(CONFIG)
    (tmp_path / "log.jsonl").write_text("".join(_line(i, 1 + i % 3) for i in range(30)))
    assert _run("2025-01-03") == 0
    return tmp_path


def _parsed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = layout.verify_published

    def counting(*args: object, **kwargs: object) -> None:
        calls.append(1)
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(layout, "verify_published", counting)
    return calls


def test_files_the_store_wrote_are_not_parsed_again(
    release: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = json.loads((release / "out" / "store.sqlite.state" / "published.json").read_text())
    assert set(kept["files"]) == {
        "public/release-head.json", "public/summary.json", "public/releases.csv",
        "public/releases.json",
    }  # fmt: skip
    calls = _parsed(monkeypatch)
    with (release / "log.jsonl").open("a") as f:
        f.write(_line(100, 3))
    assert _run("2025-01-04") == 0
    assert _run("2025-01-05") == 0
    assert calls == []


def test_an_edited_file_is_parsed_and_refused(
    release: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _parsed(monkeypatch)
    path = release / "out" / "public" / "releases.csv"
    path.write_text(path.read_text().replace(",1,", ",9,", 1))
    assert _run("2025-01-04") == 2
    assert calls == [1]


@pytest.mark.parametrize("record", ["lost", "foreign head", "garbage"])
def test_a_lost_or_stale_record_means_parsing(
    release: Path, monkeypatch: pytest.MonkeyPatch, record: str
) -> None:
    path = release / "out" / "store.sqlite.state" / "published.json"
    if record == "lost":
        path.unlink()
    elif record == "foreign head":
        kept = json.loads(path.read_text())
        path.write_text(json.dumps({**kept, "head": "0" * 64}))
    else:
        path.write_text("{")
    calls = _parsed(monkeypatch)
    assert _run("2025-01-04") == 0
    assert calls == [1]


def test_verification_failures_are_rewritten_errors(release: Path) -> None:
    (release / "out" / "store.sqlite.state" / "published.json").unlink()
    path = release / "out" / "public" / "releases.json"
    rows = json.loads(path.read_text())
    rows[0]["change"] += 1
    path.write_text(json.dumps(rows))
    from dpcr.config import load_config
    from dpcr.release._layout import check_published
    from dpcr.store import Store

    settings = load_config("dpcr.toml")
    with Store(settings.store_path, fingerprint=settings.fingerprint()) as store, \
            pytest.raises(RewrittenError, match=r"releases\.json"):  # fmt: skip
        check_published(settings, store, simulation=False)


def test_json_records_is_json_dumps_with_indent_1() -> None:
    rng = random.Random(5)
    import numpy as np

    values = [0, -3, 1.5, math.nan, math.inf, -math.inf, None, True, False, "", 'é"\\\n\u2028',
              1e-300, 2**70, -0.0, np.float64(0.1), np.float64("nan"),
              np.float64("-inf")]  # fmt: skip
    for _ in range(50):
        records = [
            {f"k{j}": rng.choice(values) for j in range(rng.randrange(4))}
            for _ in range(rng.randrange(5))
        ]
        assert json_records(records) == json.dumps(records, indent=1)


def test_json_indented_is_json_dumps_with_indent() -> None:
    import enum
    from collections import OrderedDict

    import numpy as np

    class Level(enum.IntEnum):
        HIGH = 3

    rng = random.Random(11)
    leaves = [0, -3, 1.5, math.nan, math.inf, -math.inf, None, True, False, "", 'é"\\\n\u2028',
              1e-300, 2**70, -0.0, np.float64(0.1), np.int64(7), Path("/a/b"), Level.HIGH,
              (), [], {}, OrderedDict(b=1, a=2)]  # fmt: skip

    def value(depth: int) -> Any:
        roll = rng.random()
        if depth > 3 or roll < 0.4:
            return rng.choice(leaves)
        if roll < 0.7:
            return {rng.choice(["a", "b", "zz", "é", f"k{depth}"]): value(depth + 1)
                    for _ in range(rng.randrange(4))}  # fmt: skip
        items = [value(depth + 1) for _ in range(rng.randrange(4))]
        return items if roll < 0.85 else tuple(items)

    for _ in range(400):
        v = value(0)
        for indent, sort_keys in ((2, False), (1, True), (0, False)):
            try:
                want = json.dumps(v, indent=indent, sort_keys=sort_keys)
            except TypeError:
                with pytest.raises(TypeError):
                    json_indented(v, indent, sort_keys=sort_keys)
            else:
                assert json_indented(v, indent, sort_keys=sort_keys) == want
            assert json_indented(v, indent, sort_keys=sort_keys, default=str) == json.dumps(
                v, indent=indent, sort_keys=sort_keys, default=str)  # fmt: skip
    assert json_indented({1: "a"}, 2) == json.dumps({1: "a"}, indent=2)


def test_a_run_with_nothing_new_reads_the_files_back_and_writes_nothing(
    release: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dpcr.release._outputs as outputs
    from dpcr.config import load_config

    public = release / "out" / "public"
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in public.iterdir()}
    settings = load_config("dpcr.toml", until="2025-01-03")
    quick = settings.run()
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in public.iterdir()} == before
    # the same result as the path that recomputes the rows from the store and rewrites them
    monkeypatch.setattr(outputs, "published_rows", lambda *a, **k: None)
    slow = settings.run()
    assert quick.rows == slow.rows
    assert quick.summary == slow.summary and quick.diagnostics == slow.diagnostics
    assert {p.name: p.read_bytes() for p in public.iterdir()} == {
        name: data for name, (_t, data) in before.items()
    }


def test_a_run_with_nothing_new_imports_no_engine(release: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; from dpcr.cli import main; "
        "argv = ['run', 'dpcr.toml', '--until', '2025-01-03', '--quiet', '--no-report']; "
        "assert main(argv) == 0; "
        "print('duckdb' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=release, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr
