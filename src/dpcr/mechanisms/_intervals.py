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
  ``level``. ``h`` is chosen so the slack ``m h / 2`` is at most 2 % of the std (more when the
  window would exceed :data:`MAX_CELLS` cells; the bound stays valid, only wider).
* ``"chernoff"`` -- fallback when a node's noise is too wide to tabulate: ``P(Y >= u) <=
  exp(Σ log E[e^{t w_i X_i}] - t u)`` minimised over ``t`` (discrete Laplace: its exact moment
  generating function; discrete Gaussian: ``E[e^{tX}] <= e^{t²σ²/2}``, Canonne-Kamath-Steinke
  2020). Valid, about 1.4x wider than the exact interval for Gaussian noise.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.mechanisms._noise import noise_variance

__all__ = [
    "METHODS",
    "Interval",
    "Term",
    "chernoff",
    "chernoff_tails",
    "gaussian_half_width",
    "half_width",
    "half_widths_iid",
]

Event = DiscreteLaplaceEvent | DiscreteGaussianEvent
#: (weight, noise event, how many independent nodes carry this weight and this noise)
Term = tuple[float, Event, int]

METHODS = ("exact", "normal", "grid", "chernoff")
#: per node: the tabulated pmf leaves out at most this much mass
TRUNCATED = 1e-13
#: mass of Y outside the FFT window (Chernoff bound)
ALIAS = 1e-10
#: the largest FFT window and the largest tabulated pmf of one node
MAX_CELLS = 1 << 17
MAX_SUPPORT = 1 << 21
#: relative slack of the grid method: m h / 2 <= GRID_SLACK * std
GRID_SLACK = 0.02


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


@functools.lru_cache(maxsize=64)
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


#: the normal method is used when its proven Kolmogorov error is at most this
NORMAL_ERROR = 1e-3


def _normal(terms: Sequence[Term], tail: float) -> Interval | None:
    """Gaussian nodes only, each with σ² >= 9: Esseen's smoothing inequality with T = π / max|w|
    bounds sup |F_Y - Φ_s| (s² = Σ w² σ², the continuous Gaussian with the nodes' parameters) by
    D = 24 max|w| / (π² s sqrt(2π)) + π m 1.01 (2π σ²_min)² exp(-π² σ²_min / 2): by Poisson
    summation the discrete Gaussian's characteristic function differs from exp(-σ²t²/2) on
    |t| <= π by at most 1.01 t² (2πσ²)² exp(-π²σ²/2) (docs/uncertainty.md). When D <=
    NORMAL_ERROR, u = s Φ^-1(1 - (tail - D)) gives P(Y > u) <= tail. None otherwise."""
    gauss = [(w, e, c) for w, e, c in terms if isinstance(e, DiscreteGaussianEvent)]
    if len(gauss) < len(terms) or any(e.sigma2 < 9 for _, e, _ in gauss):
        return None
    s2 = sum(c * w * w * float(e.sigma2) for w, e, c in gauss)
    m = sum(c for _, _, c in terms)
    wmax = max(abs(w) for w, _, _ in terms)
    smin2 = min(float(e.sigma2) for _, e, _ in gauss)
    var = sum(c * w * w * noise_variance(e) for w, e, c in terms)
    return _esseen(s2, var, m, wmax, smin2, tail)


def _esseen(s2: float, var: float, m: int, wmax: float, smin2: float,
            tail: float) -> Interval | None:
    """:func:`_normal` from the row's aggregates: s² = Σ w² σ², Var(Y), m terms, max|w|, σ²_min."""
    from scipy.special import ndtri

    s = math.sqrt(s2)
    d = (24 * wmax / (math.pi**2 * s * math.sqrt(2 * math.pi))
         + math.pi * m * 1.01 * (2 * math.pi * smin2) ** 2 * math.exp(-math.pi**2 * smin2 / 2))
    if d > NORMAL_ERROR:
        return None
    u = s * float(ndtri(1 - (tail - d)))
    return Interval(half_width=u, coverage=1 - 2 * tail, std=math.sqrt(var), method="normal")


