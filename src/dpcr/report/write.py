"""Both reports written from one consistent snapshot of the store.

The public report (:mod:`dpcr.report.html`) and the operator report (:mod:`dpcr.report.operator`)
read the store as a read-only snapshot (:class:`dpcr.store.Store` with ``snapshot=True``): no run
lock is taken, so ``dpcr report`` works beside a running ``dpcr follow`` or ``dpcr run``, and
every figure comes from one committed state of the store. A run commits the store before it
writes the public files; a snapshot taken just before a commit can meet public files of the
newer state, which it cannot account for yet: the reports are then gathered again from a newer
snapshot (:data:`ATTEMPTS` in all).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpcr.release import ContinualRelease, Progress, RunResult

__all__ = ["ATTEMPTS", "write_reports"]


#: Snapshots tried before a disagreement between the store and the public files is reported.
ATTEMPTS = 3


def write_reports(
    settings: ContinualRelease,
    *,
    simulation: bool,
    result: RunResult | None = None,
    output: Path | None = None,
    operator: bool = True,
    truth: dict[tuple[str, str], list[float]] | None = None,
    exact: dict[tuple[str, str], list[float]] | None = None,
    written: Callable[[str, Path], None] = lambda kind, path: None,
    exact_values: bool = False,
    progress: Progress = lambda stage, done, total: None,
) -> list[Path]:
    """Write the public report (to ``output``, or ``report.html`` beside the public outputs) and,
    when ``operator``, the operator report; returns their paths. ``result``: a run's result
    (the rows it holds are the store's). ``truth``: a simulation's exact series (in both
    reports). ``exact``: a release's exact series, for the operator report alone (a release's
    public report never holds exact values).
    ``written(kind, path)`` is called after each report ("public", "operator").
    ``exact_values``: compute here what is not given (loads the source again): a simulation's
    ``truth``, or with the operator report a release's ``exact`` (``dpcr report --exact``).
    ``progress(stage, done, total)`` follows that load, then the stage "report" starts.
    From Python, after ``release.run()``: ``dpcr.write_reports(release, simulation=False)``
    (docs/config.md).
    """
    from dpcr.errors import RewrittenError

    if exact_values:
        from dpcr.report.truth import exact_series

        if simulation and truth is None:
            truth = exact_series(settings, progress=progress)
        if not simulation and operator and exact is None:  # (the operator report's alone)
            exact = exact_series(settings, progress=progress, simulation=False)
    progress("report", 0, 1)

    for attempt in range(ATTEMPTS):
        try:
            return _write(settings, simulation=simulation, result=result, output=output,
                          operator=operator, truth=truth, exact=exact,
                          written=written)  # fmt: skip
        except RewrittenError:  # (public files newer than the snapshot: read a newer one)
            if attempt + 1 == ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _write(
    settings: ContinualRelease, *, simulation: bool, result: RunResult | None,
    output: Path | None, operator: bool, truth: dict[tuple[str, str], list[float]] | None,
    exact: dict[tuple[str, str], list[float]] | None, written: Callable[[str, Path], None],
) -> list[Path]:  # fmt: skip
    from dpcr.release import save_calibrations
    from dpcr.report.data import gather
    from dpcr.report.html import write_report
    from dpcr.report.operator import write_operator_report
    from dpcr.store import Store

    mode = "simulation" if simulation else "release"
    paths: list[Path] = []
    with Store(settings.store_path, fingerprint=settings.fingerprint(), mode=mode,
               snapshot=True) as snapshot:  # fmt: skip
        data = gather(settings, simulation=simulation, result=result, truth=truth,
                      store=snapshot)  # fmt: skip
        if operator:
            paths.append(write_operator_report(settings, simulation=simulation, store=snapshot,
                                               rows=data.rows,
                                               exact=truth if exact is None else exact))
    paths.insert(0, write_report(settings, data, output))
    written("public", paths[0])
    if operator:
        written("operator", paths[1])
    save_calibrations(settings.store_path)  # (the ranked plans', for the next reports)
    return paths
