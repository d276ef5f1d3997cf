"""A self-contained HTML report of a release: what a reader may see.

One file that opens offline (no external script, font or image; a Content-Security-Policy
forbids any request). It leads with the statistics: per statistic what it is, its latest value,
charts of its running value and of its change in each interval with their 95 % intervals (of
proven coverage, from the exact noise distribution: docs/uncertainty.md) and its values; then
the plan and its guarantee per constraint class, the budget spent and remaining after every
reporting interval, the planner's candidates at equal privacy with their predicted errors, and
the alerts. A simulation's report adds the exact series and the realised error. Every number is
also embedded as JSON (``<script type="application/json" id="dpcr-data">``) so the page can
be checked against the store.

Only public content goes in: DP values, their uncertainty, the plan and the guarantee. Exact
counts of the raw data are the operator report's (:mod:`dpcr.report.operator`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcr._svg import Z95, Line, line_chart, row_band, tick_labels
from dpcr.report.data import ReportData

if TYPE_CHECKING:
    from dpcr.release import ContinualRelease, ReleaseRow

__all__ = [
    "MAX_KEY_CHARTS", "SECTIONS", "Z95", "embed_json", "render_report", "tick_labels",
    "write_report",
]

#: A histogram draws a chart for at most this many keys (all keys are in the tables and data).
MAX_KEY_CHARTS = 12
#: The report's sections, in order (``<section id=...>``): the statistics lead.
SECTIONS = ("statistics", "plan", "budget", "planner", "alerts")
_BLUE, _ORANGE, _GREEN = "#1f77b4", "#d62728", "#2ca02c"
_CLASS_COLORS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
        "img-src data:")
_STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 62em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
td.text, th.text { text-align: left; }
.simulation { background: #fee; padding: 0.5em; border: 1px solid #c66; }
.note { color: #555; font-size: 0.9em; }
pre { font-size: 0.8em; background: #f6f6f6; padding: 0.5em; overflow-x: auto; }
"""
_CHECK = (
    "(function(){var d=JSON.parse(document.getElementById('dpcr-data').textContent);"
    "var e=document.getElementById('dpcr-check');e.setAttribute('data-rows',String(d.rows.length));"
    "e.textContent=d.rows.length+' released values embedded as JSON (id dpcr-data).';})();"
)


