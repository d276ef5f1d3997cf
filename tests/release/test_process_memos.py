"""The process's memos of row noise terms (``dpcr.release._terms._TREE_TERMS``) and of their
cache keys (``dpcr.release._uncertainty._KEYS``): a memo answers what the computation does
(other variances, other terms), keeps a few entries, the ones used last, and gives the same
answers when threads use it at once (a session's intervals are computed in a thread beside
the step's)."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpcr.release._terms as terms_module
import dpcr.release._uncertainty as uncertainty
from dpcr._lastused import LastUsed
from dpcr.accounting.events import DiscreteLaplaceEvent
from dpcr.mechanisms import noise_variance
from dpcr.plans import TreeRelease
from dpcr.release._terms import closed_form_terms
from dpcr.release._uncertainty import _terms, estimator_weights


def _tree(n: int, scales: dict[int, int], branching: int = 2) -> tuple[Any, ...]:
    """A Honaker tree over ``n`` intervals, its nodes, their variances (layer l's event of
    scale ``scales[l] / 2``) and event ids (one per layer)."""
    plan = TreeRelease(start=0, period=10**6, branching=branching, estimator="honaker")
    nodes = plan.due(0, n)
    events = {lv: DiscreteLaplaceEvent(scale=Fraction(s, 2), sensitivity=Fraction(1))
              for lv, s in scales.items()}  # fmt: skip
    var = {node: noise_variance(events[node[0]]) for node in nodes}
    ids = np.array([node[0] for node in nodes], dtype=np.int64)
    return plan, nodes, var, ids


def _key_sets() -> LastUsed[Any, Any]:
    """An empty memo of key sets, as ``dpcr.release._uncertainty._KEYS`` starts."""
    return LastUsed(uncertainty._KEY_SETS_KEPT, uncertainty._too_many)


def _probe(plan: Any, nodes: Any, var: Any, ids: Any, n: int) -> tuple[list[Any], list[Any]]:
    change_w, est_w = estimator_weights(plan, nodes, var, n)
    return [_terms(change_w[i], ids) for i in range(n)], [_terms(est_w[i], ids) for i in range(n)]


def test_other_variances_give_other_memoised_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same tree, the same events' ids, other variances (another budget share per layer,
    as another plan, ρ or σ gives): Honaker's weights, so the rows' terms, differ, and each
    call gives the probe's terms, whatever was memoised before it."""
    monkeypatch.setattr(terms_module, "_TREE_TERMS", LastUsed(terms_module._TREES_KEPT))
    n = 37
    plan, nodes, var_a, ids = _tree(n, {lv: 3 for lv in range(7)})
    _, _, var_b, _ = _tree(n, {lv: 3 + 4 * lv for lv in range(7)})
    first = closed_form_terms(plan, nodes, var_a, ids, n, range(n))
    second = closed_form_terms(plan, nodes, var_b, ids, n, range(n))
    again = closed_form_terms(plan, nodes, var_a, ids, n, range(n))
    assert first is not None and second is not None and again is not None
    assert first[1] != second[1]  # (the test means something: the variances matter)
    assert list(first) == list(again) == list(_probe(plan, nodes, var_a, ids, n))
    assert list(second) == list(_probe(plan, nodes, var_b, ids, n))
    # the same variances scaled (the same ratios): the same weights, the same terms
    scaled = {node: 9.0 * v for node, v in var_a.items()}
    assert closed_form_terms(plan, nodes, scaled, ids, n, range(n)) == first


