from __future__ import annotations

import time
from pathlib import Path

import pytest

from dpcr.errors import StoreError
from dpcr.store import ReleasedNode, SourceState, Store


def _commit(store: Store, interval: int, value: int) -> None:
    store.commit_release(
        values=[
            ReleasedNode(
                layer=0,
                index=interval,
                t_lo=None,
                t_hi=10 * interval,
                query="q",
                key="",
                value=value,
            )
        ],
        events=[(0, interval, "q", {"type": "pure_dp", "epsilon": 0.5})],
        source=SourceState(records=interval, interval=interval, t_last=10 * interval, digest="d"),
        summary={"n": interval},
        started=time.time(),
    )


def test_values_persist_and_are_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with Store(path, fingerprint="f") as store:
        _commit(store, 1, 42)
    with Store(path, fingerprint="f") as store:
        assert [r.value for r in store.released()] == [42]
        assert store.source_state() == SourceState(records=1, interval=1, t_last=10, digest="d")
        with pytest.raises(StoreError, match="already released"):
            _commit(store, 1, 7)
        # The failed transaction changed nothing.
        assert [r.value for r in store.released()] == [42]
        assert store.source_state().records == 1
        assert len(store.runs()) == 1


def test_store_is_bound_to_its_plan_and_mode(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with Store(path, fingerprint="f") as store:
        _commit(store, 1, 42)
    with pytest.raises(StoreError, match="different plan"):
        Store(path, fingerprint="g")
    with pytest.raises(StoreError, match="simulation"):
        Store(path, fingerprint="f", mode="simulation")
    sim = tmp_path / "sim.sqlite"
    Store(sim, fingerprint="f", mode="simulation").close()
    with pytest.raises(StoreError, match="never be published"):
        Store(sim, fingerprint="f", mode="release")


def test_garbage_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError, match="not a usable dpcr store"):
        Store(path, fingerprint="f")


def test_schema_1_store_is_migrated_in_place(tmp_path: Path) -> None:
    """A store written before the unified schema (disjoint values by interval, tree nodes in
    their own tables) opens as schema 3 (released values by node, tests/store/test_schema.py)
    with every value and ledger row kept."""
    import sqlite3

    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE releases (interval INTEGER NOT NULL, t_lo INTEGER, t_hi INTEGER NOT NULL,
            query TEXT NOT NULL, key TEXT NOT NULL, value INTEGER NOT NULL,
            PRIMARY KEY (query, key, interval));
        CREATE TABLE ledger (interval INTEGER NOT NULL, query TEXT NOT NULL, event TEXT NOT NULL,
            released_at REAL NOT NULL, PRIMARY KEY (interval, query));
        CREATE TABLE nodes (layer INTEGER NOT NULL, idx INTEGER NOT NULL, t_lo INTEGER NOT NULL,
            t_hi INTEGER NOT NULL, query TEXT NOT NULL, key TEXT NOT NULL,
            value INTEGER NOT NULL, PRIMARY KEY (query, key, layer, idx));
        CREATE TABLE node_ledger (layer INTEGER NOT NULL, idx INTEGER NOT NULL,
            query TEXT NOT NULL, event TEXT NOT NULL, released_at REAL NOT NULL,
            PRIMARY KEY (layer, idx, query));
        INSERT INTO meta VALUES ('schema', '1'), ('fingerprint', 'f'), ('mode', 'release');
        INSERT INTO releases VALUES (1, NULL, 10, 'q', '', 42), (2, 10, 20, 'q', '', 7);
        INSERT INTO ledger VALUES (1, 'q', '{"type": "pure_dp", "epsilon": 0.5}', 0),
                                  (2, 'q', '{"type": "pure_dp", "epsilon": 0.5}', 0);
        INSERT INTO nodes VALUES (1, 0, 0, 20, 'q', '', 49);
        INSERT INTO node_ledger VALUES (1, 0, 'q', '{"type": "pure_dp", "epsilon": 0.25}', 0);
        """
    )
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="different plan"):  # refused before any change
        Store(path, fingerprint="g")
    with Store(path, fingerprint="f") as store:
        got = {(r.layer, r.index): r.value for r in store.released()}
        assert got == {(0, 1): 42, (0, 2): 7, (1, 0): 49}
        assert [(lv, i) for lv, i, _q, _e in store.ledger()] == [(0, 1), (0, 2), (1, 0)]
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("3",)
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not tables & {"releases", "ledger", "nodes", "node_ledger"}
    raw.close()


def _zero_commit(store: Store) -> None:
    """A run that no interval had closed for: a commit without values or ledger rows."""
    store.commit_release(values=[], events=[], summary={"n": 0}, started=time.time(),
                         source=SourceState(records=5, interval=0, t_last=None, digest="d"),
                         frozen=[("u", "e", 3)], source_fingerprint="src")  # fmt: skip


def test_a_store_without_a_release_is_bound_by_the_next_plan(tmp_path: Path) -> None:
    """Before its first release a store takes a changed plan: the earlier plan's source
    position, frozen units and run summaries go, the heads public files were written at stay
    held, and the first release binds it."""
    path = tmp_path / "s.sqlite"
    Store(path, fingerprint="f").close()  # (what a run that failed leaves)
    with pytest.raises(StoreError, match="holds no release yet"):
        Store(path, fingerprint="g", rebind=False)  # (as `dpcr verify` opens it)
    with Store(path, fingerprint="g") as store:
        _zero_commit(store)
        first = store.recorded_head()
        assert first is not None
    with Store(path, fingerprint="h") as store:
        assert store.fingerprint == "h"
        assert store.source_state() == SourceState()
        assert (store.runs(), store.frozen(), store.source_fingerprint()) == ([], (), None)
        assert store.holds(first)
        assert store.recorded_head() not in (None, first)
        _commit(store, 1, 42)
    for other in ("f", "g"):
        with pytest.raises(StoreError, match="different plan"):
            Store(path, fingerprint=other)
    with Store(path, fingerprint="h") as store:
        assert [r.value for r in store.released()] == [42]


def test_a_store_whose_releases_were_deleted_is_not_rebound(tmp_path: Path) -> None:
    """Deleting a store's released values to free it for another plan is an edit: refused."""
    import sqlite3

    from dpcr.errors import RewrittenError

    path = tmp_path / "s.sqlite"
    with Store(path, fingerprint="f") as store:
        _commit(store, 1, 42)
    raw = sqlite3.connect(path)
    raw.execute("DELETE FROM released")
    raw.execute("DELETE FROM release_ledger")
    raw.commit()
    raw.close()
    with pytest.raises(RewrittenError, match="edited"):
        Store(path, fingerprint="g")


