"""The operator report: exact diagnostics of the raw data, never to be published.

``<output>/operator/report.html`` (``simulation-report.html`` for a simulation store), in the
owner-only operator folder, file mode 0600, marked SENSITIVE on every screen: per run the exact
counts of records read, valid, quarantined (by reason), mutations kept and dropped (by reason and
class), late records, units and the first and last timestamps. These are not differentially
private (docs/attack-model.md); the public report (:mod:`dpcr.report.html`) never holds them.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpcr.release import ContinualRelease

__all__ = ["SENSITIVE", "render_operator_report", "write_operator_report"]

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


def render_operator_report(settings: ContinualRelease, runs: list[dict[str, Any]], *,
                           simulation: bool) -> str:
    """The operator report's HTML: every run's exact diagnostics, the last in full."""
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
        '<section id="runs"><h2>Diagnostics per run</h2>' + _run_rows(runs) + "</section>"
        '<section id="last"><h2>Last run in full</h2>'
        + (f"<h3>Per class</h3><table>{classes}</table>" if classes else "")
        + f"<pre>{escape(json.dumps(last, indent=2, default=str))}</pre></section>"
        f'<p class="sensitive">{SENSITIVE}.</p></body></html>\n'
    )


def write_operator_report(settings: ContinualRelease, *, simulation: bool) -> Path:
    """Write the operator report into the owner-only operator folder (mode 0600, never through
    a symbolic link)."""
    from dpcr._fs import full, write_atomic
    from dpcr.errors import DiskFullError
    from dpcr.release import PRIVATE_MODES, operator_dir
    from dpcr.store import Store

    with Store(settings.store_path, fingerprint=settings.fingerprint(),
               mode="simulation" if simulation else "release") as store:
        runs = store.runs()
    folder = operator_dir(settings)
    target = folder / ("simulation-report.html" if simulation else "report.html")
    try:
        write_atomic(target, render_operator_report(settings, runs, simulation=simulation),
                     mode=PRIVATE_MODES[1])
    except DiskFullError:
        raise full(target, then=(
            "Nothing in the store is lost: free space and run `dpcr report CONFIG` to write "
            "the reports again")) from None  # fmt: skip
    return target
