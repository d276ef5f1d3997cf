"""How a plan's report and a run's result show themselves: one line (``repr``), a few lines of
text (``str``; what rich prints in a terminal) and HTML for a notebook (``_repr_html_``: the
guarantee, the tables and the charts of the public report). Public content only: a run's
operator diagnostics are never shown."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

__all__ = ["plan_html", "plan_summary", "plan_text", "run_html", "run_summary", "run_text"]

#: Charts drawn for at most this many statistics (every one is in the table).
MAX_CHARTS = 12


def _g(v: float, fmt: str = ".6g") -> str:
    return format(v, fmt)


def plan_summary(report: Any) -> str:
    worst = {n: f"±{e.running_std:.4g}" for n, e in report.predicted.items()}
    return (
        f"PlanReport({report.kind}: ({_g(report.epsilon)}, {_g(report.delta, '.3g')})-DP, "
        f"≤ {report.max_releases_per_unit} releases per unit, worst running std {worst})"
    )


def plan_text(report: Any) -> str:
    lines = [
        f"Plan: {report.description}",
        f"Guarantee: ({_g(report.epsilon)}, {_g(report.delta, '.3g')})-DP [{report.method}]",
    ]
    for name, c in report.per_class.items():
        lines.append(f"  class {name}: {c.releases} releases one unit can affect")
    lines.append(f"Predicted noise std over {report.horizon} reporting intervals:")
    for name, e in report.predicted.items():
        lines.append(f"  {name}: one interval's change ±{e.release_std:.4g}, running value "
                     f"(worst) ±{e.running_std:.4g}")  # fmt: skip
    return "\n".join(lines)


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    h = "".join(f"<th>{escape(str(c))}</th>" for c in head)
    b = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>"
                for r in rows)  # fmt: skip
    return f"<table><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table>"


def plan_html(report: Any) -> str:
    classes = [(name, c.releases) for name, c in report.per_class.items()]
    predicted = [(name, f"±{e.release_std:.4g}", f"±{e.running_std:.4g}")
                 for name, e in report.predicted.items()]  # fmt: skip
    return (
        f"<div><p><strong>{escape(report.description)}</strong></p>"
        f"<p>Guarantee: ({_g(report.epsilon)}, {_g(report.delta, '.3g')})-differential "
        f"privacy [{escape(report.method)}]</p>"
        + _table(("class", "releases one unit can affect"), classes)
        + f"<p>Predicted noise std over {report.horizon} reporting intervals</p>"
        + _table(("statistic", "one interval's change", "running value (worst)"), predicted)
        + "</div>"
    )


def _series(rows: Sequence[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in rows:
        out.setdefault(r.query + (f"[{r.key}]" if r.key else ""), []).append(r)
    for values in out.values():
        values.sort(key=lambda r: r.interval)
    return out


def run_summary(result: Any) -> str:
    series = _series(result.rows)
    last = max((r.interval for r in result.rows), default=0)
    g = result.summary.get("guarantee", {})
    return (
        f"RunResult({len(series)} statistics through interval {last}, "
        f"{result.summary.get('new_intervals', 0)} new this run; "
        f"spent ε = {g.get('spent_epsilon')} of {g.get('epsilon')})"
    )


def run_text(result: Any) -> str:
    lines = [run_summary(result)]
    for name, rows in _series(result.rows).items():
        r = rows[-1]
        lines.append(f"  {name} at {r.end}: {r.estimate:.6g} ± {r.std_estimate:.3g} "
                     f"(change {r.change:.6g})")  # fmt: skip
    return "\n".join(lines)


def run_html(result: Any) -> str:
    from dpcr._svg import Line, line_chart, row_band

    series = _series(result.rows)
    latest = [(name, rows[-1].end, f"{rows[-1].estimate:.6g}", f"{rows[-1].std_estimate:.3g}",
               f"{rows[-1].change:.6g}") for name, rows in series.items()]  # fmt: skip
    charts = []
    for name, rows in list(series.items())[:MAX_CHARTS]:
        x, labels = [r.interval for r in rows], [r.end[:16].replace("T", " ") for r in rows]
        for what, values, band in (
            ("running value", [r.estimate for r in rows], row_band(rows)),
            ("change in each interval", [r.change for r in rows], row_band(rows, change=True)),
        ):  # (the two charts of the public report)
            line = Line(label="published, 95 % interval", values=values, color="#1f77b4",
                        band=band)  # fmt: skip
            charts.append(line_chart(title=f"{name}: {what}", x=x, x_labels=labels,
                                     lines=[line]))  # fmt: skip
    return (
        f"<div><p>{escape(run_summary(result))}</p>"
        + _table(("statistic", "end", "estimate", "± std", "change"), latest)
        + "".join(charts)
        + "</div>"
    )
