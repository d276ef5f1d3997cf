"""The operator report: exact diagnostics of the raw data, never to be published.

``<output>/operator/report.html`` (``simulation-report.html`` for a simulation store), in the
owner-only operator folder, file mode 0600, marked SENSITIVE on every screen: per run the exact
counts of records read, valid, quarantined (by reason), mutations kept and dropped (by reason and
class), late records, units and the first and last timestamps. These are not differentially
private (docs/attack-model.md); the public report (:mod:`dpcr.report.html`) never holds them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpcr.release import ContinualRelease, ReleaseRow
    from dpcr.store import Store

__all__ = ["HEALTH_FILE", "SENSITIVE", "render_operator_report", "write_operator_report"]

SENSITIVE = "SENSITIVE: operator only. Exact counts from the raw data, not differentially private"
_STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 62em; }
.sensitive { background: #b00; color: white; padding: 0.6em; font-weight: bold; }
.warning { background: #fe8; border: 2px solid #b60; padding: 0.6em; font-weight: bold; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
td:first-child, th:first-child { text-align: left; }
"""


def _dict(d: Any) -> str:
    if not isinstance(d, dict) or not d:
        return "0" if isinstance(d, dict) else escape(str(d))
    return escape(", ".join(f"{k}: {v}" for k, v in d.items()))


def _run_rows(runs: list[dict[str, Any]]) -> str:
    head = ("run", "clock", "records", "valid", "quarantined", "tombstones", "units", "kept",
            "dropped", "late", "not yet due", "first", "last")
    out = []
    for k, run in enumerate(runs):
        d = run.get("operator") or {}
        ch, b = d.get("changelog", {}), d.get("bounding", {})
        cells = (k + 1, escape(str(run.get("clock", ""))), ch.get("records"), ch.get("valid"),
                 _dict(ch.get("quarantined", {})), ch.get("tombstones"), b.get("units"),
                 b.get("kept"), _dict(b.get("dropped", {})), b.get("late"),
                 ch.get("not_yet_due"), escape(str(ch.get("first"))),
                 escape(str(ch.get("last"))))
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    th = "".join(f"<th>{h}</th>" for h in head)
    return (f'<table class="runs"><thead><tr>{th}</tr></thead><tbody>{"".join(out)}</tbody>'
            "</table>")


def _warnings(last: dict[str, Any]) -> str:
    """The last run's warnings (bounding dropped more than ``warn_dropped`` of the mutations,
    decimals without a scale...), each in a box at the top, and the share bounding dropped."""
    ch, b = last.get("changelog") or {}, last.get("bounding") or {}
    shown = [*ch.get("warnings", ()), *([b["dropped_warning"]] if b.get("dropped_warning") else [])]
    out = "".join(f'<p class="warning">Warning: {escape(str(w))}</p>' for w in shown)
    share = b.get("dropped_share")
    if isinstance(share, float | int):
        out += (f"<p>Last run: bounding dropped {100 * share:.2f} % of the mutations (a "
                f"warning above {100 * float(b.get('warn_dropped', 0.05)):g} %).</p>")
    return out


def _runs_chart(runs: list[dict[str, Any]]) -> str:
    """Records read, kept, dropped and quarantined after each run (exact, cumulative)."""
    from dpcr._svg import Line, line_chart

    if len(runs) < 2:  # (one point draws no line: the table says it all)
        return ""
    d = [r.get("operator") or {} for r in runs]
    ch = [x.get("changelog", {}) for x in d]
    b = [x.get("bounding", {}) for x in d]

    def series(values: list[Any]) -> list[float]:
        return [float(v) if isinstance(v, int | float) else float("nan") for v in values]

    dropped = [sum((x.get("dropped") or {}).values()) for x in b]
    quarantined = [sum((c.get("quarantined") or {}).values()) for c in ch]
    lines = [
        Line(label="records", values=series([c.get("records") for c in ch]), color="#1f77b4"),
        Line(label="kept", values=series([x.get("kept") for x in b]), color="#2ca02c"),
        Line(label="dropped", values=series(dropped), color="#d62728"),
        Line(label="quarantined", values=series(quarantined), color="#ff7f0e"),
    ]
    return line_chart(title="after each run (exact)", x=list(range(1, len(runs) + 1)),
                      x_labels=[str(r.get("clock", ""))[:16] for r in runs], lines=lines,
                      css_class="chart runs", from_zero=True,
                      x_title="run (its clock)")  # fmt: skip


