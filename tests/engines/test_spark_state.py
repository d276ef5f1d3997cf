"""The Spark engine's state folder without Spark: heads, matching, versions and commits."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from dpcr.changelog import JsonlSource
from dpcr.engines.base import AggregateRequest, StoreHead
from dpcr.engines.spark import _state
from engines.helpers import CONSTRAINTS, QUERIES, T0

STORE = StoreHead(records=12, t_last=T0, token="file1:100:" + "a" * 64)


def _head(version: int, **kw: object) -> _state.Head:
    fields: dict[str, object] = {
        "version": version,
        "store": None,
        "fingerprint": "f",
        "spec": "s",
        "lines": 12,
        "bytes": 100,
        "files": (),
        "explicit": False,
        "counters": {"records": 12},
        "totals": ((0, 1, 0, 3),),
        "clamps": (),
        "settled": 1,
        "times": "t",
        "tables": {"qlines": (version,)},
        "rows": {},
        "pending": True,
    }
    fields.update(kw)
    return _state.Head(**fields)  # type: ignore[arg-type]


def test_a_committed_head_is_continued_only_by_its_store_and_configuration(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "state"
    version = _state.prepare(folder, None)
    assert version == 1 and oct(folder.stat().st_mode & 0o777) == "0o700"
    _state.write_qlines(folder, None, version, [(3, 0, "line 3\n"), (1, 0, "line 1\n")])
    assert _state.matching(folder, STORE, "f", "s") is None  # written, not committed
    _state.SparkPending(folder=folder, head=_head(version)).commit(STORE)
    head = _state.matching(folder, STORE, "f", "s")
    assert head is not None and head.store == STORE and head.totals == ((0, 1, 0, 3),)
    assert _state.Head.from_json(head.to_json()) == head
    for store, fingerprint, spec in (
        (StoreHead(records=13, t_last=T0, token=STORE.token), "f", "s"),  # store moved on
        (STORE, "g", "s"),  # another configuration
        (STORE, "f", "other"),
    ):
        assert _state.matching(folder, store, fingerprint, spec) is None
    assert list(_state.quarantine_lines(folder, head)) == [(1, 0, "line 1\n"), (3, 0, "line 3\n")]


def test_a_version_without_its_commit_is_removed_and_old_ones_are_collected(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "state"
    _state.prepare(folder, None)
    _state.write_qlines(folder, None, 1, [(1, 0, "line 1\n")])
    _state.SparkPending(folder=folder, head=_head(1)).commit(STORE)
    head = _state.committed(folder)
    assert head is not None
    assert _state.prepare(folder, head) == 2
    (folder / "v2" / "units").mkdir(parents=True)  # a run that dies before its commit
    assert _state.prepare(folder, head) == 2 and not (folder / "v2" / "units").exists()
    _state.write_qlines(folder, head, 2, [(5, 1, "line 5\n")])
    later = StoreHead(records=20, t_last=T0 + 1, token=STORE.token)
    tables = {"qlines": (1, 2)}
    _state.SparkPending(folder=folder, head=_head(2, tables=tables)).commit(later)
    assert (folder / "v1" / "qlines.jsonl").exists()  # still read by version 2
    assert not (folder / "v1" / "HEAD.json").exists()
    head = _state.committed(folder)
    assert [line for _r, _p, line in _state.quarantine_lines(folder, head)] == [
        "line 1\n",
        "line 5\n",
    ]
    assert _state.prepare(folder, head) == 3
    _state.SparkPending(folder=folder, head=_head(3, tables={"qlines": ()})).commit(later)
    assert sorted(p.name for p in folder.iterdir()) == ["CURRENT", "v3"]


def test_the_state_belongs_to_a_configuration_not_to_a_path(tmp_path: Path) -> None:
    request = AggregateRequest(
        source=JsonlSource(path=tmp_path / "a.jsonl"),
        queries=QUERIES,
        constraint=CONSTRAINTS[0],
        release_times=[T0],
        first_interval=1,
        clock=T0,
    )
    from dataclasses import replace

    moved = replace(request, source=JsonlSource(path=tmp_path / "tail.jsonl"))
    assert _state.spec_digest(moved) == _state.spec_digest(request)
    assert _state.spec_digest(replace(request, constraint=CONSTRAINTS[1])) != (
        _state.spec_digest(request)
    )
