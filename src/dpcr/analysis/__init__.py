"""dpcr.analysis: tools that analyse privacy rather than release data.

* :mod:`~dpcr.analysis.regions` -- exact privacy regions and profiles δ(ε) of finite mechanisms.
"""

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
    "FiniteMechanism",
    "LossDistribution",
    "PrivacyProfile",
    "loss_distribution",
    "privacy_profile",
    "randomized_response",
    "region_polygon",
]
