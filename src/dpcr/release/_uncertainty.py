"""95 % intervals of the published estimates, from the exact noise distribution the plan implies.

Every plan's estimator is linear in the released nodes. Probing it with unit vectors (one
column per node: ``values[node] = e_node``) gives the weight of every node in every published
change and running value; with the nodes' noise events, :func:`dpcr.mechanisms.half_width`
turns each row of weights into an interval of proven coverage (docs/uncertainty.md). The
intervals depend on the plan, the events and ``n`` only, never on the data.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from dpcr._fs import read_nofollow, write_atomic
from dpcr._lastused import LastUsed
from dpcr.accounting.events import DiscreteGaussianEvent
from dpcr.errors import DpcrError
from dpcr.mechanisms import (
    Interval,
    NoiseGroups,
    gaussian_half_width,
    group_half_widths,
    half_width,
    half_widths_iid,
)
from dpcr.plans.base import Node
from dpcr.release._terms import closed_form_terms

__all__ = ["LEVEL", "MAX_PROBE", "METHOD", "METHODS", "cached_on_disk", "estimator_weights",
           "noise_terms", "row_intervals"]

#: the nominal coverage of every published interval
LEVEL = 0.95
#: How published intervals are computed: "1", row by row by convolution
#: (:func:`dpcr.mechanisms.half_width`, the method of stores created before method 2);
#: "2", from characteristic functions (:func:`dpcr.mechanisms.half_widths`), the method of
#: every store created now. A store publishes with the method it was created with, so its
#: published intervals never change.
METHODS = ("1", "2")
METHOD = "2"
Terms = tuple[tuple[float, int, int], ...]
#: the most (reporting intervals x nodes) weights computed by probing
MAX_PROBE = 1 << 24


def estimator_weights(
    plan: Any, nodes: Sequence[Node], variances: Mapping[Node, float], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(change, estimate)`` weights, each ``n x len(nodes)``: row i, column j is the weight of
    node ``nodes[j]`` in interval ``i + 1``'s published change / running value."""
    eye = np.eye(len(nodes), dtype=np.int64)
    values = {node: eye[j] for j, node in enumerate(nodes)}
    est = plan.estimate(values, variances, n)
    return (np.asarray(est.change, dtype=np.float64).reshape(n, -1),
            np.asarray(est.estimate, dtype=np.float64).reshape(n, -1))


def _terms(row: np.ndarray, ids: np.ndarray) -> tuple[tuple[float, int, int], ...]:
    """The row's noise as sorted (|weight|, event id, copies) groups (noise is symmetric: the
    sign does not matter)."""
    nz = np.flatnonzero(row)
    if nz.size == 0:
        return ()
    e = ids[nz]
    if e.min() == e.max():  # one event: group by weight alone (the same groups, in order)
        weights, counts = np.unique(np.abs(row[nz]), return_counts=True)
        first = int(e[0])
        return tuple((float(w), first, int(c)) for w, c in zip(weights, counts, strict=True))
    pairs = np.stack([np.abs(row[nz]), ids[nz].astype(np.float64)], axis=1)
    groups, counts = np.unique(pairs, axis=0, return_counts=True)
    return tuple((float(w), int(e), int(c)) for (w, e), c in zip(groups, counts, strict=True))


#: Intervals by their noise (terms with events by repr): they depend on the plan's weights and
#: events only, so every run and report of a process shares them. Bounded.
_CACHE: dict[str, Interval] = {}
_CACHE_LIMIT = 200_000
#: Each cache file as this process last read or wrote it, (inode, size, modification time in
#: ns), with the size and first key of :data:`_CACHE` then: a file still so, while ``_CACHE``
#: still holds that key and as many entries, holds nothing that ``_CACHE`` lacks and is not
#: read again (:func:`_holds`).
_SEEN: dict[str, tuple[tuple[int, int, int] | None, int, str | None, bool]] = {}
_CLEARED = [0]
#: The intervals of a session's step are computed in a thread beside the step's
#: (``dpcr.release._loop``), which may still be computing while the next step's thread
#: publishes: what iterates or clears :data:`_CACHE` holds this lock (single
#: reads and inserts of equal values need none).
_LOCK = threading.Lock()


