"""The values of open histograms' keys in the store: written by key id, a run adding only the
keys new to it and the values it drew; a chain of per-commit digests that notices an edit;
and a store of the earlier layout (fixtures/open_v1: a run's whole tuple of keys per key set,
written by the dpcr before key ids with fixtures/open_v1/make.py) checked, migrated in place
and continued with the bytes a new store gives."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import dpcr.store._open_store as open_store
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
        "UPDATE open_keysets SET keys = '[\"a\", \"c\"]' WHERE first = 0",
        "DELETE FROM open_keysets WHERE first = 2",
    ],
)
def test_the_chain_notices_an_edit(tmp_path: Path, tamper: str) -> None:
    path = tmp_path / "s.sqlite"
    with Store(path, fingerprint="f", mode="simulation") as st:
        _commit(st, 1, [_block(("a", "b"), [(0, 1)], 0)],
                [OpenKey(query="q", key=k, appeared=1) for k in ("a", "b")])  # fmt: skip
        _commit(st, 2, [_block(("a", "b", "c"), [(0, 2)], 10), _block(("c",), [(0, 1)], 20)],
                [OpenKey(query="q", key="c", appeared=2),
                 OpenKey(query="q", key="b", appeared=1, selected=2)])  # fmt: skip
    VERIFIED.clear()
    with Store(path, fingerprint="f", mode="simulation"):
        pass  # (intact)
    with sqlite3.connect(path) as con:
        assert con.execute(tamper).rowcount >= 1
    VERIFIED.clear()
    with pytest.raises(RewrittenError, match="edited or is corrupt"):
        Store(path, fingerprint="f", mode="simulation")


def test_a_record_outside_its_commits_intervals_is_refused(tmp_path: Path) -> None:
    """A key's first interval must lie in (before, after] of the commit that writes it: no
    later check could attribute it otherwise."""
    with Store(tmp_path / "s.sqlite", fingerprint="f", mode="simulation") as st:
        _commit(st, 2, [], [OpenKey(query="q", key="a", appeared=1)])
        with pytest.raises(StoreError, match=r"outside the reporting intervals 3\.\.4"):
            _commit(st, 4, [], [OpenKey(query="q", key="b", appeared=2)])
