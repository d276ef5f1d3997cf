"""``[release] plan = "factorization"``: exact discrete square-root factorization, finite horizon.

The real square root ``C = A^{1/2}`` (:mod:`dpcr.plans.factorization`) has irrational entries, and
dpcr adds only exact integer noise. So the plan releases with an INTEGER lower-triangular Toeplitz
matrix ``C'`` whose coefficients are

    c'_j = floor(s * c_j),   c_j = binom(2j, j) / 4^j   (computed exactly, integers),

for a scale ``s`` (default ``2^20``). ``c'_0 = s >= 1``, so ``C'`` is invertible. For base interval
``t = 1 .. T`` the plan releases ``y_t = (C' x)_t + z_t``: ``x`` the exact integer change per
interval (and key), ``z_t`` i.i.d. discrete Gaussian. ``y`` is an integer vector, released exactly;
running counts are post-processing (``A C'^{-1} y``, :mod:`dpcr.estimators.factorization`).

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from itertools import pairwise
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError
from dpcr.plans.base import Budgeting, Estimates, LayerBudget, Node
from dpcr.plans.dcr import DisjointRelease

if TYPE_CHECKING:
    from dpcr.accounting.guarantee import Participation
    from dpcr.tomltable import TomlTable

__all__ = [
    "FACTORIZATIONS",
    "MAX_HORIZON",
    "FactorizationRelease",
    "integer_sensitivity2",
    "integer_sqrt_coefficients",
]

FACTORIZATIONS = ("sqrt",)
#: Largest horizon (base intervals): estimates cost O(T^2) per key (forward substitution).
MAX_HORIZON = 16384
DEFAULT_SCALE = 1 << 20
#: Released integers must stay clear of int64 overflow: |y_t| <= s * sum |x| + |z|.
_INT_LIMIT = 1 << 62


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


@lru_cache(maxsize=64)
def _coefficients(horizon: int, scale: int) -> tuple[int, ...]:
    return tuple(integer_sqrt_coefficients(horizon, scale=scale))


@dataclass(frozen=True, slots=True, kw_only=True)
class FactorizationRelease:
    """Base intervals ``(start + (i-1) period, start + i period]``, ``i = 1 .. horizon``; one
    discrete Gaussian vector release ``y = C'x + z`` (finite horizon; Gaussian noise only).

    >>> FactorizationRelease(start=0, period=10, horizon=4).coefficients()[:2]
    [1048576, 524288]
    """

    kind: ClassVar[str] = "factorization"
    mechanisms: ClassVar[tuple[str, ...]] = ("gaussian",)

    start: int
    period: int
    horizon: int
    factorization: str = "sqrt"
    scale: int = DEFAULT_SCALE

    def __post_init__(self) -> None:
        from dpcr.timeutil import normalize_fields

        normalize_fields(self, timestamps=("start",), durations=("period",))
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

    @classmethod
    def from_toml(cls, table: TomlTable) -> FactorizationRelease:
        """``[release]`` keys: ``start``, ``period``, exactly one of ``end`` or ``horizon`` (base
        intervals), ``factorization`` (``"sqrt"``)."""
        start, period = table.pop_time("start"), table.pop_span("period")
        end = table.pop_time("end", None)
        horizon = table.pop("horizon", None, types=(int,))
        factorization = table.pop("factorization", "sqrt", types=(str,))
        if (end is None) == (horizon is None):
            raise ConfigError(
                "plan = 'factorization' needs a finite horizon: exactly one of release.end or "
                "release.horizon (number of base intervals)"
            )
        if horizon is None:
            horizon = (end - start) // period
        return cls(start=start, period=period, horizon=horizon, factorization=factorization)

    @property
    def end(self) -> int:
        return self.start + self.horizon * self.period

    def grid(self) -> DisjointRelease:
        """The base intervals as a disjoint grid (release times, closed intervals)."""
        return DisjointRelease(start=self.start, period=self.period, end=self.end)

    def coefficients(self) -> list[int]:
        return list(_coefficients(self.horizon, self.scale))

    # --- the plan protocol (dpcr.plans.base) ----------------------------------------------

    def schedule(self) -> DisjointRelease:
        return self.grid()

    def base_grid(self) -> DisjointRelease:
        return self.grid()

    def reporting_range(self, i: int) -> tuple[int | None, int]:
        return self.grid().interval(i)

    def reporting_base(self, i: int) -> tuple[int, int]:
        return i, i

    def base_range(self, before: int, after: int) -> tuple[int, int]:
        return (1, after) if after > before else (after + 1, after)  # y_t needs x_1 .. x_t

    def due(self, before: int, after: int) -> list[Node]:
        return [(0, i) for i in range(before + 1, min(after, self.horizon) + 1)]

    def exact(self, base: np.ndarray, first: int, nodes: Sequence[Node]) -> np.ndarray:
        """``(C'x)_t`` for the nodes ``(0, t)``, saturated to ``±2^61``.

        In int64 when ``c'_0 sum |x|`` cannot overflow, else exactly in Python integers. The
        saturation is 1-Lipschitz in every coordinate, so it never raises the sensitivity (the
        released vector is a function of ``C'x`` with at most its L2 change), and no data can
        make the release fail: a plan decided by one unit's values would leak.
        """
        if not nodes:
            return np.zeros((0, base.shape[1]), dtype=np.int64)
        if first != 1:
            raise ConfigError("a factorization release needs the base totals from interval 1")
        x = np.asarray(base, dtype=np.int64)
        hi = max(t for _, t in nodes)
        coeffs = self.coefficients()
        rows = [t - 1 for _, t in nodes]
        total = int(np.abs(x[:hi]).sum(axis=0).max(initial=0))
        if total * int(coeffs[0]) < _INT_LIMIT >> 2:
            c = np.asarray(coeffs[:hi], dtype=np.int64)
            mixed = np.empty((hi, x.shape[1]), dtype=np.int64)
            for k in range(x.shape[1]):
                mixed[:, k] = np.convolve(x[:hi, k], c)[:hi]
            return mixed[rows]
        cap = _INT_LIMIT >> 1
        out = np.empty((len(rows), x.shape[1]), dtype=np.int64)
        for k in range(x.shape[1]):
            col = [int(v) for v in x[:hi, k]]
            for r, t in enumerate(rows):
                exact = sum(coeffs[t - j] * col[j] for j in range(t + 1))
                out[r, k] = max(-cap, min(cap, exact))
        return out

    def instance(self, node: Node) -> Node:
        return (0, 1)  # the whole vector is one mechanism

    def node_range(self, node: Node) -> tuple[int | None, int]:
        return self.grid().interval(node[1])

    def participations(self, constraint: AtMostK | TimeBounded | Hybrid) -> dict[str, int]:
        """Per class, the most base intervals one unit's change touches (capped by the
        horizon): k (at most k, anywhere) or ``ceil(B/W) + 1`` (B-time-bounded, a run)."""
        from dpcr.plans.counts import periodic_most_span

        classes = constraint.all_classes() if isinstance(constraint, Hybrid) else {
            "all": constraint
        }
        out: dict[str, int] = {}
        for name, con in classes.items():
            if isinstance(con, AtMostK):
                m = con.k
            elif isinstance(con, TimeBounded):
                m = periodic_most_span(con.bound, self.period)
            else:
                raise ConfigError(f"unsupported constraint {con!r} for plan = 'factorization'")
            out[name] = max(1, min(m, self.horizon))
        return out

    def sensitivities(self, constraint: AtMostK | TimeBounded | Hybrid) -> dict[str, int]:
        """Per class, the exact squared L2 sensitivity of ``C'`` (worst pattern)."""
        coeffs = self.coefficients()
        return {
            name: integer_sensitivity2(coeffs, m)
            for name, m in self.participations(constraint).items()
        }

    def details(self, constraint: AtMostK | TimeBounded | Hybrid) -> dict[str, object]:
        """Per class: base intervals one unit touches and the L2 sensitivity of ``C'`` / scale
        (exact, worst pattern: the first ``m`` intervals)."""
        import math

        return {
            "participations": self.participations(constraint),
            "sensitivity": {
                name: math.sqrt(v) / self.scale
                for name, v in self.sensitivities(constraint).items()
            },
        }

    def participation(
        self, constraint: AtMostK | TimeBounded | Hybrid, *, reporting: int | None
    ) -> dict[str, Participation]:
        """One instance (the whole vector), met once by every unit: the multi-participation is
        inside its sensitivity."""
        from dpcr.accounting.guarantee import Participation

        return {name: Participation(counts=(1,)) for name in self.participations(constraint)}

    def budgeting(
        self, constraint: AtMostK | TimeBounded | Hybrid, *, clamped: bool = False
    ) -> Budgeting:
        """The whole vector, S the worst class's exact sensitivity² of ``C'`` (its analysis
        bounds each base interval's change by the per-interval sensitivity, clamped or not)."""
        worst = max(self.sensitivities(constraint).values())  # hybrid: the worst class
        return Budgeting(
            layers=(LayerBudget(share=Fraction(1), l2=Fraction(worst), values=self.horizon),)
        )

    def estimate(
        self, values: Mapping[Node, np.ndarray], variances: Mapping[Node, float], n: int
    ) -> Estimates:
        """Running totals ``A C'^{-1} y`` and changes, with exact variances."""
        from dpcr.estimators.factorization import (
            factorization_prefix_estimates,
            factorization_prefix_variances,
            factorization_window_estimates,
            factorization_window_variances,
        )

        for t in range(1, n + 1):
            if (0, t) not in values:
                raise ConfigError(f"released value of interval {t} is missing from the store")
        y = np.array([values[(0, t)] for t in range(1, n + 1)], dtype=np.int64).reshape(n, -1)
        coeffs = self.coefficients()
        var = float(variances[(0, 1)]) if n else 0.0
        est = factorization_prefix_estimates(y, coeffs)
        return Estimates(
            change=factorization_window_estimates(est, 1),
            estimate=est,
            change_var=factorization_window_variances(coeffs, var, n, 1),
            estimate_var=factorization_prefix_variances(coeffs, var, n),
        )

    def describe(self) -> str:
        from dpcr.timeutil import format_duration, format_timestamp

        return (
            f"exact discrete square-root factorization, {self.horizon} base intervals of "
            f"{format_duration(self.period)} from {format_timestamp(self.start)} to "
            f"{format_timestamp(self.end)}; C' = floor({self.scale} * (1-x)^(-1/2)) "
            "(integer Toeplitz), one Gaussian mechanism on the whole vector"
        )
