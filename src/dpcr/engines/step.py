"""The data step of an engine that reads a file source by itself (Spark, or a one-shot DuckDB
database): :meth:`~dpcr.engines.base.Engine.aggregate` through the run's position check, or
:meth:`~dpcr.engines.base.IncrementalEngine.aggregate_step` when the engine keeps a state;
and the refusals every engine's step shares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dpcr.engines.base import (
    Consumed,
    DataStep,
    EngineRun,
    EngineStateRef,
    IncrementalEngine,
    StoreHead,
)
from dpcr.errors import ConfigError, RewrittenError, StoreError

if TYPE_CHECKING:
    from pathlib import Path

    from dpcr.changelog import SourceConfig
    from dpcr.engines.base import AggregateRequest, Engine, EngineResult, Pending

__all__ = [
    "REWRITTEN",
    "engine_step",
    "positioned",
    "refuse_lost_records",
    "refuse_missing",
]

REWRITTEN = (
    "records already consumed by earlier runs have changed in the source (rewritten history); "
    "released intervals cannot be reconciled. Restore the original changelog, or start a new "
    "release with a new store."
)


def positioned(source: SourceConfig) -> tuple[Path | None, bool]:
    """(path, is Parquet) of a file source checked by position, or (None, False) for a source
    checked by record digests (SQLite)."""
    from pathlib import Path

    from dpcr.changelog import ParquetSource, SqliteSource

    if isinstance(source, SqliteSource):
        return None, False
    return Path(source.path), isinstance(source, ParquetSource)


def refuse_lost_records(store: StoreHead, records: int) -> None:
    """Refuse a source with fewer records than earlier runs consumed."""
    if records < store.records:
        raise RewrittenError(
            f"the source now has {records} records but earlier runs consumed "
            f"{store.records}; dpcr needs the whole append-only changelog"
        )


def refuse_missing(missing: Sequence[str]) -> None:
    """Refuse a release whose queries or constraint name a column no row has (a typo)."""
    if missing:
        raise ConfigError(
            f"column(s) {', '.join(map(repr, missing))} named by a query or the constraint "
            "appear in no row of the source: check the spelling (`dpcr check CONFIG` names the "
            "likely one); nothing was released: run again with the corrected config, in the "
            "same output folder (docs/store.md, \"Binding to a plan\")"
        )


def engine_step(engine: Engine, request: AggregateRequest, run: EngineRun) -> DataStep:
    """The data step of ``engine``, which reads a Parquet or JSON-lines file itself and returns
    only totals and counts; an :class:`~dpcr.engines.base.IncrementalEngine` continues its
    state when ``run.keep_state``."""
    from dpcr.changelog.parquet_position import parse_parquet_token
    from dpcr.changelog.position import parse_token

    path, _parquet = positioned(request.source)
    name, store = engine.name, run.store
    if path is None:
        raise ConfigError(
            f"engine {name!r} reads Parquet and JSON-lines files; use the DuckDB engine for "
            "this source"
        )
    if store.records and parse_token(store.token) is None \
            and parse_parquet_token(store.token) is None:  # fmt: skip
        raise StoreError(
            f"this store was last run with the DuckDB engine of an older dpcr; run it once "
            f"with the DuckDB engine before switching to {name!r}"
        )
    if run.keep_state and isinstance(engine, IncrementalEngine):
        return _continued(engine, request, run)
    run.progress("load changelog", 0, 1)
    result, token = run.at_position(
        lambda source, _size: engine.aggregate(dataclasses.replace(request, source=source))
    )
    run.progress("bound and aggregate", 1, 1)
    return _step_of(result, token, store)


def _step_of(result: EngineResult, token: str, store: StoreHead) -> DataStep:
    refuse_lost_records(store, result.load.records)
    refuse_missing(result.missing_columns)
    return DataStep(result.load, result.aggregates, result.min_ts, result.max_ts,
                    result.not_yet_due, token)  # fmt: skip


def _continued(engine: IncrementalEngine, request: AggregateRequest, run: EngineRun) -> DataStep:
    """The data step of an engine that keeps state between runs (Spark): it reads only the
    records after the store's position when its state (``<store>.state/<engine>/``) matches
    the store's head, and the state moves forward once the store has committed."""
    from dpcr.changelog.position import parse_token

    assert run.state_dir is not None
    ref = EngineStateRef(
        folder=run.state_dir / engine.name, store=run.store, fingerprint=run.fingerprint,
        settle_at=run.settle_at, settle_times=run.settle_times,
    )  # fmt: skip
    old = parse_token(run.store.token)
    consumed = Consumed(bytes=old.size if old is not None and run.store.records else 0)
    request = dataclasses.replace(request, consumed=consumed)
    _path, parquet = positioned(request.source)
    bounded = not parquet and engine.continues(request, ref)  # a tail read: up to ``size``

    def read(source: SourceConfig, size: int) -> tuple[EngineResult, Pending]:
        tail = dataclasses.replace(consumed, size=size if bounded else None)
        return engine.aggregate_step(dataclasses.replace(request, source=source,
                                                         consumed=tail), ref)  # fmt: skip

    run.progress("load changelog", 0, 1)
    (result, pending), token = run.at_position(read, bounded=bounded)
    run.progress("bound and aggregate", 1, 1)
    step = _step_of(result, token, run.store)
    return dataclasses.replace(step, settle=pending.commit)
