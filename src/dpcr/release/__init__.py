"""The release core: one entry object, one calibration policy, one release loop for every plan.

* :class:`ContinualRelease` -- every setting of a release as a frozen value
  (:class:`ReleaseSettings`); ``explain()`` states the guarantee (no data read), ``run()``
  releases every closed interval.
* :mod:`~dpcr.release._calibrate` -- the noise of every layer from the budget and constraint
  (a Gaussian search's ρ kept beside the store: :mod:`~dpcr.release._kept_rho`);
  :mod:`~dpcr.release._plan_report` -- what `dpcr plan` states from it.
* :mod:`~dpcr.release._loop` -- load, bound and aggregate, check the filter, draw, commit, estimate.
* :func:`verify` -- a full check of what runs check only in part (``dpcr verify``).
"""

from typing import TYPE_CHECKING

from dpcr._lazy import exports

if TYPE_CHECKING:
    from dpcr.release._auto import WARN_RATIO, Ranked, choose_plan, rank_plans, running_candidates
    from dpcr.release._calibrate import OPEN_HORIZON, Calibration, calibrate, largest_rho
    from dpcr.release._consistency import CONSISTENCY_MODES, Consistency
    from dpcr.release._facade import AutoPlan, ContinualRelease, ReleaseSession
    from dpcr.release._full import load_changelog
    from dpcr.release._kept_rho import save_calibrations
    from dpcr.release._loop import (
        closed_count,
        exact_columns,
        exact_release,
        private_output,
        resolve_randomness,
        run_clock,
        stored_result,
    )
    from dpcr.release._outputs import (
        PRIVATE_MODES,
        operator_dir,
        public_dir,
        public_modes,
        write_public,
    )
    from dpcr.release._participation import flatten, query_constraints, query_participation
    from dpcr.release._plan_report import (
        ClassReport,
        LayerReport,
        PlanReport,
        QueryError,
        QueryParticipation,
        plan_report,
    )
    from dpcr.release._results import OUTPUT_FIELDS, ReleaseRow, RunResult
    from dpcr.release._settings import (
        NOISES,
        Budget,
        DiscreteGaussian,
        DiscreteLaplace,
        Noise,
        Progress,
        ReleaseSettings,
    )
    from dpcr.release._summary import public_summary
    from dpcr.release._verify import Finding, verify

#: Each name is imported from its module when first used (:mod:`dpcr._lazy`).
__getattr__, __dir__ = exports(
    "dpcr.release",
    {
        "dpcr.release._auto": [
            "WARN_RATIO", "Ranked", "choose_plan", "rank_plans", "running_candidates",
        ],
        "dpcr.release._calibrate": ["OPEN_HORIZON", "Calibration", "calibrate", "largest_rho"],
        "dpcr.release._kept_rho": ["save_calibrations"],
        "dpcr.release._participation": ["flatten", "query_constraints", "query_participation"],
        "dpcr.release._consistency": ["CONSISTENCY_MODES", "Consistency"],
        "dpcr.release._facade": ["AutoPlan", "ContinualRelease", "ReleaseSession"],
        "dpcr.release._full": ["load_changelog"],
        "dpcr.release._loop": [
            "closed_count", "exact_columns", "exact_release", "private_output",
            "resolve_randomness", "run_clock", "stored_result",
        ],
        "dpcr.release._outputs": [
            "PRIVATE_MODES", "operator_dir", "public_dir", "public_modes", "write_public",
        ],
        "dpcr.release._plan_report": [
            "ClassReport", "LayerReport", "PlanReport", "QueryError", "QueryParticipation",
            "plan_report",
        ],
        "dpcr.release._results": ["OUTPUT_FIELDS", "ReleaseRow", "RunResult"],
        "dpcr.release._settings": [
            "NOISES", "Budget", "DiscreteGaussian", "DiscreteLaplace", "Noise", "Progress",
            "ReleaseSettings",
        ],
        "dpcr.release._summary": ["public_summary"],
        "dpcr.release._verify": ["Finding", "verify"],
    },
)  # fmt: skip

__all__ = [
    "CONSISTENCY_MODES",
    "NOISES",
    "OPEN_HORIZON",
    "OUTPUT_FIELDS",
    "PRIVATE_MODES",
    "WARN_RATIO",
    "AutoPlan",
    "Budget",
    "Calibration",
    "ClassReport",
    "Consistency",
    "ContinualRelease",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "Finding",
    "LayerReport",
    "Noise",
    "PlanReport",
    "Progress",
    "QueryError",
    "QueryParticipation",
    "Ranked",
    "ReleaseRow",
    "ReleaseSession",
    "ReleaseSettings",
    "RunResult",
    "calibrate",
    "choose_plan",
    "closed_count",
    "exact_columns",
    "exact_release",
    "flatten",
    "largest_rho",
    "load_changelog",
    "operator_dir",
    "plan_report",
    "private_output",
    "public_dir",
    "public_modes",
    "public_summary",
    "query_constraints",
    "query_participation",
    "rank_plans",
    "resolve_randomness",
    "run_clock",
    "running_candidates",
    "save_calibrations",
    "stored_result",
    "verify",
    "write_public",
]