def test_the_memos_keep_the_entries_used_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long run of other trees (a session's steps, each with more rows) leaves
    ``_TREES_KEPT`` of them, the ones used last; the key sets likewise."""
    monkeypatch.setattr(terms_module, "_TREE_TERMS", LastUsed(terms_module._TREES_KEPT))
    kept = terms_module._TREES_KEPT
    real, computed = terms_module._tree_terms_of, []

    def counted(*args: Any) -> Any:
        computed.append(len(args[4]))
        return real(*args)

    monkeypatch.setattr(terms_module, "_tree_terms_of", counted)
    plan, nodes, var, ids = _tree(8, {lv: 3 for lv in range(4)})
    closed_form_terms(plan, nodes, var, ids, 8, range(8))
    for n in range(9, 9 + 3 * kept):
        tree = _tree(n, {lv: 3 for lv in range(6)})
        closed_form_terms(*tree, n, range(n))
        closed_form_terms(plan, nodes, var, ids, 8, range(8))  # (used again: kept)
        assert len(terms_module._TREE_TERMS) <= kept
    assert computed == [8, *range(9, 9 + 3 * kept)]
    last = 8 + 3 * kept
    closed_form_terms(*_tree(last, {lv: 3 for lv in range(6)}), last, range(last))
    closed_form_terms(*_tree(9, {lv: 3 for lv in range(6)}), 9, range(9))
    assert computed[-1:] == [9]  # (the last tree was kept, the first of the run was not)

    monkeypatch.setattr(uncertainty, "_KEYS", _key_sets())
    sets = uncertainty._KEY_SETS_KEPT
    mine = uncertainty._keys_of("2", ["mine"])
    for i in range(3 * sets):
        uncertainty._keys_of("2", [f"event {i}"])[((1.0, 0, i),)] = "k"
        assert uncertainty._keys_of("2", ["mine"]) is mine
        assert len(uncertainty._KEYS) <= sets
    monkeypatch.setattr(uncertainty, "_KEYS_LIMIT", 10)
    mine.update({((1.0, 0, i),): "k" for i in range(11)})
    assert uncertainty._keys_of("2", ["mine"]) == {}  # (past the limit: cleared)


def test_threads_at_once_get_the_terms_of_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads asking for more trees than are kept, all at once, with the interpreter switching
    threads as often as it can: no error, and every answer is the one computed alone."""
    monkeypatch.setattr(terms_module, "_TREE_TERMS", LastUsed(terms_module._TREES_KEPT))
    monkeypatch.setattr(uncertainty, "_KEYS", _key_sets())
    trees = [(_tree(n, {lv: 3 + lv for lv in range(5)}), n) for n in range(5, 17)]
    alone = [closed_form_terms(*tree, n, range(n)) for tree, n in trees]
    errors: list[BaseException] = []
    wrong: list[int] = []

    def work(offset: int) -> None:
        try:
            for round_ in range(40):
                i = (offset + round_) % len(trees)
                tree, n = trees[i]
                if closed_form_terms(*tree, n, range(n)) != alone[i]:
                    wrong.append(i)
                keys = uncertainty._keys_of("2", [f"event {i % 7}"])
                keys.setdefault(((1.0, 0, n),), str(n))
        except BaseException as exc:  # (reported by the test's thread)
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert not wrong
    assert len(terms_module._TREE_TERMS) <= terms_module._TREES_KEPT


class _SlowToRemove(dict):  # type: ignore[type-arg]
    """A dictionary that waits before it removes a key (another thread runs meanwhile)."""

    def pop(self, *args: Any) -> Any:
        time.sleep(0.05)
        return super().pop(*args)

    def __delitem__(self, key: Any) -> None:
        time.sleep(0.05)
        super().__delitem__(key)


def test_two_threads_making_room_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads adding a tree to a full memo at the same time each make room for theirs
    (without the lock both chose the same oldest entry, and the second removal raised)."""
    memo: LastUsed[Any, Any] = LastUsed(1)
    memo.entries = _SlowToRemove()
    monkeypatch.setattr(terms_module, "_TREE_TERMS", memo)
    closed_form_terms(*_tree(4, {lv: 3 for lv in range(3)}), 4, range(4))
    trees = [(_tree(n, {lv: 3 for lv in range(3)}), n) for n in (5, 6)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        tree, n = trees[i]
        start.wait()
        try:
            closed_form_terms(*tree, n, range(n))
        except BaseException as exc:  # (reported by the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(memo) == 1


def test_the_cache_file_written_while_another_thread_adds_intervals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread computing intervals (a session step's warming) while another writes the new
    entries of the cache file (``cached_on_disk`` at its end): no error, and the file holds
    every entry this thread added."""
    from dpcr.mechanisms import Interval
    from dpcr.plans import DisjointRelease
    from dpcr.release._uncertainty import cached_on_disk, row_intervals

    monkeypatch.setattr(uncertainty, "_CACHE", {})
    monkeypatch.setattr(uncertainty, "_SEEN", {})
    plan = DisjointRelease(start=0, period=10)
    nodes = plan.due(0, 1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def computing() -> None:
        try:
            for i in itertools.count(1):
                if stop.is_set():
                    return
                event = DiscreteLaplaceEvent(scale=Fraction(i, 7), sensitivity=Fraction(1))
                row_intervals(plan, nodes, dict.fromkeys(nodes, event),
                              dict.fromkeys(nodes, noise_variance(event)), 1)  # fmt: skip
        except BaseException as exc:  # (reported by the test's thread)
            errors.append(exc)

    other = threading.Thread(target=computing)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    other.start()
    path = tmp_path / "intervals.jsonl"
    try:
        for round_ in range(4):
            with cached_on_disk(path):
                for j in range(20_000):
                    uncertainty._CACHE[f"mine {round_} {j}"] = Interval(1.0, 0.95, 1.0, "exact")
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(interval)
    assert not errors, errors[:1]
    written = {line.split('"')[1] for line in path.read_text().splitlines()}
    assert {f"mine {r} {j}" for r in range(4) for j in range(20_000)} <= written