def gaussian_half_width(
    *, sum_sq: float, max_abs: float, count: int, event: DiscreteGaussianEvent,
    level: float = 0.95,
) -> Interval | None:
    """:func:`half_width` of ``Y = Σ w_i X_i`` with ``X_i`` i.i.d. ``event`` from the row's
    aggregates (``sum_sq = Σ w_i²``, ``max_abs = max |w_i|``, ``count`` nonzero weights, not all
    integers): the normal method's interval, or None where it does not apply (then
    :func:`half_width` with the terms decides). O(1): for plans whose rows hold thousands of
    weights on one event (factorizations)."""
    tail = (1 - level) / 2
    if sum_sq == 0:
        return Interval(half_width=0.0, coverage=1.0, std=0.0, method="exact")
    if float(event.sigma2) < 9:
        return None
    sigma2 = float(event.sigma2)
    return _esseen(sum_sq * sigma2, sum_sq * noise_variance(event), count, max_abs, sigma2, tail)


def _wide_cells(event: Event, w: float, h: float, half_cells: int) -> np.ndarray:
    """Lower bounds on P(w X in cell j), cells ``j = -half_cells..half_cells`` of width ``h``
    (cell j holds the integers x with (j - 1/2) h < w x <= (j + 1/2) h, so |w x - j h| <= h/2),
    for a node too wide to tabulate point by point. Discrete Laplace: the exact closed form
    P(X <= x) = 1 - q^(x+1)/(1+q) (x >= 0), q^(-x)/(1+q) (x < 0). Discrete Gaussian
    (f(x) = exp(-x²/2σ²), unimodal): sum_{a..b} f >= integral_a^b f - [a <= 0 <= b] and
    Z = sum f <= σ sqrt(2π) + 1, so the cell mass is at least
    (σ sqrt(2π) (Φ(b/σ) - Φ(a/σ)) - [a <= 0 <= b]) / (σ sqrt(2π) + 1)."""
    j = np.arange(-half_cells, half_cells + 1, dtype=np.float64)
    b = np.floor((j + 0.5) * h / w)
    a = np.floor((j - 0.5) * h / w) + 1
    if isinstance(event, DiscreteLaplaceEvent):
        q = _laplace_q(event)

        def cdf(x: np.ndarray) -> np.ndarray:
            pos = 1 - np.exp((np.maximum(x, 0) + 1) * math.log(q)) / (1 + q)
            neg = np.exp(-np.minimum(x, -1) * math.log(q)) / (1 + q)
            out: np.ndarray = np.where(x >= 0, pos, neg)
            return out

        mass = cdf(b) - cdf(a - 1)
    else:
        from scipy.special import ndtr

        sigma = math.sqrt(float(event.sigma2))
        norm = sigma * math.sqrt(2 * math.pi)
        mass = (norm * (ndtr(b / sigma) - ndtr(a / sigma)) - ((a <= 0) & (b >= 0))) / (norm + 1)
    out: np.ndarray = np.maximum(np.where(b >= a, mass, 0.0), 0.0)
    return out


def _log_mgf(event: Event, t: np.ndarray) -> np.ndarray:
    """log E[e^{tX}] (discrete Laplace, exact; t < -log q) or its bound σ²t²/2 (discrete
    Gaussian), for t >= 0."""
    if isinstance(event, DiscreteLaplaceEvent):
        q = _laplace_q(event)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # (t past -log q)
            out = 2 * math.log1p(-q) - np.log1p(-q * np.exp(t)) - np.log1p(-q * np.exp(-t))
        return np.where(t < -math.log(q), out, np.inf)
    out2: np.ndarray = float(event.sigma2) * t * t / 2
    return out2


