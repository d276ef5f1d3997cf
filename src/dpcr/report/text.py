"""Plain-text views of a plan and of a run (what ``dpcr plan`` and ``dpcr run`` print)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dpcr.accounting.events import event_to_dict
from dpcr.queries import has_open_keys
from dpcr.report.hints import noise_hint_lines

if TYPE_CHECKING:
    from dpcr.release import ContinualRelease, PlanReport, RunResult

__all__ = ["backlog_lines", "open_key_lines", "plan_lines", "rows_lines", "run_lines"]

_LABELS = {"all": "every unit", "*": "other classes"}


def _label(cls: str) -> str:
    return _LABELS.get(cls, f"class {cls}")


def plan_lines(settings: ContinualRelease, report: PlanReport, *, shown: int = 8) -> list[str]:
    """The plan, the noise per layer, the worst unit per class, predicted errors and the
    guarantee; the same layout for every plan kind."""
    lines = [
        f"Plan: {report.description}",
        f"  privacy unit: {settings.unit}; constraint: {settings.constraint.describe()}; "
        f"noise: discrete {settings.mechanism}, budget ε={settings.budget.epsilon}, "
        f"δ={settings.budget.delta}",
        "  layer  share of budget per release  releases per unit  noise per query",
    ]
    steps = {q.name: q.unit_scale for q in settings.queries}
    for lr in report.layers[:shown]:
        # the mechanism's parameters count grid steps; the std is in the statistic's units
        noise = ", ".join(
            f"{name}: {_params(e)}"
            + (f" in steps of {float(steps[name]):g}" if steps.get(name, 1) != 1 else "")
            + f" (std {lr.noise_std[name]:.4g})"
            for name, e in lr.events.items()
        )
        lines.append(f"  {lr.layer:>5}  {lr.share:>27.6g}  {lr.instances_per_unit:>17}  {noise}")
    if len(report.layers) > shown:
        lines.append(f"  ... ({len(report.layers)} layers accounted)")
    if report.tail_share:
        lines.append(
            f"  layers from {len(report.layers)} on: at most {report.tail_share:.3g} of the "
            "budget together (shares 1/((l+1)(l+2)) telescope)"
        )
    lines.append("Worst case per unit (releases one unit's mutations can affect):")
    for cls, c in report.per_class.items():
        per_layer = ""
        if len(c.per_layer) > 1:
            head = ", ".join(str(n) for n in c.per_layer[:shown])
            per_layer = f" (per layer [{head}{', ...' if len(c.per_layer) > shown else ''}])"
        lines.append(f"  {_label(cls)}: {c.releases} releases{per_layer}")
    if report.per_query:
        lines.append("Per query (releases one unit's mutations can change through it):")
    for name, qp in report.per_query.items():
        ops = ", ".join(qp.touched_by)
        classes = "; ".join(
            f"{_label(c)} {sum(v)}" for c, v in qp.per_class.items()
        ) if len(qp.per_class) > 1 else ""
        lines.append(
            f"  {name} (changed by {ops}): {qp.releases} release"
            + ("" if qp.releases == 1 else "s")
            + (f" ({classes})" if classes else "")
        )
    for cls, sm in report.state_machines.items():
        label = {"all": "state machine", "*": "state machine (other classes)"}.get(
            cls, f"state machine of class {cls}"
        )
        lines.append(f"  {label}: k = {sm['k']}, attained by {sm['path']}")
        dropped = sm.get("dropped")
        if dropped:
            moves = dropped["transitions"]
            lines.append(f"    dropped moves ({len(moves)}): {', '.join(moves) or 'none'}")
            stays = ", ".join(f"{c} {n}" for c, n in dropped["allowances"].items())
            lines.append(f"    stays allowed per composite state (more are dropped): {stays}")
    for name, value in report.details.items():
        lines.append(f"  {name}: {value}")
    if report.split == "auto" or len(set(report.weights.values())) > 1:
        how = ('chosen by the planner (weights = "auto": every query the same, least factor '
               "above the least std any candidate plan gives it)"
               if report.split == "auto" else "as given")
        lines.append("Budget split across queries, " + how + ": " + ", ".join(
            f"{n} {w:.4g}" for n, w in report.weights.items()))
    for name, sel in report.selections.items():
        if sel.follows is not None:
            lines.append(f"Open keys of {name}: {sel.describe()}")
            continue
        lines.append(
            f"Open keys of {name}: a key not declared is published from the first interval "
            f"whose running value reaches {sel.threshold:.6g}; a key one unit alone holds "
            f"(at most {sel.keys_per_unit}, each at most {sel.count_per_unit}) is published "
            f"with probability <= {sel.delta:.3g} (in the δ above)"
        )
    span = "" if report.releases is not None else " (open-ended: a planning horizon)"
    lines.append(f"Predicted noise std over {report.horizon} reporting intervals{span}:")
    for name, err in report.predicted.items():
        lines.append(
            f"  {name}: one interval's change ±{err.release_std:.4g}, running value (worst) "
            f"±{err.running_std:.4g}"
            + (f"; 95 % intervals ±{err.release_half_width:.4g} and "
               f"±{err.running_half_width:.4g}"
               if err.release_half_width is not None and err.running_half_width is not None
               else "")
        )
    if settings.derived:
        lines.append("Derived from released values (no budget, no noise of their own):")
        lines.extend(f"  {d.name}: {d.describe()}" for d in settings.derived)
    lines.extend(noise_hint_lines(settings, report))
    for a in report.alerts.get("rules", []):
        acc = a["accuracy"]
        lines.append(
            f"Alert {a['name']}: {a['rule']}; sensitivity {a['sensitivity']:g}; "
            f"({a['epsilon']:.4g}, {a['delta']:.3g})-DP from the same budget; accurate to "
            f"±{acc['alpha']:g} with probability {1 - acc['beta']:g} over {acc['horizon']}"
        )
    lines.append(
        f"Guarantee: ({report.epsilon:.6g}, {report.delta:.3g})-DP per {settings.unit} over the "
        f"whole release{' and its alerts' if settings.alerts else ''} [{report.method}]"
    )
    lines.extend(backlog_lines(settings))
    lines.extend(rows_lines(settings, report))
    lines.extend(ranking_lines(settings, report))
    lines.extend(candidate_lines(settings, report))
    return lines


def backlog_lines(settings: ContinualRelease, *, now: int | None = None) -> list[str]:
    """How many reporting intervals a run would close now (the wall clock, or ``until``) when
    that is more than :data:`~dpcr.plans.base.ANNOUNCE_RUN_INTERVALS`, and how to release them
    when it is more than one run closes (:data:`~dpcr.plans.base.MAX_RUN_INTERVALS`)."""
    import time

    from dpcr.plans.base import ANNOUNCE_RUN_INTERVALS, MAX_RUN_INTERVALS
    from dpcr.timeutil import format_timestamp

    schedule = settings.plan.schedule()
    clock = settings.until if settings.until is not None else (
        now if now is not None else time.time_ns() // 1000)
    due = schedule.count_until(clock)
    if due <= ANNOUNCE_RUN_INTERVALS:
        return []
    first = format_timestamp(schedule.release_time(1))
    line = (f"A run now closes {due:,} reporting intervals ({first} to "
            f"{format_timestamp(schedule.release_time(due))}); its time grows with them")
    if due <= MAX_RUN_INTERVALS:
        return [line]
    runs = -(-due // MAX_RUN_INTERVALS)
    return [f"{line}, and one run releases at most {MAX_RUN_INTERVALS:,}: {runs} runs release "
            "them (each run the next ones), or choose a later release.start"]


#: ``dpcr plan`` states the published rows (intervals × keys) past this many, with what a run
#: that rebuilds them costs: about ROW_MS milliseconds and ROW_KB kB of memory per row (measured
#: on 2 cores: 10,000 keys × 31 daily intervals, 45 s and 1.6 GB).
ANNOUNCE_ROWS = 100_000
ROW_MS, ROW_KB = 0.15, 5.0


def rows_lines(settings: ContinualRelease, report: PlanReport) -> list[str]:
    """The rows ``releases.csv`` will hold (reporting intervals × declared keys, all queries)
    when they pass :data:`ANNOUNCE_ROWS`: every run rebuilds them. With open histograms, one
    line more: the keys they publish are rows besides, and the plan cannot count them."""
    keys = sum(len(q.keys) for q in settings.queries)
    intervals = report.releases if report.releases is not None else report.horizon
    rows = keys * intervals
    span = "" if report.releases is not None else " of the planning horizon"
    lines = [] if rows <= ANNOUNCE_ROWS else [
        f"releases.csv will hold {rows:,} rows ({keys:,} keys × {intervals:,} intervals"
        f"{span}); every run rebuilds them all: about {rows * ROW_MS / 1000:,.0f} s and "
        f"{rows * ROW_KB / 1e6:,.1f} GB at the end ({ROW_MS:g} ms and {ROW_KB:g} kB per row "
        "on 2 cores)"
    ]  # fmt: skip
    opened = [q.name for q in settings.queries if has_open_keys(q)]
    if opened:
        lines.append(
            f"releases.csv also holds, for {', '.join(opened)}, a row per interval of each "
            f"key published, from its selection on (at most {intervals:,} rows a key{span}): "
            "how many keys the data holds is not known before it is read, so no count of "
            f"these rows is stated{' above' if rows > ANNOUNCE_ROWS else ''}"
        )
    return lines


def ranking_lines(settings: ContinualRelease, report: PlanReport) -> list[str]:
    """The running-total plans the planner can run, calibrated to these settings, best first,
    by the worst running-value std over the horizon; a warning when the configured plan is more
    than 1.5 times worse than the best."""
    from dpcr.plans import SlidingWindowRelease
    from dpcr.release import WARN_RATIO, rank_plans

    if isinstance(settings.plan, SlidingWindowRelease):
        return []  # windows are another statistic than running totals
    ranked = rank_plans(settings, known=report)
    if len(ranked) < 2:
        return []
    first = settings.queries[0].name
    span = "" if report.releases is not None else (
        ", open-ended: the planning horizon"
        f"{' (release.planning_horizon)' if settings.horizon else ' (the default)'}"
    )
    what = (f"the running-value std at interval {report.horizon}"
            if settings.objective == "final"
            else f"the worst running-value std over {report.horizon} intervals")
    if settings.split == "auto":
        lines = [f"Plans ranked by {what}{span} (objective = \"{settings.objective}\"; an event "
                 "query: one interval's std), each at its own budget split (weights = \"auto\"): "
                 "the factor every query's std is above the least any candidate gives it at "
                 f"equal shares; {first}'s std in its units, and the split:"]
    else:
        lines = [f"Plans ranked by {what}{span} (objective = \"{settings.objective}\"; relative "
                 f"to disjoint; {first} in its units: worst, and at the last interval):"]
    mine = None
    for r in ranked:
        same = r.plan == settings.plan
        mine = r if same else mine
        if r.stds is not None and r.weights is not None:
            split = ":".join(f"{w:.3g}" for w in r.weights)
            lines.append(f"  {'*' if same else ' '} {r.score:6.3f}  ±{r.stds[first]:<10.4g} "
                         f"{split:<18} {r.plan.describe()}")
            continue
        std = r.report.predicted[first].running_std
        end = r.report.predicted[first].final_std
        lines.append(f"  {'*' if same else ' '} {r.score:6.3f}  ±{std:<10.4g} ±{end:<10.4g} "
                     f"{r.plan.describe()}")
    if mine is not None and mine.score > WARN_RATIO * ranked[0].score:
        lines.append(
            f"warning: the configured plan's running values are {mine.score / ranked[0].score:.2f}"
            f" times noisier than the best candidate's ({ranked[0].plan.describe()}); "
            "plan = \"auto\" picks it"
        )
    return lines


def candidate_lines(settings: ContinualRelease, report: PlanReport) -> list[str]:
    """The planner's candidates at equal privacy for the plan's horizon (windows for a window
    plan, running totals otherwise)."""
    from dpcr.plans import SlidingWindowRelease
    from dpcr.plans.planner import plan_prefix, plan_window

    plan = settings.plan
    mode: Literal["pure", "zcdp"] = "pure" if settings.mechanism == "laplace" else "zcdp"
    if isinstance(plan, SlidingWindowRelease):
        table = plan_window(
            settings.constraint, window=plan.window, period=plan.period,
            horizon=report.horizon * plan.period, mode=mode,
        ).table()
        what = "releases"
    else:
        period = plan.base_grid().period
        if period is None:  # explicit release times: no regular grid to compare on
            return []
        table = plan_prefix(
            settings.constraint, horizon=report.horizon, base=period, mode=mode
        ).table()
        what = "base intervals"
    return [
        f"Planner candidates at equal privacy (horizon {report.horizon} {what}; variance in "
        "units of one sensitivity-1 count's noise at the whole budget):",
        *("  " + row for row in table.splitlines()),
    ]


def open_key_lines(settings: ContinualRelease, result: RunResult, *, shown: int = 8) -> list[str]:
    """Per open histogram, from the published rows alone: how many keys are published, and
    when those first published by this run appeared."""
    last = max((r.interval for r in result.rows), default=0)
    since = last - result.new_intervals
    lines = []
    for q in settings.queries:
        if not getattr(q, "open", False):
            continue
        first: dict[str, tuple[int, str]] = {}
        for r in result.rows:
            if r.query == q.name and (r.key not in first or r.interval < first[r.key][0]):
                first[r.key] = (r.interval, r.end)
        new = sorted((i, k, end) for k, (i, end) in first.items() if i > max(since, 1))
        plural = "" if len(first) == 1 else "s"
        text = f"Open keys of {q.name}: {len(first):,} key{plural} published"
        if new:
            text += f"; {len(new):,} new: " + ", ".join(
                f"{k!r} from interval {i} ({end})" for i, k, end in new[:shown]
            ) + (f" and {len(new) - shown:,} more" if len(new) > shown else "")
        lines.append(text)
    return lines


def _params(event: Any) -> str:
    d = event_to_dict(event)
    params = ", ".join(f"{k}={v}" for k, v in d.items() if k not in ("type", "dimension"))
    return f"{d['type']}({params})"


def run_lines(
    settings: ContinualRelease, result: RunResult, *, reports: Sequence[Path] = ()
) -> list[str]:
    """The guarantee (public), then the operator-only counts of a run (the table of latest
    values is the CLI's). ``reports``: the public report, then the operator report, if written."""
    from dpcr.release import operator_dir, public_dir

    s = result.summary
    g = s["guarantee"]
    lines = [
        f"Guarantee: ({g['epsilon']:.6g}, {g['delta']:.3g})-DP per {s['unit']} "
        f"(≤ {g['max_queries_per_entry']} releases per unit; {g['method']}"
        f"{'; alerts included' if g.get('includes_alerts') else ''}); spent so far "
        f"ε = {g['spent_epsilon']:.6g}",
    ]
    if s.get("waiting_intervals"):
        from dpcr.plans.base import MAX_RUN_INTERVALS

        lines.append(
            f"{s['waiting_intervals']:,} more closed intervals wait: one run releases at most "
            f"{MAX_RUN_INTERVALS:,}; run again to release the next ones"
        )
    for name, a in s.get("alerts", {}).items():
        lines.append(
            f"Alert {name}: {a['above']} above threshold this run, {a['count']}/"
            f"{a['cutoff']} used" + (" (halted)" if a["halted"] else "")
        )
    lines.extend(open_key_lines(settings, result))
    private = operator_dir(settings, create=False).resolve()
    public = public_dir(settings, simulation=bool(s.get("simulation"))).resolve()
    lines.append(f"Public outputs: {public}/releases.csv, releases.json, summary.json"
                 + (f", {reports[0].name}" if reports else ""))
    if len(reports) > 1:
        lines.append(f"Operator report (sensitive, do not publish): {reports[1].resolve()}")
    d = result.diagnostics
    if not d:
        return lines
    lines.append(
        "Operator diagnostics (exact, not differentially private; do not publish) in "
        f"{private}/:"
    )
    ch, b = d["changelog"], d["bounding"]
    if not ch["valid"]:
        lines.append(
            "  warning: the source has no valid record: every release is noise around 0. Check "
            f"[source] (path, format, field names) and {settings.quarantine_path}"
        )
    lines.extend(f"  warning: {w}" for w in ch.get("warnings", ()))
    if b.get("dropped_warning"):
        lines.append(f"  warning: {b['dropped_warning']}")
    quarantined = sum(ch["quarantined"].values())
    lines.append(
        f"  Changelog: {ch['records']} records, {ch['valid']} valid, {quarantined} quarantined"
        + (f" {ch['quarantined']} → {ch['quarantine_file']}" if quarantined else "")
    )
    dropped = sum(b["dropped"].values())
    lines.append(
        f"  Bounding: {b['units']} units, {b['kept']} mutations kept, {dropped} dropped "
        f"{b['dropped'] if dropped else ''}, {b['late']} late, {ch['not_yet_due']} not yet due"
    )
    for name, n in (d.get("open_keys") or {}).items():
        lines.append(f"  Open keys of {name}: {n:,} candidate keys held by kept rows")
    for reason, moves in (b.get("dropped_moves") or {}).items():
        top = sorted(moves.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{m} {n}" for m, n in top[:8])
        more = f" and {len(top) - 8} more moves" if len(top) > 8 else ""
        lines.append(f"    dropped by {reason}, per move: {shown}{more}")
    return lines
