"""A whole changelog loaded and totalled in a caller's DuckDB connection, from a release's
settings: for audits, reports and exact values (a run's data step is the engine's,
:mod:`dpcr.release._engine`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from dpcr.release._engine import engine_request, engine_run

if TYPE_CHECKING:
    import duckdb

    from dpcr.release._settings import ReleaseSettings
    from dpcr.store import SourceState

__all__ = ["aggregate_totals", "load_changelog"]


def load_changelog(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    state: SourceState,
    frozen: tuple[tuple[str, str, int], ...] = (),
    progress: Any = None,
    *,
    materialize: bool = True,
    on_read: Callable[[], None] | None = None,
    liveness: Literal["check", "defer"] = "check",
) -> tuple[Any, int | None, int | None, str]:
    """Load the changelog into table ``changelog`` of ``con`` and refuse a source that lost or
    rewrote records consumed by earlier runs (``state``); late records freeze their (unit,
    entry) for good, with the ``frozen`` points of earlier runs. Returns (load report, min ts,
    max ts, the source's new position token): see
    :func:`dpcr.engines.duckdb_step.load_positioned`.

    ``materialize=False``: ``changelog`` may be a view that reads the source again (see
    :func:`dpcr.changelog.load`), for a caller that reads it once. ``on_read`` and
    ``liveness``: as in :func:`dpcr.changelog.load`.
    """
    from dpcr.engines.duckdb_step import load_positioned

    request = engine_request(settings, state, frozen)
    run = engine_run(settings, con, state, request, progress=_silent, on_read=on_read)
    return load_positioned(request, run, progress=progress, materialize=materialize,
                           liveness=liveness)  # fmt: skip


def _silent(_stage: str, _done: int, _total: int) -> None:
    return None


def aggregate_totals(
    settings: ReleaseSettings,
    con: duckdb.DuckDBPyConnection,
    *,
    table: str,
    lo: int,
    hi: int,
    exclude_late: tuple[int, int] | None,
    progress: Any = None,
) -> Any:
    """Bound and total base intervals ``lo .. hi`` of the changelog in ``table`` of ``con``
    (:func:`dpcr.engines.duckdb.aggregate`)."""
    from dpcr.engines.duckdb import aggregate

    grid = settings.plan.base_grid()
    times = [grid.release_time(j) for j in range(1, hi + 1)] if hi >= 1 else []
    return aggregate(
        con,
        table=table,
        queries=settings.queries,
        constraint=settings.constraint,
        release_times=times,
        first_interval=max(1, min(lo, hi + 1)),
        unit_is_entry=settings.owner is None,
        exclude_late=exclude_late,
        progress=progress,
        retire=settings.on_exhausted == "retire",
    )
