"""Exact coupled-worlds privacy of finite mechanisms on finite rows: an independent brute-force
oracle, agreement with the Bernoulli count engine, Theorem 4 never below the exact value on random
distributions, and the private-block layout of Figure 2 (4)."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pytest

from dpcr.analysis import (
    Layout,
    RowDistribution,
    WindowMechanism,
    check_theorem4,
    cw_exact,
    cw_step_bound,
)
from dpcr.analysis.cw import brute_force_stream, single_step
from dpcr.errors import ConfigError

F = Fraction


def _oracle(
    rows: RowDistribution, mech: WindowMechanism, layout: Layout
) -> list[tuple[list[Fraction], list[Fraction]]]:
    """Every (world 0 | v, z; world 1 | z) pair of output distributions, straight from the
    definition: sum over all assignments of the rows, in Fractions."""
    k, b = rows.values, layout.block
    n_rows = layout.blocks * b
    m, t = mech.outputs, len(layout.databases)
    joint: dict[tuple[int, int, tuple[int, ...]], dict[tuple[int, ...], Fraction]] = {}
    aux = [blk * b + j for blk in layout.aux for j in range(b)]
    held = {blk for db in layout.databases for blk in db} - set(layout.aux)
    private = [blk * b + j for blk in sorted(held) for j in range(b)]
    for xs in itertools.product(range(k), repeat=n_rows):
        w = math.prod((rows.probabilities[x] for x in xs), start=Fraction(1))
        dists = []
        for db in layout.databases:
            code = 0
            for blk in db:
                for j in range(b):
                    code = code * k + xs[blk * b + j]
            dists.append(mech.probabilities[code])
        z = tuple(xs[r] for r in aux)
        for rho in private:
            table = joint.setdefault((rho, xs[rho], z), {})
            for ys in itertools.product(range(m), repeat=t):
                mass = w * math.prod((d[y] for d, y in zip(dists, ys, strict=True)), start=F(1))
                table[ys] = table.get(ys, F(0)) + mass
    out = []
    outputs = list(itertools.product(range(m), repeat=t))
    for (rho, v, z), table in joint.items():
        if rows.probabilities[v] == 0:
            continue
        world1: dict[tuple[int, ...], Fraction] = {}
        for u in range(k):
            for ys, mass in joint.get((rho, u, z), {}).items():
                world1[ys] = world1.get(ys, F(0)) + mass
        t0, t1 = sum(table.values(), F(0)), sum(world1.values(), F(0))
        if t1 == 0:
            continue
        out.append(([table[y] / t0 for y in outputs], [world1[y] / t1 for y in outputs]))
    return out


def _random_case(seed: int) -> tuple[RowDistribution, WindowMechanism, Layout]:
    """A small random row distribution and mechanism (on the whole window, or on its sum)."""
    rng = random.Random(seed)

    def pmf(size: int, zeros: bool = False) -> list[Fraction]:
        while True:
            w = [rng.randint(0 if zeros else 1, 6) for _ in range(size)]
            if sum(1 for x in w if x) >= 2:
                return [F(x, sum(w)) for x in w]

    k = rng.choice([2, 3])
    n, block = rng.choice([(2, 1), (3, 1), (4, 2)] if k == 2 else [(2, 1), (3, 1)])
    t, m = rng.choice([2, 3]), rng.choice([2, 3])
    rows = RowDistribution.of(pmf(k, zeros=k == 3 and rng.random() < 0.3))
    if rng.random() < 0.5:
        table = tuple(tuple(pmf(m)) for _ in range(k**n))
        mech = WindowMechanism(values=k, n=n, probabilities=table)
    else:
        mech = WindowMechanism.of_sum(values=k, n=n, rows=[pmf(m) for _ in range(n * (k - 1) + 1)])
    if n == 3 and rng.random() < 0.5:
        return rows, mech, Layout.private_blocks(block=1, steps=t)  # Figure 2 (4)
    return rows, mech, Layout.sliding_window(n=n, block=block, steps=t)


def test_exact_profile_matches_definition() -> None:
    """Theorem 3: the exact profile is the worst (v, z) pair's hockey stick, at every slope."""
    rows = RowDistribution.of([F(1, 2), F(1, 3), F(1, 6)])
    mech = WindowMechanism.from_function(
        values=3, n=2, kernel=lambda x: [F(2, 3), F(1, 3)] if x[0] < x[1] else [F(1, 4), F(3, 4)]
    )
    for layout in (
        Layout.sliding_window(n=2, block=1, steps=2),
        Layout(block=1, databases=((0, 1), (1, 2)), aux=()),
    ):
        exact = cw_exact(rows, mech, layout)
        pairs = _oracle(rows, mech, layout)
        assert len(pairs) > 1
        pairs += [(q, p) for p, q in pairs]
        slope = max(a / b for p, q in pairs for a, b in zip(p, q, strict=True) if a and b)
        delta = max(sum((a for a, b in zip(p, q, strict=True) if b == 0), F(0)) for p, q in pairs)
        assert (exact.slope, exact.delta) == (slope, delta)
        for s in (F(1), F(3, 2), F(2), F(7, 3), slope):
            hockey = max(
                sum((max(F(0), a - s * b) for a, b in zip(p, q, strict=True)), F(0))
                for p, q in pairs
            )
            assert exact.delta_at_slope(s) == hockey