def _log_mgf_grid(terms: Sequence[Term]) -> tuple[np.ndarray, np.ndarray] | None:
    """The grid of t the Chernoff bounds minimise over and Σ c log E[e^{t w X}] on it (None:
    no noise)."""
    std = math.sqrt(sum(c * w * w * noise_variance(e) for w, e, c in terms))
    if std == 0:
        return None
    hi = 50 / std
    for w, e, _ in terms:
        if isinstance(e, DiscreteLaplaceEvent):  # the MGF exists for |w t| < -log q
            hi = min(hi, 0.999 / (float(e.scale) * abs(w)))
    t = np.geomspace(hi * 1e-5, hi, 400)
    total = np.zeros_like(t)
    for w, e, c in terms:
        total += c * _log_mgf(e, abs(w) * t)
    return t, total


def chernoff(terms: Sequence[Term], tail: float) -> float:
    """u with P(Y >= u) <= tail (and P(Y <= -u) <= tail by symmetry): the Chernoff bound
    min_t (Σ c log E[e^{t w X}] + log(1/tail)) / t over a grid of t (any t gives a valid u)."""
    grid = _log_mgf_grid(terms)
    if grid is None:
        return 0.0
    t, total = grid
    u = (total + math.log(1 / tail)) / t
    return float(np.min(u[np.isfinite(u)], initial=math.inf))


def chernoff_tails(terms: Sequence[Term]) -> Callable[[float], float]:
    """``bound(u)``: a proven bound on P(Y >= u), min_t exp(Σ c log E[e^{t w X}] - t u) over
    the grid of :func:`chernoff` (any t gives a valid bound; 1 when u <= 0). The moment
    generating function is tabulated once, for many ``u``."""
    grid = _log_mgf_grid(terms)

    def bound(u: float) -> float:
        if u <= 0:
            return 1.0
        if grid is None:
            return 0.0
        t, total = grid
        exponent = total - t * u
        least = float(np.min(exponent[np.isfinite(exponent)], initial=0.0))
        return math.exp(min(0.0, least))

    return bound


