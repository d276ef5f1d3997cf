"""A process's memo of the values used last, safe to share between threads.

A session computes its rows' intervals in a thread beside the step's, which may still be
computing while the next step's thread publishes: both read and fill the same memos. A
:class:`LastUsed` reads and changes its entries under its own lock and keeps the ``kept``
entries used last (a read counts as a use); the values are made outside the lock (two
threads making one key's value make equal values, and the later one is kept).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

__all__ = ["LastUsed"]

K = TypeVar("K")
V = TypeVar("V")


class LastUsed(Generic[K, V]):
    """At most ``kept`` entries, the ones used last; all of them dropped when ``too_big``
    says the values together are too big (checked before each :meth:`setdefault`)."""

    def __init__(self, kept: int,
                 too_big: Callable[[Iterable[V]], bool] | None = None) -> None:  # fmt: skip
        self.kept = kept
        self.too_big = too_big
        self.entries: dict[K, V] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: K) -> V | None:
        """The value of ``key`` (None: none), made the one used last."""
        with self._lock:
            value = self.entries.pop(key, None)
            if value is not None:
                self.entries[key] = value
        return value

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` as ``key``'s, the one used last, dropping the least recently used
        entries beyond ``kept``."""
        with self._lock:
            self._put(key, value)

    def made(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, or ``make()``'s (made outside the lock) kept as its value; a
        ``make`` that raises keeps nothing."""
        value = self.get(key)
        if value is None:
            value = make()
            self.put(key, value)
        return value

    def setdefault(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, or ``make()``'s kept as its value (``make`` runs under the
        lock: a cheap constructor, such as ``dict``)."""
        with self._lock:
            if self.too_big is not None and self.too_big(self.entries.values()):
                self.entries.clear()
            value = self.entries.pop(key, None)
            if value is None:
                value = make()
            self._put(key, value)
        return value

    def _put(self, key: K, value: V) -> None:
        self.entries.pop(key, None)
        while self.entries and len(self.entries) >= self.kept:
            del self.entries[next(iter(self.entries))]  # (the least recently used)
        self.entries[key] = value