@pytest.mark.parametrize(
    ("n", "block", "p", "keep", "t"),
    [
        (4, 2, F(1, 2), F(1, 2), 2),
        (4, 2, F(1, 3), F(1, 2), 3),
        (3, 1, F(1, 4), F(2, 3), 3),
        (4, 2, F(1, 2), None, 3),
    ],
)
def test_bernoulli_counts_agree_with_the_count_engine(
    n: int, block: int, p: Fraction, keep: Fraction | None, t: int
) -> None:
    eye = np.eye(n + 1)
    kernel = eye if keep is None else float(keep) * eye + float(1 - keep) / (n + 1)
    old = single_step(n=n, block=block, p=p, kernel=kernel)
    old_exact, _ = brute_force_stream(n=n, block=block, p=p, kernel=kernel, t=t)
    rows = RowDistribution.bernoulli(p)
    if keep is None:
        mech = WindowMechanism.of_sum(values=2, n=n, rows=eye.astype(int).tolist())
    else:
        mech = WindowMechanism.noisy_sum(values=2, n=n, keep=keep)
    check = check_theorem4(rows, mech, Layout.sliding_window(n=n, block=block, steps=t))
    assert check.step.epsilon_max == pytest.approx(old.epsilon_max, rel=1e-12)
    assert float(check.step.delta_max) == pytest.approx(old.delta_max, rel=1e-12)
    assert check.step.gamma == pytest.approx(old.gamma, rel=1e-12)
    assert check.step.assumption_1 == old.assumption_1
    assert check.exact.epsilon == pytest.approx(old_exact.epsilon, rel=1e-12)
    assert float(check.exact.delta) == pytest.approx(old_exact.delta, rel=1e-12)


def test_theorem4_never_below_exact_on_random_distributions() -> None:
    """24 random row distributions and mechanisms (fixed seeds), sliding windows and private
    blocks, t = 2, 3: the bound's slope, its δ and the exact δ at the bound's ε are compared
    exactly (rationals)."""
    finite, settings = 0, set()
    for seed in range(24):
        rows, mech, layout = _random_case(seed)
        check = check_theorem4(rows, mech, layout)
        assert check.applies
        settings.add(check.setting)
        assert check.holds, (seed, check.exact.slope, check.bound_slope, check.exact.delta)
        if check.bound_slope is not None:
            finite += 1
            assert check.exact.slope <= check.bound_slope
            assert check.delta_at_bound is not None
            assert max(check.exact.delta, check.delta_at_bound) <= check.bound_delta
    assert finite >= 20  # the bound is finite (Assumption 1 holds) in most of them
    assert settings == {"sliding window", "private blocks"}


def test_holds_is_false_when_the_bound_is_below_exact() -> None:
    """The check can fail: out of the note's setting (a stream whose auxiliary information is the
    oldest row instead of the final window's last rows) the formula is below the exact ε."""
    stream = Layout.sliding_window(n=2, block=1, steps=2)
    layout = Layout(block=1, databases=stream.databases, aux=(0,))
    check = check_theorem4(
        RowDistribution.bernoulli(F(1, 2)),
        WindowMechanism.noisy_sum(values=2, n=2, keep=F(1, 2)),
        layout,
    )
    assert check.setting is None and not check.applies
    assert not check.holds
    assert check.bound_slope is not None and check.exact.slope > check.bound_slope
    assert check.exact.epsilon == pytest.approx(1.70474809, abs=1e-8)
    assert check.step.theorem4(2)[0] == pytest.approx(1.11923158, abs=1e-8)


