"""What a long-running process keeps between its runs: a connection, a calibration, the ledger.

``dpcr follow`` runs one release step every time the clock closes an interval, seconds apart.
Each :meth:`dpcr.release.ContinualRelease.run` would open a DuckDB connection, attach the
incremental state file, calibrate every layer and, at the end, detach the state (a checkpoint)
and close. A session keeps the connection with the state attached and the calibration (which
depends on the configuration, not on the clock), and the store's ledger as parsed by its last
run (read again only when the store's head is not the one the session committed last). Each run
works in its own cursor of the connection, whose temporary tables vanish when it closes (the
attached state belongs to the connection's database, not to a cursor), so a step costs what its
new records cost. The store's connection stays open too, its lock held during each run only
(:mod:`dpcr.store._kept`: a step neither opens the store again nor checkpoints its write-ahead
log, and a store another process committed to, or replaced, between two steps is opened
afresh). The state file stays open (and locked by DuckDB) while the session lives; the SQL
step's writes are committed as before, and those of steps from memory in batches
(:class:`~dpcr.engines.duckdb_memory.HeldState`): a crash loses at most the batch not yet written,
which the next run replays from the lines those steps read, or rebuilds from the source
(:mod:`dpcr.engines.duckdb_replay` says when). After a run that raised, the steps settled before it
are written, the connection and the store are closed and the next run opens them afresh.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import TYPE_CHECKING, Self

from dpcr.engines.duckdb_memory import HeldState
from dpcr.release._calibrate import Calibration, calibrate
from dpcr.release._ledger import LedgerCache
from dpcr.release._rows import appendable

if TYPE_CHECKING:  # (DuckDB is imported once a run opens a connection)
    import duckdb

    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import KeptStore

__all__ = ["INTERVALS_AHEAD", "Session", "open_connection"]

#: The rows past a session's run whose 95 % intervals it computes with the run's (at least
#: this many, up to as many as it has published, at most ``INTERVALS_AHEAD_MAX``): they depend
#: on the plan and its calibrated events alone, and many rows in one call cost about what one
#: row costs (:func:`dpcr.mechanisms.group_half_widths`), so the next runs find theirs computed.
INTERVALS_AHEAD = 64
INTERVALS_AHEAD_MAX = 1024


def open_connection(memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB database (``memory_limit``: ``[engine] memory_limit``)."""
    import duckdb

    config: dict[str, str | bool | int | float | list[str]] = {}
    if memory_limit is not None:
        config["memory_limit"] = memory_limit.strip()
    con = duckdb.connect(config=config)
    con.execute("SET enable_progress_bar = false")
    return con


class Session:
    """What runs of one release share: a connection, a calibration and the store's parsed
    ledger (module docstring). :class:`dpcr.release.ReleaseSession` adds the runs."""

    def __init__(self, settings: ReleaseSettings) -> None:
        self.settings = settings
        self._con: duckdb.DuckDBPyConnection | None = None
        self._cal: Calibration | None = None
        self.ledger = LedgerCache()
        #: the incremental state's seeds, held between steps (dpcr.engines.duckdb_memory)
        self.held = HeldState()
        #: the rows 1 .. n whose intervals a run computed, and of which events and method
        self._warmed: tuple[str, int] = ("", 0)
        self._spill_set = False
        self._store: KeptStore | None = None
        #: the modes (simulation or not) whose folder layout a run of the session checked
        self._laid_out: set[bool] = set()

    def calibration(self) -> Calibration:
        """The calibration of every layer (computed on first use)."""
        if self._cal is None:
            self._cal = calibrate(self.settings)
        return self._cal

    def intervals_to_warm(
        self, before: int, after: int, method: str, layers: object
    ) -> tuple[int, int] | None:
        """The rows (``first``, ``n``: rows ``first + 1 .. n``) whose intervals a run that
        publishes rows ``before + 1 .. after`` computes while its data step runs (from the
        plan and the events ``layers`` to draw with; ``method``: the store's interval method),
        or None when an earlier run of the session computed them. With rows that only grow
        (:func:`~dpcr.release._rows.appendable`: each row's interval depends on the nodes due
        by it alone), :data:`INTERVALS_AHEAD` rows or more past ``after``, within the plan."""
        key = f"{method}|{layers!r}"
        if self._warmed[0] == key and after <= self._warmed[1]:
            return None
        n = after
        if appendable(self.settings):
            n += min(max(after, INTERVALS_AHEAD), INTERVALS_AHEAD_MAX)
            count = self.settings.plan.schedule().release_count()
            if count is not None:
                n = max(after, min(n, count))
        self._warmed = (key, n)
        return before, n

    def layout_unchecked(self, simulation: bool) -> bool:
        """Whether the layout of the folders (:func:`~dpcr.release._layout.check_layout`) is
        still to be checked for a run in this mode; it is checked by the caller. The session's
        later runs write through the same checks (no link followed, none created), so it is
        checked once per session (again after a run that raised)."""
        unchecked = simulation not in self._laid_out
        self._laid_out.add(simulation)
        return unchecked

    def spill_unset(self) -> bool:
        """Whether the connection's spill folder (``temp_directory``, a setting of its
        database that every cursor shares) is still to be set; it is set by the caller."""
        unset, self._spill_set = not self._spill_set, True
        return unset

    @contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of the session's connection for one run (its temporary objects go with
        it); the connection is closed (and reopened by the next run) when the run raised."""
        import duckdb

        if self._con is None:
            self._con = open_connection(self.settings.engine.memory_limit)
        cursor = self._con.cursor()
        try:
            yield cursor
        except BaseException:
            with suppress(duckdb.Error):
                cursor.close()
            self._reset()
            self.ledger = LedgerCache()
            raise
        try:
            cursor.close()
        except duckdb.Error:
            self._reset()

    @contextmanager
    def store(self, mode: str) -> Iterator[KeptStore]:
        """The release's store in ``mode`` for one run, its lock held during the run: the
        connection of the session's last run when the store is as that run left it
        (:mod:`dpcr.store._kept`), else opened afresh; closed when the run raised."""
        from dpcr.store import KeptStore

        kept = self._store
        if kept is not None and (kept.mode != mode or not kept.resume()):
            self._store = None
            kept.discard()
        if self._store is None:
            self._store = KeptStore(self.settings.store_path,
                                    fingerprint=self.settings.fingerprint(), mode=mode)  # fmt: skip
        try:
            yield self._store
        except BaseException:
            self._close_store()
            raise
        self._store.pause()

    def _close_store(self) -> None:
        self._laid_out.clear()
        store, self._store = self._store, None
        if store is not None:
            store.close()

    def _reset(self) -> None:
        con, self._con = self._con, None
        self._spill_set = False
        self._laid_out.clear()
        if con is not None:
            import duckdb

            # The steps settled from memory that the state file lacks (when they cannot be
            # written, the next run finds the state behind the store and replays or rebuilds
            # it).
            with suppress(duckdb.Error):
                self.held.forget(con)
            with suppress(duckdb.Error):
                con.close()
        self.held.forget()

    def close(self) -> None:
        """Detach the state (a checkpoint), close the connection and the store."""
        try:
            self._reset()
        finally:
            self._close_store()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
