"""The store's schema number: 3 for the key-id layout of open histograms' values; a store of
schema 2 (the same tables written before the number changed, or the earlier layout:
fixtures/open_v1) or 1 (fixtures/v1) is brought to 3 by the first run that opens it and never
by what writes nothing (a snapshot, `dpcr verify`); a number above 3 is refused, before
anything is written, as made by a newer dpcr."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.errors import StoreError
from dpcr.noise import simulation_randomness
from dpcr.store import SCHEMA_VERSION, Store
from dpcr.store._heads import VERIFIED

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _schema(path: Path) -> str:
    with sqlite3.connect(path) as con:
        return str(con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0])


def _set_schema(path: Path, number: str) -> None:
    with sqlite3.connect(path) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (number,))


def _released(tmp: Path) -> tuple[Path, Path]:
    """A simulated release of an open histogram (fixtures/open_v1's config) over 8 days: the
    folder and its store."""
    folder = tmp / "rel"
    folder.mkdir()
    for f in ("dpcr.toml", "log.jsonl"):
        shutil.copy(FIXTURES / "open_v1" / f, folder / f)
    release = load_config(folder / "dpcr.toml")
    for day in (5, 9):
        release.run(until=f"2025-01-{day:02d}T00:00:00Z", rng=simulation_randomness(3))
    return folder, folder / "out" / "store.sqlite"


def test_a_store_of_schema_2_in_the_key_id_layout_is_numbered_3_by_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, store = _released(tmp_path)
    assert SCHEMA_VERSION == 3 and _schema(store) == "3"
    _set_schema(store, "2")  # (what dpcr wrote for this layout before the number changed)
    fingerprint = load_config(folder / "dpcr.toml").fingerprint()
    VERIFIED.clear()
    with Store(store, fingerprint=fingerprint, mode="simulation", snapshot=True) as snap:
        assert snap.open_keys()["zones"] and snap.released_count() > 0
    monkeypatch.chdir(folder)
    assert main(["verify", "dpcr.toml", "--simulation"]) == 0
    assert _schema(store) == "2"  # (neither writes)
    VERIFIED.clear()
    with Store(store, fingerprint=fingerprint, mode="simulation"):
        pass
    assert _schema(store) == "3"


def test_a_store_of_the_earlier_layout_is_numbered_3_by_its_migration(tmp_path: Path) -> None:
    folder = tmp_path / "old"
    shutil.copytree(FIXTURES / "open_v1", folder)
    store = folder / "store.sqlite"
    assert _schema(store) == "2"
    fingerprint = load_config(folder / "dpcr.toml").fingerprint()
    with Store(store, fingerprint=fingerprint, mode="simulation", rebind=False):
        pass  # (`dpcr verify`: checked, not migrated)
    assert _schema(store) == "2"
    with Store(store, fingerprint=fingerprint, mode="simulation"):
        pass
    assert _schema(store) == "3"
    with sqlite3.connect(store) as con:
        assert {r[1] for r in con.execute("PRAGMA table_info(open_keysets)")} >= {"first", "n"}


def test_a_store_of_schema_1_is_moved_by_a_run_and_read_by_nothing_else(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / "v1" / "disjoint.sqlite", store)
    fingerprint = load_config(FIXTURES / "v1" / "disjoint.toml").fingerprint()
    for kwargs in ({"rebind": False}, {"snapshot": True}):
        with pytest.raises(StoreError, match="run `dpcr run` once to upgrade it"):
            Store(store, fingerprint=fingerprint, mode="simulation", **kwargs)
    assert _schema(store) == "1"
    with Store(store, fingerprint=fingerprint, mode="simulation") as st:
        assert st.released_count() > 0
    assert _schema(store) == "3"


def test_a_store_of_a_newer_schema_is_refused_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, store = _released(tmp_path)
    _set_schema(store, "4")
    with sqlite3.connect(store) as con:  # (the bytes compared below: every change in the file)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = store.read_bytes()
    fingerprint = load_config(folder / "dpcr.toml").fingerprint()
    for kwargs in ({}, {"rebind": False}, {"snapshot": True}):
        VERIFIED.clear()
        with pytest.raises(StoreError, match=r"store schema 4 was made by a newer dpcr; upgrade "
                                             r"dpcr \(this one reads schemas 1 to 3"):  # fmt: skip
            Store(store, fingerprint=fingerprint, mode="simulation", **kwargs)
    monkeypatch.chdir(folder)
    capsys.readouterr()
    assert main(["run", "dpcr.toml", "--simulate", "3", "--quiet", "--no-report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "made by a newer dpcr; upgrade dpcr" in err[0]
    assert main(["verify", "dpcr.toml", "--simulation"]) == 2
    capsys.readouterr()
    assert main(["check", "dpcr.toml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "store schema 4 was made by a newer dpcr; upgrade dpcr" in err[0]
    assert store.read_bytes() == before and _schema(store) == "4"


@pytest.mark.parametrize("number", ["0", "two", ""])
def test_an_unknown_schema_number_is_refused(tmp_path: Path, number: str) -> None:
    path = tmp_path / "s.sqlite"
    with Store(path, fingerprint="f", mode="simulation"):
        pass
    _set_schema(path, number)
    with pytest.raises(StoreError, match=f"store schema {number} is not supported"):
        Store(path, fingerprint="f", mode="simulation")
