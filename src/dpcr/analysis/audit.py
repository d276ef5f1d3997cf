"""Empirical privacy auditing: a statistically valid *lower* bound on ε from simulated runs.

Run a mechanism many times on each of two neighbouring inputs D, D'. For any output set S,
(ε, δ)-DP implies Pr[M(D) ∈ S] ≤ e^ε Pr[M(D') ∈ S] + δ, so

    ε ≥ ln((p − δ) / p'),   p = Pr[M(D) ∈ S], p' = Pr[M(D') ∈ S].

With Clopper-Pearson bounds p ≥ p_lo and p' ≤ p'_hi, each one-sided at level α/2, the bound
ln((p_lo − δ)/p'_hi) holds with probability ≥ 1 − α. S is a threshold set {T ≥ t} or {T ≤ t} of a
scalar test statistic T (the log-likelihood ratio when the noise distribution is known: the
Neyman-Pearson test, the most powerful one). The threshold is *chosen on a separate selection
sample* (default 20% of the runs) and evaluated on the rest, so the choice does not invalidate the
confidence level. If the lower bound exceeds the claimed ε, the claim is refuted (at level α).

Pipeline audits (:func:`audit_pipeline`) take a release config, build the neighbouring changelog
by removing one privacy unit's whole history (the adjacency of the changelog model), compute both
changelogs' released values (noise off) with the release core's own loader, bounding,
aggregation and linear map for every plan kind, and draw its calibrated noise
(:func:`dpcr.release.calibrate`) through the randomness seam in batches. Aggregation is
deterministic, so this samples exactly the distribution of ``dpcr run``'s released values;
coordinates equal on both sides carry no information and are not simulated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.errors import ConfigError
from dpcr.noise import Randomness, discrete_gaussian, discrete_laplace

__all__ = [
    "AuditResult",
    "audit_laplace",
    "audit_pipeline",
    "audit_samples",
    "betainc",
    "clopper_pearson",
]


# --- Clopper-Pearson from the regularised incomplete beta function -------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of I_x(a, b) (modified Lentz; Numerical Recipes 6.4)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            return h
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) for a, b > 0, 0 ≤ x ≤ 1."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
        + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _beta_quantile(q: float, a: float, b: float) -> tuple[float, float]:
    """Bracket [lo, hi] of the q-quantile of Beta(a, b)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if betainc(a, b, mid) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return lo, hi


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """One-sided (1 − alpha) Clopper-Pearson bounds (lower, upper) on a binomial proportion.

    lower = Beta(alpha; k, n − k + 1) quantile, upper = Beta(1 − alpha; k + 1, n − k) quantile;
    each bisection end is taken on the conservative side."""
    if not 0 <= successes <= trials or trials <= 0:
        raise ConfigError(f"need 0 <= successes <= trials, trials > 0; got {successes}/{trials}")
    k, n = successes, trials
    lower = 0.0 if k == 0 else _beta_quantile(alpha, k, n - k + 1)[0]
    upper = 1.0 if k == n else _beta_quantile(1 - alpha, k + 1, n - k)[1]
    return lower, upper


# --- the audit ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditResult:
    """Outcome of an audit: ``epsilon_lower`` holds with probability ≥ 1 − ``alpha``."""

    epsilon_lower: float
    epsilon_claimed: float
    delta: float
    alpha: float
    runs: int
    threshold: float
    direction: str
    counts: tuple[int, int]

    @property
    def violated(self) -> bool:
        """True when the data refute the claim: the lower bound exceeds the claimed ε."""
        return self.epsilon_lower > self.epsilon_claimed

    def to_json(self) -> dict[str, Any]:
        return {
            "epsilon_lower": self.epsilon_lower,
            "epsilon_claimed": self.epsilon_claimed,
            "delta": self.delta,
            "alpha": self.alpha,
            "runs": self.runs,
            "threshold": self.threshold,
            "test": self.direction,
            "counts": list(self.counts),
            "violated": self.violated,
        }


