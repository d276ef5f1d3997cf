"""The values of open histograms' keys in the store: written by key id, a run adding only the
keys new to it and the values it drew; a chain of per-commit digests that notices an edit;
and a store of the earlier layout (fixtures/open_v1: a run's whole tuple of keys per key set,
written by the dpcr before key ids with fixtures/open_v1/make.py) checked, migrated in place
and continued with the bytes a new store gives."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpcr.store._open_heads as open_heads
import dpcr.store._open_store as open_store
from dpcr.cli import main
from dpcr.config import load_config
from dpcr.errors import RewrittenError, StoreError
from dpcr.noise import simulation_randomness
from dpcr.store import OpenBlock, OpenKey, SourceState, Store
from dpcr.store._heads import VERIFIED

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "open_v1"
END = "2025-01-11T00:00:00Z"


def _copy(tmp: Path, name: str, *, store: bool) -> Path:
    folder = tmp / name
    folder.mkdir()
    for f in ("dpcr.toml", "log.jsonl"):
        shutil.copy(FIXTURE / f, folder / f)
    if store:
        (folder / "out").mkdir()
        shutil.copy(FIXTURE / "store.sqlite", folder / "out" / "store.sqlite")
    return folder


def _columns(path: Path, table: str) -> set[str]:
    with sqlite3.connect(path) as con:
        return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def _values(path: Path, fingerprint: str) -> dict[tuple[str, str, int, int], int]:
    with Store(path, fingerprint=fingerprint, mode="simulation") as st:
        return {(r.query, r.key, r.layer, r.index): r.value for r in st.released()}


def test_a_store_of_the_earlier_layout_is_migrated_and_continues(tmp_path: Path) -> None:
    old = _copy(tmp_path, "old", store=True)
    store = old / "out" / "store.sqlite"
    assert "keyset" in _columns(store, "open_keysets")
    release = load_config(old / "dpcr.toml")
    with sqlite3.connect(store) as con:
        legacy = con.execute("SELECT count(*), sum(length(vals)) FROM open_values").fetchone()
    # nothing new: the same public bytes as the run that wrote the store, and the layout is new
    again = release.run(until="2025-01-05T00:00:00Z", rng=simulation_randomness(3))
    assert again.new_intervals == 0
    public = old / "out" / "simulation" / "releases.csv"
    assert public.read_bytes() == (FIXTURE / "releases.csv").read_bytes()
    assert {"first", "n"} <= _columns(store, "open_keysets")
    with sqlite3.connect(store) as con:
        assert con.execute("SELECT n, before, after FROM open_commits").fetchall() == [(1, 0, 4)]
        assert con.execute("SELECT sum(length(vals)) FROM open_values").fetchone()[0] == legacy[1]
        lists = [k for (text,) in con.execute("SELECT keys FROM open_keysets ORDER BY first")
                 for k in __import__("json").loads(text)]  # fmt: skip
    assert sorted(lists) == ["A", "B", "C", "D", "L"] and len(set(lists)) == len(lists)
    before = _values(store, release.fingerprint())
    # later runs: what a new store gives over the whole log, nothing re-noised
    for day in (7, 9, 11):
        release.run(until=f"2025-01-{day:02d}T00:00:00Z", rng=simulation_randomness(3))
    fresh = _copy(tmp_path, "fresh", store=False)
    whole = load_config(fresh / "dpcr.toml")
    whole.run(until=END, rng=simulation_randomness(3))
    for name in ("releases.csv", "releases.json"):
        assert (old / "out" / "simulation" / name).read_bytes() == (
            fresh / "out" / "simulation" / name
        ).read_bytes()
    after = _values(store, release.fingerprint())
    assert {k: after[k] for k in before} == before
    assert after == _values(fresh / "out" / "store.sqlite", whole.fingerprint())


def test_a_migration_waits_for_the_check_of_the_earlier_head(tmp_path: Path) -> None:
    old = _copy(tmp_path, "old", store=True)
    store = old / "out" / "store.sqlite"
    with sqlite3.connect(store) as con:
        con.execute("UPDATE open_values SET vals = zeroblob(length(vals)) WHERE rowid = "
                    "(SELECT min(rowid) FROM open_values)")  # fmt: skip
    release = load_config(old / "dpcr.toml")
    with pytest.raises(RewrittenError, match="edited or is corrupt"):
        release.run(until=END, rng=simulation_randomness(3))
    assert "keyset" in _columns(store, "open_keysets")  # (left as it was)


def test_a_snapshot_of_the_earlier_layout_says_to_run_once(tmp_path: Path) -> None:
    old = _copy(tmp_path, "old", store=True)
    release = load_config(old / "dpcr.toml")
    with Store(old / "out" / "store.sqlite", fingerprint=release.fingerprint(),
               mode="simulation", snapshot=True) as snap:  # fmt: skip
        assert snap.open_keys()["zones"]["A"].selected == 1
        with pytest.raises(StoreError, match="run `dpcr run` once to upgrade it"):
            snap.released()


def _commit(st: Store, interval: int, blocks: list[OpenBlock], keys: list[OpenKey]) -> None:
    st.commit_release(values=[], events=[], source=SourceState(records=interval,
                      interval=interval), summary={}, started=0.0, open_keys=keys,
                      open_blocks=blocks)  # fmt: skip


def _block(keys: tuple[str, ...], nodes: list[tuple[int, int]], base: int) -> OpenBlock:
    values = base + np.arange(len(nodes) * len(keys), dtype=np.int64).reshape(len(nodes), -1)
    return OpenBlock(query="q", keys=keys, nodes=tuple(nodes),
                     ranges=tuple((None, n[1]) for n in nodes), values=values)  # fmt: skip


def test_a_run_stores_only_its_new_keys_by_id_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Key ids in pieces of at most ID_BLOCK keys (here 4), never a key twice; value rows
    within a piece; values read back for any keys and nodes; a run's keys in another order
    than their ids are written by id."""
    monkeypatch.setattr(open_store, "ID_BLOCK", 4)
    path = tmp_path / "s.sqlite"
    first = tuple(f"k{i}" for i in range(6))
    second = ("k3", "x1", "k0", "x0", "k5", "k1", "k2", "k4", "x2")  # (not in id order)
    with Store(path, fingerprint="f", mode="simulation") as st:
        _commit(st, 1, [_block(first, [(0, 1)], 0)],
                [OpenKey(query="q", key=k, appeared=1) for k in first])  # fmt: skip
        _commit(st, 2, [_block(second, [(0, 2)], 100),
                        _block(("x1", "x0", "x2"), [(0, 1)], 200)],
                [OpenKey(query="q", key=k, appeared=2) for k in ("x0", "x1", "x2")]
                + [OpenKey(query="q", key="k2", appeared=1, selected=2)])  # fmt: skip
        values, held = st.open_values("q", ["x0", "k2", "zz"], [(0, 1), (0, 2)])
    assert held.tolist() == [[True, True, False], [True, True, False]]
    assert values.tolist() == [[201, 2, 0], [103, 106, 0]]
    with sqlite3.connect(path) as con:
        pieces = con.execute("SELECT first, n, keys FROM open_keysets ORDER BY first").fetchall()
        rows = con.execute("SELECT layer, idx, lo, hi, n FROM open_values ORDER BY n, idx, lo")
        ranges = rows.fetchall()
    assert pieces == [(0, 1, '["k0", "k1", "k2", "k3"]'), (4, 1, '["k4", "k5"]'),
                      (6, 2, '["x1", "x0"]'), (8, 2, '["x2"]')]  # fmt: skip
    assert ranges == [(0, 1, 0, 4, 1), (0, 1, 4, 6, 1), (0, 1, 6, 8, 2), (0, 1, 8, 9, 2),
                      (0, 2, 0, 4, 2), (0, 2, 4, 8, 2), (0, 2, 8, 9, 2)]  # fmt: skip
    VERIFIED.clear()
    with Store(path, fingerprint="f", mode="simulation") as st:  # (the chain checked in full)
        got = {(r.key, r.index): r.value for r in st.released()}
        assert st.released_count() == len(got) == 6 + 9 + 3
    assert got[("x2", 2)] == 108 and got[("x1", 1)] == 200 and got[("k4", 1)] == 4