def _finite(value: Any) -> Any:
    """JSON-safe: non-finite floats become null (JSON.parse rejects NaN and Infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def embed_json(data: Any) -> str:
    """JSON that is safe inside ``<script>``: ``<``, ``>`` and ``&`` written as ``\\u`` escapes,
    so the text parses unchanged with ``JSON.parse`` (and with ``json.loads``)."""
    text = json.dumps(_finite(data), default=str, allow_nan=False, sort_keys=True)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _table(head: Sequence[str], rows: Sequence[Sequence[object]], *, text: int = 0,
           css: str = "") -> str:
    """A table; the first ``text`` columns are left-aligned text."""
    def cell(tag: str, k: int, v: object) -> str:
        cls = ' class="text"' if k < text else ""
        return f"<{tag}{cls}>{escape(str(v))}</{tag}>"

    h = "".join(cell("th", k, v) for k, v in enumerate(head))
    b = "".join("<tr>" + "".join(cell("td", k, v) for k, v in enumerate(r)) + "</tr>"
                for r in rows)
    cls = f' class="{css}"' if css else ""
    return f"<table{cls}><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table>"


def _g(v: object, fmt: str = ".6g") -> str:
    return format(v, fmt) if isinstance(v, int | float) else "—"


def _class_label(cls: str) -> str:
    return {"all": "every unit", "*": "other classes"}.get(cls, f"class {cls}")


def _plan_section(d: ReportData) -> str:
    p, s = d.plan, d.summary
    spent_last = d.budget[-1] if d.budget else {"per_class": {}}
    rows = [
        (_class_label(name), c["releases"], _g(c["epsilon"]), _g(c["delta"], ".3g"),
         _g(spent_last["per_class"].get(name, {}).get("epsilon")))
        for name, c in p["per_class"].items()
    ]
    layers = [
        (lr["layer"], _g(lr["share"]), lr["instances_per_unit"],
         ", ".join(f"{q}: ±{std:.4g}" for q, std in lr["noise_std"].items()))
        for lr in p["layers"][:8]
    ]
    return (
        '<section id="plan"><h2>Plan and guarantee</h2>'
        f"<p>{escape(p['description'])}.</p>"
        f"<p>Privacy unit: {escape(str(p['unit']))}; constraint: {escape(p['constraint'])}; "
        f"noise: exact discrete {escape(p['noise'])}; budget ε = {_g(p['budget']['epsilon'])}, "
        f"δ = {_g(p['budget']['delta'], '.3g')} per unit over the whole release.</p>"
        f'<p class="guarantee"><strong>Guarantee over the whole release: (ε = {_g(p["epsilon"])}, '
        f'δ = {_g(p["delta"], ".3g")})-differential privacy per {escape(str(p["unit"]))}</strong>'
        f" [{escape(str(p['method']))}], for every unit that satisfies the constraint"
        f"{' (alert rules included)' if d.alert_rules else ''}. "
        f"{s.get('released_intervals', 0)} reporting intervals released so far"
        + (f" (through {escape(str(s['released_through']))})" if s.get("released_through")
           else "")
        + ".</p>"
        "<h3>Per constraint class</h3>"
        + _table(("class", "releases one unit affects", "ε (whole plan)", "δ",
                  "ε spent so far"), rows, text=1, css="classes")
        + _query_table(p)
        + "<h3>Noise per layer</h3>"
        + _table(("layer", "share of budget", "releases per unit", "noise std per query"),
                 layers, css="layers")
        + ("" if len(p["layers"]) <= 8 else f"<p class='note'>… {len(p['layers'])} layers.</p>")
        + "</section>"
    )


def _query_table(p: dict[str, Any]) -> str:
    """Per query: the ops that can change it and the releases one unit changes through it."""
    per_query = p.get("per_query") or {}
    if not per_query:
        return ""
    rows = [(name, ", ".join(q["touched_by"]), q["releases"]) for name, q in per_query.items()]
    return "<h3>Per query</h3>" + _table(
        ("query", "changed by", "releases one unit changes through it"), rows, text=2,
        css="queries",
    )


def _budget_section(d: ReportData) -> str:
    eps = d.plan["budget"]["epsilon"]
    b = d.budget
    lines = [Line(label="spent (worst class)", values=[r["spent_epsilon"] for r in b],
                  color=_BLUE)]
    classes = list(b[-1]["per_class"]) if b else []
    if len(classes) > 1:
        lines += [
            Line(label=_class_label(c), values=[r["per_class"][c]["epsilon"] for r in b],
                 color=color, dashed=True)
            for c, color in zip(classes, _CLASS_COLORS, strict=False)
        ]
    chart = line_chart(
        title="privacy budget (ε per unit) spent after each reporting interval",
        x=[r["interval"] for r in b], x_labels=tick_labels([r["end"] for r in b]), lines=lines,
        reference=("budget", eps), css_class="chart budget", from_zero=True,
    ) if b else "<p>Nothing released yet.</p>"
    last = b[-1] if b else {"spent_epsilon": 0.0, "remaining_epsilon": eps}
    runs = [
        (k + 1, r.get("clock") or "", r.get("released_intervals"), r.get("new_intervals"),
         _g(r.get("spent_epsilon")), _g(max(0.0, eps - (r.get("spent_epsilon") or 0.0))))
        for k, r in enumerate(d.runs)
    ]
    return (
        '<section id="budget"><h2>Budget spent and remaining</h2>'
        f"<p>Spent so far ε = {_g(last['spent_epsilon'])} of ε = {_g(eps)}; remaining "
        f"ε = {_g(last['remaining_epsilon'])}.</p>"
        "<p class='note'>Spent after an interval is the guarantee, per unit, of everything "
        "released up to it: what the worst unit that satisfies the constraint can lose to a "
        "reader of all those releases. It stops growing once no unit can affect more releases "
        "(a unit with at most k mutations affects at most k disjoint intervals); an open-ended "
        "tree keeps a share for the layers it has not released yet.</p>"
        f"{chart}<h3>Runs</h3>"
        + _table(("run", "clock", "intervals released", "new", "ε spent", "ε remaining"),
                 runs, css="runs")
        + "</section>"
    )


def _planner_section(d: ReportData) -> str:
    if not d.ranking:
        body = ("<p>A window plan releases another statistic than running totals: no running-"
                "total candidate to rank.</p>")
    else:
        queries = list(d.ranking[0]["predicted"])
        rows = [
            (("* " if r["configured"] else "") + r["plan"],
             ("≈ " if r.get("approximate") else "") + f"{r['score']:.3f}",
             *(f"±{r['predicted'][q]['running_std']:.4g}" for q in queries))
            for r in d.ranking
        ]
        rough = any(r.get("approximate") for r in d.ranking)
        body = (
            "<p>The running-total plans the planner can run, calibrated to the same budget, "
            "constraint, queries and noise, best first, scored by the worst running-value std "
            "over the horizon relative to the disjoint plan (mean over queries); * marks this "
            "release's plan.</p>"
            + ("<p>≈ marks figures calibrated approximately: as if the discrete Gaussian noise "
               "were the continuous Gaussian of the same σ (its closed form instead of the "
               "discrete Gaussian's privacy-loss distribution; each score within 0.5 % of the "
               "exact one); this release's plan is calibrated exactly.</p>" if rough else "")
            + _table(("plan", "score", *(f"{q}: worst running std" for q in queries)), rows,
                     text=1, css="ranking")
        )
    table = "\n".join(d.planner_table)
    return (
        '<section id="planner"><h2>Planner candidates</h2>'
        f"{body}{f'<pre>{escape(table)}</pre>' if table else ''}</section>"
    )


def _alerts_section(d: ReportData) -> str:
    if not d.alert_rules:
        return '<section id="alerts"><h2>Alerts</h2><p>No alert rules.</p></section>'
    rules = [
        (a["name"], a["rule"], _g(a["epsilon"]), _g(a["delta"], ".3g"),
         f"±{a['accuracy']['alpha']:g} w.p. {1 - a['accuracy']['beta']:g}")
        for a in d.alert_rules
    ]
    above = [a for a in d.alerts if a["above"]]
    rows = [(a["rule"], a["statistic"], a["key"], a["interval"], a["end"],
             "" if a["value"] is None else _g(a["value"])) for a in above]
    return (
        '<section id="alerts"><h2>Alerts</h2>'
        + _table(("rule", "condition", "ε", "δ", "accuracy"), rules, text=2, css="alert-rules")
        + f"<p>{len(above)} answers above threshold out of {len(d.alerts)}.</p>"
        + (_table(("rule", "statistic", "key", "interval", "end", "value"), rows, text=3,
                  css="alerts") if rows else "")
        + "</section>"
    )


def _charts(name: str, what: str, rows: Sequence[ReleaseRow],
            truth: list[float] | None, prior: float = 0.0) -> str:  # fmt: skip
    """The running value and the change of each interval, each with its 95 % band.
    ``prior``: the true running value before the first row (a key published from a later
    interval)."""
    x, labels = [r.interval for r in rows], tick_labels([r.end for r in rows])
    lo, hi = row_band(rows)
    running = [Line(label="published, 95 % interval", values=[r.estimate for r in rows],
                    color=_BLUE, band=(lo, hi))]  # fmt: skip
    if truth is not None:
        running.append(Line(label="true (simulation)", values=truth, color=_ORANGE,
                            dashed=True))  # fmt: skip
    clo, chi = row_band(rows, change=True)
    changes = [Line(label="published change, 95 % interval", values=[r.change for r in rows],
                    color=_GREEN, band=(clo, chi))]  # fmt: skip
    if truth is not None:
        before = [prior, *truth[:-1]]
        changes.append(Line(label="true (simulation)", values=[t - b for t, b in
                                                                zip(truth, before, strict=True)],
                            color=_ORANGE, dashed=True))  # fmt: skip
    return (
        line_chart(title=f"{name}: running value ({what})", x=x, x_labels=labels,
                   lines=running, css_class="chart running")
        + line_chart(title=f"{name}: change in each interval", x=x, x_labels=labels,
                     lines=changes, css_class="chart change")
    )


def _statistic(name: str, what: str, rows: Sequence[ReleaseRow], series: list[float] | None,
               chart: bool) -> str:  # fmt: skip
    """One statistic's section; ``series``: its true running value at every interval."""
    est = [r.estimate for r in rows]
    lo, hi = row_band(rows)
    truth = None if series is None or len(series) < rows[-1].interval else [
        series[r.interval - 1] for r in rows]  # fmt: skip
    prior = series[rows[0].interval - 2] if truth and series and rows[0].interval > 1 else 0.0
    svg = _charts(name, what, rows, truth, prior) if chart else ""
    head: tuple[str, ...] = ("#", "end", "change", "estimate", "± std", "95 % interval")
    body: list[tuple[object, ...]] = [
        (r.interval, r.end, f"{r.change:.6g}", f"{r.estimate:.6g}", f"{r.std_estimate:.3g}",
         f"{lo[k]:.6g} .. {hi[k]:.6g}") for k, r in enumerate(rows)
    ]
    error = ""
    if truth is not None:
        head = (*head, "true", "error")
        body = [(*row, f"{t:.6g}", f"{e - t:.3g}")
                for row, t, e in zip(body, truth, est, strict=True)]
        errs = [e - t for e, t in zip(est, truth, strict=True)]
        covered = sum(a <= t <= b for a, t, b in zip(lo, truth, hi, strict=True))
        rmse = math.sqrt(sum(e * e for e in errs) / len(errs))
        mean_std = math.sqrt(sum(r.std_estimate ** 2 for r in rows) / len(rows))
        error = (
            f'<p class="realised">Realised error: root mean square {rmse:.4g} (predicted '
            f"{mean_std:.4g}), largest {max(abs(e) for e in errs):.4g}; the band covers the "
            f"truth in {covered} of {len(rows)} intervals.</p>"
        )
    last = rows[-1]
    since = "" if rows[0].interval <= 1 else (
        f'<p class="since">Published from interval {rows[0].interval} (ending '
        f"{escape(rows[0].end)}): the first whose noisy running estimate reached the "
        "threshold (a key that appears in the data: docs/privacy.md).</p>"
    )  # fmt: skip
    latest = (
        f'<p class="latest">Latest ({escape(last.end)}): {last.estimate:.6g} '
        f"(95 % interval {lo[-1]:.6g} .. {hi[-1]:.6g}); change {last.change:.6g}. "
        f"<span class='note'>{escape(what)}</span></p>"
    )
    return (
        f'<section class="statistic" data-statistic="{escape(name)}"><h3>{escape(name)}</h3>'
        f"{since}{latest}{svg}{error}<details><summary>values</summary>"
        f"{_table(head, body, text=2)}</details></section>"
    )


