"""Local differential privacy for evolving entries (paper sections 5 and 6).

No curator sees the data: each entry randomizes its own changes on its device and a server
estimates the current histogram continually. See docs/local-dp.md.
"""

from dpcr.local._bounding import BoundedStates, bound_states
from dpcr.local._counts import (
    lifecycle_mutations,
    local_dcr_count,
    local_tree_count,
    local_window_count,
)
from dpcr.local._oracles import GeneralizedRR, UnaryEncoding, exp_ratio
from dpcr.local._planner import plan_protocols
from dpcr.local._population import synthetic_population
from dpcr.local._protocols import ENCODINGS, ORACLES, SCHEDULES, LocalProtocol, all_protocols
from dpcr.local._service import (
    LocalClient,
    LocalEstimate,
    LocalServer,
    Report,
    exact_mse,
    exact_variance,
    simulate,
    true_answer,
    true_histogram,
)

__all__ = [
    "ENCODINGS",
    "ORACLES",
    "SCHEDULES",
    "BoundedStates",
    "GeneralizedRR",
    "LocalClient",
    "LocalEstimate",
    "LocalProtocol",
    "LocalServer",
    "Report",
    "UnaryEncoding",
    "all_protocols",
    "bound_states",
    "exact_mse",
    "exact_variance",
    "exp_ratio",
    "lifecycle_mutations",
    "local_dcr_count",
    "local_tree_count",
    "local_window_count",
    "plan_protocols",
    "simulate",
    "synthetic_population",
    "true_answer",
    "true_histogram",
]