def _mark(name: str, path: Path, lines: bool) -> None:
    """Note the file ``path`` as this process leaves it (``lines``: of one entry per line)."""
    with _LOCK:
        held = len(_CACHE), next(iter(_CACHE), None)
    _SEEN[name] = (_file_state(path), *held, lines)


def _holds(name: str, path: Path) -> bool:
    """Whether ``_CACHE`` holds every entry of the cache file ``path``, which has one entry
    per line (see ``_SEEN``)."""
    seen = _SEEN.get(name)
    if seen is None or seen[0] is None or seen[0] != _file_state(path):
        return False
    return len(_CACHE) >= seen[1] and (seen[2] is None or seen[2] in _CACHE) and seen[3]


def _file_state(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _read_cache(path: Path) -> tuple[dict[str, list[Any]], bool]:
    """The entries of the cache file at ``path`` and whether new ones can be appended to it:
    one JSON array ``[key, half-width, coverage, std, method]`` per line (a line that does not
    parse, such as one cut short, is skipped). A file of one JSON object (the entries by key, as
    dpcr wrote it before) is read, and rewritten when entries are added."""
    try:
        text = read_nofollow(path).decode("utf-8")
    except (DpcrError, ValueError):
        return {}, False
    if text.startswith("{"):
        with suppress(ValueError):
            loaded = json.loads(text)
            if isinstance(loaded, dict):
                return loaded, False
        return {}, False
    out: dict[str, list[Any]] = {}
    for line in text.splitlines():
        with suppress(ValueError, TypeError):
            key, *value = json.loads(line)
            if isinstance(key, str):
                out[key] = value
    return out, text.endswith("\n") or not text


@contextmanager
def cached_on_disk(path: Path) -> Iterator[None]:
    """Intervals computed by earlier processes for the same release, from ``path`` (a file
    beside the store, :func:`_read_cache`; it holds half-widths by noise, no data), and the new
    ones appended. A missing or unreadable file is only a cold cache; a file as this process
    left it is not read again (``_SEEN``)."""
    name = str(path)
    appendable = _holds(name, path)
    loaded: dict[str, list[Any]] = {}
    if not appendable:
        loaded, appendable = _read_cache(path)
        for k, v in loaded.items():
            with suppress(TypeError, ValueError):
                _CACHE.setdefault(k, Interval(*v))
        _mark(name, path, appendable)
    with _LOCK:
        count, cleared = len(_CACHE), _CLEARED[0]
    yield
    with _LOCK:
        start = count if cleared == _CLEARED[0] else 0  # (entries are added at the end)
        new = [[k, v.half_width, v.coverage, v.std, v.method]
               for k, v in itertools.islice(_CACHE.items(), start, None)]  # fmt: skip
    if not new:
        return
    with suppress(DpcrError, OSError):  # only a cache (a full disk, a link there: not written)
        if appendable and _file_state(path) is not None:
            _append(path, "".join(json.dumps(e) + "\n" for e in new))
        else:  # (a new file, or one of the earlier form: its entries and the new ones)
            every = [[k, *v] for k, v in loaded.items()] + new
            write_atomic(path, "".join(json.dumps(e) + "\n" for e in every), mode=0o600,
                         durable=False)  # fmt: skip
        _mark(name, path, True)


def _append(path: Path, text: str) -> None:
    """Append ``text`` to the file at ``path`` (a link is not followed)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0))  # fmt: skip
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def noise_terms(
    plan: Any, nodes: Sequence[Node], events: Mapping[Node, Any],
    variances: Mapping[Node, float], n: int, picked: Sequence[int],
) -> tuple[list[Any], dict[str, list[Terms]]]:
    """The distinct noise events (by repr) and, for the rows ``picked`` (0-based reporting
    intervals), the noise of each published change and running value as sorted
    ``(|weight|, event number, copies)`` groups: in closed form where the plan has one
    (:mod:`dpcr.release._terms`), else by probing the estimator."""
    # Equal events (equal reprs) get one id, so grouping a row compares numbers only.
    # (A release's nodes share a few event objects: each object's repr is taken once.)
    by_repr: dict[str, int] = {}
    by_object: dict[int, int] = {}  # id(event) -> its id (the events outlive the call)
    distinct: list[Any] = []
    objects = list(map(events.__getitem__, nodes))
    for e in dict(zip(map(id, objects), objects, strict=True)).values():  # (in order)
        key = repr(e)
        if key not in by_repr:
            by_repr[key] = len(distinct)
            distinct.append(e)
        by_object[id(e)] = by_repr[key]
    ids = np.fromiter(map(by_object.__getitem__, map(id, objects)), dtype=np.int64,
                      count=len(objects))  # fmt: skip
    closed = closed_form_terms(plan, nodes, variances, ids, n, picked)
    if closed is not None:
        return distinct, {"change": list(closed[0]), "estimate": list(closed[1])}
    change_w, est_w = estimator_weights(plan, nodes, variances, n)
    return distinct, {name: [_terms(w[i], ids) for i in picked]
                      for name, w in (("change", change_w), ("estimate", est_w))}  # fmt: skip


def row_intervals(
    plan: Any, nodes: Sequence[Node], events: Mapping[Node, Any],
    variances: Mapping[Node, float], n: int, *, rows: Sequence[int] | None = None,
    method: str = METHOD, done: Callable[[int, int], None] | None = None,
) -> tuple[list[Interval], list[Interval]]:
    """Per reporting interval (``rows``: 0-based, default all ``n``): the interval of the change
    and of the running value. ``events[node]``: the noise event of the node's instance.
    ``method``: :data:`METHODS` (a store publishes with the method it was created with).
    ``done(rows, total)``: called as rows not remembered are computed (method 2)."""
    if method not in METHODS:
        raise ValueError(f"interval method must be one of {METHODS}, got {method!r}")
    picked = range(n) if rows is None else rows
    fast = _one_gaussian(plan, nodes, events, n, picked)
    if fast is not None:
        return fast
    distinct, terms_of = noise_terms(plan, nodes, events, variances, n, picked)
    reprs = [repr(e) for e in distinct]
    if method == "1":  # (the keys of the caches method 1 wrote)

        def key_of(terms: Terms) -> str:
            return repr(tuple((w, reprs[e], c) for w, e, c in terms))

    else:  # the events once, then the groups by event number: a digest of both
        signature = hashlib.sha256(repr(reprs).encode()).hexdigest()[:16]

        def key_of(terms: Terms) -> str:
            digest = hashlib.blake2b(repr(terms).encode(), digest_size=16).hexdigest()
            return f"{method}|{signature}|{digest}"

    seen = _keys_of(method, reprs)  # (rows often share their terms: a tree's changes all do)

    def key_once(terms: Terms) -> str:
        key = seen.get(terms)
        if key is None:
            key = seen[terms] = key_of(terms)
        return key

    keys = {name: [key_once(t) for t in rows_terms] for name, rows_terms in terms_of.items()}
    known: dict[str, Interval] = {}
    missing: dict[str, Terms] = {}
    for name, rows_terms in terms_of.items():
        for key, terms in zip(keys[name], rows_terms, strict=True):
            hit = _CACHE.get(key)
            if hit is not None:
                known[key] = hit
            elif key not in missing:
                missing[key] = terms
    if missing:
        if method == "1":
            new = _legacy_intervals(missing, distinct)
        else:
            found = group_half_widths(NoiseGroups.of(list(missing.values()), distinct),
                                      level=LEVEL, done=done)
            new = dict(zip(missing, found, strict=True))
        with _LOCK:
            if len(_CACHE) + len(new) > _CACHE_LIMIT:
                _CACHE.clear()
                _CLEARED[0] += 1
            _CACHE.update(new)
        known.update(new)
    return [known[k] for k in keys["change"]], [known[k] for k in keys["estimate"]]


#: Per interval method and distinct events (their reprs), the cache key of each row's terms
#: made in this process: a run makes its rows' keys while it computes their intervals, and
#: again to publish them. The :data:`_KEY_SETS_KEPT` sets used last, cleared past
#: :data:`_KEYS_LIMIT` terms together (the terms they hold alive: about 3.5 kB a row of an
#: hourly binary tree; a run publishes at most ``MAX_RUN_INTERVALS`` rows, and a session's
#: later steps ask for the keys of new rows). A :class:`~dpcr._lastused.LastUsed` (a set's
#: keys are made outside its lock: two threads make one key alike).
_KEYS_LIMIT = 20_000
_KEY_SETS_KEPT = 4


def _too_many(sets: Iterable[dict[Terms, str]]) -> bool:
    return sum(map(len, sets)) > _KEYS_LIMIT


_KEYS: LastUsed[tuple[str, tuple[str, ...]], dict[Terms, str]] = LastUsed(_KEY_SETS_KEPT,
                                                                          _too_many)


def _keys_of(method: str, reprs: Sequence[str]) -> dict[Terms, str]:
    """The keys made in this process for the terms of ``method`` over the events ``reprs``."""
    return _KEYS.setdefault((method, tuple(reprs)), dict)


def _legacy_intervals(missing: Mapping[str, Terms], distinct: Sequence[Any]) -> dict[str, Interval]:
    """Method 1 (:func:`dpcr.mechanisms.half_width`, one row at a time): rows whose noise is c
    copies of one node's are computed together, sharing the node's spectrum (the same numbers
    as one by one)."""
    out: dict[str, Interval] = {}
    runs: dict[tuple[float, int], list[tuple[int, str]]] = {}
    for key, terms in missing.items():
        if len(terms) == 1:
            w, e, c = terms[0]
            runs.setdefault((w, e), []).append((c, key))
        else:
            out[key] = half_width([(w, distinct[e], c) for w, e, c in terms], level=LEVEL)
    for (w, e), items in runs.items():
        items.sort()
        found = half_widths_iid(w, distinct[e], [c for c, _ in items], level=LEVEL)
        out.update((key, iv) for (_, key), iv in zip(items, found, strict=True))
    return out


def _one_gaussian(
    plan: Any, nodes: Sequence[Node], events: Mapping[Node, Any], n: int, picked: Sequence[int],
) -> tuple[list[Interval], list[Interval]] | None:
    """The intervals from the plan's weight aggregates (``plan.weight_stats``) when every node
    carries the same discrete Gaussian event: the normal method needs only ``Σ w²``, ``max |w|``
    and the number of terms of a row, O(1) per row instead of probing the estimator (O(n) per
    node) and grouping O(n) terms per row. None (probe) when a row would take another method."""
    if not hasattr(plan, "weight_stats") or not nodes:
        return None
    distinct = {repr(events[node]): events[node] for node in nodes}
    if len(distinct) != 1 or sorted(nodes) != sorted(plan.due(0, n)):
        return None
    (event,) = distinct.values()
    if not isinstance(event, DiscreteGaussianEvent):
        return None
    out: list[list[Interval]] = []
    for stats in plan.weight_stats(n):
        ivs = []
        for i in picked:
            if stats.integer[i]:
                return None  # an integer row may take the exact method
            iv = gaussian_half_width(sum_sq=float(stats.sum_sq[i]),
                                     max_abs=float(stats.max_abs[i]),
                                     count=int(stats.count[i]), event=event, level=LEVEL)
            if iv is None:
                return None
            ivs.append(iv)
        out.append(ivs)
    return out[0], out[1]
