"""Local differential privacy for evolving entries (paper sections 5 and 6).

No curator sees the data: each entry randomizes its own changes on its device and a server
estimates the current histogram continually. See docs/local-dp.md.
"""

from dpcr.local._counts import (
    lifecycle_mutations,
    local_dcr_count,
    local_tree_count,
    local_window_count,
)

__all__ = [
    "lifecycle_mutations",
    "local_dcr_count",
    "local_tree_count",
    "local_window_count",
]
