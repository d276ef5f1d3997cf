"""A store kept open between the runs of a long-running session, its lock released meanwhile.

A session (``release.session()``, ``dpcr follow``) runs a step each time an interval closes. It
keeps its store's SQLite connection open from step to step (a step neither opens the store,
running its schema and head checks again, nor closes it, checkpointing the write-ahead log), but
holds the store's lock only during a step, as separate runs do: between steps a ``dpcr run``,
``dpcr verify`` or another process may open the store. The next step takes the lock again and
continues with the open connection only when the store is as the session left it: no other
connection committed to it (SQLite's ``data_version``) and its file and write-ahead log have the
inode, size and modification time they had (a store replaced or copied over). Otherwise it is
closed and opened afresh, with every check an opening makes.
"""

from __future__ import annotations

from dpcr.store._store import Store

__all__ = ["KeptStore"]


class KeptStore(Store):
    """A :class:`Store` (for writing) that a session keeps open between its runs: :meth:`pause`
    after a run, :meth:`resume` before the next."""

    #: A session's runs may each be called from another thread than the one that opened the
    #: store (``dpcr follow`` runs its steps in a worker thread and closes the session from the
    #: main thread); one thread at a time uses it, which SQLite's serialized mode allows.
    ANY_THREAD = True
    _left: object = None

    def pause(self) -> None:
        """Release the lock, the connection left open (module docstring)."""
        self._left = self.unlock()

    def resume(self) -> bool:
        """Take the lock again (refused while another run holds it); whether the store is as
        :meth:`pause` left it (else close it: it is to be opened afresh)."""
        same = self.relock(self._left)
        self._left = None
        return same

    def discard(self) -> None:
        """Close it without recording it as verified (its files changed since :meth:`pause`:
        the next opening checks its heads in full)."""
        self.close(verified=False)
