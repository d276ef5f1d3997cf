"""What a long-running process keeps between its runs: a connection and a calibration.

``dpcr follow`` runs one release step every time the clock closes an interval, seconds apart.
Each :meth:`dpcr.release.ContinualRelease.run` would open a DuckDB connection, attach the
incremental state file, calibrate every layer and, at the end, detach the state (a checkpoint)
and close. A
session keeps the connection with the state attached and the calibration (which depends on the
configuration, not on the clock), and clears the run's temporary tables after each run, so a
step costs what its new records cost. The state file stays open (and locked by DuckDB) while
the session lives; its writes are committed as before, so a crash loses nothing a run
committed. After a run that raised, the connection is closed and the next run opens a fresh one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import TYPE_CHECKING, Self

import duckdb

from dpcr.release._calibrate import Calibration, calibrate

if TYPE_CHECKING:
    from dpcr.release._settings import ReleaseSettings

__all__ = ["Session", "open_connection"]


def open_connection() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    return con


def clear_temporary(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the temporary views and tables a run left on ``con``."""
    views = con.execute(
        "SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal"
    ).fetchall()
    for (name,) in views:
        con.execute(f'DROP VIEW IF EXISTS temp."{name}"')
    tables = con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
    for (name,) in tables:
        con.execute(f'DROP TABLE IF EXISTS temp."{name}"')


class Session:
    """What runs of one release share: a connection and a calibration (module docstring).
    :class:`dpcr.release.ReleaseSession` adds the runs."""

    def __init__(self, settings: ReleaseSettings) -> None:
        self.settings = settings
        self._con: duckdb.DuckDBPyConnection | None = None
        self._cal: Calibration | None = None

    def calibration(self) -> Calibration:
        """The calibration of every layer (computed on first use)."""
        if self._cal is None:
            self._cal = calibrate(self.settings)
        return self._cal

    @contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The session's connection for one run: cleared of the run's temporary objects after
        it, closed (and reopened by the next run) when the run raised."""
        if self._con is None:
            self._con = open_connection()
        try:
            yield self._con
        except BaseException:
            self._reset()
            raise
        try:
            clear_temporary(self._con)
        except duckdb.Error:
            self._reset()

    def _reset(self) -> None:
        con, self._con = self._con, None
        if con is not None:
            with suppress(duckdb.Error):
                con.close()

    def close(self) -> None:
        """Detach the state (a checkpoint) and close the connection."""
        self._reset()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