def test_values_are_read_a_block_of_key_ids_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored values of any keys come a block of key ids (here 4) at a time, then the keys
    the store has no value of: together what one read of them all gives."""
    monkeypatch.setattr(open_store, "ID_BLOCK", 4)
    path = tmp_path / "s.sqlite"
    first = tuple(f"k{i}" for i in range(6))  # (ids 0..5; x1, x0, x2 then 6, 7, 8)
    with Store(path, fingerprint="f", mode="simulation") as st:
        _commit(st, 1, [_block(first, [(0, 1)], 0)],
                [OpenKey(query="q", key=k, appeared=1) for k in first])  # fmt: skip
        _commit(st, 2, [_block(("x1", "x0", "x2", "k1"), [(0, 1), (0, 2)], 100)],
                [OpenKey(query="q", key=k, appeared=2) for k in ("x1", "x0", "x2")])  # fmt: skip
        keys, nodes = ["x0", "k2", "zz", "k5", "x2", "k0"], [(0, 2), (0, 1)]
        blocks = list(st.open_value_blocks("q", keys, nodes))
        whole = st.open_values("q", keys, nodes)
    assert [b[0].tolist() for b in blocks] == [[1, 5], [0, 3], [4], [2]]
    values = np.zeros((2, len(keys)), np.int64)
    held = np.zeros((2, len(keys)), bool)
    for positions, got, has in blocks:
        assert got.shape == has.shape == (2, len(positions))
        values[:, positions], held[:, positions] = got, has
    assert values.tolist() == whole[0].tolist() and held.tolist() == whole[1].tolist()
    assert held.tolist() == [[True, False, False, False, True, False],
                             [True, True, False, True, True, True]]  # fmt: skip


def test_a_release_reading_small_blocks_of_key_ids_gives_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Selection reads the waiting keys' stored values a block of key ids at a time: with
    blocks of 2 keys, the releases, stored values and open keys of runs that test waiting keys
    on stored values are those of one block."""
    read: list[tuple[int, bool]] = []  # (keys, any value stored) of each block read
    original = Store.open_value_blocks

    def reading(self: Store, *args: Any) -> Any:
        for positions, values, held in original(self, *args):
            read.append((len(positions), bool(held.any())))
            yield positions, values, held

    monkeypatch.setattr(Store, "open_value_blocks", reading)
    outputs = []
    for name, block in (("one", 1 << 16), ("small", 2)):
        monkeypatch.setattr(open_store, "ID_BLOCK", block)
        read.clear()
        folder = _copy(tmp_path, name, store=False)
        _run_days(folder, 3, 5, 7, 9, 11)
        release = load_config(folder / "dpcr.toml")
        with Store(release.store_path, fingerprint=release.fingerprint(),
                   mode="simulation") as st:  # fmt: skip
            stored = ({(r.query, r.key, r.layer, r.index): r.value for r in st.released()},
                      st.open_keys())  # fmt: skip
        con = sqlite3.connect(release.store_path)
        pieces = con.execute("SELECT count(*) FROM open_keysets").fetchone()[0]
        con.close()
        outputs.append(((folder / "out" / "simulation" / "releases.csv").read_bytes(), stored,
                        pieces))  # fmt: skip
    assert outputs[0][:2] == outputs[1][:2]
    assert outputs[0][2] < outputs[1][2]  # (the small blocks were used)
    assert max(n for n, _ in read) == 2 and sum(stored for _, stored in read) >= 4
    zones = outputs[0][1][1]["zones"]
    # (keys first stored by an early run, tested by each later one on their stored values)
    assert {k for k, r in zones.items() if r.selected is None and r.appeared <= 4} == {
        "B", "C", "D", "L"} and zones["A"].selected == 1  # fmt: skip


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE open_commits SET after = after + 1 WHERE n = 1",
        "UPDATE open_commits SET head = 'x' WHERE n = 2",
        "DELETE FROM open_commits WHERE n = 2",
        "DELETE FROM meta WHERE key = 'candidates_head'",
        "UPDATE open_keys SET appeared = 2 WHERE key = 'a'",
        "UPDATE open_keys SET selected = 1 WHERE key = 'b'",
        "UPDATE open_keys SET selected = NULL WHERE key = 'b'",
        "INSERT INTO open_keys (query, key, appeared) VALUES ('q', 'z', 9)",
        "UPDATE open_values SET n = 1 WHERE n = 2",
        "UPDATE open_values SET t_hi = 7 WHERE rowid = (SELECT max(rowid) FROM open_values)",
        "DELETE FROM open_keysets WHERE first = 2",
    ],
)
def test_the_chain_notices_an_edit(tmp_path: Path, tamper: str) -> None:
    """An edit of the newest commit, of the links, or a row past the newest commit: refused
    when the store opens."""
    path = tmp_path / "s.sqlite"
    _two_commits(path)
    VERIFIED.clear()
    with Store(path, fingerprint="f", mode="simulation"):
        pass  # (intact)
    with sqlite3.connect(path) as con:
        assert con.execute(tamper).rowcount >= 1
    VERIFIED.clear()
    with pytest.raises(RewrittenError, match="edited or is corrupt"):
        Store(path, fingerprint="f", mode="simulation")


