"""dpcr: differentially private continual release from changing databases."""

from dpcr.errors import (
    BudgetExhaustedError,
    ChangelogError,
    ConfigError,
    DpcrError,
    InsecureRandomnessError,
    MissingExtraError,
    PrivacyError,
    StoreError,
    UnsupportedEventError,
)

__version__ = "0.1.0"

__all__ = [
    "BudgetExhaustedError",
    "ChangelogError",
    "ConfigError",
    "DpcrError",
    "InsecureRandomnessError",
    "MissingExtraError",
    "PrivacyError",
    "StoreError",
    "UnsupportedEventError",
    "__version__",
]