def test_figure_2_4_private_blocks() -> None:
    """Figure 2 (4): X_i = (s_i, p_i, s_{i+1}), each database owns p_i; three-valued rows and a
    noisy sum; exact ε_t vs the composed bound ε_max + (t − 1)γ, t = 1..3."""
    rows = RowDistribution.of([F(1, 2), F(1, 4), F(1, 4)])
    mech = WindowMechanism.noisy_sum(values=3, n=3, keep=F(1, 2))
    exact_eps, bound_eps = [], []
    for t in (1, 2, 3):
        layout = Layout.private_blocks(block=1, steps=t)
        assert all(layout.owners())
        check = check_theorem4(rows, mech, layout)
        assert check.setting == "private blocks" and check.step.assumption_1
        assert check.holds
        exact_eps.append(check.exact.epsilon)
        bound_eps.append(check.step.theorem4(t)[0])
        assert check.exact.delta == 0 and check.bound_delta == min(1, t * check.step.delta_max)
    assert exact_eps[0] == pytest.approx(bound_eps[0])  # one step: the bound is exact
    assert exact_eps == pytest.approx([1.011601, 1.963610, 2.143003], abs=1e-5)
    assert bound_eps == pytest.approx([1.011601, 2.515678, 4.019756], abs=1e-5)
    # the sliding window of 2 blocks (Figure 2 (2)): the middle database owns no block
    assert Layout.sliding_window(n=2, block=1, steps=3).owners() == (True, False, True)


def test_step_bound_without_assumption_1() -> None:
    # the exact sum of three-valued rows: no output is possible under every z, so γ = ∞
    rows = RowDistribution.of([F(1, 3), F(1, 3), F(1, 3)])
    eye = np.eye(5, dtype=int).tolist()
    bound = cw_step_bound(
        rows,
        WindowMechanism.of_sum(values=3, n=2, rows=eye),
        Layout.sliding_window(n=2, block=1, steps=2),
    )
    assert not bound.assumption_1 and bound.gamma_slope is None and math.isinf(bound.gamma)
    assert bound.bound_slope(2) is None and math.isinf(bound.theorem4(2)[0])


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: RowDistribution.of([F(1, 2), F(1, 3)]), "sum to 5/6"),
        (lambda: RowDistribution.of([1, 0]), "one possible value"),
        (lambda: RowDistribution(probabilities=(0.5, 0.5)), "must be Fractions"),  # type: ignore[arg-type]
        (lambda: WindowMechanism.of_sum(values=2, n=2, rows=[[1], [1]]), "3 rows"),
        (lambda: WindowMechanism.of_sum(values=2, n=1, rows=[["1/2", "1/3"], [1, 0]]), "sums to"),
        (lambda: Layout(block=1, databases=((0, 1), (2,))), "database 1"),
        (lambda: Layout(block=1, databases=((0, 1),), aux=(5,)), "auxiliary block"),
        (lambda: Layout.sliding_window(n=3, block=2, steps=1), "multiple of the block"),
        (
            lambda: cw_exact(
                RowDistribution.bernoulli(F(1, 2)),
                WindowMechanism.noisy_sum(values=2, n=3, keep=F(1, 2)),
                Layout.sliding_window(n=2, block=1, steps=2),
            ),
            "takes 3 rows",
        ),
        (
            lambda: cw_exact(
                RowDistribution.bernoulli(F(1, 2)),
                WindowMechanism.noisy_sum(values=2, n=4, keep=F(1, 2)),
                Layout.sliding_window(n=4, block=1, steps=16),
            ),
            "assignments",
        ),
        (
            lambda: WindowMechanism.noisy_sum(values=2, n=40, keep=F(1, 2)),
            "K\\^n = 2\\^40",
        ),
        (
            lambda: cw_exact(
                RowDistribution.bernoulli(F(1, 2)),
                WindowMechanism.noisy_sum(values=2, n=2, keep=F(1, 2)),
                Layout(block=1, databases=((0, 10**12),)),
            ),
            "too large",
        ),
    ],
)
def test_errors_name_the_cause(build: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build()  # type: ignore[operator]
