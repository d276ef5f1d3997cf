"""dpcr: differentially private continual release from changing databases.

The Python API in one place: describe a release with frozen values and run it.

>>> import dpcr
>>> release = dpcr.ContinualRelease(
...     source=dpcr.sources.Jsonl(path="log.jsonl"),
...     constraint=dpcr.Hybrid(column="kind", classes={"multi": dpcr.AtMostK(k=12),
...                                                    "monthly": dpcr.TimeBounded(bound="31d")}),
...     plan=dpcr.TreeRelease(start="2025-01-01", period="7d", end="2025-12-31"),
...     queries=[dpcr.Count(name="active"),
...              dpcr.Sum(name="fares", column="fare", lower=0, upper=100, grid=0.5)],
...     budget=dpcr.Budget(epsilon=2.0),
... )
>>> report = release.explain()      # the guarantee from the settings alone; reads no data
>>> report.epsilon <= 2.0, report.kind
(True, 'tree')
"""

from typing import TYPE_CHECKING

from dpcr._lazy import exports
from dpcr.errors import (
    BudgetExhaustedError,
    ChangelogError,
    ConfigError,
    DiskFullError,
    DpcrError,
    InsecureRandomnessError,
    MissingExtraError,
    OutputError,
    PrivacyError,
    RewrittenError,
    StoreError,
    UnsupportedEventError,
)

if TYPE_CHECKING:
    from dpcr import sources
    from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
    from dpcr.bounding.state_machine import OpLimits, StateMachine
    from dpcr.plans import (
        DisjointRelease,
        FactorizationRelease,
        SlidingWindowRelease,
        TreeRelease,
    )
    from dpcr.queries import Count, Events, GroupedSum, Histogram, Sum
    from dpcr.release import (
        AutoPlan,
        Budget,
        Consistency,
        ContinualRelease,
        DiscreteGaussian,
        DiscreteLaplace,
        PlanReport,
        ReleaseRow,
        RunResult,
    )
    from dpcr.report.write import write_reports
    from dpcr.svt.rules import AlertRule

__version__ = "0.1.0"

#: Where each name of the API is defined: imported when first used (:mod:`dpcr._lazy`), so that
#: ``import dpcr`` (and the command line, which imports it) costs only what a command needs.
__getattr__, __dir__ = exports(
    "dpcr",
    {
        "dpcr.sources": ["sources"],
        "dpcr.bounding.constraints": ["AtMostK", "Hybrid", "TimeBounded"],
        "dpcr.bounding.state_machine": ["OpLimits", "StateMachine"],
        "dpcr.plans": [
            "DisjointRelease", "FactorizationRelease", "SlidingWindowRelease", "TreeRelease",
        ],
        "dpcr.queries": ["Count", "Events", "GroupedSum", "Histogram", "Sum"],
        "dpcr.release": [
            "AutoPlan", "Budget", "Consistency", "ContinualRelease", "DiscreteGaussian",
            "DiscreteLaplace", "PlanReport", "ReleaseRow", "RunResult",
        ],
        "dpcr.svt.rules": ["AlertRule"],
        "dpcr.report.write": ["write_reports"],
    },
)  # fmt: skip

__all__ = [
    "AlertRule",
    "AtMostK",
    "AutoPlan",
    "Budget",
    "BudgetExhaustedError",
    "ChangelogError",
    "ConfigError",
    "Consistency",
    "ContinualRelease",
    "Count",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "DisjointRelease",
    "DiskFullError",
    "DpcrError",
    "Events",
    "FactorizationRelease",
    "GroupedSum",
    "Histogram",
    "Hybrid",
    "InsecureRandomnessError",
    "MissingExtraError",
    "OpLimits",
    "OutputError",
    "PlanReport",
    "PrivacyError",
    "ReleaseRow",
    "RewrittenError",
    "RunResult",
    "SlidingWindowRelease",
    "StateMachine",
    "StoreError",
    "Sum",
    "TimeBounded",
    "TreeRelease",
    "UnsupportedEventError",
    "__version__",
    "sources",
    "write_reports",
]
