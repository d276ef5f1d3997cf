"""A self-contained HTML report of a release: what a reader may see.

One file, no external script, font or image: the plan and its guarantee, the budget spent, and per
statistic the published series with a band of ±1.96 standard deviations (the exact noise std of
each estimate; a 95 % interval under a normal approximation of the noise, which is close for
running values that sum many noise draws and conservative-to-slightly-narrow for a single
discrete Laplace draw: docs/report.md), a table of the values, and the data embedded as JSON
(``<script type="application/json" id="dpcr-data">``) so the figures can be checked against the
store. Only public outputs go in: no exact count, record or per-unit state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpcr.release import ContinualRelease, ReleaseRow, RunResult

__all__ = ["Z95", "render_report", "write_report"]

#: The normal 97.5 % quantile: estimate ± Z95 · std is the ≈ 95 % band.
Z95 = 1.959963984540054
_W, _H, _PAD, _LEFT = 760, 260, 40, 90


def _number(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def _chart(title: str, rows: Sequence[ReleaseRow]) -> str:
    """An inline SVG line chart of the estimates with their ±1.96 std band."""
    if not rows:
        return ""
    xs = [r.interval for r in rows]
    lo = [r.estimate - Z95 * r.std_estimate for r in rows]
    hi = [r.estimate + Z95 * r.std_estimate for r in rows]
    ymin, ymax = min(lo), max(hi)
    if not (math.isfinite(ymin) and math.isfinite(ymax)) or ymax <= ymin:
        ymin, ymax = ymin - 1, ymax + 1
    xmin, xmax = min(xs), max(max(xs), min(xs) + 1)

    def px(x: float) -> float:
        return _LEFT + (x - xmin) / (xmax - xmin) * (_W - _LEFT - _PAD)

    def py(y: float) -> float:
        return _H - _PAD + (y - ymin) / (ymax - ymin) * (2 * _PAD - _H)

    band = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, hi, strict=True))
    band += " " + " ".join(
        f"{px(x):.1f},{py(y):.1f}" for x, y in zip(reversed(xs), reversed(lo), strict=True)
    )
    line = " ".join(f"{px(r.interval):.1f},{py(r.estimate):.1f}" for r in rows)
    ticks = "".join(
        f'<text x="{_LEFT - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{_number(v)}</text>'
        for v in (ymin + (ymax - ymin) * k / 4 for k in range(5))
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="11" role="img" '
        f'aria-label="{escape(title)}">'
        f'<rect width="{_W}" height="{_H}" fill="white"/>'
        f'<text x="{_W / 2}" y="16" text-anchor="middle" font-size="13">{escape(title)}</text>'
        f'<polygon points="{band}" fill="#1f77b4" fill-opacity="0.18" stroke="none"/>'
        f'<polyline points="{line}" fill="none" stroke="#1f77b4" stroke-width="1.6"/>'
        f'<rect x="{_LEFT}" y="{_PAD}" width="{_W - _LEFT - _PAD}" height="{_H - 2 * _PAD}" '
        'fill="none" stroke="#444"/>'
        f'{ticks}<text x="{_W / 2}" y="{_H - 12}" text-anchor="middle">interval {xmin} .. '
        f"{max(xs)}</text></svg>"
    )


def _table(rows: Sequence[ReleaseRow]) -> str:
    head = "".join(f"<th>{h}</th>" for h in
                   ("#", "end", "change", "estimate", "± std", "95 % band"))
    body = "".join(
        f"<tr><td>{r.interval}</td><td>{escape(r.end)}</td><td>{r.change:.6g}</td>"
        f"<td>{r.estimate:.6g}</td><td>{r.std_estimate:.3g}</td>"
        f"<td>{r.estimate - Z95 * r.std_estimate:.6g} .. {r.estimate + Z95 * r.std_estimate:.6g}"
        "</td></tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_report(settings: ContinualRelease, result: RunResult) -> str:
    """The report's HTML text (public content only)."""
    s = result.summary
    g = s.get("guarantee", {})
    series: dict[tuple[str, str], list[ReleaseRow]] = {}
    for r in result.rows:
        series.setdefault((r.query, r.key), []).append(r)
    sections = []
    for (query, key), rows in series.items():
        name = query + (f"[{key}]" if key else "")
        sections.append(
            f'<section class="statistic" data-statistic="{escape(name)}"><h2>{escape(name)}</h2>'
            f"{_chart(name, rows)}<details><summary>values</summary>{_table(rows)}</details>"
            "</section>"
        )
    data = {
        "summary": s,
        "rows": [asdict(r) for r in result.rows],
    }
    sim = (
        '<p class="simulation"><strong>SIMULATION</strong>: seeded noise, not for publication.'
        "</p>" if s.get("simulation") else ""
    )
    budget = s.get("budget", {})
    spent = g.get("spent_epsilon", 0.0)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>dpcr release report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 60em; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
.simulation {{ background: #fee; padding: 0.5em; }}
</style></head><body>
<h1>Differentially private continual release</h1>
{sim}
<section id="plan"><h2>Plan and guarantee</h2>
<p>{escape(str(s.get("plan", {}).get("description", settings.plan.describe())))}</p>
<p>Privacy unit: {escape(str(s.get("unit", settings.unit)))}; constraint:
{escape(str(s.get("constraint", "")))}.</p>
<p class="guarantee">Guarantee over the whole release: (ε = {g.get("epsilon", 0):.6g},
δ = {g.get("delta", 0):.3g})-DP per unit [{escape(str(g.get("method", "")))}];
spent so far ε = {spent:.6g} of the budget ε = {budget.get("epsilon", 0):.6g}
(remaining {max(0.0, budget.get("epsilon", 0) - spent):.6g}).</p>
<p>{s.get("released_intervals", 0)} intervals released, clock {escape(str(s.get("clock", "")))}.
Bands: estimate ± 1.96 × its exact noise standard deviation.</p>
</section>
{"".join(sections)}
<script type="application/json" id="dpcr-data">{escape(json.dumps(data, default=str))}</script>
</body></html>
"""


def write_report(settings: ContinualRelease, result: RunResult, path: Path | None = None) -> Path:
    """Write ``report.html`` beside the public outputs (or to ``path``); returns the path."""
    from dpcr.release._outputs import public_dir

    target = path or public_dir(
        settings, simulation=bool(result.summary.get("simulation"))
    ) / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(render_report(settings, result), encoding="utf-8")
    tmp.replace(target)
    return target
