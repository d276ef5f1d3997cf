"""A store to read: the caller's, or one opened for a ``with`` block."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from dpcr.store._store import Store

__all__ = ["reading"]


def reading(
    store: Store | None, path: str | Path, *, fingerprint: str, mode: str
) -> AbstractContextManager[Store]:
    """``store`` itself for a ``with`` block (left open: a caller's snapshot), or the store at
    ``path`` opened for the block."""
    if store is not None:
        return nullcontext(store)
    return Store(path, fingerprint=fingerprint, mode=mode)
