"""Privacy (exact, all pairs of small histories), unbiasedness and variance of the protocols."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from dpcr.errors import ConfigError, InsecureRandomnessError
from dpcr.local import (
    LocalClient,
    LocalProtocol,
    LocalServer,
    all_protocols,
    exact_variance,
    simulate,
    synthetic_population,
    true_histogram,
)
from dpcr.local._memo import l_grr_channels, memoized_loss
from dpcr.noise import secure_randomness, simulation_randomness


def _histories(domain: int, horizon: int, mutations: int) -> list[tuple[int, ...]]:
    """Every state sequence (null = domain) with at most ``mutations`` state changes."""
    out = []
    for seq in itertools.product(range(domain + 1), repeat=horizon):
        changes = sum(1 for prev, cur in zip((domain, *seq), seq, strict=False) if prev != cur)
        if changes <= mutations:
            out.append(seq)
    return out


def _worst_ratio(proto: LocalProtocol, h1: tuple[int, ...], h2: tuple[int, ...]) -> Fraction:
    """Exact sup over transcripts of P[transcript | h1] / P[transcript | h2], worst assignment.

    Reports are independent given the history and the public assignment, so the sup of the
    product is the product over reports of each report's exact sup (enumerated by the oracle)."""
    states = np.array([h1, h2])
    worst = Fraction(0)
    assignments: list[int | None]
    if proto.schedule == "random-level":
        assignments = list(range(proto.levels))
    elif proto.schedule == "random-period":
        assignments = list(range(proto.horizon))
    else:
        assignments = [None]
    for a in assignments:
        ratio = Fraction(1)
        for level in range(proto.levels):
            if proto.schedule == "random-level" and level != a:
                continue
            for index in range(proto.node_count(level)):
                if proto.schedule == "random-period" and index != a:
                    continue
                inputs = proto.node_inputs(states, (level, index))
                for o, x in zip(proto.oracles(level), inputs, strict=True):
                    if x[0] != x[1]:
                        ratio *= o.max_ratio(int(x[0]), int(x[1]))
        worst = max(worst, ratio)
    return worst


@pytest.mark.parametrize("mutations", [1, 2])
def test_every_protocol_meets_its_guarantee_exactly(mutations: int) -> None:
    domain, horizon, eps = 2, 4, 2.0
    hist = _histories(domain, horizon, mutations)
    bound = math.exp(eps)
    for proto in all_protocols(domain=domain, horizon=horizon, mutations=mutations, epsilon=eps):
        worst = max(_worst_ratio(proto, a, b) for a in hist for b in hist)
        assert worst <= bound, proto.name
        assert math.log(worst) <= proto.per_entry_epsilon() + 1e-12, proto.name
        if proto.encoding != "split":
            # tight: some pair reaches the accounted loss (up to the rational rounding of e^ε).
            # The split accounting is conservative: an insert changes only the "new" half.
            assert math.log(worst) == pytest.approx(proto.per_entry_epsilon(), abs=1e-6)
        assert proto.per_entry_epsilon() == pytest.approx(eps, abs=1e-6)


def test_paper_count_2k_is_tight_for_the_flat_protocol() -> None:
    proto = LocalProtocol(
        domain=2, horizon=6, mutations=2, epsilon=1.0, encoding="mutation", schedule="flat"
    )
    assert proto.level_count(0) == 4
    # insert at 0 and change at 1, against insert at 2 and change at 3: 4 periods differ
    h1, h2 = (0, 1, 1, 1, 1, 1), (2, 2, 0, 1, 1, 1)
    assert _worst_ratio(proto, h1, h2) == proto.node_ratio(0) ** 4


def test_invalid_combinations_name_the_fix() -> None:
    with pytest.raises(ConfigError, match="value encoding"):
        LocalProtocol(
            domain=2, horizon=4, mutations=1, epsilon=1.0, encoding="value", schedule="tree"
        )
    with pytest.raises(ConfigError, match="encoding='value'"):
        LocalProtocol(
            domain=2,
            horizon=4,
            mutations=1,
            epsilon=1.0,
            encoding="split",
            schedule="random-period",
        )


# ---- statistics -------------------------------------------------------------------------
# R independent runs; the estimate at the last period is a sum of >= 100 independent bounded
# reports per node, close to normal. Mean: |mean - truth| <= z σ / sqrt(R). Variance: the sample
# variance s² has relative sd sqrt((2 + κ) / R) with κ the excess kurtosis, small here (take 1):
# |s²/σ² - 1| <= z sqrt(3 / R). z = 5.5 (two-sided 4e-8 per check, 4 checks per test: < 1e-6).
Z = 5.5


@pytest.mark.parametrize(
    "encoding,schedule,oracle",
    [("mutation", "flat", "grr"), ("mutation", "tree", "grr"), ("split", "flat", "oue")],
)
def test_unbiased_with_the_erratum_8_variance(encoding: str, schedule: str, oracle: str) -> None:
    d, horizon, reps = 2, 8, 3000
    states = synthetic_population(entries=150, domain=d, horizon=horizon, seed=5)
    proto = LocalProtocol(
        domain=d,
        horizon=horizon,
        mutations=4,
        epsilon=4.0,
        encoding=encoding,
        schedule=schedule,
        oracle=oracle,
    )
    t = horizon - 1
    truth = true_histogram(states, t, d)
    rng = simulation_randomness(11)
    est = np.array([simulate(proto, states, rng=rng).estimate(t).histogram for _ in range(reps)])
    var = exact_variance(proto, states, t)
    assert np.all(np.abs(est.mean(axis=0) - truth) <= Z * np.sqrt(var / reps))
    assert np.all(np.abs(est.var(axis=0, ddof=1) / var - 1) <= Z * math.sqrt(3 / reps))


