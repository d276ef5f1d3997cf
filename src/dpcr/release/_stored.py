"""What the store holds, as a run's result: the rerun that releases nothing new, the public
outputs written from the store, and :func:`stored_result` (the report's, which reads no
source)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from dpcr.errors import StoreError
from dpcr.release._results import RunResult
from dpcr.release._rows import appendable
from dpcr.store import SourceState, Store, reading
from dpcr.timeutil import format_timestamp

if TYPE_CHECKING:
    from dpcr.release._outputs import Published
    from dpcr.release._settings import ReleaseSettings

__all__ = ["publish", "rerun_unchanged", "stored_release", "stored_result"]


def stored_release(settings: ReleaseSettings, store: Store) -> RunResult:
    """The store's release: every released row, the last run's public summary and its
    operator diagnostics (empty before the first run)."""
    from dpcr.release._rows import released_rows

    runs = store.runs()
    last = dict(runs[-1]) if runs else {}
    diagnostics = last.pop("operator", {})
    rows = released_rows(settings, store, store.source_state().interval)
    return RunResult(rows=tuple(rows), summary=last, diagnostics=diagnostics, new_intervals=0)


def publish(
    settings: ReleaseSettings, store: Store, result: RunResult, *, simulation: bool,
    since: tuple[str | None, int] | None = None, found: Published | None = None,
) -> None:
    """The public outputs (and the operator's diagnostics) of ``result``, stamped with the
    store's head, and the alert answers when there are alert rules. ``since``: the store head
    and reporting intervals of the outputs as they are, which ``result.rows`` extends with
    the rows of new intervals (:func:`dpcr.release._rows.appendable`): when the release files
    are those written at that head, only the new rows are written, appended to their bytes.
    ``found``: the public files as the run's check found them, written at a head of the store
    (:func:`~dpcr.release._layout.check_published`; the store's lock held since): the release
    files' bytes are taken from there when it holds them, else read again."""
    from dpcr.release._outputs import (
        public_dir,
        published_releases,
        record_published,
        write_outputs,
        write_table,
    )
    from dpcr.release._summary import public_summary
    from dpcr.svt.pipeline import ALERT_FIELDS, alert_rows, alert_totals

    public = public_summary(settings, result.summary, alert_totals(settings, store))
    head = store.recorded_head()
    prior = None
    if since is not None and appendable(settings):
        texts = _found_releases(settings, found, since[0], simulation=simulation)
        if texts is None:
            texts = published_releases(settings, since[0], simulation=simulation)
        held = len(result.rows)  # (rows in interval order: those of new intervals last)
        while held and result.rows[held - 1].interval > since[1]:
            held -= 1
        if texts is not None and held == _rows_in(texts[1]):
            prior = (*texts, held)
    digests = write_outputs(settings, result.rows, public, result.diagnostics, head=head,
                            prior=prior)  # fmt: skip
    if settings.alerts:
        digests |= write_table(public_dir(settings, simulation=simulation), "alerts",
                               ALERT_FIELDS, alert_rows(settings, store), simulation=simulation)
    record_published(settings, head, digests)


def _found_releases(
    settings: ReleaseSettings, found: Published | None, head: str | None, *, simulation: bool
) -> tuple[bytes, bytes] | None:
    """What :func:`~dpcr.release._outputs.published_releases` gives at ``head``, from the
    files the run's check ``found``: the bytes of ``releases.csv`` and ``releases.json`` when
    it found both, written at ``head``; None otherwise."""
    from dpcr.release._outputs import public_dir

    if found is None or found.head != head:
        return None
    folder = public_dir(settings, simulation=simulation)
    csv_text, json_text = (found.texts.get(folder / n) for n in ("releases.csv", "releases.json"))
    return None if csv_text is None or json_text is None else (csv_text, json_text)


def _rows_in(json_text: bytes) -> int:
    """The number of records in a ``releases.json`` text (one ``"query"`` field each)."""
    return json_text.count(b'\n  "query": ')


def stored_result(
    settings: ReleaseSettings, *, simulation: bool = False, store: Store | None = None
) -> RunResult:
    """What the store holds, as a run's result (rows, the last run's public summary and
    diagnostics), without loading the source or drawing anything. Refuses when public outputs
    exist that the store cannot account for (:func:`~dpcr.release._layout.check_published`).
    ``store``: an open store (a snapshot) to read instead of opening it."""
    from dpcr.release._layout import check_layout, check_published

    if store is None and not settings.store_path.exists():
        raise StoreError(f"no store at {settings.store_path}: run `dpcr run` first")
    check_layout(settings, simulation=simulation)
    with reading(store, settings.store_path, fingerprint=settings.fingerprint(),
                 mode="simulation" if simulation else "release") as opened:  # fmt: skip
        check_published(settings, opened, simulation=simulation)
        return stored_release(settings, opened)


def rerun_unchanged(
    settings: ReleaseSettings, store: Store, state: SourceState, clock: int,
    simulation: bool, fingerprint: str | None,
) -> RunResult | None:
    """Nothing new since the last run (same source content, no interval closed since): the
    stored values are the release; nothing is loaded or drawn. None when there is work. When
    the public files are those the store's last run wrote, at the store's head, they are the
    outputs already (two runs that release nothing new write the same bytes): nothing is
    written, and the rows are read back from them."""
    from dpcr.release._outputs import published_rows

    if fingerprint is None or not state.records or store.source_fingerprint() != fingerprint:
        return None
    if settings.plan.schedule().count_until(clock) > state.interval:  # (an interval closed)
        return None
    rows = published_rows(settings, store, simulation=simulation)
    if rows is not None:
        last = store.last_run()
        diagnostics = last.pop("operator", {})
        if last:
            return RunResult(rows=tuple(rows), summary=_unchanged(last, clock, simulation),
                             diagnostics=diagnostics)  # fmt: skip
    stored = stored_release(settings, store)
    if not stored.summary:
        return None
    result = dataclasses.replace(stored, summary=_unchanged(stored.summary, clock, simulation))
    publish(settings, store, result, simulation=simulation)
    return result


def _unchanged(summary: dict[str, Any], clock: int, simulation: bool) -> dict[str, Any]:
    """The summary of a run that released nothing new, from the last run's."""
    out = {**summary, "new_intervals": 0, "simulation": simulation,
           "clock": format_timestamp(clock)}  # fmt: skip
    out["plan"] = {**out.get("plan", {}), "new_nodes": 0}
    out.pop("alerts", None)
    return out
