"""Summary-statistic privacy: exact Π against brute-force guessing; Theorem 0.1 on small cases."""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import numpy as np
import pytest

from dpcr.analysis.summary import (
    adaptive_component_privacy,
    composed_summary_privacy,
    composition_bound,
    summary_privacy,
)
from dpcr.errors import ConfigError


def test_pi_is_the_best_guess_by_brute_force() -> None:
    prior = {0: F(1, 5), 1: F(3, 10), 2: F(1, 2)}
    secret = {0: "a", 1: "b", 2: "a"}
    mech = {0: {"x": F(1, 2), "y": F(1, 2)}, 1: {"x": F(1, 4), "y": F(3, 4)},
            2: {"x": F(9, 10), "y": F(1, 10)}}
    best = F(0)
    for guess in itertools.product("ab", repeat=2):  # every map ĝ: {x, y} -> secrets
        g = dict(zip("xy", guess, strict=True))
        best = max(best, sum((prior[t] * q for t in prior for o, q in mech[t].items()
                              if g[o] == secret[t]), F(0)))
    assert summary_privacy(prior, secret, mech) == best


def _random_case(rng: np.random.Generator) -> tuple[dict[int, F], dict[int, int], list[dict]]:
    k = int(rng.integers(2, 5))
    w = rng.integers(1, 5, k)
    prior = {t: F(int(w[t]), int(w.sum())) for t in range(k)}
    secret = {t: int(rng.integers(0, 2)) for t in range(k)}
    tables = []
    for _ in range(int(rng.integers(1, 4))):
        outs = int(rng.integers(2, 4))
        tab = {}
        for t in range(k):
            v = rng.integers(0, 4, outs) + (np.arange(outs) == 0)
            tab[t] = {o: F(int(v[o]), int(v.sum())) for o in range(outs)}
        tables.append(tab)
    return prior, secret, tables


@pytest.mark.parametrize("seed", range(40))
def test_composition_bound_holds_non_adaptive(seed: int) -> None:
    prior, secret, tables = _random_case(np.random.default_rng(seed))
    mechs = [lambda t, h, tab=tab: tab[t] for tab in tables]
    exact = composed_summary_privacy(prior, secret, mechs)
    bound = composition_bound(prior, [summary_privacy(prior, secret, tab) for tab in tables])
    assert exact <= bound


def test_composition_bound_holds_adaptive() -> None:
    # mechanism 2 reveals θ exactly when mechanism 1 said "1", else is uninformative
    prior = {0: F(1, 3), 1: F(2, 3)}
    secret = {0: 0, 1: 1}
    m1 = {0: {0: F(2, 3), 1: F(1, 3)}, 1: {0: F(1, 3), 1: F(2, 3)}}

    def mech2(theta: int, hist: tuple) -> dict:
        if hist[-1] == 1:
            return {theta: F(1)} if theta == 0 else {1: F(1)}
        return {0: F(1, 2), 1: F(1, 2)}

    mechs = [lambda t, h: m1[t], mech2]
    exact = composed_summary_privacy(prior, secret, mechs)
    pi1 = summary_privacy(prior, secret, m1)
    pi2 = adaptive_component_privacy(prior, secret, mech2, [(0,), (1,)])
    assert pi2 == 1
    assert exact <= composition_bound(prior, [pi1, pi2])
    assert F(2, 3) < exact < 1


def test_validation() -> None:
    with pytest.raises(ConfigError, match="prior"):
        summary_privacy({0: F(1, 2)}, {0: 0}, {0: {0: F(1)}})
    with pytest.raises(ConfigError, match="distribution"):
        summary_privacy({0: F(1)}, {0: 0}, {0: {0: F(1, 2)}})