def _exact_section(rows: Sequence[ReleaseRow],
                   exact: dict[tuple[str, str], list[float]] | None) -> str:  # fmt: skip
    """Per statistic the published running value against the exact one, and the error."""
    from dpcr._svg import Line, line_chart, tick_labels

    if exact is None:
        return (
            '<section id="exact"><h2>Published and exact</h2><p>Not computed: `dpcr report '
            "--exact` loads the source again to draw each published statistic beside its exact "
            "value (a simulation's report always does).</p></section>"
        )
    series: dict[tuple[str, str], list[ReleaseRow]] = {}
    for r in rows:
        series.setdefault((r.query, r.key), []).append(r)
    parts = []
    for (query, key), rs in series.items():
        rs.sort(key=lambda r: r.interval)
        truth = exact.get((query, key))
        if truth is None or len(truth) != len(rs):
            continue
        name = query + (f"[{key}]" if key else "")
        errors = [r.estimate - t for r, t in zip(rs, truth, strict=True)]
        rmse = math.sqrt(sum(e * e for e in errors) / len(errors))
        lines = [Line(label="published", values=[r.estimate for r in rs], color="#1f77b4"),
                 Line(label="exact", values=truth, color="#d62728", dashed=True)]
        chart = line_chart(title=f"{name}: published and exact running value",
                           x=[r.interval for r in rs], x_labels=tick_labels([r.end for r in rs]),
                           lines=lines, css_class="chart exact")
        parts.append(f"{chart}<p>{escape(name)}: error root mean square {rmse:.4g}, largest "
                     f"{max(abs(e) for e in errors):.4g}.</p>")
    return '<section id="exact"><h2>Published and exact</h2>' + "".join(parts) + "</section>"


def _health_section(health: dict[str, Any] | None) -> str:
    """The follower's last health record (``follow-health.json``), when one runs."""
    if not health:
        return ""
    rows = "".join(f"<tr><td>{escape(str(k))}</td><td>{escape(str(v))}</td></tr>"
                   for k, v in health.items())  # fmt: skip
    return ('<section id="follower"><h2>Follower</h2><p>As of its last step.</p>'
            f"<table>{rows}</table></section>")


def render_operator_report(settings: ContinualRelease, runs: list[dict[str, Any]], *,
                           simulation: bool, rows: Sequence[ReleaseRow] = (),
                           exact: dict[tuple[str, str], list[float]] | None = None,
                           health: dict[str, Any] | None = None) -> str:  # fmt: skip
    """The operator report's HTML: the follower's health (when one runs), every run's exact
    diagnostics (a chart and a table), each published statistic beside its exact value (when
    ``exact`` is given), and the last run in full."""
    last = (runs[-1].get("operator") if runs else None) or {}
    by_class = last.get("bounding", {}).get("by_class") or {}
    classes = "".join(
        f"<tr><td>{escape(str(c))}</td><td>{escape(json.dumps(v, default=str))}</td></tr>"
        for c, v in by_class.items()
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'\">"
        f'<meta name="robots" content="noindex"><title>{SENSITIVE}</title>'
        f"<style>{_STYLE}</style></head><body>"
        f'<p class="sensitive">{SENSITIVE}. Do not publish or share '
        "(docs/attack-model.md).</p>"
        f"<h1>Operator report{' (simulation)' if simulation else ''}</h1>" + _warnings(last) +
        f"<p>Store {escape(str(settings.store_path))}; source "
        f"{escape(str(getattr(settings.source, 'path', settings.source)))}.</p>"
        + _health_section(health)
        + '<section id="runs"><h2>Diagnostics per run</h2>' + _runs_chart(runs)
        + _run_rows(runs) + "</section>" + _exact_section(rows, exact)
        +
        '<section id="last"><h2>Last run in full</h2>'
        + (f"<h3>Per class</h3><table>{classes}</table>" if classes else "")
        + f"<pre>{escape(json.dumps(last, indent=2, default=str))}</pre></section>"
        f'<p class="sensitive">{SENSITIVE}.</p></body></html>\n'
    )


#: The follower's last health record, in the operator folder (written after every step).
HEALTH_FILE = "follow-health.json"


def write_operator_report(
    settings: ContinualRelease, *, simulation: bool, store: Store | None = None,
    rows: Sequence[ReleaseRow] = (), exact: dict[tuple[str, str], list[float]] | None = None,
) -> Path:  # fmt: skip
    """Write the operator report into the owner-only operator folder (mode 0600, never through
    a symbolic link). ``store``: an open store (a snapshot) to read instead of opening it.
    ``rows``: the released rows, drawn beside ``exact`` (per (query, key) the exact running
    values) when given."""
    from dpcr._fs import full, write_atomic
    from dpcr.errors import DiskFullError
    from dpcr.release import PRIVATE_MODES, operator_dir
    from dpcr.store import reading

    with reading(store, settings.store_path, fingerprint=settings.fingerprint(),
                 mode="simulation" if simulation else "release") as opened:  # fmt: skip
        runs = opened.runs()
    folder = operator_dir(settings)
    target = folder / ("simulation-report.html" if simulation else "report.html")
    html = render_operator_report(settings, runs, simulation=simulation, rows=rows, exact=exact,
                                  health=_health(folder / HEALTH_FILE))  # fmt: skip
    try:
        write_atomic(target, html, mode=PRIVATE_MODES[1])
    except DiskFullError:
        raise full(target, then=(
            "Nothing in the store is lost: free space and run `dpcr report CONFIG` to write "
            "the reports again")) from None  # fmt: skip
    return target


def _health(path: Path) -> dict[str, Any] | None:
    """The follower's health record at ``path`` (None when there is none, or it is unreadable:
    the report is written without it)."""
    try:
        with open(path, encoding="utf-8") as handle:  # (a link is refused where it is written)
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