def _statistics_section(d: ReportData) -> str:
    series: dict[tuple[str, str], list[ReleaseRow]] = {}
    for r in d.rows:
        series.setdefault((r.query, r.key), []).append(r)
    per_query: dict[str, int] = {}
    parts = []
    for (query, key), rows in series.items():
        rows.sort(key=lambda r: r.interval)
        per_query[query] = per_query.get(query, 0) + 1
        truth = d.truth.get((query, key)) if d.truth is not None else None
        name = query + (f"[{key}]" if key else "")
        what = d.statistics.get(query, "")
        parts.append(_statistic(name, what, rows, truth,
                                chart=per_query[query] <= MAX_KEY_CHARTS))  # fmt: skip
    appeared = _appeared_table(series)
    more = [q for q, c in per_query.items() if c > MAX_KEY_CHARTS]
    note = (f"<p class='note'>Charts of the first {MAX_KEY_CHARTS} keys of "
            f"{', '.join(more)}; every key is in the tables.</p>") if more else ""
    return (
        '<section id="statistics"><h2>Published statistics</h2>'
        "<p class='note'>Per statistic the running value (a window plan: the window's value) "
        "and the change in each reporting interval, each with its 95 % interval: from the "
        "exact distribution of the noise, covering the true value with probability at least "
        "95 % (docs/uncertainty.md). The guarantee and how the budget is spent follow below."
        f"</p>{note}{appeared}{''.join(parts) or '<p>Nothing released yet.</p>'}</section>"
    )


