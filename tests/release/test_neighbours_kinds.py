"""The neighbour harness (:mod:`release.test_neighbours`) over the query kinds added through
:class:`dpcr.queries.QueryKind`: the clamped sum of squares, beside the count and sum a variance
reads, released on D and D' = D without one unit with the noise off; each pair's exact loss
stays within the stated guarantee, for every plan kind, unit mode, constraint and noise."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import dpcr
from dpcr.queries import SumSquares
from release.test_neighbours import CONSTRAINTS, PLANS, adversarial_log, noise_off, worst_ratio

__all__ = ["noise_off"]  # (the harness's fixture: the released values are the exact ones)

#: bounds on one side of 0: the sensitivity is max(b², a²) = 120² steps, not 120² - 20²
QUERIES = (
    dpcr.Count(name="active"),
    dpcr.Sum(name="fares", column="fare", lower=10, upper=60, grid=0.5),
    SumSquares(name="fares_sq", column="fare", lower=10, upper=60, grid=0.5),
)
#: each plan kind, unit mode, constraint and noise at least once
CASES = [
    ("disjoint", "at_most_k", "entry", "laplace"),
    ("tree", "time_bounded", "rider_id", "laplace"),
    ("window", "state_machine", "entry", "gaussian"),
    ("factorization", "hybrid", "rider_id", "gaussian"),
    ("blt", "op_limits", "entry", "gaussian"),
    ("tree", "hybrid", "entry", "gaussian"),
    ("disjoint", "time_bounded", "rider_id", "gaussian"),
    ("window", "at_most_k", "rider_id", "laplace"),
]
NOISES: dict[str, Any] = {"laplace": dpcr.DiscreteLaplace(), "gaussian": dpcr.DiscreteGaussian()}


@pytest.mark.slow
@pytest.mark.parametrize(("plan", "constraint", "unit", "noise"), CASES)
def test_the_sum_of_squares_stays_within_the_stated_guarantee(
    tmp_path: Path, plan: str, constraint: str, unit: str, noise: str
) -> None:
    ratio, who = worst_ratio(
        tmp_path, plan=PLANS[plan], constraint=CONSTRAINTS[constraint], unit=unit,
        noise=NOISES[noise], log=adversarial_log(7), events=QUERIES,
    )  # fmt: skip
    assert ratio <= 1 + 1e-9, f"unit {who}: the pair's loss is {ratio:.4g} x the stated one"
    assert ratio > 0  # the harness saw a difference


def _flip_log() -> list[dict[str, Any]]:
    """Ticket t0 inserted at a fare above the bounds, moved below them and back, one day apart
    (within a 2-day time bound: three daily releases each see a change of about max(b², a²)),
    and a bystander t1."""

    def row(entry: str, fare: float) -> dict[str, Any]:
        return {"ticket_id": entry, "rider_id": "r0", "kind": "multi", "zone": "A",
                "fare": fare, "rides": 0}  # fmt: skip

    out: list[dict[str, Any]] = []
    before = None
    for seq, (ts, fare) in enumerate(
        [("2025-01-01T00:30:00Z", 150.0), ("2025-01-02T00:10:00Z", 5.0),
         ("2025-01-03T00:20:00Z", 150.0)], start=1,
    ):  # fmt: skip
        after = row("t0", fare)
        out.append({"entry": "t0", "ts": ts, "seq": seq, "op": "update" if before else "insert",
                    "before": before, "after": after})  # fmt: skip
        before = after
    out.append({"entry": "t1", "ts": "2025-01-01T03:00:00Z", "seq": 9, "op": "insert",
                "before": None, "after": row("t1", 40.0)})  # fmt: skip
    return out


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_the_harness_catches_a_sum_of_squares_calibrated_by_its_width(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, noise: str
) -> None:
    """Calibrated by (max - min) of its squares (the source paper's |b - a|, erratum 3), the
    pair's loss exceeds the stated one; by max(b², a²), it stays within it, close to it."""
    query = (SumSquares(name="sq", column="fare", lower=10, upper=60, grid=0.5),)
    kw: dict[str, Any] = {"plan": PLANS["disjoint"], "constraint": dpcr.TimeBounded(bound="2d"),
                          "unit": "entry", "noise": NOISES[noise], "log": _flip_log(),
                          "events": query}  # fmt: skip
    (tmp_path / "right").mkdir()
    (tmp_path / "wrong").mkdir()
    right, _ = worst_ratio(tmp_path / "right", **kw)
    assert 0.95 < right <= 1 + 1e-9
    lo, hi = query[0].steps_range
    monkeypatch.setattr(SumSquares, "l1_sensitivity", property(lambda self: Fraction(hi - lo)))
    monkeypatch.setattr(SumSquares, "l2_sensitivity_squared",
                        property(lambda self: Fraction(hi - lo) ** 2))  # fmt: skip
    wrong, _ = worst_ratio(tmp_path / "wrong", **kw)
    assert wrong > 1
