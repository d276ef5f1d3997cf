"""dpcr.analysis: tools that analyse privacy rather than release data.

* :mod:`~dpcr.analysis.regions` -- exact privacy regions and profiles δ(ε) of finite mechanisms.
* :mod:`~dpcr.analysis.cw_finite` -- exact coupled-worlds privacy of a finite mechanism on finite
  i.i.d. rows (streams and the private-block layout), and the composition theorem against it.
"""

from dpcr.analysis.cw_finite import (
    CwExactProfile,
    CwStepBound,
    Layout,
    RowDistribution,
    Theorem4Check,
    WindowMechanism,
    check_theorem4,
    cw_exact,
    cw_step_bound,
)
from dpcr.analysis.regions import (
    FiniteMechanism,
    LossDistribution,
    PrivacyProfile,
    loss_distribution,
    privacy_profile,
    randomized_response,
    region_polygon,
)

__all__ = [
    "CwExactProfile",
    "CwStepBound",
    "FiniteMechanism",
    "Layout",
    "LossDistribution",
    "PrivacyProfile",
    "RowDistribution",
    "Theorem4Check",
    "WindowMechanism",
    "check_theorem4",
    "cw_exact",
    "cw_step_bound",
    "loss_distribution",
    "privacy_profile",
    "randomized_response",
    "region_polygon",
]