def test_read_binding_reads_without_opening(tmp_path: Path) -> None:
    """``dpcr check`` reads what a store is bound to without a lock and without writing."""
    from dpcr.store import SCHEMA_VERSION, Binding, read_binding

    path, schema = tmp_path / "s.sqlite", str(SCHEMA_VERSION)
    assert read_binding(path) is None
    Store(path, fingerprint="f").close()
    unreleased = Binding(fingerprint="f", mode="release", released=False, schema=schema)
    assert read_binding(path) == unreleased
    released = Binding(fingerprint="f", mode="release", released=True, schema=schema)
    with Store(path, fingerprint="f") as store:
        _commit(store, 1, 42)
        assert read_binding(path) == released
    before, files = path.read_bytes(), sorted(tmp_path.iterdir())
    assert read_binding(path) == released
    assert (path.read_bytes(), sorted(tmp_path.iterdir())) == (before, files)
    (tmp_path / "garbage.sqlite").write_bytes(b"not a database" * 100)
    assert read_binding(tmp_path / "garbage.sqlite") is None


def test_an_alert_answer_binds_a_store_and_a_bare_alert_state_does_not(tmp_path: Path) -> None:
    """A sparse vector's state from a run that answered nothing published nothing: removed
    with the rest; one answer (a release) binds the store."""
    path = tmp_path / "s.sqlite"
    state = {"rule": {"last_interval": 0, "svt": {"threshold_noise": 3}}}
    with Store(path, fingerprint="f") as store:
        store.commit_release(values=[], events=[], source=SourceState(), summary={},
                             started=time.time(), alerts=(state, []))  # fmt: skip
    with Store(path, fingerprint="g") as store:
        assert store.alert_states() == {}
        answer = ("rule", 1, "", 0, None)
        store.commit_release(values=[], events=[], source=SourceState(), summary={},
                             started=time.time(), alerts=(state, [answer]))  # fmt: skip
    with pytest.raises(StoreError, match="different plan"):
        Store(path, fingerprint="f")
