"""The source side of a run's data step: the read of the source with its position checked,
the same for every engine (handed to it as ``EngineRun.at_position``).

The check of the source's position (:mod:`dpcr.changelog.position`) is the same for every
engine; a source that no longer holds what earlier runs consumed is refused before anything is
committed or written (a first read is hashed while it is read; a run after earlier ones checks
what they consumed first, :func:`dpcr.changelog.position.advance`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dpcr.engines.step import REWRITTEN
from dpcr.engines.step import positioned as engine_positioned
from dpcr.errors import ConfigError, DpcrError, RewrittenError, StoreError

if TYPE_CHECKING:
    import duckdb

    from dpcr.changelog import SourceConfig
    from dpcr.changelog.position import HeldPosition
    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import SourceState

Progress = Any
T = TypeVar("T")

__all__ = ["REWRITTEN", "check_source", "positioned", "read_at_position"]


def positioned(settings: ReleaseSettings) -> tuple[Path | None, bool]:
    """(path, is Parquet) of a file source checked by position, or (None, False) for a source
    checked by record digests (SQLite)."""
    return engine_positioned(settings.source)


def check_source(settings: ReleaseSettings) -> None:
    """Refuse, before a store, a state or an operator folder is created, a source file that
    does not exist, cannot be reached (a symlink loop, a folder without access) or is not a
    file: one line naming the path and the fix."""
    import os
    import stat

    path = Path(str(settings.source.path))
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ConfigError(
            f"the source {str(path)!r} does not exist; check [source] path (nothing was "
            "written)"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot reach the source {str(path)!r} ({exc.strerror}); check [source] path "
            "(nothing was written)"
        ) from None
    if not stat.S_ISREG(mode):
        raise ConfigError(
            f"the source {str(path)!r} is not a file; [source] path must name the changelog "
            "file (nothing was written)"
        )


def _unreadable(path: Path, state: SourceState, exc: BaseException) -> DpcrError:
    """The error for a source file that cannot be read as its format says (not a rewritten
    history: nothing says its consumed records changed)."""
    detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if not state.records:
        return ConfigError(
            f"cannot read the source {str(path)!r} ({detail}); check [source] path and format "
            "(nothing was released)"
        )
    return StoreError(
        f"cannot read the source {str(path)!r} ({detail}), of which earlier runs consumed "
        f"{state.records} records; restore the file and run again (nothing was released)"
    )


def read_at_position(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    read: Callable[[SourceConfig, int], T],
    *,
    bounded: bool = False,
    held: HeldPosition | None = None,
) -> tuple[T, str]:
    """``read(source, size)`` (``size``: the bytes of a line file the position covers) with
    the source's position checked, the same for every engine: a rewritten source is refused
    before anything is committed or written. Returns what ``read`` returned and the new
    position token ('' for a source checked by record digests: the caller digests
    what it loaded).

    A line file appended to while it is read (a live capture) is read again from a still copy
    of its complete lines, and the position covers the copy; a Parquet file that changes while
    it is read is read again, three times at most. ``bounded``: ``read`` reads no byte of a line
    file at or after ``size`` (the incremental tail): then the read covers the complete lines
    the file held when it started, and a writer appending meanwhile costs nothing (a final
    line without a line end is read only once the file is at rest, as before).
    ``held``: what a long-running session holds of the position between its runs (its later
    checks of a line file read only the last consumed block and the bytes after it:
    :class:`~dpcr.changelog.position.HeldPosition`).
    """
    from dpcr.changelog.parquet_position import parquet_position, parse_parquet_token
    from dpcr.changelog.position import (
        SourceRewritten,
        advance,
        complete_lines,
        complete_prefix,
        parse_token,
        snapshot,
    )
    from dpcr.release._outputs import clear_scratch, operator_dir, scratch_dir, source_blocks

    check_source(settings)
    if settings.on_error == "quarantine":
        operator_dir(settings)  # owner-only, before any raw record is written there
    path, parquet = positioned(settings)
    clear_scratch(settings)
    old, old_pq = parse_token(state.digest), parse_parquet_token(state.digest)
    token, stack = "", ExitStack()
    for attempt in range(3):
        seen = snapshot(path) if path is not None else None
        source, read_path, size = settings.source, path, seen[0] if seen else 0
        lines = path is not None and not parquet
        if attempt and lines and not bounded:
            assert path is not None
            read_path, size = stack.enter_context(
                complete_prefix(path, size, scratch_dir(settings))
            )
            source = dataclasses.replace(source, path=read_path)
        elif attempt == 0 and lines and bounded:
            assert path is not None
            consumed = old.size if old is not None and state.records else 0
            size = max(complete_lines(path, size), consumed)
        hashing: Future[Any] | None = None
        if read_path is not None:
            try:
                if parquet:
                    check_pq = old_pq if state.records else None
                    token = parquet_position(con, read_path, check=check_pq,
                                             blocks=source_blocks(settings)).token
                else:
                    check = old if state.records else None
                    blocks = source_blocks(settings)
                    if check is None:  # nothing to refuse first: hash meanwhile
                        hashing = _HASHER.submit(advance, read_path, size, check=None,
                                                 blocks=blocks)  # fmt: skip
                    elif held is not None and read_path == path:
                        token = held.advance(read_path, size, check=check, blocks=blocks,
                                             token=state.digest, every=not bounded).token
                    else:  # a re-read of consumed bytes checks every one of them first
                        token = advance(read_path, size, check=check, blocks=blocks,
                                        every=not bounded).token  # fmt: skip
            except SourceRewritten as exc:
                stack.close()
                raise RewrittenError(f"{REWRITTEN} ({exc})") from exc
            except (OSError, _duckdb_error()) as exc:
                stack.close()
                raise _unreadable(read_path, state, exc) from exc
        failure: BaseException | None = None
        with stack:  # a copy read from is deleted only once the hashing is done with it
            try:
                result = read(source, size)
            except BaseException as exc:
                failure = exc
            if hashing is not None:
                token = _hashed(hashing)  # a rewritten file is the first thing to report
        if failure is not None:
            raise failure
        if path is None or read_path != path:
            break
        now = snapshot(path)
        if bounded and lines:
            assert seen is not None
            if size == seen[0] or now != seen:
                break  # complete lines, which hold still while a writer appends
            continue  # at rest, ending in a line without a line end: read that line too
        if now == seen:
            break
    else:
        raise StoreError(
            f"{path} kept changing while it was read (three attempts); run again when the "
            "writer pauses"
        )
    return result, token


def _duckdb_error() -> type[Exception]:
    import duckdb

    return duckdb.Error


#: Hashes a line file's position in a thread (hashlib releases the interpreter) while the
#: records of a first read are read (nothing consumed that could have been rewritten).
_HASHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpcr-position")


def _hashed(hashing: Future[Any]) -> str:
    from dpcr.changelog.position import SourceRewritten

    try:
        return str(hashing.result().token)
    except (SourceRewritten, OSError) as exc:
        raise RewrittenError(f"{REWRITTEN} ({exc})") from exc
