"""Progress of a multi-statement DuckDB job, for a progress bar.

A job (loading a changelog, bounding and aggregating it) is a known number of steps, each one or
a few SQL statements. :class:`Steps` reports ``(done, total)`` in thousandths of the job: the
finished steps, plus the running statement's own progress read from DuckDB
(``query_progress()``, polled from a thread while the statement runs). Without a callback it
does nothing and starts no thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import duckdb

#: ``report(done, total)``
Report = Callable[[int, int], None]

_SCALE = 1000
_POLL_S = 0.2


class Steps:
    """``steps`` steps of a job on ``con``, reported to ``report`` (see the module docstring)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, report: Report | None, steps: int) -> None:
        self._con = con
        self._report = report
        self._steps = max(1, steps)
        self._done = 0
        self._running: AbstractContextManager[None] | None = None
        if report is not None:
            try:
                con.execute("SET enable_progress_bar = true")
                con.execute("SET enable_progress_bar_print = false")
            except duckdb.Error:
                pass
            report(0, self._steps * _SCALE)

    def next(self) -> None:
        """Finish the running step (if any) and start the next one."""
        self.close()
        self._running = self.step()
        self._running.__enter__()

    def close(self) -> None:
        """Finish the running step (if any)."""
        running, self._running = self._running, None
        if running is not None:
            running.__exit__(None, None, None)

    @contextmanager
    def step(self) -> Iterator[None]:
        """One step: the statements run inside count as its progress."""
        if self._report is None:
            yield
            return
        report = self._report
        stop = threading.Event()
        base = min(self._done, self._steps) * _SCALE
        total = self._steps * _SCALE

        def poll() -> None:
            last = -1
            while not stop.wait(_POLL_S):
                try:
                    pct = float(self._con.query_progress())
                except (duckdb.Error, RuntimeError, ValueError):
                    return
                if pct < 0:
                    continue
                now = base + int(min(pct, 100.0) * _SCALE / 100)
                if now > last:
                    last = now
                    report(now, total)

        thread = threading.Thread(target=poll, name="dpcr-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            self._done += 1
            report(min(self._done, self._steps) * _SCALE, total)