def _appeared_table(series: dict[tuple[str, str], list[ReleaseRow]]) -> str:
    """When each key published later than the first interval appeared (open keys: from
    their selection interval on), from the published rows alone."""
    later = sorted(
        ((query, key, rows[0]) for (query, key), rows in series.items()
         if rows and rows[0].interval > 1),
        key=lambda item: (item[0], item[2].interval, item[1]),
    )  # fmt: skip
    if not later:
        return ""
    body = [(query, key, r.interval, r.end) for query, key, r in later]
    return (
        '<details class="appeared"><summary>Keys published from a later interval (open '
        f"keys): {len(later)}</summary>"
        f"{_table(('statistic', 'key', 'from interval', 'ending'), body, text=2)}</details>"
    )


def _headline(d: ReportData) -> str:
    """One line above the statistics: the guarantee and how far the release has come."""
    p, s = d.plan, d.summary
    if "epsilon" not in p:
        return ""
    through = f" through {escape(str(s['released_through']))}" if s.get("released_through") else ""
    return (
        f'<p class="headline">({_g(p["epsilon"])}, {_g(p["delta"], ".3g")})-differential '
        f"privacy per {escape(str(p.get('unit')))} over the whole release; "
        f"{s.get('released_intervals', 0)} reporting intervals released{through} (the plan "
        "and the budget follow the statistics).</p>"
    )


