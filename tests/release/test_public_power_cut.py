"""The public files are replaced without an fsync: the store (committed durably first) holds
what each shows. What a power cut can leave of one (the file missing, empty, cut short at a
block boundary, blocks that read as zeros) is written again by the next run or the next step of
a session, byte for byte as the step wrote it; a file cut anywhere else, or whose bytes are not
the store's, is refused as before (dpcr.release._layout.check_published)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import dpcr.release._outputs as outputs
from dpcr.errors import RewrittenError
from dpcr.noise import simulation_randomness
from dpcr.release._layout import BLOCK, power_cut_remnant
from dpcr.timeutil import format_timestamp
from engines.helpers import DAY, T0, generate
from release.helpers import log_release

FILES = ("releases.csv", "releases.json", "summary.json", "release-head.json")


def _release(tmp: Path) -> Any:
    (tmp / "log.jsonl").write_text("".join(x + "\n" for x in generate(1, unit_column=False)))
    return log_release(tmp, on_error="quarantine")


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "cut at a block":  # (the files shorter than a block are left empty)
        path.write_bytes(data[: (len(data) - 1) // BLOCK * BLOCK])
    elif how == "zero blocks":  # (its size written, its first block's data not)
        path.write_bytes(bytes(min(BLOCK, len(data))) + data[BLOCK:])
    else:
        raise AssertionError(how)


def _public(tmp: Path, simulation: bool) -> Path:
    return tmp / "out" / ("simulation" if simulation else "public")


def _rng(simulation: bool) -> Any:
    return simulation_randomness(5) if simulation else None


def test_the_public_files_are_not_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = _release(tmp_path)
    writes: list[tuple[str, bool]] = []
    real = outputs.write_atomic

    def write_atomic(path: Path, content: Any, *, mode: int, durable: bool = True) -> None:
        writes.append((Path(path).name, durable))
        real(path, content, mode=mode, durable=durable)

    monkeypatch.setattr(outputs, "write_atomic", write_atomic)
    dataclasses.replace(release, until=format_timestamp(T0 + 4 * DAY)).run()
    assert {p.name for p in _public(tmp_path, False).iterdir()} == set(FILES)
    assert sorted(writes) == sorted((name, False) for name in (*FILES, "diagnostics.json",
                                                               "published.json"))  # fmt: skip


@pytest.mark.parametrize("simulation", [False, True], ids=["release", "simulation"])
@pytest.mark.parametrize("how", ["missing", "empty", "cut at a block", "zero blocks"])
def test_what_a_power_cut_leaves_is_written_again_byte_for_byte(
    tmp_path: Path, how: str, simulation: bool
) -> None:
    release = _release(tmp_path)
    until = format_timestamp(T0 + 6 * DAY)
    public = _public(tmp_path, simulation)
    with release.session() as session:
        session.run(until=until, rng=_rng(simulation))
        written = {p.name: p.read_bytes() for p in public.iterdir()}
        assert len(written["releases.json"]) > 2 * BLOCK  # (a cut at a block keeps some)
        for name in FILES:  # the session's next step
            _damage(public / name, how)
            result = session.run(until=until, rng=_rng(simulation))
            assert result.new_intervals == 0
            assert {p.name: p.read_bytes() for p in public.iterdir()} == written, name
    for name in FILES:  # a new process (a session resumed, or `dpcr run`)
        _damage(public / name, how)
        dataclasses.replace(release, until=until).run(rng=_rng(simulation))
        assert {p.name: p.read_bytes() for p in public.iterdir()} == written, name


@pytest.mark.parametrize("how", ["missing", "empty", "cut at a block", "zero blocks"])
def test_a_step_that_releases_more_after_a_power_cut_writes_every_file(
    tmp_path: Path, how: str
) -> None:
    release = _release(tmp_path)
    public = _public(tmp_path, False)
    with release.session() as session:
        session.run(until=format_timestamp(T0 + 5 * DAY))
        for name in FILES:
            _damage(public / name, how)
        result = session.run(until=format_timestamp(T0 + 6 * DAY))
        assert result.new_intervals == 1
        written = {p.name: p.read_bytes() for p in public.iterdir()}
    # the same bytes as the store gives them (a run with nothing new after all four are lost)
    for name in FILES:
        (public / name).unlink()
    dataclasses.replace(release, until=format_timestamp(T0 + 6 * DAY)).run()
    assert {p.name: p.read_bytes() for p in public.iterdir()} == written


@pytest.mark.parametrize("how", ["cut in a line", "cut at a block, edited", "longer"])
def test_other_damage_is_refused(tmp_path: Path, how: str) -> None:
    release = _release(tmp_path)
    until = format_timestamp(T0 + 6 * DAY)
    dataclasses.replace(release, until=until).run()
    path = _public(tmp_path, False) / "releases.json"
    data = path.read_bytes()
    if how == "cut in a line":
        cut = BLOCK + 100
        assert data[cut - 1 : cut] not in (b"\n", b"")
        path.write_bytes(data[:cut])
    elif how == "cut at a block, edited":  # (a value of the first block changed)
        at = data.index(b'"estimate": ') + len(b'"estimate": ')
        edited = data[:at] + (b"1" if data[at : at + 1] != b"1" else b"2") + data[at + 1 :]
        path.write_bytes(edited[:BLOCK])
    else:
        path.write_bytes(data[:-2] + b"\x00" * BLOCK)
    with pytest.raises(RewrittenError, match="unreadable or truncated"):
        dataclasses.replace(release, until=until).run()


def test_power_cut_remnant() -> None:
    whole = bytes(range(256)) * 40  # 10240 bytes: two whole blocks and a part
    assert power_cut_remnant(whole, whole)
    assert power_cut_remnant(b"", whole)
    assert power_cut_remnant(whole[:BLOCK], whole)
    assert power_cut_remnant(whole[: 2 * BLOCK], whole)
    assert power_cut_remnant(bytes(BLOCK) + whole[BLOCK:], whole)
    assert power_cut_remnant(whole[: 2 * BLOCK] + bytes(len(whole) - 2 * BLOCK), whole)
    assert power_cut_remnant(bytes(len(whole)), whole)
    assert not power_cut_remnant(whole[: BLOCK + 1], whole)  # not at a block
    assert not power_cut_remnant(whole[:-1], whole)
    assert not power_cut_remnant(whole + b"\n", whole)  # longer
    assert not power_cut_remnant(b"\x01" + whole[1:], whole)  # another byte
    assert not power_cut_remnant(bytes(BLOCK - 1) + whole[BLOCK - 1 :], whole)  # a part-block
    assert not power_cut_remnant(bytes(BLOCK), b"x" * 100)  # longer than the file
    small = b'{"a": 1}\n'
    assert power_cut_remnant(b"", small) and power_cut_remnant(bytes(len(small)), small)
    assert not power_cut_remnant(small[:4], small)


def test_alert_files_a_power_cut_emptied_are_written_again(tmp_path: Path) -> None:
    from dpcr.cli import main
    from e2e.helpers import mutations, write_config, write_jsonl

    alert = ('\n[[alerts]]\nname = "busy"\nstatistic = "active"\nwhat = "running"\n'
             "threshold = 12\ncutoff = 3\nepsilon = 0.5\n")  # fmt: skip
    write_jsonl(tmp_path / "log.jsonl", mutations())
    write_config(tmp_path, epsilon=2.0, extra_query=alert, plan="tree")
    run = ["run", str(tmp_path / "dpcr.toml"), "--quiet", "--no-report", "--until", "2025-01-07"]
    assert main(run) == 0
    public = tmp_path / "out" / "public"
    written = {p.name: p.read_bytes() for p in public.iterdir()}
    assert {"alerts.csv", "alerts.json"} <= set(written)
    for name in written:
        (public / name).write_bytes(b"")
    assert main(run) == 0
    assert {p.name: p.read_bytes() for p in public.iterdir()} == written
