"""Window answers: the sliding-window protocol (SWCR, Cor 5.4/5.5) and the difference of two
prefix estimates of every other protocol, against their exact MSE; the planner ranks them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcr.errors import ConfigError
from dpcr.local import (
    LocalProtocol,
    exact_mse,
    plan_protocols,
    simulate,
    synthetic_population,
    true_answer,
    true_histogram,
)
from dpcr.noise import simulation_randomness

# R runs; per bin the mean squared error over runs has relative sd sqrt((2 + κ) / R) for a
# near-normal estimate (κ = excess kurtosis, taken <= 1): |mse_hat / mse - 1| <= z sqrt(3 / R),
# z = 5.5 (two-sided 4e-8 per bin and check, 2 bins × 2 checks × 5 cases: < 1e-6 in all).
Z = 5.5


@pytest.mark.parametrize(
    ("constraint", "encoding", "schedule", "window", "step", "t"),
    [
        ({"bound": 2}, "split", "window", 3, 1, 6),
        ({"mutations": 4}, "mutation", "window", 4, 2, 7),
        ({"bound": 2}, "mutation", "random-level", 3, 1, 6),
        ({"mutations": 4}, "value", "random-period", 3, 1, 7),
        ({"bound": 1}, "mutation", "tree", 5, 1, 6),
    ],
)
def test_window_answers_are_unbiased_with_the_exact_mse(
    constraint: dict[str, int], encoding: str, schedule: str, window: int, step: int, t: int
) -> None:
    d, horizon, reps = 2, 8, 1200
    within = constraint.get("bound")
    states = synthetic_population(entries=300, domain=d, horizon=horizon, seed=9, within=within)
    extra = {"window": window, "step": step} if schedule == "window" else {}
    proto = LocalProtocol(
        domain=d,
        horizon=horizon,
        epsilon=4.0,
        encoding=encoding,
        schedule=schedule,
        oracle="oue",
        **constraint,
        **extra,
    )
    truth = true_answer(proto, states, t, window=window)
    np.testing.assert_array_equal(
        truth, true_histogram(states, t, d) - true_histogram(states, t - window, d)
    )
    rng = simulation_randomness(31)
    est = np.array(
        [simulate(proto, states, rng=rng).estimate(t, window=window).histogram for _ in range(reps)]
    )
    mse = exact_mse(proto, states, t, window=window)
    err = est - truth
    assert np.all(np.abs(err.mean(axis=0)) <= Z * np.sqrt(mse / reps))
    assert np.all(np.abs((err**2).mean(axis=0) / mse - 1) <= Z * math.sqrt(3 / reps))


def test_a_window_protocol_answers_at_its_release_times_only() -> None:
    proto = LocalProtocol(
        domain=2,
        horizon=8,
        bound=1,
        epsilon=1.0,
        encoding="split",
        schedule="window",
        window=3,
        step=2,
    )
    assert proto.answer_nodes(5) == [((0, 2), 1)] and proto.node_span((0, 2)) == (3, 5)
    with pytest.raises(ConfigError, match="released at the end"):
        proto.answer_nodes(4)
    with pytest.raises(ConfigError, match="windows of 3 periods"):
        proto.answer_nodes(5, window=2)
    with pytest.raises(ConfigError, match="not the histogram"):
        proto.prefix_nodes(5)


def test_prefix_differences_cancel_shared_nodes() -> None:
    proto = LocalProtocol(
        domain=2, horizon=16, mutations=2, epsilon=1.0, encoding="mutation", schedule="tree"
    )
    # t = 11: [0..7] + [8..11]; t - 3 = 8: [0..7] + [8]; the shared [0..7] cancels
    assert sorted(proto.answer_nodes(11, window=3)) == [((0, 8), -1), ((2, 2), 1)]


def test_planner_ranks_window_answers_and_time_bounded_protocols() -> None:
    rows = plan_protocols(
        domain=3, horizon=16, bound=6, epsilon=2.0, population=5000, window=2, fanouts=(2, 4)
    )
    names = {r.protocol.name for r in rows}
    assert {"split/window(W=2,P=1)/oue", "mutation/tree(c=4)/grr", "mutation/flat/grr"} <= names
    assert all(r.protocol.bound == 6 for r in rows)
    assert [r.predicted_mse for r in rows] == sorted(r.predicted_mse for r in rows)
    # with a long bound and a short window, the direct window beats the difference of flat
    # reports: 2 ⌈(B + W)/P⌉ = 16 reports per window node against W = 2 nodes at 2 (B + 1) = 14
    by = {r.protocol.name: r.predicted_mse for r in rows}
    assert by["split/window(W=2,P=1)/grr"] < by["split/flat/grr"]
