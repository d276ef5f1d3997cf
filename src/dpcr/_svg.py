"""Inline SVG line charts for the HTML reports and the notebook views of a plan and a run: no
library, no external resource.

A chart is series of y values over the same x positions (reporting intervals), each optionally
with a band (``lo``, ``hi``), a dashed or solid line, and an optional horizontal reference line
(a budget). Labels are escaped; numbers are formatted compactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

__all__ = ["Z95", "Line", "line_chart", "number", "row_band", "tick_labels"]

_W, _H, _TOP, _BOTTOM, _LEFT, _RIGHT = 760, 280, 44, 46, 84, 44
#: The normal 97.5 % quantile: estimate ± Z95 · std is the ≈ 95 % band.
Z95 = 1.959963984540054


def row_band(rows: Sequence[Any], *, change: bool = False) -> tuple[list[float], list[float]]:
    """The 95 % band of released rows (:class:`dpcr.ReleaseRow`): of their running values, or
    with ``change`` of their changes; the published bounds, or value ± :data:`Z95` · std for
    rows stored before intervals existed (their bounds are NaN)."""
    key, std = ("change", "std_change") if change else ("estimate", "std_estimate")
    lo: list[float] = []
    hi: list[float] = []
    for r in rows:
        value, sd = getattr(r, key), getattr(r, std)
        a, b = getattr(r, f"{key}_lo"), getattr(r, f"{key}_hi")
        lo.append(value - Z95 * sd if math.isnan(a) else a)
        hi.append(value + Z95 * sd if math.isnan(b) else b)
    return lo, hi


def tick_labels(ends: Sequence[str]) -> list[str]:
    """Labels for the x axis from the intervals' ISO ends: the date when every end falls on
    another day, else month, day and time (a period under a day), with seconds when minutes
    alone repeat."""
    if len({e[:10] for e in ends}) == len(ends):
        return [e[:10] for e in ends]
    minutes = [e[5:16].replace("T", " ") for e in ends]
    if len(set(minutes)) == len(ends):
        return minutes
    return [e[5:19].replace("T", " ") for e in ends]


def number(v: float) -> str:
    """A compact label: thousands separators from 10^4, else 4 significant digits."""
    if not math.isfinite(v):
        return str(v)
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Line:
    """One series: ``values`` over the chart's x positions; ``band`` = (lo, hi) drawn shaded
    beneath it; ``dashed`` for a reference such as the true series."""

    label: str
    values: Sequence[float]
    color: str
    band: tuple[Sequence[float], Sequence[float]] | None = None
    dashed: bool = False


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    return [lo + (hi - lo) * k / (count - 1) for k in range(count)]


def line_chart(
    *,
    title: str,
    x: Sequence[int],
    x_labels: Sequence[str],
    lines: Sequence[Line],
    reference: tuple[str, float] | None = None,
    css_class: str = "chart",
    from_zero: bool = False,
    x_title: str = "reporting interval (end)",
) -> str:
    """An SVG chart of ``lines`` over positions ``x`` (labelled by ``x_labels``), with an
    optional horizontal ``reference`` = (label, y); ``from_zero``: the y axis includes 0.
    Empty when there is nothing to draw."""
    if not x or not lines:
        return ""
    ys: list[float] = []
    for line in lines:
        ys.extend(line.values)
        if line.band is not None:
            ys.extend(line.band[0])
            ys.extend(line.band[1])
    if reference is not None:
        ys.append(reference[1])
    if from_zero:
        ys.append(0.0)
    finite = [y for y in ys if math.isfinite(y)]
    ymin, ymax = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if ymax <= ymin:
        ymin, ymax = ymin - 1, ymax + 1
    pad = (ymax - ymin) * 0.04
    ymin, ymax = ymin - pad, ymax + pad
    xmin, xmax = min(x), max(max(x), min(x) + 1)

    def px(v: float) -> float:
        return _LEFT + (v - xmin) / (xmax - xmin) * (_W - _LEFT - _RIGHT)

    def py(v: float) -> float:
        return _H - _BOTTOM - (v - ymin) / (ymax - ymin) * (_H - _TOP - _BOTTOM)

    def points(vals: Sequence[float], xs: Sequence[int] = x) -> str:
        return " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in zip(xs, vals, strict=True))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{css_class}" width="{_W}" '
        f'height="{_H}" viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="11" '
        f'role="img" aria-label="{escape(title)}">',
        f'<rect width="{_W}" height="{_H}" fill="white"/>',
        f'<text x="{_W / 2}" y="16" text-anchor="middle" font-size="13">{escape(title)}</text>',
    ]
    for v in _ticks(ymin, ymax):
        parts.append(
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{py(v):.1f}" y2="{py(v):.1f}" '
            'stroke="#eee"/>'
            f'<text x="{_LEFT - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{number(v)}</text>'
        )
    shown = sorted({round(k * (len(x) - 1) / 5) for k in range(6)}) if len(x) > 1 else [0]
    for k in shown:
        parts.append(
            f'<text x="{px(x[k]):.1f}" y="{_H - _BOTTOM + 16}" text-anchor="middle">'
            f"{escape(x_labels[k])}</text>"
        )
    for line in lines:
        if line.band is not None:
            lo, hi = line.band
            poly = points(hi) + " " + points(list(reversed(lo)), list(reversed(x)))
            parts.append(
                f'<polygon class="band" points="{poly}" fill="{line.color}" fill-opacity="0.18" '
                'stroke="none"/>'
            )
    if reference is not None:
        ry = py(reference[1])
        parts.append(
            f'<line class="reference" x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{ry:.1f}" '
            f'y2="{ry:.1f}" stroke="#b22" stroke-dasharray="2 3"/>'
        )
    for line in lines:
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        parts.append(
            f'<polyline class="series" points="{points(line.values)}" fill="none" '
            f'stroke="{line.color}" stroke-width="1.6"{dash}/>'
        )
    legend = [(line.label, line.color, line.dashed) for line in lines]
    if reference is not None:
        legend.append((reference[0], "#b22", True))
    step = min(190, (_W - _LEFT - _RIGHT) // len(legend))
    for k, (label, color, dashed) in enumerate(legend):
        lx, ly = _LEFT + 8 + step * k, 32
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        parts.append(
            f'<line x1="{lx}" x2="{lx + 22}" y1="{ly}" y2="{ly}" stroke="{color}" '
            f'stroke-width="2"{dash}/><text x="{lx + 26}" y="{ly + 4}">{escape(label)}</text>'
        )
    parts.append(
        f'<rect x="{_LEFT}" y="{_TOP}" width="{_W - _LEFT - _RIGHT}" '
        f'height="{_H - _TOP - _BOTTOM}" fill="none" stroke="#444"/>'
        f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{_H - 8}" text-anchor="middle">'
        f"{escape(x_title)}</text></svg>"
    )
    return "".join(parts)
