"""Tree estimators: exact sums, Honaker variances vs dense BLUE and Monte Carlo, streaming."""

from __future__ import annotations

import numpy as np
import pytest

from dpcr.estimators.tree import (
    TreeStream,
    honaker_nodes,
    honaker_variances,
    prefix_from_nodes,
    range_from_nodes,
    range_variance,
    tree_nodes,
    tree_prefix_variances,
)


@pytest.mark.parametrize("c,height", [(2, 4), (3, 3), (4, 2)])
def test_exact_prefix_and_ranges_histogram(c: int, height: int) -> None:
    rng = np.random.default_rng(0)
    n = c ** (height - 1) * 3 + 1
    x = rng.integers(-5, 6, size=(n, 3))
    levels = tree_nodes(x, c=c, height=height)
    assert np.array_equal(prefix_from_nodes(levels, c=c, n=n), np.cumsum(x, axis=0))
    for lo in range(0, n, 3):
        for hi in range(lo, n + 1, 2):
            assert np.array_equal(range_from_nodes(levels, lo, hi, c=c), x[lo:hi].sum(axis=0))


def test_honaker_variance_matches_dense_estimator() -> None:
    """Online Honaker: the variance of the combination it uses, computed from its weights."""
    c, height, n = 2, 4, 8
    s = [1.0, 2.0, 0.5, 1.5]
    nodes = [(lv, j) for lv in range(height) for j in range(n // c**lv)]
    index = {nd: i for i, nd in enumerate(nodes)}
    # linear map noise -> estimate, node by node (basis vectors through honaker_nodes)
    cols = []
    for nd in nodes:
        e = [np.zeros(n // c**lv) for lv in range(height)]
        e[nd[0]][nd[1]] = 1.0
        cols.append(np.concatenate(prefix_from_nodes(honaker_nodes(e, s, c=c), c=c, n=n)[None]))
    M = np.stack(cols, axis=-1).reshape(n, len(nodes))
    var = (M**2 * np.array([s[lv] for lv, _ in nodes])).sum(axis=1)
    v = honaker_variances(s, c=c)
    assert np.allclose(var, tree_prefix_variances(np.arange(1, n + 1), v, c=c))
    # unbiased: signal passes through exactly
    x = np.arange(1.0, n + 1)
    est = prefix_from_nodes(honaker_nodes(tree_nodes(x, c=c, height=height), s, c=c), c=c, n=n)
    assert np.allclose(est, np.cumsum(x))
    assert index  # silence


def test_monte_carlo_variance() -> None:
    """Empirical variance within a chi-square tolerance (false-failure rate < 1e-6)."""
    rng = np.random.default_rng(7)
    c, height, n, reps = 2, 5, 16, 20000
    s = [1.0] * height
    x = np.zeros(n)
    exact = tree_nodes(x, c=c, height=height)
    noisy = [lv[None, :] + rng.standard_normal((reps, lv.size)) for lv in exact]
    levels = [a.T for a in noisy]  # (nodes, reps): reps act as keys
    est = prefix_from_nodes(honaker_nodes(levels, s, c=c), c=c, n=n)
    emp = est.var(axis=1, ddof=1)
    want = tree_prefix_variances(np.arange(1, n + 1), honaker_variances(s, c=c), c=c)
    # var ratio ~ chi2(reps-1)/(reps-1): sd sqrt(2/reps) = 0.01; 5.3 sd ~ 1e-7 two-sided
    assert np.all(np.abs(emp / want - 1) < 5.3 * np.sqrt(2 / reps) * 1.1)
    assert range_variance(3, 11, s, c=c) == 4.0


@pytest.mark.parametrize("honaker", [False, True])
def test_stream_matches_batch(honaker: bool) -> None:
    rng = np.random.default_rng(3)
    c, height, n, keys = 3, 3, 40, 4
    levels = [rng.standard_normal((n // c**lv, keys)) for lv in range(height)]
    s = [1.0, 1.0, 1.0]
    batch = prefix_from_nodes(honaker_nodes(levels, s, c=c) if honaker else levels, c=c, n=n)
    st = TreeStream(c=c, height=height, keys=keys, node_var=s if honaker else None)
    for t in range(n):
        layers = st.closing_layers()
        st.update(np.stack([levels[lv][(t + 1) // c**lv - 1] for lv in range(layers)]))
        assert np.allclose(st.get(), batch[t])


def test_blt_and_sqrt_prefix_match_dense() -> None:
    from scipy.linalg import toeplitz

    from dpcr.estimators.factorization import BLTStream, blt_prefix, sqrt_prefix
    from dpcr.plans.factorization import BLT, sqrt_coefficients

    rng = np.random.default_rng(5)
    T, keys = 60, 3
    x = rng.integers(-3, 4, size=(T, keys)).astype(float)
    z = rng.standard_normal((T, keys))
    blt = BLT(omega=(0.3, 0.1), theta=(0.8, 0.99))
    A = np.tril(np.ones((T, T)))
    C = np.tril(toeplitz(blt.c_coefficients(T)))
    want = A @ x + A @ np.linalg.solve(C, z)
    assert np.allclose(blt_prefix(x, z, blt), want)
    st = BLTStream(blt, keys=keys)
    for t in range(T):
        st.update(x[t], z[t])
        assert np.allclose(st.get(), want[t])
    S = np.tril(toeplitz(sqrt_coefficients(T)))
    assert np.allclose(sqrt_prefix(x, z), A @ x + S @ z)