def _two_commits(path: Path) -> None:
    with Store(path, fingerprint="f", mode="simulation") as st:
        _commit(st, 1, [_block(("a", "b"), [(0, 1)], 0)],
                [OpenKey(query="q", key=k, appeared=1) for k in ("a", "b")])  # fmt: skip
        _commit(st, 2, [_block(("a", "b", "c"), [(0, 2)], 10), _block(("c",), [(0, 1)], 20)],
                [OpenKey(query="q", key="c", appeared=2),
                 OpenKey(query="q", key="b", appeared=1, selected=2)])  # fmt: skip


@pytest.mark.parametrize(
    ("tamper", "found"),
    [
        ("UPDATE open_keysets SET keys = '[\"a\", \"c\"]' WHERE first = 0",
         "the rows commit 1 (reporting intervals 1..1) wrote no longer match its recorded digest"),
        ("UPDATE open_values SET vals = zeroblob(length(vals)) WHERE n = 1", "commit 1 "),
        ("DELETE FROM open_values WHERE n = 1", "commit 1 "),
        ("UPDATE open_commits SET digest = 'x' WHERE n = 1", "commit 1 "),
        ("INSERT INTO open_keys (query, key, appeared) VALUES ('q', 'z', 0)",
         "the store holds 2 key-list pieces, 3 value rows, 4 keys and 1 selections; its commits "
         "cover 2, 3, 3 and 1"),
    ],
)  # fmt: skip
def test_an_edit_of_an_older_commit_is_found_by_the_full_check(
    tmp_path: Path, tamper: str, found: str
) -> None:
    """Opening the store checks the newest commit alone: an older commit's rows edited pass
    it, and the full check of the chain (``dpcr verify``) names the difference."""
    path = tmp_path / "s.sqlite"
    _two_commits(path)
    with sqlite3.connect(path) as con:
        assert con.execute(tamper).rowcount >= 1
    VERIFIED.clear()
    with Store(path, fingerprint="f", mode="simulation") as st:
        assert found in (st.chain_fault() or "")
        assert st.candidates_head() == ""


