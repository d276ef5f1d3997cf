"""Dependency-free SVG plots: privacy regions and curves (no matplotlib in dpcr's dependencies)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

__all__ = ["curves_svg", "region_svg"]

_W, _H, _PAD = 420, 420, 50
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _frame(title: str, xlabel: str, ylabel: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="11">',
        f'<rect width="{_W}" height="{_H}" fill="white"/>',
        f'<text x="{_W / 2}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>',
        f'<text x="{_W / 2}" y="{_H - 8}" text-anchor="middle">{escape(xlabel)}</text>',
        f'<text x="14" y="{_H / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {_H / 2})">{escape(ylabel)}</text>',
        f'<rect x="{_PAD}" y="{_PAD}" width="{_W - 2 * _PAD}" height="{_H - 2 * _PAD}" '
        'fill="none" stroke="black"/>',
    ]


def _ticks(lo: float, hi: float, axis: str, to_px: object) -> list[str]:
    out = []
    for k in range(6):
        v = lo + (hi - lo) * k / 5
        px = to_px(v)  # type: ignore[operator]
        if axis == "x":
            y = _H - _PAD + 14
            out.append(f'<text x="{px:.1f}" y="{y}" text-anchor="middle">{v:.3g}</text>')
        else:
            out.append(f'<text x="{_PAD - 4}" y="{px + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    return out


def region_svg(
    polygon: Sequence[tuple[float, float]],
    *,
    epsilon: float | None = None,
    delta: float = 0.0,
    title: str = "privacy region",
) -> str:
    """The region (filled) in the unit square and, when ``epsilon`` is given, the boundary of
    R(ε, δ) = {p_x + e^ε p_y ≥ 1 − δ, e^ε p_x + p_y ≥ 1 − δ} and its mirror (dashed)."""

    def sx(v: float) -> float:
        return _PAD + v * (_W - 2 * _PAD)

    def sy(v: float) -> float:
        return _H - _PAD - v * (_H - 2 * _PAD)

    parts = _frame(title, "Pr[M(x) ∈ S]", "Pr[M(x') ∉ S]")
    parts += _ticks(0, 1, "x", sx) + _ticks(0, 1, "y", sy)
    pts = " ".join(f"{sx(x):.2f},{sy(y):.2f}" for x, y in polygon)
    parts.append(f'<polygon points="{pts}" fill="#1f77b4" fill-opacity="0.35" stroke="#1f77b4"/>')
    if epsilon is not None:
        e = math.exp(epsilon)
        # corner of the lower-left boundary: p_x + e p_y = 1 − δ meets e p_x + p_y = 1 − δ
        c = (1 - delta) / (1 + e)
        lower = [(0.0, min(1.0, 1 - delta)), (c, c), (min(1.0, 1 - delta), 0.0)]
        upper = [(1 - x, 1 - y) for x, y in lower]
        for chain in (lower, upper):
            line = " ".join(f"{sx(x):.2f},{sy(y):.2f}" for x, y in chain)
            parts.append(
                f'<polyline points="{line}" fill="none" stroke="#d62728" stroke-dasharray="5,3"/>'
            )
        parts.append(
            f'<text x="{_W - _PAD - 4}" y="{_PAD + 14}" text-anchor="end" fill="#d62728">'
            f"R(ε={epsilon:.3g}, δ={delta:.3g})</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def curves_svg(
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    log_y: bool = False,
) -> str:
    """Line plot of named (x, y) series (y on a log scale when ``log_y``; y ≤ 0 then dropped)."""
    xs = [x for _, sx_, _ in series for x in sx_]
    ys = [
        (math.log10(y) if log_y else y)
        for _, _, sy_ in series
        for y in sy_
        if not log_y or y > 0
    ]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    y0, y1 = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1

    def px(v: float) -> float:
        return _PAD + (v - x0) / (x1 - x0) * (_W - 2 * _PAD)

    def py(v: float) -> float:
        return _H - _PAD - (v - y0) / (y1 - y0) * (_H - 2 * _PAD)

    parts = _frame(title, xlabel, ("log10 " if log_y else "") + ylabel)
    parts += _ticks(x0, x1, "x", px) + _ticks(y0, y1, "y", py)
    for k, (name, sx_, sy_) in enumerate(series):
        colour = _COLOURS[k % len(_COLOURS)]
        pts = [
            (px(x), py(math.log10(y) if log_y else y))
            for x, y in zip(sx_, sy_, strict=True)
            if not log_y or y > 0
        ]
        line = " ".join(f"{a:.2f},{b:.2f}" for a, b in pts)
        parts.append(
            f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.5"/>'
        )
        parts.append(
            f'<text x="{_W - _PAD - 4}" y="{_PAD + 14 + 13 * k}" text-anchor="end" '
            f'fill="{colour}">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
