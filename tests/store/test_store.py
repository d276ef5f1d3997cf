from __future__ import annotations

import time
from pathlib import Path

import pytest

from dpcr.errors import StoreError
from dpcr.store import Released, SourceState, Store


def _commit(store: Store, interval: int, value: int) -> None:
    store.commit_release(
        values=[
            Released(
                interval=interval, t_lo=None, t_hi=10 * interval, query="q", key="", value=value
            )
        ],
        events=[(interval, "q", {"type": "pure_dp", "epsilon": 0.5})],
        source=SourceState(records=interval, interval=interval, t_last=10 * interval, digest="d"),
        units=[("u", "", 1, 1, 0)],
        summary={"n": interval},
        started=time.time(),
    )


def test_values_persist_and_are_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with Store(path, fingerprint="f") as store:
        _commit(store, 1, 42)
    with Store(path, fingerprint="f") as store:
        assert [r.value for r in store.released()] == [42]
        assert store.last_interval() == 1
        assert store.source_state() == SourceState(records=1, interval=1, t_last=10, digest="d")
        with pytest.raises(StoreError, match="already released"):
            _commit(store, 1, 7)
        # The failed transaction changed nothing.
        assert [r.value for r in store.released()] == [42]
        assert store.source_state().records == 1
        assert len(store.runs()) == 1


def test_store_is_bound_to_its_plan_and_mode(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    Store(path, fingerprint="f").close()
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
