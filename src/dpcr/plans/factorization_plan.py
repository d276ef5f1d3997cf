"""``[release] plan = "factorization"``: exact discrete square-root factorization, finite horizon.

The real square root ``C = A^{1/2}`` (:mod:`dpcr.plans.factorization`) has irrational entries, and
dpcr adds only exact integer noise. So the plan releases with an INTEGER lower-triangular Toeplitz
matrix ``C'`` whose coefficients are

    c'_j = floor(s * c_j),   c_j = binom(2j, j) / 4^j   (computed exactly, integers),

for a scale ``s`` (default ``2^20``). ``c'_0 = s >= 1``, so ``C'`` is invertible. For base interval
``t = 1 .. T`` the plan releases ``y_t = (C' x)_t + z_t``: ``x`` the exact integer change per
interval (and key), ``z_t`` i.i.d. discrete Gaussian. ``y`` is an integer vector, released exactly;
running counts are post-processing (``A C'^{-1} y``, :mod:`dpcr.factorization_pipeline`).

**Sensitivity (proof).** ``c_j >= 0`` and ``c_j >= c_{j+1}`` (the ratio is ``(2j+1)/(2j+2) < 1``);
``floor`` is nondecreasing and maps ``[0, inf)`` into ``[0, inf)``, so ``c'_j >= 0`` and
``c'_j >= c'_{j+1}``. ``C'`` is therefore lower-triangular Toeplitz with nonnegative nonincreasing
coefficients, and the worst-pattern theorem of :mod:`dpcr.plans.factorization` applies to it
exactly: over all changes ``d`` with ``|d_i| <= 1`` supported on at most ``m`` intervals (any ``m``
for at most k, a run of ``m = ceil(B/W) + 1`` for B-time-bounded), ``max ||C' d||^2`` is attained
by ``d = 1`` on the first ``m`` intervals, i.e. ``sum_t (S_t - S_{t-m})^2`` with ``S`` the prefix
sums of ``c'`` (:func:`integer_sensitivity2`, an exact integer).

Keys (histograms) and per-interval sensitivity ``Delta``: one unit changes the matrix ``X``
(intervals x keys) by ``D`` whose row ``a`` has L2 norm ``<= Delta`` on at most ``m`` rows. With the
Gram matrix ``G = C'^T C'`` (entries ``>= 0``), ``||C' D||_F^2 = sum_ab G_ab <D_a, D_b> <=
sum_ab G_ab |D_a| |D_b| <= Delta^2 sum_{a,b in support} G_ab <= Delta^2 * integer_sensitivity2``
(Cauchy-Schwarz, then the scalar theorem with ``d_a = |D_a| / Delta``). The whole release is ONE
multivariate discrete Gaussian mechanism with integer shift, ``rho = Delta^2 S / (2 sigma^2)``-zCDP
(Canonne-Kamath-Steinke 2020, Thm 14 and its multivariate form); a hybrid constraint takes the
worst class.

>>> integer_sqrt_coefficients(4, scale=8)
[8, 4, 3, 2]
>>> integer_sensitivity2([8, 4, 3, 2], 1)  # 64 + 16 + 9 + 4
93
>>> integer_sensitivity2([8, 4, 3, 2], 2)  # C' (1, 1, 0, 0): 8, 12, 7, 5
282
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from dpcr.errors import ConfigError
from dpcr.plans.dcr import DisjointRelease

__all__ = [
    "FACTORIZATIONS",
    "MAX_HORIZON",
    "FactorizationPlan",
    "integer_sensitivity2",
    "integer_sqrt_coefficients",
]

FACTORIZATIONS = ("sqrt",)
#: Largest horizon (base intervals): estimates cost O(T^2) per key (forward substitution).
MAX_HORIZON = 16384
DEFAULT_SCALE = 1 << 20


def integer_sqrt_coefficients(T: int, *, scale: int) -> list[int]:
    """``floor(scale * binom(2j, j) / 4^j)`` for ``j < T``, exactly (integer arithmetic)."""
    out: list[int] = []
    num = 1  # binom(2j, j)
    for j in range(T):
        if j:
            num = num * (2 * j) * (2 * j - 1) // (j * j)
        out.append((scale * num) >> (2 * j))
    return out


def integer_sensitivity2(coeffs: Sequence[int], m: int) -> int:
    """``max ||C' d||^2`` for ``|d_i| <= 1`` on at most ``m`` intervals (any, or a run), exact.

    Valid for nonnegative nonincreasing integer coefficients (checked): the first ``m`` intervals
    are a worst pattern, so the value is ``sum_t (S_t - S_{t-m})^2``."""
    c = [int(v) for v in coeffs]
    if any(v < 0 for v in c) or any(b > a for a, b in pairwise(c)):
        raise ConfigError("the worst-pattern theorem needs nonnegative nonincreasing coefficients")
    if m < 1:
        raise ConfigError(f"participations must be >= 1, got {m}")
    prefix = [0]
    for v in c:
        prefix.append(prefix[-1] + v)
    return sum((prefix[t + 1] - prefix[max(0, t + 1 - m)]) ** 2 for t in range(len(c)))


@dataclass(frozen=True, slots=True, kw_only=True)
class FactorizationPlan:
    """Base intervals ``(start + (i-1) period, start + i period]``, ``i = 1 .. horizon``.

    >>> FactorizationPlan(start=0, period=10, horizon=4).coefficients()[:2]
    [1048576, 524288]
    """

    start: int
    period: int
    horizon: int
    factorization: str = "sqrt"
    scale: int = DEFAULT_SCALE

    def __post_init__(self) -> None:
        for name in ("start", "period", "horizon", "scale"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"release.{name} must be an integer, got {v!r}")
        if self.period <= 0:
            raise ConfigError(f"release.period must be > 0, got {self.period}")
        if not 1 <= self.horizon <= MAX_HORIZON:
            raise ConfigError(
                f"release.horizon must be 1 .. {MAX_HORIZON} base intervals, got {self.horizon} "
                "(a factorization plan needs a finite horizon; use plan = 'tree' for longer or "
                "open-ended releases)"
            )
        if self.factorization not in FACTORIZATIONS:
            raise ConfigError(
                f"release.factorization must be one of {list(FACTORIZATIONS)}, "
                f"got {self.factorization!r}"
            )
        if self.scale < 1:
            raise ConfigError(f"scale must be >= 1, got {self.scale}")

    @property
    def end(self) -> int:
        return self.start + self.horizon * self.period

    def grid(self) -> DisjointRelease:
        """The base intervals as a disjoint grid (release times, closed intervals)."""
        return DisjointRelease(start=self.start, period=self.period, end=self.end)

    def coefficients(self) -> list[int]:
        return integer_sqrt_coefficients(self.horizon, scale=self.scale)