def _fast_len(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n (>= 1): a length numpy's FFT transforms fast (what
    ``scipy.fft.next_fast_len(n, real=True)`` returns, without importing scipy).

    >>> [_fast_len(n) for n in (1, 7, 11, 97, 1000, 131073)]
    [1, 8, 12, 100, 1000, 131220]
    """
    best = 0
    p5 = 1
    while True:
        p35 = p5
        while True:
            need = -(-n // p35)  # the power of 2 must reach ceil(n / p35)
            candidate = (1 << (need - 1).bit_length()) * p35
            if not best or candidate < best:
                best = candidate
            if p35 >= n:
                break
            p35 *= 3
        if p5 >= n:
            return best
        p5 *= 5


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
    integer = all(float(w).is_integer() for w, _, _ in terms)
    reach = chernoff(terms, ALIAS / 2)
    if not (integer and 2 * reach + 3 <= MAX_CELLS):
        normal = _normal(terms, tail)
        if normal is not None:
            return normal
    if integer and 2 * reach + 3 <= MAX_CELLS:
        h, slack, method = 1.0, 0.0, "exact"
    else:
        h = max(2 * GRID_SLACK * std / m, 2 * (reach + 1) / (MAX_CELLS - 8))
        slack, method = m * h / 2, "grid"
    half_cells = math.ceil((reach + slack) / h) + 1
    size = _fast_len(2 * half_cells + 1)
    spectrum = np.ones(size // 2 + 1, dtype=np.complex128)
    for w, e, c in terms:
        wide = _radius(e) > MAX_SUPPORT or (
            h >= 2 * abs(w) and _radius(e) > size
            and (isinstance(e, DiscreteLaplaceEvent) or float(e.sigma2) >= 1e8))
        row: np.ndarray
        if wide:  # by cells, from the closed form (faster than point by point)
            if h < 2 * abs(w):  # cells narrower than the lattice: cannot tabulate by cells
                return fallback
            row = np.zeros(size)
            row[: 2 * half_cells + 1] = _wide_cells(e, abs(w), h, half_cells)
        else:
            k, p = _pmf(e)
            cells = np.rint(w * np.arange(-k, k + 1, dtype=np.float64) / h).astype(np.int64)
            keep = np.abs(cells) <= half_cells  # mass cut here only lowers the cdf
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


def _chernoff_counts(w: float, event: Event, counts: np.ndarray, tail: float) -> np.ndarray:
    """:func:`chernoff` of ``[(w, event, c)]`` for every c of ``counts`` (the same t grid)."""
    std = np.sqrt(counts * w * w * noise_variance(event))
    hi = 50 / std
    if isinstance(event, DiscreteLaplaceEvent):
        hi = np.minimum(hi, 0.999 / (float(event.scale) * abs(w)))
    out = np.empty(len(counts))
    for i, (c, top) in enumerate(zip(counts, hi, strict=True)):
        t = np.geomspace(top * 1e-5, top, 400)
        u = (c * _log_mgf(event, abs(w) * t) + math.log(1 / tail)) / t
        out[i] = float(np.min(u[np.isfinite(u)], initial=math.inf))
    return out


def half_widths_iid(
    w: float, event: Event, counts: Sequence[int], *, level: float = 0.95
) -> list[Interval]:
    """``half_width([(w, event, c)])`` for every c of ``counts`` (each >= 1), sharing the
    node's spectrum between the counts whose window has the same size: the same numbers, bit
    for bit, for the running totals of a plan whose nodes carry the same noise."""
    counts = [int(c) for c in counts]
    w = float(w)
    out: dict[int, Interval] = {}
    tail = (1 - level) / 2
    simple = (
        w != 0 and w.is_integer() and counts and min(counts) >= 1
        and isinstance(event, DiscreteLaplaceEvent) and noise_variance(event) > 0
        and _radius(event) <= MAX_SUPPORT
    )  # fmt: skip
    if simple:
        distinct = np.unique(np.asarray(counts, dtype=np.int64))
        reach = _chernoff_counts(w, event, distinct, ALIAS / 2)
        simple = bool(np.all(2 * reach + 3 <= MAX_CELLS))
    if not simple:
        return [half_width([(w, event, c)], level=level) for c in counts]
    fallback = _chernoff_counts(w, event, distinct, tail)
    k, p = _pmf(event)
    cells = np.rint(w * np.arange(-k, k + 1, dtype=np.float64) / 1.0).astype(np.int64)
    spectra: dict[tuple[int, int], np.ndarray] = {}
    for c, r, fb in zip(distinct.tolist(), reach, fallback, strict=True):
        std = math.sqrt(c * w * w * noise_variance(event))
        half_cells = math.ceil((r + 0.0) / 1.0) + 1
        size = _fast_len(2 * half_cells + 1)
        base = spectra.get((size, half_cells))
        if base is None:
            keep = np.abs(cells) <= half_cells
            row = np.bincount(cells[keep] + half_cells, weights=p[keep], minlength=size)
            base = spectra[(size, half_cells)] = np.fft.rfft(np.roll(row, -half_cells))
        spectrum = np.ones(size // 2 + 1, dtype=np.complex128)
        spectrum *= base**c
        pmf = np.roll(np.fft.irfft(spectrum, n=size), half_cells)
        excess = 1 - np.cumsum(pmf) + ALIAS + 1e-9
        ok = np.nonzero(excess <= tail)[0]
        chern = Interval(half_width=float(fb), coverage=level, std=std, method="chernoff")
        if ok.size == 0:
            out[c] = chern
            continue
        u = float(int(ok[0]) - half_cells)
        if chern.half_width < u:
            out[c] = chern
            continue
        out[c] = Interval(half_width=max(u, 0.0), coverage=1 - 2 * float(excess[ok[0]]),
                          std=std, method="exact")  # fmt: skip
    return [out[c] for c in counts]
