"""The exact series behind a release, for a simulation's report and for the operator report:
what the noisy values estimate.

A release store is read only for the operator report (``dpcr report --exact``), which is
owner-only and never published; the public report of a release refuses exact values
(:class:`~dpcr.report.data.ReportData`). The changelog is loaded again
through the release core (:func:`dpcr.release.load_changelog`, with the store's frozen points,
up to the records the store consumed), aggregated and mapped to the plan's nodes with the noise
switched off (:func:`dpcr.release.exact_release`), then put through the plan's own estimator:
every estimator is linear and unbiased, so on noise-free node values it returns the exact
running value (a window plan: the window's value) of each reporting interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from dpcr.release import Progress

if TYPE_CHECKING:
    from dpcr.release import ContinualRelease

__all__ = ["exact_series"]


def _quiet(stage: str, done: int, total: int) -> None:
    return None


def exact_series(
    settings: ContinualRelease, *, progress: Progress = _quiet, simulation: bool = True
) -> dict[tuple[str, str], list[float]]:
    """Per (query, key): the exact value of each reporting interval the store at
    ``settings.store_path`` released, in the statistic's units (the declared keys, and the keys
    an open histogram publishes). ``simulation=False`` reads a
    release store: for the operator report alone (``dpcr report --exact``), never a public
    file."""
    import duckdb

    from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
    from dpcr.mechanisms import noise_variance
    from dpcr.release import calibrate, exact_columns, load_changelog, private_output
    from dpcr.store import SourceState, Store

    with Store(settings.store_path, fingerprint=settings.fingerprint(),
               mode="simulation" if simulation else "release", snapshot=True) as store:
        state, frozen = store.source_state(), store.frozen()
        published = {q: {k for k, r in keys.items() if r.selected is not None}
                     for q, keys in store.open_keys().items()}  # fmt: skip
    n = state.interval
    if n == 0:
        return {}
    plan = settings.plan
    stage = "simulation: exact values"
    progress(stage, 0, 3000)

    def part(first: int) -> Callable[[int, int], None]:  # thousandths of one of three parts
        return lambda done, total: progress(stage, first + done * 1000 // max(total, 1), 3000)

    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    try:
        # loading may set aside malformed records, and the operator's quarantine file of the run
        # is not to be rewritten by a report
        with private_output(settings) as aside:
            load_changelog(aside, con, SourceState(), frozen, progress=part(0))
        con.execute("DELETE FROM changelog WHERE record > ?", [state.records])
        exact, columns = exact_columns(settings, con, table="changelog", reporting=n,
                                       progress=part(1000))  # fmt: skip
        progress(stage, 2000, 3000)
    finally:
        con.close()
    cal = calibrate(settings)
    nodes = plan.due(0, n)
    out: dict[tuple[str, str], list[float]] = {}
    for q in settings.queries:
        variances: dict[tuple[int, int], float] = {}
        for node in {plan.instance(m) for m in nodes} | set(nodes):
            event = cal.layers[node[0]][q.name] if node[0] < len(cal.layers) else None
            if isinstance(event, DiscreteLaplaceEvent | DiscreteGaussianEvent):
                variances[node] = noise_variance(event)
        unit = float(q.unit_scale)
        # (an open histogram: its declared keys and the keys it publishes, from the store)
        shown = published.get(q.name, set())
        for k, key in enumerate(columns[q.name]):
            if k >= len(q.keys) and key not in shown:
                continue
            values = {node: exact[q.name][row, k:k + 1] for row, node in enumerate(nodes)}
            est = plan.estimate(values, variances, n)
            out[(q.name, key)] = [float(v) * unit for v in np.asarray(est.estimate)[:, 0]]
    progress(stage, 3000, 3000)
    return out
