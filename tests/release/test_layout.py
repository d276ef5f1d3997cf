"""Where a run writes: ``public/`` holds only what may be published, ``operator/``, the store and
its state sit beside it; folders get explicit modes whatever the umask, and what exists keeps its
mode; nothing is written through a symbolic link; a release made before ``public/`` existed is
moved into it (fixtures/layout1: made by ``dpcr run`` before this layout, public files directly
in ``out/``)."""

from __future__ import annotations

import csv
import logging
import math
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpcr.cli import main
from e2e.helpers import mutations, write_config, write_jsonl

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "layout1"
PUBLIC = {"release-head.json", "summary.json", "releases.csv", "releases.json", "report.html"}
UNTIL = "2025-01-08"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _config(tmp: Path) -> Path:
    write_jsonl(tmp / "log.jsonl", mutations())
    return write_config(tmp, on_error="quarantine")


def run(config: Path, *args: str) -> int:
    return main(["run", str(config), "--quiet", "--until", UNTIL, *args])


@pytest.mark.parametrize("umask", [0o000, 0o077], indirect=True)
def test_public_folder_holds_only_public_files_with_explicit_modes(
    tmp_path: Path, umask: int
) -> None:
    config = _config(tmp_path)
    assert run(config) == 0
    out = tmp_path / "out"
    cache = "store.sqlite.intervals.json"  # (written when this process had to compute them)
    tables = "store.sqlite.noise"  # (the same)
    assert {p.name for p in out.iterdir()} - {cache, tables} == {
        "public", "operator", "store.sqlite", "store.sqlite.lock", "store.sqlite.state",
    }  # fmt: skip
    assert mode(out) == 0o755
    assert mode(out / "public") == 0o755
    assert {p.name for p in (out / "public").iterdir()} == PUBLIC
    for path in (out / "public").iterdir():
        assert mode(path) == 0o644, path
    assert mode(out / "operator") == 0o700
    assert {"diagnostics.json", "quarantine.jsonl", "report.html"} <= {
        p.name for p in (out / "operator").iterdir()
    }
    for path in (out / "operator").iterdir():
        assert mode(path) in (0o600, 0o700), path
    for name in ("store.sqlite", "store.sqlite.lock", cache):
        if (out / name).exists():
            assert mode(out / name) == 0o600, name
    assert mode(out / "store.sqlite.state") == 0o700
    if (out / tables).exists():
        assert mode(out / tables) == 0o700
        for path in (out / tables).iterdir():
            assert mode(path) == 0o600, path
    for path in (out / "store.sqlite.state").iterdir():
        assert mode(path) & 0o077 == 0, path


@pytest.mark.parametrize("umask", [0o000, 0o077], indirect=True)
def test_a_simulation_writes_nothing_public_and_owner_only(tmp_path: Path, umask: int) -> None:
    """Whoever knows the seed subtracts the noise: simulated values are exact statistics."""
    config = _config(tmp_path)
    assert run(config, "--simulate", "3") == 0
    out = tmp_path / "out"
    assert not (out / "public").exists()
    assert mode(out / "simulation") == 0o700
    names = {p.name for p in (out / "simulation").iterdir()}
    assert {"releases.csv", "summary.json", "report.html"} <= names
    for path in (out / "simulation").iterdir():
        assert mode(path) == 0o600, path


def test_what_exists_keeps_its_mode(tmp_path: Path) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out"
    (out / "operator").mkdir(parents=True)
    os.chmod(out, 0o750)
    os.chmod(out / "operator", 0o750)
    lock = out / "store.sqlite.lock"
    lock.touch()
    os.chmod(lock, 0o640)
    assert run(config) == 0
    assert (mode(out), mode(out / "operator"), mode(lock)) == (0o750, 0o750, 0o640)


def test_a_folder_every_user_may_write_to_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    assert run(config) == 2
    err = capsys.readouterr().err
    assert "chmod o-w" in err and len(err.strip().splitlines()) == 1
    assert list(out.iterdir()) == []
    os.chmod(out, 0o1777)  # sticky: no one can replace another's files
    assert run(config) == 0


# --- symbolic links -------------------------------------------------------------------------


def _target(tmp: Path, kind: str) -> Path:
    """Something outside the output folder, with a mode of its own."""
    path = tmp / f"elsewhere-{kind}"
    if kind == "dir":
        path.mkdir()
        os.chmod(path, 0o755)
    else:
        path.write_text("keep me\n")
        os.chmod(path, 0o644)
    return path