def render_report(data: ReportData) -> str:
    """The report's HTML text."""
    sim = (
        '<p class="simulation"><strong>SIMULATION</strong>: seeded noise, not for publication. '
        "The true series and the realised errors are shown to judge the plan; a release's "
        "report never holds them.</p>" if data.simulation else ""
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        "<title>dpcr release report</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>Differentially private continual release{' (simulation)' * data.simulation}</h1>"
        f"{sim}{_headline(data)}"
        + _statistics_section(data) + _plan_section(data) + _budget_section(data)
        + _planner_section(data) + _alerts_section(data)
        + '<p class="note" id="dpcr-check"></p>'
        f'<script type="application/json" id="dpcr-data">{embed_json(data.to_json())}</script>'
        f"<script>{_CHECK}</script></body></html>\n"
    )


def write_report(settings: ContinualRelease, data: ReportData, path: Path | None = None) -> Path:
    """Write ``report.html`` beside the public outputs (or to ``path``), never through a
    symbolic link; returns the path. A simulation's report (it shows the exact series) is
    owner-only (0600), a release's 0644."""
    from dpcr._fs import PARENT_MODE, ensure_dir, full, write_atomic
    from dpcr.errors import DiskFullError
    from dpcr.release import public_dir, public_modes, write_public

    if path is None:
        target = public_dir(settings, simulation=data.simulation) / "report.html"
        try:
            write_public(target, render_report(data), simulation=data.simulation)
        except DiskFullError:
            raise full(target, then=_REWRITE) from None
        return target
    ensure_dir(path.parent, PARENT_MODE, follow=True)
    try:
        write_atomic(path, render_report(data), mode=public_modes(simulation=data.simulation)[1])
    except DiskFullError:
        raise full(path, then=_REWRITE) from None
    return path


_REWRITE = (
    "Nothing in the store is lost (a committed release stays committed): free space and run "
    "again, or `dpcr report CONFIG`, which writes the reports again from the store"
)
