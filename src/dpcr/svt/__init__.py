"""Sparse vector technique: alerts over a continual release (docs/alerts.md).

AboveThreshold, Sparse (δ = 0 and δ > 0) and NumericSparse with exact discrete Laplace noise from
the :mod:`dpcr.noise` seam; their (α, β) accuracy; and, in :mod:`dpcr.svt.audit`, the exact output
distributions used to check privacy.
"""

from typing import TYPE_CHECKING

from dpcr._lazy import exports

if TYPE_CHECKING:
    from dpcr.svt._accuracy import (
        Accuracy,
        accuracy,
        discrete_laplace_tail,
        lecture_alpha,
    )
    from dpcr.svt._sparse import (
        BOTTOM,
        HALTED,
        TOP,
        SparseAnswers,
        SparseParameters,
        SparseState,
        SparseVector,
        above_threshold,
        advanced_composition,
        numeric_sparse,
        sparse,
    )

#: Imported when first used (:mod:`dpcr._lazy`): a release without alerts imports no sparse
#: vector (:mod:`dpcr.svt.rules` is read by every configuration).
__getattr__, __dir__ = exports(
    "dpcr.svt",
    {
        "dpcr.svt._accuracy": ["Accuracy", "accuracy", "discrete_laplace_tail", "lecture_alpha"],
        "dpcr.svt._sparse": [
            "BOTTOM", "HALTED", "TOP", "SparseAnswers", "SparseParameters", "SparseState",
            "SparseVector", "above_threshold", "advanced_composition", "numeric_sparse", "sparse",
        ],
    },
)  # fmt: skip

__all__ = [
    "BOTTOM",
    "HALTED",
    "TOP",
    "Accuracy",
    "SparseAnswers",
    "SparseParameters",
    "SparseState",
    "SparseVector",
    "above_threshold",
    "accuracy",
    "advanced_composition",
    "discrete_laplace_tail",
    "lecture_alpha",
    "numeric_sparse",
    "sparse",
]
