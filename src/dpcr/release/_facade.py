"""The entry object of a continual release, :class:`ContinualRelease`: its settings
(:class:`~dpcr.release._settings.ReleaseSettings`) with the operations on them. ``explain()``
states the guarantee from the settings alone; ``run()`` releases every closed interval through
the one release loop; ``session()`` keeps what repeated runs in one process share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dpcr.release._kept_rho import save_calibrations
from dpcr.release._loop import run_release
from dpcr.release._session import Session
from dpcr.release._settings import Progress, ReleaseSettings, _quiet

if TYPE_CHECKING:
    from dpcr.noise import Randomness
    from dpcr.release._plan_report import PlanReport
    from dpcr.release._results import RunResult
    from dpcr.release._suggest import Suggestion
    from dpcr.timeutil import Instant, Span

__all__ = ["AutoPlan", "ContinualRelease", "ReleaseSession"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoPlan:
    """``plan = "auto"``: the running-total plan with the least predicted error for these
    settings (``dpcr plan`` ranks them), on the grid of base intervals ``start``, ``period``,
    ``end`` (strings or µs, as for :class:`~dpcr.plans.DisjointRelease`). A
    :class:`ContinualRelease` given one holds the chosen plan, which its fingerprint binds."""

    start: Instant
    period: Span
    end: Instant | None = None


class ContinualRelease(ReleaseSettings):
    """A continual release: where the changelog comes from, whose privacy is protected, how
    entries may mutate, the plan, the statistics, the budget, the noise and where released
    values are kept (every setting: :class:`~dpcr.release._settings.ReleaseSettings`).

    >>> import dpcr
    >>> release = dpcr.ContinualRelease(
    ...     source=dpcr.sources.Jsonl(path="log.jsonl"),
    ...     constraint=dpcr.AtMostK(k=3),
    ...     plan=dpcr.DisjointRelease(start="2025-01-01", period="7d"),
    ...     queries=[dpcr.Count(name="active")],
    ...     budget=dpcr.Budget(epsilon=1.0),
    ... )
    >>> report = release.explain()          # reads no data
    >>> report.epsilon, report.per_class["all"].releases
    (1.0, 3)

    Every command of ``dpcr`` in Python (the TOML's keys are the values' parameters; a config
    file gives this object with :func:`dpcr.config.load_config`):

    ============================  ==========================================================
    ``dpcr plan``                 ``release.explain()`` (a :class:`PlanReport`)
    ``dpcr run``                  ``release.run(until=...)`` (a :class:`RunResult`)
    ``dpcr report``               ``dpcr.write_reports(release, simulation=False)``
    ``dpcr follow``               ``dpcr.cdc.follow.Follower(release, settings).run()``;
                                  ``release.session()`` for repeated runs in one process
    ``dpcr suggest``              ``release.suggest()``
    ``dpcr verify``               ``dpcr.release.verify(release)``
    ``dpcr check``                ``dpcr.config.load_config(path)`` (refuses a bad config)
                                  and ``release.explain()``
    ``dpcr capture``              ``dpcr.cdc.postgres.capture(...)``,
                                  ``dpcr.cdc.kafka.capture(...)``
    ``dpcr account``              ``dpcr.accounting.accountants.compare(...)``
    ``dpcr analyze``              ``dpcr.analysis.cw``, ``dpcr.analysis.regions``,
                                  ``dpcr.analysis.summary``
    ``dpcr audit``                ``dpcr.analysis.audit.audit_pipeline(...)``
    ``dpcr local-plan``           ``dpcr.local.plan_protocols(...)``
    ``dpcr sqlite-install-        ``dpcr.changelog.install_triggers(...)``
    triggers``
    ============================  ==========================================================
    """

    __slots__ = ()

    def __post_init__(self) -> None:
        auto = isinstance(self.plan, AutoPlan)
        split = isinstance(self.weights, str) and self.weights == "auto"
        if auto:  # the grid as a disjoint plan first: every setting is checked against it
            from dpcr.plans import DisjointRelease

            plan: Any = self.plan
            object.__setattr__(self, "plan", DisjointRelease(start=plan.start, period=plan.period,
                                                             end=plan.end))  # fmt: skip
        if split:  # equal shares first; the planner splits the budget below
            object.__setattr__(self, "weights", None)
        super().__post_init__()
        if auto or split:
            from dpcr.release._auto import choose_plan, choose_split

            chosen = choose_plan(self, split=split) if auto else choose_split(self)
            object.__setattr__(self, "plan", chosen.plan)
            object.__setattr__(self, "weights", chosen.weights)
            object.__setattr__(self, "split", chosen.split)

    def explain(self) -> PlanReport:
        """What ``dpcr plan`` states: the guarantee per class, participation, noise and predicted
        error per query. Reads no data; raises when the plan cannot be proven within budget."""
        from dpcr.release._plan_report import plan_report  # (a run needs no report)

        return plan_report(self)

    def suggest(
        self,
        *,
        epsilon: float = 0.1,
        exact: bool = False,
        ks: Sequence[int] | None = None,
        bounds: Sequence[int] | None = None,
        cap: int | None = None,
        rng: Randomness | None = None,
    ) -> Suggestion:
        """What ``dpcr suggest`` shows: for candidate bounds of the constraint (``ks`` for
        at-most-k, ``bounds`` in µs for time-bounded; per class of a hybrid), the shares of
        mutations and units bounding would drop, from DP histograms at ``epsilon`` (stated, and
        added to the release's guarantee), or exactly with ``exact=True`` (operator-only), and
        each statistic's predicted error (:mod:`dpcr.release._suggest`). Reads the changelog;
        writes nothing."""
        from dpcr.release._suggest import suggest  # (a run needs no suggestion)

        return suggest(self, epsilon=epsilon, exact=exact, ks=ks, bounds=bounds, cap=cap,
                       rng=rng)  # fmt: skip

    def session(self) -> ReleaseSession:
        """A :class:`ReleaseSession` for repeated runs in one process (one engine connection
        with the incremental state attached, one calibration)."""
        return ReleaseSession(self)

    def run(
        self,
        *,
        until: object = None,
        rng: Randomness | None = None,
        progress: Progress = _quiet,
    ) -> RunResult:
        """Release every closed interval (node, window) not yet released and write the outputs.

        ``until``: a time (ISO string, datetime or µs) closing every interval ending at or before
        it. ``rng``: None for a real release (the secure source); a seeded generator makes a
        simulation whose store can never be published from. The HTML reports that ``dpcr run``
        writes after a run come from :func:`dpcr.write_reports`.
        """
        settings = self._at(until)
        try:
            return run_release(settings, rng=rng, progress=progress)
        finally:
            save_calibrations(settings.store_path)  # (for the next processes)


class ReleaseSession(Session):
    """Runs of one release that share a connection and a calibration
    (:mod:`dpcr.release._session`).

    Use as a context manager, or call :meth:`close`::

        with release.session() as session:
            session.run(until=clock)
    """

    def run(
        self, *, until: object = None, rng: Randomness | None = None, progress: Any = None
    ) -> RunResult:
        """:meth:`ContinualRelease.run` within the session."""
        try:
            return run_release(self.settings._at(until), rng=rng, progress=progress or _quiet,
                               session=self)  # fmt: skip
        finally:
            save_calibrations(self.settings.store_path)
