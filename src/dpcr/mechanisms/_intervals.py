"""Confidence intervals for linear combinations of independent discrete Laplace / Gaussian noise.

A published estimate is ``truth + Y`` with ``Y = Σ_i w_i X_i``: the estimator's weights ``w_i``
on independent released nodes whose noise ``X_i`` is discrete Laplace or discrete Gaussian
(symmetric). :func:`half_width` returns ``u`` with ``P(|Y| > u) <= 1 - level``, so
``[estimate - u, estimate + u]`` covers the truth with probability at least ``level``.

Method (:data:`METHODS`), always a proven bound, never an approximation:

* ``"exact"`` -- all weights are integers: ``Y`` lives on the integers and its distribution is the
  exact convolution of the nodes' probability mass functions (FFT on a window that holds all but
  ``ALIAS`` of the mass, bounded by the Chernoff bound below). ``u`` is the exact quantile; the only
  slack is the truncated and aliased mass (< 1e-9).
* ``"grid"`` -- real weights (Honaker trees, factorizations): each term ``w_i X_i`` is rounded to
  the nearest multiple of a grid step ``h`` (``|error| <= h/2``), the rounded sum is convolved
  exactly, and ``u`` = its quantile + ``m h / 2`` for ``m`` terms, so coverage is still at least
  ``level``. ``h`` is chosen so the slack ``m h / 2`` is at most 1 % of the std (more when the
  window would exceed :data:`MAX_CELLS` cells; the bound stays valid, only wider).
* ``"chernoff"`` -- fallback when a node's noise is too wide to tabulate: ``P(Y >= u) <=
  exp(Σ log E[e^{t w_i X_i}] - t u)`` minimised over ``t`` (discrete Laplace: its exact moment
  generating function; discrete Gaussian: ``E[e^{tX}] <= e^{t²σ²/2}``, Canonne-Kamath-Steinke
  2020). Valid, about 1.4x wider than the exact interval for Gaussian noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.mechanisms._noise import noise_variance

__all__ = ["METHODS", "Interval", "Term", "half_width"]

Event = DiscreteLaplaceEvent | DiscreteGaussianEvent
#: (weight, noise event, how many independent nodes carry this weight and this noise)
Term = tuple[float, Event, int]

METHODS = ("exact", "grid", "chernoff")
#: per node: the tabulated pmf leaves out at most this much mass
TRUNCATED = 1e-13
#: mass of Y outside the FFT window (Chernoff bound)
ALIAS = 1e-10
#: the largest FFT window and the largest tabulated pmf of one node
MAX_CELLS = 1 << 17
MAX_SUPPORT = 1 << 21
#: relative slack of the grid method: m h / 2 <= GRID_SLACK * std
GRID_SLACK = 0.01


@dataclass(frozen=True, slots=True)
class Interval:
    """``half_width`` u; ``coverage``: a proven lower bound on P(|Y| <= u) (for ``exact``, the
    coverage itself up to 1e-9); ``std`` of Y; ``method`` as in :data:`METHODS`."""

    half_width: float
    coverage: float
    std: float
    method: str


def _laplace_q(event: DiscreteLaplaceEvent) -> float:
    return math.exp(-1.0 / float(event.scale))


def _radius(event: Event) -> int:
    """K with P(|X| > K) <= TRUNCATED."""
    if isinstance(event, DiscreteLaplaceEvent):
        q = _laplace_q(event)
        # P(|X| > K) = 2 q^(K+1) / (1 + q)
        return max(0, math.ceil(math.log(TRUNCATED * (1 + q) / 2) / math.log(q)) - 1)
    sigma = math.sqrt(float(event.sigma2))
    return math.ceil(sigma * math.sqrt(2 * math.log(4 / TRUNCATED))) + 1


def _pmf(event: Event) -> tuple[int, np.ndarray]:
    """The pmf of X on -K..K (sums to 1 - dropped mass)."""
    k = _radius(event)
    x = np.arange(-k, k + 1, dtype=np.float64)
    if isinstance(event, DiscreteLaplaceEvent):
        q = _laplace_q(event)
        return k, (1 - q) / (1 + q) * np.exp(np.abs(x) * math.log(q))
    s2 = float(event.sigma2)
    wide = math.ceil(14 * math.sqrt(s2)) + 2 + k
    norm = float(np.exp(-(np.arange(-wide, wide + 1, dtype=np.float64) ** 2) / (2 * s2)).sum())
    return k, np.exp(-(x**2) / (2 * s2)) / norm


def _log_mgf(event: Event, t: float) -> float:
    if isinstance(event, DiscreteLaplaceEvent):
        q = _laplace_q(event)
        t = abs(t)
        if t >= -math.log(q):
            return math.inf
        return 2 * math.log1p(-q) - math.log1p(-q * math.exp(t)) - math.log1p(-q * math.exp(-t))
    return float(event.sigma2) * t * t / 2


def chernoff(terms: Sequence[Term], tail: float) -> float:
    """u with P(Y >= u) <= tail (and P(Y <= -u) <= tail by symmetry)."""
    std = math.sqrt(sum(c * w * w * noise_variance(e) for w, e, c in terms))
    if std == 0:
        return 0.0
    hi = 50 / std
    for w, e, _ in terms:
        if isinstance(e, DiscreteLaplaceEvent):  # the MGF exists for |w t| < -log q
            hi = min(hi, 0.999 / (float(e.scale) * abs(w)))
    best = math.inf
    for t in np.geomspace(hi * 1e-5, hi, 400):
        s = sum(c * _log_mgf(e, w * float(t)) for w, e, c in terms)
        if math.isfinite(s):
            best = min(best, (s + math.log(1 / tail)) / float(t))
    return best


def half_width(terms: Sequence[Term], *, level: float = 0.95) -> Interval:
    """The half-width of a two-sided ``level`` interval for ``Y = Σ c copies of w X``."""
    terms = [(float(w), e, int(c)) for w, e, c in terms if w != 0 and c > 0]
    var = sum(c * w * w * noise_variance(e) for w, e, c in terms)
    std = math.sqrt(var)
    tail = (1 - level) / 2
    if std == 0:
        return Interval(half_width=0.0, coverage=1.0, std=0.0, method="exact")
    m = sum(c for _, _, c in terms)
    fallback = Interval(half_width=chernoff(terms, tail), coverage=level, std=std,
                        method="chernoff")
    if any(_radius(e) > MAX_SUPPORT for _, e, _ in terms):
        return fallback
    integer = all(float(w).is_integer() for w, _, _ in terms)
    reach = chernoff(terms, ALIAS / 2)
    if integer and 2 * reach + 3 <= MAX_CELLS:
        h, slack, method = 1.0, 0.0, "exact"
    else:
        h = max(2 * GRID_SLACK * std / m, 2 * (reach + 1) / (MAX_CELLS - 8))
        slack, method = m * h / 2, "grid"
    half_cells = math.ceil((reach + slack) / h) + 1
    size = 2 * half_cells + 1
    spectrum = np.ones(size // 2 + 1, dtype=np.complex128)
    for w, e, c in terms:
        k, p = _pmf(e)
        cells = np.rint(w * np.arange(-k, k + 1, dtype=np.float64) / h).astype(np.int64)
        keep = np.abs(cells) <= half_cells  # mass cut here only lowers the cdf: conservative
        row = np.bincount(cells[keep] + half_cells, weights=p[keep], minlength=size)
        # shift so that cell 0 sits at index 0 (circular)
        row = np.roll(row, -half_cells)
        spectrum *= np.fft.rfft(row) ** c
    pmf = np.fft.irfft(spectrum, n=size)
    pmf = np.roll(pmf, half_cells)  # index j <-> cell j - half_cells
    cdf = np.cumsum(pmf)
    # P(Y_r > g) <= 1 - cdf(g) + ALIAS (+ float error)
    excess = 1 - cdf + ALIAS + 1e-9
    ok = np.nonzero(excess <= tail)[0]
    if ok.size == 0:
        return fallback
    g = (int(ok[0]) - half_cells) * h
    u = g + slack
    coverage = 1 - 2 * float(excess[ok[0]])
    if fallback.half_width < u:
        return fallback
    return Interval(half_width=max(u, 0.0), coverage=coverage, std=std, method=method)
