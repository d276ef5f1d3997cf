"""A lost, replaced, restored, edited or shared store is noticed before anything is released."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

import dpcr
from dpcr.errors import StoreError
from dpcr.noise import simulation_randomness
from dpcr.store import Store
from e2e.helpers import mutations, write_jsonl

CUT = "2025-01-07T00:00:00Z"
END = "2025-01-17T00:00:00Z"


def release(tmp: Path) -> dpcr.ContinualRelease:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=dpcr.AtMostK(k=3),
        plan=dpcr.DisjointRelease(start="2025-01-01", period="1d", end=END),
        queries=[dpcr.Count(name="active")],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
    )


@pytest.fixture
def released(tmp_path: Path) -> dpcr.ContinualRelease:
    """A real release (secure noise) of the first six days."""
    write_jsonl(tmp_path / "log.jsonl", mutations())
    r = release(tmp_path)
    r.run(until=CUT)
    return r


def test_a_lost_store_is_not_silently_replaced(released: dpcr.ContinualRelease) -> None:
    released.store_path.unlink()
    with pytest.raises(StoreError, match="does not hold"):
        released.run(until=END)
    assert len(released.store_path.read_bytes()) > 0  # a fresh store, nothing released into it


def test_an_older_backup_is_not_silently_restored(
    released: dpcr.ContinualRelease, tmp_path: Path
) -> None:
    backup = tmp_path / "backup.sqlite"
    shutil.copy(released.store_path, backup)
    released.run(until=END)
    shutil.copy(backup, released.store_path)
    with pytest.raises(StoreError, match="older backup"):
        released.run(until=END)


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE released SET value = value + 1 WHERE idx = 2",
        "DELETE FROM release_ledger WHERE idx = 3",
        "UPDATE meta SET value = 'simulation' WHERE key = 'mode'",
        "UPDATE release_ledger SET event = replace(event, '\"3\"', '\"30\"')",
    ],
)
def test_an_edited_store_is_refused(released: dpcr.ContinualRelease, edit: str) -> None:
    with sqlite3.connect(released.store_path) as con:
        con.execute(edit)
    mode = "simulation" if "'simulation'" in edit else "release"
    with pytest.raises(StoreError, match="edited or is corrupt"):
        Store(released.store_path, fingerprint=released.fingerprint(), mode=mode)


def test_a_simulation_store_turned_into_a_release_store_is_refused(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    r = release(tmp_path)
    r.run(until=CUT, rng=simulation_randomness(3))
    with sqlite3.connect(r.store_path) as con:
        con.execute("UPDATE meta SET value = 'release' WHERE key = 'mode'")
    with pytest.raises(StoreError, match="edited or is corrupt"):
        r.run(until=END)


def test_a_second_run_on_the_same_store_is_refused(released: dpcr.ContinualRelease) -> None:
    with (
        Store(released.store_path, fingerprint=released.fingerprint()),
        pytest.raises(StoreError, match="another dpcr run"),
    ):
        released.run(until=END)
    released.run(until=END)  # once the first is done, the store is free


def test_sensitive_files_are_owner_only(released: dpcr.ContinualRelease) -> None:
    out = released.output_dir
    for path in (released.store_path, out / "operator", out / "operator" / "diagnostics.json"):
        assert path.stat().st_mode & 0o077 == 0, path


@pytest.mark.parametrize("seed", range(30))
def test_a_corrupt_store_is_one_clean_error(
    released: dpcr.ContinualRelease, seed: int
) -> None:
    """Bit flips, truncation or a zeroed page: the next run either proves the store intact and
    goes on, or stops with one StoreError; never a traceback."""
    import random

    rnd = random.Random(seed)
    data = bytearray(released.store_path.read_bytes())
    kind = seed % 3
    if kind == 0:
        for _ in range(8):
            i = rnd.randrange(len(data))
            data[i] ^= 1 << rnd.randrange(8)
    elif kind == 1:
        data = data[: rnd.randrange(len(data))]
    else:
        page = rnd.randrange(max(1, len(data) // 4096))
        data[page * 4096 : (page + 1) * 4096] = bytes(min(4096, len(data) - page * 4096))
    released.store_path.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        Path(str(released.store_path) + suffix).unlink(missing_ok=True)
    try:
        released.run(until=END)
    except StoreError as exc:
        assert "\n" not in str(exc)


def test_a_store_this_process_left_unchanged_is_not_hashed_again(
    released: dpcr.ContinualRelease, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reopened as this process closed it, the store is not hashed again; touched in any way
    since (here a write that leaves every released value as it was), it is."""
    calls: list[int] = []
    real = Store.content_head

    def counted(self: Store) -> str:
        calls.append(1)
        return real(self)

    monkeypatch.setattr(Store, "content_head", counted)
    Store(released.store_path, fingerprint=released.fingerprint()).close()
    assert calls == []
    with sqlite3.connect(released.store_path) as con:
        con.execute("UPDATE released SET value = value WHERE idx = 2")
    Store(released.store_path, fingerprint=released.fingerprint()).close()
    assert calls == [1]


def test_the_content_head_hashes_each_row_as_json() -> None:
    """The batched encoding is byte for byte ``json.dumps`` of each row (the head recorded by
    earlier versions stays valid): integers, floats, None, escapes and non-ASCII text."""
    import json

    from dpcr.store._heads import json_rows

    rows = [(0, 1, -5, 2**70, "q", 'k"ey\n', 3), (1, 2, None, 0.1, "é日", "", -1.5e300),
            (2, 3, 4, 5, "a", "b", float("inf"))]  # fmt: skip
    expected = "".join(json.dumps(r) for r in rows)
    assert json_rows(rows, json.encoder.c_make_encoder) == expected  # type: ignore[attr-defined]
    assert json_rows(rows, None) == expected
