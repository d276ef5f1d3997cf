"""An append-only changelog file that is durable before the source is acknowledged.

:class:`DurableLog` appends whole lines and makes them durable with ``fsync`` before
:meth:`DurableLog.append` returns; only then does a capture acknowledge its source (a
PostgreSQL slot's flush LSN, a Kafka offset). A crash can therefore leave at most one torn last
line (a write that was never acknowledged): it is cut off when the file is opened again, and the
source sends it again. Complete lines are never rewritten, so a reader that remembers how many
bytes it consumed (see :mod:`dpcr.changelog.position`) keeps seeing the same prefix.

The file is created owner-only (0600): it holds the raw rows of the followed table.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from dpcr.errors import ConfigError

__all__ = ["BATCHING", "Batching", "DurableLog", "fsync_dir", "tail_lines"]


@dataclass(frozen=True, slots=True)
class Batching:
    """When a capture writes, reports and stops.

    ``batch_messages``: a batch is written (and the source acknowledged) once it holds that many
    messages (a Kafka capture polls at most that many records at a time); ``batch_seconds``: at
    the latest that long after the last write; ``tick``: ``on_batch`` is called at least that
    often while the source is quiet; ``heartbeat``: the period of a PostgreSQL capture's
    heartbeats (None: none; see :mod:`dpcr.cdc.postgres`); ``idle_exit``: return once no change
    arrived for that many seconds (None: only when asked to stop). Seconds, as floats."""

    idle_exit: float | None = None
    batch_seconds: float = 0.2
    batch_messages: int = 5_000
    heartbeat: float | None = None
    tick: float = 1.0


BATCHING = Batching()  # the defaults


def fsync_dir(path: Path) -> None:
    """Make the directory entry of ``path`` durable (after creating or renaming it)."""
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tail_lines(
    path: Path, *, stop: bytes | tuple[bytes, ...] | None = None, chunk: int = 1 << 16
) -> list[bytes]:
    """The complete lines at the end of ``path``, last first, read backwards until a line that
    contains ``stop`` (or one of the ``stop`` strings; that line included) or the start of the
    file; blank lines are left out."""
    stops = (stop,) if isinstance(stop, bytes) else (stop or ())
    out: list[bytes] = []
    with path.open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        rest = b""
        while end > 0:
            start = max(0, end - chunk)
            f.seek(start)
            block = f.read(end - start) + rest
            end = start
            parts = block.split(b"\n")
            rest = parts[0] if start > 0 else b""
            for line in reversed(parts[1:] if start > 0 else parts):
                if not line.strip():
                    continue
                out.append(line)
                if any(s in line for s in stops):
                    return out
        if rest.strip():
            out.append(rest)
    return out


class DurableLog:
    """Append lines to ``path`` durably (see the module docstring).

    >>> import tempfile
    >>> log = DurableLog(Path(tempfile.mkdtemp()) / "c.jsonl")
    >>> log.append(['{"a":1}', '{"a":2}'])
    >>> log.close()
    >>> (log.path.read_text(), oct(log.path.stat().st_mode & 0o777))
    ('{"a":1}\\n{"a":2}\\n', '0o600')
    """

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = Path(path)
        if not self.path.exists() and not create:
            raise ConfigError(f"{self.path}: no such changelog file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self._fd: int | None = fd
        if new:
            fsync_dir(self.path)
        self.torn = self._cut_torn_line()

    def _cut_torn_line(self) -> int:
        """Cut a last line without its newline (a write a crash interrupted); return how many
        bytes were cut."""
        fd = self._require()
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        with open(self.path, "rb") as f:
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return 0
            data_end = size
            pos = size
            while pos > 0:
                step = min(1 << 16, pos)
                f.seek(pos - step)
                block = f.read(step)
                i = block.rfind(b"\n")
                if i >= 0:
                    pos = pos - step + i + 1
                    break
                pos -= step
        os.ftruncate(fd, pos)
        os.fsync(fd)
        return data_end - pos

    def _require(self) -> int:
        if self._fd is None:
            raise ConfigError(f"{self.path}: the changelog file is closed")
        return self._fd

    def append(self, lines: Iterable[str]) -> None:
        """Write ``lines`` (each without its newline) and fsync; durable when this returns.
        Encoded as UTF-8 with ``surrogateescape``: a line decoded that way from bytes that are
        not UTF-8 is written as those bytes."""
        self._write("".join(f"{line}\n" for line in lines).encode("utf-8", "surrogateescape"))

    def append_bytes(self, lines: Sequence[bytes]) -> None:
        """:meth:`append` for lines already encoded in UTF-8."""
        if lines:
            self._write(b"\n".join(lines) + b"\n")

    def _write(self, data: bytes) -> None:
        fd = self._require()
        if not data:
            return
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)

    def lines(self) -> Iterator[bytes]:
        """Every complete line of the file, first to last."""
        with self.path.open("rb") as f:
            for line in f:
                if line.strip():
                    yield line.rstrip(b"\n")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DurableLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