def _bound(k0: int, k1: int, n0: int, n1: int, alpha: float, delta: float) -> float:
    p_lo = clopper_pearson(k0, n0, alpha / 2)[0]
    q_hi = clopper_pearson(k1, n1, alpha / 2)[1]
    if p_lo - delta <= 0 or q_hi <= 0:
        return 0.0
    return max(0.0, math.log((p_lo - delta) / q_hi))


def _tail_counts(sorted_x: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(#{x ≥ t}, #{x ≤ t}) for every threshold t."""
    n = sorted_x.size
    ge = n - np.searchsorted(sorted_x, thresholds, side="left")
    le = np.searchsorted(sorted_x, thresholds, side="right")
    return ge, le


def audit_samples(
    stat_d: np.ndarray,
    stat_d_prime: np.ndarray,
    *,
    epsilon_claimed: float,
    delta: float = 0.0,
    alpha: float = 0.05,
    selection_fraction: float = 0.2,
    max_thresholds: int = 400,
) -> AuditResult:
    """Lower bound on ε from samples of a scalar statistic under D and under D'.

    All four tests {T ≥ t} and {T ≤ t}, in both directions (D vs D' and D' vs D), are tried on
    the selection part; the best (by the same bound computed there) is evaluated once on the rest.
    """
    x0 = np.asarray(stat_d, dtype=np.float64)
    x1 = np.asarray(stat_d_prime, dtype=np.float64)
    if x0.ndim != 1 or x1.ndim != 1 or x0.size < 10 or x1.size < 10:
        raise ConfigError("audit needs two 1-d samples of at least 10 runs each")
    if not 0 < selection_fraction < 1:
        raise ConfigError(f"selection_fraction must be in (0, 1), got {selection_fraction!r}")
    s0, s1 = int(x0.size * selection_fraction), int(x1.size * selection_fraction)
    sel0, ev0 = np.sort(x0[:s0]), np.sort(x0[s0:])
    sel1, ev1 = np.sort(x1[:s1]), np.sort(x1[s1:])
    cand = np.unique(np.concatenate((sel0, sel1)))
    if cand.size > max_thresholds:
        cand = np.unique(np.quantile(cand, np.linspace(0, 1, max_thresholds)))
    ge0, le0 = _tail_counts(sel0, cand)
    ge1, le1 = _tail_counts(sel1, cand)
    best = (-1.0, 0.0, "")
    tests = {
        "D:T>=t": (ge0, ge1, s0, s1),
        "D:T<=t": (le0, le1, s0, s1),
        "D':T>=t": (ge1, ge0, s1, s0),
        "D':T<=t": (le1, le0, s1, s0),
    }
    for name, (ka, kb, na, nb) in tests.items():
        # cheap screen with point estimates, then exact bounds on the most promising thresholds
        pa, pb = ka / na, np.maximum(kb, 1) / nb
        score = np.where(pa > delta, np.log(np.maximum(pa - delta, 1e-300) / pb), -np.inf)
        score -= 2.0 / np.sqrt(np.maximum(np.minimum(ka, kb), 1))  # prefer well-populated sets
        for i in np.argsort(-score)[:8]:
            b = _bound(int(ka[i]), int(kb[i]), na, nb, alpha, delta)
            if b > best[0]:
                best = (b, float(cand[i]), name)
    _, threshold, name = best
    side, direction = name.split(":")
    eva, evb = (ev0, ev1) if side == "D" else (ev1, ev0)
    th = np.array([threshold])
    a_ge, a_le = _tail_counts(eva, th)
    b_ge, b_le = _tail_counts(evb, th)
    counts = (int(a_ge[0]), int(b_ge[0])) if direction == "T>=t" else (
        int(a_le[0]), int(b_le[0]))
    bound = _bound(counts[0], counts[1], eva.size, evb.size, alpha, delta)
    return AuditResult(
        epsilon_lower=bound,
        epsilon_claimed=float(epsilon_claimed),
        delta=float(delta),
        alpha=alpha,
        runs=int(x0.size + x1.size),
        threshold=threshold,
        direction=name,
        counts=counts,
    )


def _batched(draw: Callable[[int], np.ndarray], runs: int, batch: int) -> np.ndarray:
    out = [draw(min(batch, runs - start)) for start in range(0, runs, batch)]
    return np.concatenate(out) if out else np.empty(0)


def audit_laplace(
    *,
    epsilon: float,
    runs: int,
    rng: Randomness,
    noise_factor: float = 1.0,
    alpha: float = 0.05,
    batch: int = 1 << 18,
) -> AuditResult:
    """Audit a discrete-Laplace count claimed ε-DP (sensitivity 1): counts 0 vs 1, scale 1/ε.

    ``noise_factor`` < 1 simulates a broken mechanism whose noise is too small by that factor
    while it still claims ``epsilon``."""
    scale = Fraction(1) / Fraction(epsilon).limit_denominator(10**6) * Fraction(noise_factor)
    d = _batched(lambda k: 1 + discrete_laplace(scale, k, rng), runs, batch)
    d_prime = _batched(lambda k: discrete_laplace(scale, k, rng), runs, batch)
    return audit_samples(d, d_prime, epsilon_claimed=epsilon, alpha=alpha)


# --- pipeline audits ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class NeighbourPair:
    """Released values (noise off) of a changelog with (D) and without (D') one privacy unit's
    history, on the coordinates where they differ, the noise event of each such coordinate, and
    the pair's exact loss: ``Σ |d| / b`` (pure ε, discrete Laplace) or ``Σ d² / (2σ²)`` (zCDP ρ,
    discrete Gaussian)."""

    unit: str
    with_unit: np.ndarray
    without_unit: np.ndarray
    events: tuple[DiscreteLaplaceEvent | DiscreteGaussianEvent, ...]
    coordinates: tuple[tuple[str, int, str], ...]
    loss: float = 0.0
    loss_kind: str = "epsilon"
    searched: int = 1


def _pair_loss(d: np.ndarray, events: list[Any]) -> tuple[float, str]:
    eps = rho = 0.0
    for diff, e in zip(d, events, strict=True):
        if isinstance(e, DiscreteLaplaceEvent):
            eps += abs(float(diff)) / float(e.scale)
        else:
            rho += float(diff) ** 2 / (2 * float(e.sigma2))
    if rho and eps:
        return eps + rho, "mixed"
    return (rho, "rho") if rho else (eps, "epsilon")


def neighbouring_totals(
    config: Any, *, unit: str | None = None, candidates: int = 20
) -> NeighbourPair:
    """Released values with the noise switched off, of ``config``'s changelog with and without
    one unit, through the release core's own loading, bounding, aggregation and linear map
    (:func:`dpcr.release.exact_release`), for every plan kind, on the same public clock; each
    differing coordinate carries its node's calibrated event. Without ``unit``, the ``candidates``
    most active units are tried and the one whose pair loses the most (exactly, noise off) is
    kept: the worst unit found, not merely the most active. Coordinates are (query, node number in
    release order, key)."""
    import duckdb

    from dpcr.release import (
        calibrate,
        closed_count,
        exact_release,
        load_changelog,
        private_output,
        run_clock,
    )
    from dpcr.store import SourceState

    opened = [q.name for q in config.queries if getattr(q, "open", False)]
    if opened:
        raise ConfigError(
            f"query {opened[0]!r} is an open histogram, which the audit does not compare yet "
            "(its candidate keys differ between neighbours); audit a configuration without it"
        )
    cal = calibrate(config)
    plan = config.plan
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    try:
        with private_output(config) as aside:  # an audit writes nothing into the release's
            load_changelog(aside, con, SourceState())
        if unit is None:
            tried = [
                str(r[0]) for r in con.execute(
                    "SELECT unit, count(*) AS c FROM changelog GROUP BY unit "
                    "ORDER BY c DESC, unit LIMIT ?", [max(1, candidates)]
                ).fetchall()
            ]
            if not tried:
                raise ConfigError("the changelog is empty; nothing to audit")
        else:
            found = con.execute(
                "SELECT count(*) FROM changelog WHERE unit = ?", [unit]
            ).fetchone()
            if not found or not found[0]:
                raise ConfigError(f"privacy unit {unit!r} has no mutations in the changelog")
            tried = [unit]
        n = closed_count(plan.schedule(), run_clock(config.until))
        if n == 0:
            raise ConfigError("no closed release interval to audit")
        nodes = plan.due(0, n)
        full = exact_release(config, con, table="changelog", reporting=n)
        best: NeighbourPair | None = None
        for u in tried:
            con.execute("CREATE OR REPLACE TABLE changelog_prime AS "
                        "SELECT * FROM changelog WHERE unit <> ?", [u])
            prime = exact_release(config, con, table="changelog_prime", reporting=n)
            w, wo, evs, coords = [], [], [], []
            for q in config.queries:
                a, b = full[q.name], prime[q.name]
                for i, j in zip(*np.nonzero(a != b), strict=True):
                    w.append(int(a[i, j]))
                    wo.append(int(b[i, j]))
                    evs.append(cal.layers[nodes[i][0]][q.name])
                    coords.append((q.name, int(i) + 1, str(q.keys[j])))
            d = np.array(w, dtype=np.int64) - np.array(wo, dtype=np.int64)
            loss, kind = _pair_loss(d, evs)
            if best is None or loss > best.loss:
                best = NeighbourPair(
                    unit=u,
                    with_unit=np.array(w, dtype=np.int64),
                    without_unit=np.array(wo, dtype=np.int64),
                    events=tuple(evs),
                    coordinates=tuple(coords),
                    loss=loss,
                    loss_kind=kind,
                    searched=len(tried),
                )
    finally:
        con.close()
    if best is None:
        raise ConfigError("no privacy unit to audit")
    return best


def _noise(event: DiscreteLaplaceEvent | DiscreteGaussianEvent, size: int, rng: Randomness,
           factor: Fraction) -> np.ndarray:
    if isinstance(event, DiscreteLaplaceEvent):
        return discrete_laplace(event.scale * factor, size, rng)
    return discrete_gaussian(event.sigma2 * factor * factor, size, rng)


def _log_likelihood_ratio(
    y: np.ndarray, a0: np.ndarray, a1: np.ndarray,
    events: tuple[DiscreteLaplaceEvent | DiscreteGaussianEvent, ...],
) -> np.ndarray:
    """Σ_i log P(y_i | a0_i) − log P(y_i | a1_i) under the *claimed* noise (rows = runs)."""
    out = np.zeros(y.shape[0])
    for i, e in enumerate(events):
        col = y[:, i].astype(np.float64)
        if isinstance(e, DiscreteLaplaceEvent):
            out += (np.abs(col - a1[i]) - np.abs(col - a0[i])) / float(e.scale)
        else:
            out += ((col - a1[i]) ** 2 - (col - a0[i]) ** 2) / (2 * float(e.sigma2))
    return out


def audit_pipeline(
    config: Any,
    *,
    runs: int,
    rng: Randomness,
    unit: str | None = None,
    alpha: float = 0.05,
    noise_factor: float = 1.0,
    batch: int = 1 << 16,
    candidates: int = 20,
) -> tuple[AuditResult, NeighbourPair]:
    """Audit a whole release: ``runs`` simulated releases on each of D and D' (one unit removed).

    The statistic is the log-likelihood ratio of the differing coordinates under the claimed
    noise; ``noise_factor`` < 1 shrinks the noise actually drawn (a deliberately broken run)."""
    summary = config.explain()
    pair = neighbouring_totals(config, unit=unit, candidates=candidates)
    factor = Fraction(noise_factor).limit_denominator(10**6)
    k = len(pair.events)
    if k == 0:
        raise ConfigError(f"removing unit {pair.unit!r} changes no released value")

    def sample(base: np.ndarray) -> Callable[[int], np.ndarray]:
        def draw(size: int) -> np.ndarray:
            y = np.empty((size, k), dtype=np.int64)
            for i, e in enumerate(pair.events):
                y[:, i] = base[i] + _noise(e, size, rng, factor)
            return _log_likelihood_ratio(y, pair.with_unit, pair.without_unit, pair.events)

        return draw

    stat_d = _batched(sample(pair.with_unit), runs, batch)
    stat_dp = _batched(sample(pair.without_unit), runs, batch)
    result = audit_samples(
        stat_d, stat_dp, epsilon_claimed=summary.epsilon, delta=summary.delta, alpha=alpha
    )
    return result, pair
