"""Shared pieces of the release tests."""

from __future__ import annotations

from pathlib import Path

import dpcr


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
