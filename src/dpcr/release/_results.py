"""Typed results of a run: released rows (DP values and their uncertainty) and the summary."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from dpcr.errors import MissingExtraError

__all__ = ["ReleaseRow", "RunResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseRow:
    """One statistic (and key) for one reporting interval ``(start, end]`` (ISO times; start
    empty for "from the beginning"): the estimated change over the interval, the running value
    (a window plan: the window's value), their noise standard deviations and 95 % intervals
    ``[*_lo, *_hi]`` of proven coverage (docs/uncertainty.md). Public: only differentially
    private values and their exact uncertainty. A derived statistic's row (mean, variance:
    post-processing of released values) has no stds (NaN) and an approximate interval
    (delta method), as ``summary.json`` says under ``derived``."""

    query: str
    key: str
    interval: int
    start: str
    end: str
    change: float
    estimate: float
    std_change: float
    std_estimate: float
    change_lo: float = math.nan
    change_hi: float = math.nan
    estimate_lo: float = math.nan
    estimate_hi: float = math.nan

    def record(self) -> dict[str, Any]:
        """The row as a plain dict, in :data:`OUTPUT_FIELDS` order (what ``asdict`` gives, for
        a fraction of its cost: every field is a str, int or float)."""
        return {name: getattr(self, name) for name in OUTPUT_FIELDS}


OUTPUT_FIELDS = tuple(f.name for f in fields(ReleaseRow))


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """What a run released (every released row, from the store) and its public ``summary``
    (plan, guarantee, released intervals). ``diagnostics`` are operator-only: exact counts of
    records, quarantined and dropped mutations, units and times, which are not differentially
    private and must not be published (docs/attack-model.md)."""

    rows: tuple[ReleaseRow, ...] = ()
    summary: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    new_intervals: int = 0

    def __iter__(self) -> Iterator[ReleaseRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        from dpcr.release._display import run_summary

        return run_summary(self)

    def __str__(self) -> str:
        from dpcr.release._display import run_text

        return run_text(self)

    def __rich__(self) -> str:  # (a terminal: rich prints the text)
        return str(self)

    def _repr_html_(self) -> str:  # (a notebook: the latest values and a chart per statistic)
        from dpcr.release._display import run_html

        return run_html(self)

    def records(self) -> list[dict[str, Any]]:
        """The rows as plain dicts (the JSON output)."""
        return [r.record() for r in self.rows]

    def to_pandas(self) -> Any:
        try:
            import pandas as pd
        except ImportError:
            raise MissingExtraError(
                "'pandas' is not installed; `pip install pandas` to use RunResult.to_pandas()"
            ) from None
        return pd.DataFrame(self.records(), columns=list(OUTPUT_FIELDS))

    def to_polars(self) -> Any:
        try:
            import polars as pl
        except ImportError:
            raise MissingExtraError(
                "'polars' is not installed; `pip install polars` to use RunResult.to_polars()"
            ) from None
        return pl.DataFrame(self.records(), schema=list(OUTPUT_FIELDS))

    def to_arrow(self) -> Any:
        try:
            import pyarrow as pa
        except ImportError:
            raise MissingExtraError(
                "'pyarrow' is not installed; `pip install pyarrow` to use RunResult.to_arrow()"
            ) from None
        return pa.Table.from_pylist(self.records())