LINKS = [
    ("operator", "dir"),
    ("public", "dir"),
    ("store.sqlite.lock", "file"),
    ("store.sqlite", "file"),
    ("store.sqlite-wal", "file"),
    ("store.sqlite.state", "dir"),
    ("store.sqlite.intervals.json", "file"),
    ("operator/quarantine.jsonl", "file"),
    ("operator/scratch", "dir"),
    ("public/releases.csv", "file"),
]


@pytest.mark.parametrize(("where", "kind"), LINKS, ids=[w for w, _ in LINKS])
def test_a_symbolic_link_where_dpcr_writes_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, kind: str
) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out"
    target = _target(tmp_path, kind)
    link = out / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    before = {p.name for p in out.rglob("*")}
    assert run(config) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and len(err.strip().splitlines()) == 1, err
    assert {p.name for p in out.rglob("*")} == before  # nothing written
    assert mode(target) == (0o755 if kind == "dir" else 0o644)  # never chmodded
    if kind == "dir":
        assert list(target.iterdir()) == []
    else:
        assert target.read_text() == "keep me\n"


def test_a_link_at_a_temporary_file_is_removed_not_followed(tmp_path: Path) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out"
    target = _target(tmp_path, "file")
    for name in ("public/releases.csv.tmp", "operator/diagnostics.json.tmp"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).symlink_to(target)
    assert run(config) == 0
    assert target.read_text() == "keep me\n" and mode(target) == 0o644
    assert not (out / "public" / "releases.csv.tmp").exists()


# --- the layout before public/ --------------------------------------------------------------


def _old_release(tmp: Path) -> Path:
    """fixtures/layout1 (public files directly in out/), as a release folder."""
    work = tmp / "old"
    shutil.copytree(FIXTURE, work)
    return work / "dpcr.toml"


def _rows(path: Path) -> dict[tuple[str, str, str], tuple[str, ...]]:
    with path.open(newline="") as fh:
        return {(r["query"], r["key"], r["interval"]): tuple(r.values())
                for r in csv.DictReader(fh)}  # fmt: skip


def _same(new: tuple[str, ...], old: tuple[str, ...]) -> bool:
    """The same published row; derived numbers (stds, bounds) up to a relative 1e-9 (the
    version that wrote the fixture computed them a few ulps apart)."""
    def close(a: str, b: str) -> bool:
        try:
            return a == b or math.isclose(float(a), float(b), rel_tol=1e-9)
        except ValueError:
            return False
    return len(new) == len(old) and all(close(a, b) for a, b in zip(new, old, strict=True))


@pytest.mark.parametrize("command", ["run", "report"])
def test_an_old_layout_moves_into_public_with_one_notice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, command: str
) -> None:
    config = _old_release(tmp_path)
    out = config.parent / "out"
    old = _rows(out / "releases.csv")
    names = {p.name for p in out.iterdir() if p.is_file()} - {"store.sqlite"}
    with caplog.at_level(logging.WARNING, logger="dpcr"):
        args = ["--until", UNTIL] if command == "run" else []
        assert main([command, str(config), "--quiet", *args]) == 0
    notices = [r.getMessage() for r in caplog.records if r.name == "dpcr"]
    assert len(notices) == 1 and "public" in notices[0] and "\n" not in notices[0]
    assert not any((out / name).exists() for name in names)  # nothing left in the old place
    assert names <= {p.name for p in (out / "public").iterdir()}  # nothing lost
    new = _rows(out / "public" / "releases.csv")
    assert old and all(_same(new[k], row) for k, row in old.items())  # every value as it was
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dpcr"):
        assert run(config) == 0
    assert not [r for r in caplog.records if r.name == "dpcr"]  # once


@pytest.mark.parametrize("left", ["releases.csv", "summary.json", "report.html", "alerts.csv"])
def test_files_left_in_the_old_place_guard_against_a_lost_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], left: str
) -> None:
    config = _old_release(tmp_path)
    out = config.parent / "out"
    (out / "store.sqlite").unlink()
    for path in out.iterdir():
        if path.is_file() and path.name != left:
            path.unlink()
    assert run(config) == 2
    err = capsys.readouterr().err
    assert left in err and "cannot account" in err and len(err.strip().splitlines()) == 1
