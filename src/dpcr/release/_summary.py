"""The run summary (public) and the operator diagnostics (exact counts, never published)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dpcr.accounting.composition import Guarantee
from dpcr.accounting.guarantee import with_selection
from dpcr.release._calibrate import Calibration
from dpcr.timeutil import format_timestamp

if TYPE_CHECKING:
    from dpcr.release._settings import ReleaseSettings

__all__ = [
    "RUN_FIELDS", "_diagnostics", "_summary", "dropped_share", "dropped_warning",
    "public_summary",
]

#: Fields of a run's summary that describe the run rather than the release (its clock, what it
#: added, the ⊤ answers it gave, the closed intervals left for later runs): printed and kept in
#: the store's run log for the operator report, never in a public file, whose content must not
#: change with a run that closes nothing.
RUN_FIELDS = ("clock", "new_intervals", "alerts", "waiting_intervals")


def _summary(
    settings: ReleaseSettings,
    cal: Calibration,
    guarantee: Guarantee,
    last: int,
    new: int,
    simulation: bool,
    new_nodes: int,
    clock: int,
) -> dict[str, Any]:
    """The public summary: the plan, the guarantee, what was released. No exact count of
    records, units or drops (those are :func:`_diagnostics`, operator-only)."""
    g = cal.guarantee
    guarantee = with_selection(guarantee, settings.selection_delta)  # spent: with open keys'
    per_class = {name: p.total for name, p in cal.participation.items()}
    return {
        "simulation": simulation,
        "plan": {
            "kind": settings.plan.kind,
            "new_nodes": new_nodes,
            "estimator": getattr(settings.plan, "estimator", None),
            "description": settings.plan.describe(),
        },
        "guarantee": {
            "epsilon": g.epsilon,
            "delta": g.delta,
            "method": g.method,
            "max_queries_per_entry": max(per_class.values(), default=0),
            "per_class": per_class,
            "spent_epsilon": guarantee.epsilon,
            "spent_delta": guarantee.delta,
            "includes_alerts": bool(settings.alerts),
        },
        "budget": {"epsilon": settings.budget.epsilon, "delta": settings.budget.delta},
        "constraint": settings.constraint.describe(),
        "unit": settings.unit,
        "clock": format_timestamp(clock),
        "released_intervals": last,
        "new_intervals": new,
    }


def public_summary(
    settings: ReleaseSettings, summary: dict[str, Any], alerts: dict[str, Any]
) -> dict[str, Any]:
    """What ``summary.json`` and the public report show of a run's ``summary``: the plan, the
    guarantee and what was released up to now (``released_through``: the end of the last
    released interval), with the alert rules' totals ``alerts`` (from the published answers,
    :func:`dpcr.svt.pipeline.alert_totals`). No field depends on when the run happened or on
    what the source holds beyond the released values, and keys are sorted, so two runs that
    release nothing new give the same bytes."""
    public = {k: v for k, v in summary.items() if k not in RUN_FIELDS}
    if "plan" in public:
        public["plan"] = {k: v for k, v in public["plan"].items() if k != "new_nodes"}
    released = int(summary.get("released_intervals") or 0)
    public["released_through"] = (
        format_timestamp(settings.plan.schedule().release_time(released)) if released else None
    )
    if settings.alerts:
        public["alerts"] = alerts
    if settings.derived:  # (post-processing of the released values: what each row is)
        public["derived"] = {d.name: d.describe() for d in settings.derived}
    return _sorted(public)


def _sorted(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` with the keys of it and of the mappings in it in sorted order."""
    return {k: _sorted(v) if isinstance(v, dict) else v for k, v in sorted(value.items())}


def _diagnostics(
    settings: ReleaseSettings,
    load_report: Any,
    bounding: Any,
    *,
    min_ts: int | None,
    max_ts: int | None,
    not_yet_due: int,
    warnings: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Operator-only diagnostics: exact counts and times computed from the raw data. Never
    published (they are not differentially private): written under ``operator/``.
    ``warnings``: what the run tells the operator about the records without stopping; the
    bounding's ``dropped_warning`` (:func:`dropped_warning`) is apart."""
    from dpcr.bounding.constraints import Hybrid

    loud = dropped_warning(settings, bounding)
    return {
        "operator_only": "exact counts from the raw data; not differentially private, do not "
        "publish (docs/attack-model.md)",
        "changelog": {
            "records": load_report.records,
            "valid": load_report.valid,
            "quarantined": dict(load_report.quarantined),
            "tombstones": load_report.tombstones,
            "quarantine_file": str(settings.quarantine_path)
            if sum(load_report.quarantined.values())
            else None,
            "first": format_timestamp(min_ts) if min_ts is not None else None,
            "last": format_timestamp(max_ts) if max_ts is not None else None,
            "not_yet_due": not_yet_due,
            "split_updates": getattr(load_report, "split", 0),
            "late": getattr(load_report, "late", 0),
            "frozen_entries": len(getattr(load_report, "frozen", ())),
            "warnings": list(warnings),
        },
        "bounding": {
            "units": bounding.units,
            "mutations": bounding.mutations,
            "kept": bounding.kept,
            "dropped": bounding.dropped,
            "dropped_moves": getattr(bounding, "dropped_moves", {}),
            "late": getattr(load_report, "late", 0) + bounding.late,
            "clamped_unit_intervals": bounding.clamped,
            "non_numeric_values": bounding.non_numeric,
            "unknown_keys": getattr(bounding, "unknown_keys", {}),
            "by_class": bounding.by_class,
            "dropped_share": dropped_share(bounding),
            "warn_dropped": settings.warn_dropped,
            "dropped_warning": loud[0] if loud else None,
        },
        "hybrid_column": settings.constraint.column
        if isinstance(settings.constraint, Hybrid)
        else None,
    }


def dropped_share(bounding: Any) -> float:
    """The share of the mutations bounding saw that it dropped (every reason); 0 for none.
    Exact, from the raw data: operator-only."""
    total = int(bounding.mutations)
    return sum(bounding.dropped.values()) / total if total else 0.0


def dropped_warning(settings: ReleaseSettings, bounding: Any) -> tuple[str, ...]:
    """The operator's warning when bounding drops more than ``settings.warn_dropped`` of the
    mutations (the releases are then biased towards units' early history), else nothing."""
    share = dropped_share(bounding)
    if share <= settings.warn_dropped:
        return ()
    dropped = sum(bounding.dropped.values())
    reasons = ", ".join(f"{r} {n:,}" for r, n in sorted(bounding.dropped.items()))
    return (
        f"DROPPED {100 * share:.1f} % of the mutations ({dropped:,} of {bounding.mutations:,}: "
        f"{reasons}), above constraint.warn_dropped = {100 * settings.warn_dropped:g} %: the "
        "statistics miss these changes and are biased; run `dpcr suggest CONFIG` to choose the "
        "bound with the data",
    )