def test_opening_checks_the_newest_commit_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digest of one commit is recomputed when the store opens, whatever the number of
    commits; the full check recomputes every one of them."""
    path = tmp_path / "s.sqlite"
    with Store(path, fingerprint="f", mode="simulation") as st:
        for i in range(1, 6):
            _commit(st, i, [_block((f"k{i}",), [(0, i)], i)],
                    [OpenKey(query="q", key=f"k{i}", appeared=i)])  # fmt: skip
    digests: list[int] = []
    original = open_heads.commit_digest

    def counted(con: sqlite3.Connection, n: int, before: int, after: int) -> Any:
        digests.append(n)
        return original(con, n, before, after)

    monkeypatch.setattr(open_heads, "commit_digest", counted)
    VERIFIED.clear()
    with Store(path, fingerprint="f", mode="simulation") as st:
        assert digests == [5]
        assert st.chain_fault() is None
    assert digests == [5, 1, 2, 3, 4, 5]


def _run_days(folder: Path, *days: int) -> None:
    release = load_config(folder / "dpcr.toml")
    for day in days:
        release.run(until=f"2025-01-{day:02d}T00:00:00Z", rng=simulation_randomness(3))


def test_verify_reports_an_edited_older_commit_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An older commit's values edited: a run opens the store (it checks the newest commit),
    `dpcr verify` says what differs and the safe action in one line (exit 1); the newest
    commit's values edited: a run and `dpcr verify` refuse the store."""
    folder = _copy(tmp_path, "rel", store=False)
    _run_days(folder, 5, 9)
    store = folder / "out" / "store.sqlite"
    with sqlite3.connect(store) as con:
        assert [n for (n,) in con.execute("SELECT n FROM open_commits")] == [1, 2]
        con.execute("UPDATE open_values SET vals = zeroblob(length(vals)) WHERE rowid = "
                    "(SELECT min(rowid) FROM open_values WHERE n = 1)")  # fmt: skip
    monkeypatch.chdir(folder)
    VERIFIED.clear()
    capsys.readouterr()
    assert main(["verify", "dpcr.toml", "--simulation"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("store: DIFFERS: ") and "commit 1 (reporting intervals 1..4)" \
        in lines[0] and "Restore it from the newest backup" in lines[0]  # fmt: skip
    assert [line.split(":")[:2] for line in lines[1:]] == [["source", " intact"],
                                                           ["outputs", " intact"]]  # fmt: skip
    VERIFIED.clear()
    release = load_config(folder / "dpcr.toml")
    with Store(store, fingerprint=release.fingerprint(), mode="simulation"):
        pass  # (the newest commit is intact)
    with sqlite3.connect(store) as con:
        con.execute("UPDATE open_values SET vals = zeroblob(length(vals)) WHERE rowid = "
                    "(SELECT min(rowid) FROM open_values WHERE n = 2)")  # fmt: skip
    VERIFIED.clear()
    with pytest.raises(RewrittenError, match="edited or is corrupt"):
        _run_days(folder, 11)
    assert main(["verify", "dpcr.toml", "--simulation"]) == 1
    assert "edited or is corrupt" in capsys.readouterr().out.splitlines()[0]


def test_a_record_outside_its_commits_intervals_is_refused(tmp_path: Path) -> None:
    """A key's first interval must lie in (before, after] of the commit that writes it: no
    later check could attribute it otherwise."""
    with Store(tmp_path / "s.sqlite", fingerprint="f", mode="simulation") as st:
        _commit(st, 2, [], [OpenKey(query="q", key="a", appeared=1)])
        with pytest.raises(StoreError, match=r"outside the reporting intervals 3\.\.4"):
            _commit(st, 4, [], [OpenKey(query="q", key="b", appeared=2)])
