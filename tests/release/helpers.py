"""Shared pieces of the release tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dpcr
from dpcr.timeutil import format_timestamp
from engines.helpers import CONSTRAINTS, QUERIES, T0


def zones_release(source: object, tmp: Path, **kw: object) -> dpcr.ContinualRelease:
    """A daily release of an at-most-3 changelog: the active count and a histogram of zones
    A, B and C at ε = 1, writing to ``tmp / "out"``."""
    return dpcr.ContinualRelease(
        source=source,  # type: ignore[arg-type]
        constraint=dpcr.AtMostK(k=3),
        plan=dpcr.DisjointRelease(start="2025-01-01", period="1d"),
        queries=[dpcr.Count(name="active"),
                 dpcr.Histogram(name="zones", column="zone", categories=("A", "B", "C"))],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def log_release(tmp: Path, **kw: Any) -> dpcr.ContinualRelease:
    """A daily release of the generated changelog ``tmp / "log.jsonl"``
    (:func:`engines.helpers.generate`): its first constraint and its queries at ε = 1, writing
    to ``tmp / "out"``; ``kw``: the settings that differ (``on_error``, ...)."""
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=CONSTRAINTS[0],
        plan=dpcr.DisjointRelease(start=format_timestamp(T0), period="1d"),
        queries=list(QUERIES),
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
        **kw,
    )
