"""The public-files harness (:mod:`release.test_public_neighbours`) over a release with the query
kinds added through :class:`dpcr.queries.QueryKind` (a clamped sum of squares) and the
statistics derived from released values (mean, variance): D and D' (without one unit) publish
files that differ only in released values and what is computed from them, and each pair's exact
loss stays within the stated guarantee."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from release.test_public_neighbours import Config, check_pair, noise_off, run_pair

__all__ = ["noise_off"]  # (the harness's fixture: the released values are the exact ones)

#: a sum of squares of the sum's column and bounds, and the mean and variance of the fares
MOMENTS = (
    '[[query]]\nname = "fares_sq"\nkind = "sum_squares"\ncolumn = "fare"\nlower = 0\n'
    'upper = 100\ngrid = 0.5\n'
    '[[query]]\nname = "fare_mean"\nkind = "mean"\ncount = "active"\nsum = "fares"\n'
    '[[query]]\nname = "fare_var"\nkind = "variance"\ncount = "active"\nsum = "fares"\n'
    'sum_squares = "fares_sq"\n'
)  # fmt: skip


@dataclass(frozen=True)
class MomentsConfig(Config):
    """A configuration of the matrix with :data:`MOMENTS` beside its count and sum."""

    def toml(self, path: str) -> str:
        return super().toml(path).replace("[output]", MOMENTS + "[output]")


MATRIX = {
    "disjoint-k-entry": MomentsConfig("disjoint", "at_most_k", queries=("count", "sum")),
    "tree-bounded-column-csv": MomentsConfig(
        "tree", "time_bounded", unit="rider_id", fmt="csv", queries=("count", "sum")
    ),
    "sqrt-hybrid-entry-gauss": MomentsConfig(
        "sqrt", "hybrid", noise="gaussian", queries=("count", "sum", "histogram")
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MATRIX))
def test_public_files_with_derived_statistics_differ_only_in_released_values(
    tmp_path: Path, name: str
) -> None:
    d, d1, unit = run_pair(tmp_path, MATRIX[name], bad=("malformed", "long"))
    published = d.snapshots[-1]["releases.csv"]
    assert b"\nfare_var," in published and b"\nfares_sq," in published
    ratio = check_pair(d, d1, unit)
    assert ratio > 0, "the harness saw no difference (a test that cannot fail is a defect)"