def test_standard_errors_are_calibrated_for_random_level() -> None:
    d, horizon, reps = 2, 8, 1500
    states = synthetic_population(entries=400, domain=d, horizon=horizon, seed=6)
    proto = LocalProtocol(
        domain=d,
        horizon=horizon,
        mutations=4,
        epsilon=4.0,
        encoding="split",
        schedule="random-level",
        oracle="grr",
    )
    t = 5
    truth = true_histogram(states, t, d)
    rng = simulation_randomness(12)
    runs = [simulate(proto, states, rng=rng).estimate(t) for _ in range(reps)]
    est = np.array([r.histogram for r in runs])
    se2 = np.array([r.standard_error**2 for r in runs]).mean(axis=0)
    emp = est.var(axis=0, ddof=1)
    assert np.all(np.abs(est.mean(axis=0) - truth) <= Z * np.sqrt(emp / reps))
    # the reported SE is conservative, and not grossly so
    assert np.all(se2 >= emp * (1 - Z * math.sqrt(3 / reps)))
    assert np.all(se2 <= 3 * emp)


def test_exact_per_report_simulation_matches_the_aggregate_law() -> None:
    d, horizon, reps = 2, 4, 400
    states = synthetic_population(entries=100, domain=d, horizon=horizon, seed=7)
    proto = LocalProtocol(
        domain=d,
        horizon=horizon,
        mutations=4,
        epsilon=3.0,
        encoding="mutation",
        schedule="flat",
        oracle="oue",
    )
    truth = true_histogram(states, 3, d)
    var = exact_variance(proto, states, 3)
    rng = simulation_randomness(13)
    est = np.array(
        [simulate(proto, states, rng=rng, exact=True).estimate(3).histogram for _ in range(reps)]
    )
    assert np.all(np.abs(est.mean(axis=0) - truth) <= Z * np.sqrt(var / reps))
    assert np.all(np.abs(est.var(axis=0, ddof=1) / var - 1) <= Z * math.sqrt(3 / reps))


# ---- client / server ----------------------------------------------------------------------
def test_client_refuses_seeded_randomness() -> None:
    proto = LocalProtocol(
        domain=2, horizon=4, mutations=2, epsilon=1.0, encoding="split", schedule="flat"
    )
    with pytest.raises(InsecureRandomnessError):
        LocalClient(proto, rng=simulation_randomness(1))


@pytest.mark.parametrize("schedule", ["flat", "tree", "random-level"])
def test_clients_and_server_end_to_end(schedule: str) -> None:
    d, horizon, n = 3, 8, 300
    states = synthetic_population(entries=n, domain=d, horizon=horizon, seed=8)
    proto = LocalProtocol(
        domain=d,
        horizon=horizon,
        mutations=4,
        epsilon=8.0,
        encoding="split",
        schedule=schedule,
        oracle="oue",
    )
    clients = [LocalClient(proto, rng=secure_randomness()) for _ in range(n)]
    server = LocalServer(proto, population=n)
    for t in range(horizon):
        for c, row in zip(clients, states, strict=True):
            c.set(None if row[t] == d else int(row[t]))
            server.update(c.report(t))
    est = server.estimate(horizon - 1)
    truth = true_histogram(states, horizon - 1, d)
    assert np.all(np.abs(est.histogram - truth) <= Z * est.standard_error + 1e-9)


# ---- memoization --------------------------------------------------------------------------
def test_memoized_l_grr_is_not_private_when_values_change() -> None:
    p1, p2 = l_grr_channels(k=2, eps_perm=2.0, eps_1=1.0)
    first, second = [0] * 64, [0] * 32 + [1] * 32
    loss = memoized_loss(permanent=p1, instantaneous=p2, first=first, second=second)
    assert loss.epsilon == pytest.approx(44.7895, abs=1e-3)
    # one output: a's in the first half, b's in the second
    assert loss.histograms == ((32, 0), (0, 32))
    # memoization is harmless when the value never changes: both histories identical
    same = memoized_loss(permanent=p1, instantaneous=p2, first=first, second=first)
    assert same.epsilon == 0.0


def test_memoized_loss_by_brute_force_on_short_histories() -> None:
    p1, p2 = l_grr_channels(k=3, eps_perm=1.5, eps_1=0.7)
    first, second = [0, 0, 1], [0, 2, 2]
    got = memoized_loss(permanent=p1, instantaneous=p2, first=first, second=second).epsilon

    def lik(hist: list[int], out: tuple[int, ...]) -> float:
        total = 1.0
        for v in set(hist):
            total *= sum(
                p1[v, b] * math.prod(p2[b, o] for h, o in zip(hist, out, strict=True) if h == v)
                for b in range(3)
            )
        return total

    want = max(
        abs(math.log(lik(first, o) / lik(second, o))) for o in itertools.product(range(3), repeat=3)
    )
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.slow
def test_memoized_l_grr_four_values_reaches_e_44_5() -> None:
    p1, p2 = l_grr_channels(k=4, eps_perm=2.0, eps_1=1.0)
    loss = memoized_loss(permanent=p1, instantaneous=p2, first=[0] * 64, second=[0] * 32 + [1] * 32)
    assert loss.epsilon == pytest.approx(44.5757, abs=1e-3)
