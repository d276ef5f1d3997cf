"""What a long command tells its operator while it works, on stderr.

* ``text`` (default): a progress bar per stage (percentage, count, rate, elapsed and remaining
  time), drawn with rich, only when stderr is a terminal;
* ``json``: one JSON object per line per event (``{"time", "level", "event", ...}``) for log
  collectors: every progress report, what was written, errors;
* ``--quiet``: nothing but errors.

The release loop reports progress through a ``progress(stage, done, total)`` callback; every
stage it names gets its own bar, which pulses while a stage has reported only its start
(``done = 0`` of ``total = 1``).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

__all__ = ["Feedback", "LogFormat"]

LogFormat = Literal["text", "json"]


class Feedback:
    """Progress and events of one command. Use as a context manager; ``progress`` is the
    release loop's callback."""

    def __init__(self, *, log_format: LogFormat = "text", quiet: bool = False,
                 stream: TextIO | None = None) -> None:
        self._format = log_format
        self._quiet = quiet
        self._stream = stream if stream is not None else sys.stderr
        self._bar: Any = None
        self._tasks: dict[str, Any] = {}
        self._last: dict[str, tuple[int, int]] = {}

    def __enter__(self) -> Feedback:
        if self._format == "text" and not self._quiet and self._stream.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description:<28}"),
                BarColumn(),
                TaskProgressColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(file=self._stream, highlight=False),
            )
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def progress(self, stage: str, done: int, total: int) -> None:
        """One progress report of ``stage``: ``done`` of ``total`` steps."""
        total = max(total, 1)
        if self._format == "json" and not self._quiet:
            if self._last.get(stage) != (done, total):
                self._last[stage] = (done, total)
                self.event("progress", stage=stage, done=done, total=total)
            return
        if self._bar is None:
            return
        # a stage reported only as "started" (0 of 1) pulses until it reports more
        size = None if total == 1 and done == 0 else total
        task = self._tasks.get(stage)
        if task is None:
            for other in self._tasks.values():  # a new stage: the earlier ones are finished
                t = self._bar.tasks[other]
                self._bar.update(other, total=t.total or 1, completed=t.total or 1)
            task = self._tasks[stage] = self._bar.add_task(stage, total=size, rate="")
        self._bar.update(task, completed=done, total=size)
        speed = self._bar.tasks[task].speed
        self._bar.update(task, rate=f"{speed:,.0f}/s" if speed and size else "")

    def event(self, event: str, *, level: str = "info", **fields: Any) -> None:
        """One log event (JSON mode only; text mode shows results on stdout instead)."""
        if self._format != "json" or (self._quiet and level != "error"):
            return
        record = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"),
                  "level": level, "event": event, **fields}
        self._stream.write(json.dumps(record, default=str) + "\n")
        self._stream.flush()

    def error(self, message: str) -> bool:
        """Log an error as JSON; False when the caller should print it as text."""
        if self._format != "json":
            return False
        self.event("error", level="error", message=message)
        return True
