"""``[release] plan = "factorization"``: exact discrete factorizations (square root, row-rescaled
square root, BLT).

``factorization = "sqrt"`` (this docstring) and ``"rescaled"`` need a finite horizon; ``"blt"``
may be open-ended. The row-rescaled square root and BLT matrices and their sensitivity proofs are
in :mod:`dpcr.plans.integer_factorization`.

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
from dpcr.plans.base import (
    Budgeting,
    Estimates,
    LayerBudget,
    Node,
    WeightStats,
    check_whole_periods,
)
from dpcr.plans.dcr import DisjointRelease

if TYPE_CHECKING:
    from dpcr.accounting.guarantee import Participation
    from dpcr.timeutil import Instant, Span
    from dpcr.tomltable import TomlTable

__all__ = [
    "FACTORIZATIONS",
    "MAX_HORIZON",
    "FactorizationRelease",
    "integer_sensitivity2",
    "integer_sqrt_coefficients",
]

FACTORIZATIONS = ("sqrt", "rescaled", "blt")
#: Largest finite horizon (base intervals); estimates are FFT convolutions, O(T log T) per key.
MAX_HORIZON = 1 << 16
DEFAULT_SCALE = 1 << 20
#: Base intervals an open-ended BLT is fitted and its errors predicted over, unless declared.
DEFAULT_PLANNING_HORIZON = 1024
#: Released integers must stay clear of int64 overflow: |y_t| <= s * sum |x| + |z|.
_INT_LIMIT = 1 << 62


#: Up to this horizon the square root's coefficients are the exact floors (as in stores written
#: before longer horizons existed); beyond, a fixed-point recursion (integer arithmetic too).
EXACT_FLOOR_HORIZON = 16384
_GUARD = 64


def integer_sqrt_coefficients(T: int, *, scale: int) -> list[int]:
    """``floor(scale * binom(2j, j) / 4^j)`` for ``j < T``, exactly (integer arithmetic), when
    ``T <= EXACT_FLOOR_HORIZON``. Longer: ``g_0 = scale 2^64``, ``g_j = floor(g_{j-1} (2j-1) /
    (2j))``, ``c'_j = floor(g_j / 2^64)`` (within one unit of the floor; what matters for the
    proof holds all the same: integers, nonnegative, nonincreasing, ``c'_0 = scale``)."""
    out: list[int] = []
    if T > EXACT_FLOOR_HORIZON:
        g = scale << _GUARD
        for j in range(T):
            if j:
                g = g * (2 * j - 1) // (2 * j)
            out.append(g >> _GUARD)
        return out
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


@lru_cache(maxsize=16)
def _blt_coefficients(planning: int, scale: int, cap: int, fit: int) -> tuple[int, ...]:
    from dpcr.plans.integer_factorization import blt_integer_coefficients, blt_preset

    _, omega, theta = blt_preset(planning, fit)
    return tuple(blt_integer_coefficients(omega, theta, scale=scale, cap=cap))


@lru_cache(maxsize=64)
def _sensitivity2(plan: FactorizationRelease, m: int, run: bool) -> int:
    from dpcr.plans.integer_factorization import open_sensitivity2, rescaled_sensitivity2

    coeffs = plan.coefficients()
    if plan.factorization == "rescaled":
        return rescaled_sensitivity2(coeffs, plan.row_weights(), m, run=run)
    if plan.horizon is None:
        return open_sensitivity2(coeffs, m)
    return integer_sensitivity2(coeffs, m)


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
    horizon: int | None
    factorization: str = "sqrt"
    scale: int = DEFAULT_SCALE
    #: open-ended BLT only: base intervals its parameters are chosen (and errors predicted) for
    planning_horizon: int | None = None
    #: BLT only: the participations (base intervals one unit's change touches) its parameters
    #: are fitted for (:mod:`dpcr.plans.blt_presets`; the sensitivity is exact whatever it is)
    fit_participations: int = 1

    if TYPE_CHECKING:  # (what the constructor accepts; the fields hold µs)

        def __init__(
            self, *, start: Instant, period: Span, horizon: int | None,
            factorization: str = "sqrt", scale: int = DEFAULT_SCALE,
            planning_horizon: int | None = None, fit_participations: int = 1,
        ) -> None: ...

    def __post_init__(self) -> None:
        from dpcr.timeutil import normalize_fields

        normalize_fields(self, timestamps=("start",), durations=("period",))
        for name in ("start", "period", "horizon", "scale", "planning_horizon",
                     "fit_participations"):
            v = getattr(self, name)
            if v is None and name in ("horizon", "planning_horizon"):
                continue
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"release.{name} must be an integer, got {v!r}")
        if self.period <= 0:
            raise ConfigError(f"release.period must be > 0, got {self.period}")
        if self.factorization not in FACTORIZATIONS:
            raise ConfigError(
                f"release.factorization must be one of {list(FACTORIZATIONS)}, "
                f"got {self.factorization!r}"
            )
        if self.fit_participations != 1 and self.factorization != "blt":
            raise ConfigError("release.fit_participations is for factorization = 'blt'")
        if self.fit_participations < 1:
            raise ConfigError(
                f"release.fit_participations must be >= 1, got {self.fit_participations}"
            )
        if self.factorization == "rescaled" and self.scale != DEFAULT_SCALE:
            raise ConfigError("the row-rescaled square root has a fixed scale")
        if self.horizon is None or self.factorization == "blt":
            if self.factorization != "blt":
                raise ConfigError(
                    f"factorization = {self.factorization!r} needs a finite horizon (release.end "
                    "or release.horizon); factorization = 'blt' can be open-ended"
                )
            if self.horizon is not None and self.planning_horizon is not None:
                raise ConfigError(
                    "release.planning_horizon is for open-ended releases; this one has a horizon"
                )
            planning = self.planning_horizon
            if planning is not None and not 1 <= planning <= MAX_HORIZON:
                raise ConfigError(
                    f"release.planning_horizon must be 1 .. {MAX_HORIZON} base intervals, "
                    f"got {planning}"
                )
            if self.horizon is None:
                if planning is None:
                    object.__setattr__(self, "planning_horizon", DEFAULT_PLANNING_HORIZON)
                return
        if not 1 <= self.horizon <= MAX_HORIZON:
            raise ConfigError(
                f"release.horizon must be 1 .. {MAX_HORIZON} base intervals, got {self.horizon} "
                "(a factorization plan needs a finite horizon; use plan = 'tree' for longer or "
                "open-ended releases)"
            )
        if self.scale < 1:
            raise ConfigError(f"scale must be >= 1, got {self.scale}")

    @classmethod
    def from_toml(cls, table: TomlTable) -> FactorizationRelease:
        """``[release]`` keys: ``start``, ``period``, ``factorization`` (``"sqrt"``,
        ``"rescaled"``, ``"blt"``), at most one of ``end`` or ``horizon`` (base intervals; one is
        needed except for ``"blt"``), ``planning_horizon`` (open-ended ``"blt"``),
        ``fit_participations`` (``"blt"``)."""
        start, period = table.pop_time("start"), table.pop_span("period")
        end = table.pop_time("end", None)
        horizon = table.pop("horizon", None, types=(int,))
        factorization = table.pop("factorization", "sqrt", types=(str,))
        planning = table.pop("planning_horizon", None, types=(int,))
        fit = table.pop("fit_participations", 1, types=(int,))
        if end is not None and horizon is not None:
            raise ConfigError("give exactly one of release.end or release.horizon, not both")
        if end is None and horizon is None and factorization != "blt":
            raise ConfigError(
                f"plan = 'factorization' ({factorization!r}) needs a finite horizon: exactly one "
                "of release.end or release.horizon (number of base intervals); factorization = "
                "'blt' can be open-ended"
            )
        if end is not None:
            check_whole_periods(start, period, end)
            horizon = (end - start) // period
        return cls(start=start, period=period, horizon=horizon, factorization=factorization,
                   planning_horizon=planning, fit_participations=fit)

    @property
    def end(self) -> int | None:
        return None if self.horizon is None else self.start + self.horizon * self.period

    def grid(self) -> DisjointRelease:
        """The base intervals as a disjoint grid (release times, closed intervals)."""
        return DisjointRelease(start=self.start, period=self.period, end=self.end)

    def coefficients(self) -> list[int]:
        """``c'_j`` of the integer Toeplitz ``C'`` (the whole support of an open-ended BLT)."""
        if self.factorization == "blt":
            from dpcr.plans.integer_factorization import support_cap

            planning = self.horizon or self.planning_horizon or DEFAULT_PLANNING_HORIZON
            cap = self.horizon if self.horizon is not None else support_cap(planning)
            return list(_blt_coefficients(planning, self.scale, cap, self.fit_participations))
        assert self.horizon is not None
        scale = self.scale
        if self.factorization == "rescaled":
            from dpcr.plans.integer_factorization import RESCALED_SCALE

            scale = RESCALED_SCALE
        return list(_coefficients(self.horizon, scale))

    def coefficients_upto(self, n: int) -> list[int]:
        """The first ``n`` coefficients (zeros past an open-ended BLT's support)."""
        c = self.coefficients()[:n]
        return c + [0] * (n - len(c))

    def row_weights(self, n: int | None = None) -> list[int]:
        """``q_t`` of ``Q`` (1 except for the row-rescaled square root), ``t < n``."""
        n = n if n is not None else (self.horizon or 0)
        if self.factorization != "rescaled":
            return [1] * n
        from dpcr.plans.integer_factorization import rescaled_row_weights

        assert self.horizon is not None
        return list(rescaled_row_weights(self.horizon))[:n]

    def digest(self) -> str:
        """SHA-256 of the integer matrix (coefficients and row weights): bound by the store."""
        import hashlib

        text = ",".join(map(str, self.coefficients())) + ";" + ",".join(
            map(str, self.row_weights())
        )
        return hashlib.sha256(text.encode()).hexdigest()

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
        last = after if self.horizon is None else min(after, self.horizon)
        return [(0, i) for i in range(before + 1, last + 1)]

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
        coeffs = self.coefficients_upto(hi)
        q = self.row_weights(hi)
        rows = [t - 1 for _, t in nodes]
        total = int(np.abs(x[:hi]).sum(axis=0).max(initial=0))
        cap = _INT_LIMIT >> 1
        if total * int(coeffs[0]) * max(q) < _INT_LIMIT >> 2:
            c = np.asarray(coeffs, dtype=np.int64)
            qa = np.asarray(q, dtype=np.int64)[rows]
            out = np.empty((len(rows), x.shape[1]), dtype=np.int64)
            for k in range(x.shape[1]):
                if len(rows) * 4 < hi:  # a few new intervals: one dot product each
                    xs = x[:hi, k]
                    out[:, k] = np.array([int(c[t::-1] @ xs[: t + 1]) for t in rows])
                else:
                    out[:, k] = np.convolve(x[:hi, k], c)[:hi][rows]
                out[:, k] *= qa
            return out
        out = np.empty((len(rows), x.shape[1]), dtype=np.int64)
        for k in range(x.shape[1]):
            col = [int(v) for v in x[:hi, k]]
            for r, t in enumerate(rows):
                exact = q[t] * sum(coeffs[t - j] * col[j] for j in range(t + 1))
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
            out[name] = max(1, m if self.horizon is None else min(m, self.horizon))
        return out

    def _runs(self, constraint: AtMostK | TimeBounded | Hybrid) -> dict[str, bool]:
        classes = constraint.all_classes() if isinstance(constraint, Hybrid) else {
            "all": constraint
        }
        return {name: isinstance(con, TimeBounded) for name, con in classes.items()}

    def sensitivities(self, constraint: AtMostK | TimeBounded | Hybrid) -> dict[str, int]:
        """Per class, the exact squared L2 sensitivity of ``Q C'`` (worst pattern)."""
        runs = self._runs(constraint)
        return {
            name: _sensitivity2(self, m, runs[name])
            for name, m in self.participations(constraint).items()
        }

    def details(self, constraint: AtMostK | TimeBounded | Hybrid) -> dict[str, object]:
        """Per class: base intervals one unit touches and the L2 sensitivity of ``C'`` / scale
        (exact, worst pattern: the first ``m`` intervals)."""
        import math

        scale = self.coefficients()[0] * max(self.row_weights(self.horizon or 1))
        return {
            "participations": self.participations(constraint),
            "sensitivity": {
                name: math.sqrt(v) / scale
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
        bounds each base interval's change by the per-interval sensitivity, clamped or not).
        ``values``: the most coordinates per key on which two neighbours' vectors differ (the
        accountant's dimension): the horizon, or for an open-ended BLT m·L (m intervals, each
        moving the L coordinates of one column's support)."""
        worst = max(self.sensitivities(constraint).values())  # hybrid: the worst class
        if self.horizon is not None:
            values = self.horizon
        else:
            values = max(self.participations(constraint).values()) * len(self.coefficients())
        return Budgeting(
            layers=(LayerBudget(share=Fraction(1), l2=Fraction(worst), values=values),)
        )

    def estimate(
        self, values: Mapping[Node, np.ndarray], variances: Mapping[Node, float], n: int
    ) -> Estimates:
        """Running totals ``A C'^{-1} Q^{-1} y`` and changes, with exact variances (FFT
        convolutions, O(n log n) per key)."""
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
        coeffs = self.coefficients_upto(n)
        q = self.row_weights(n) if self.factorization == "rescaled" else None
        var = float(variances[(0, 1)]) if n else 0.0
        est = factorization_prefix_estimates(y, coeffs, weights=q)
        return Estimates(
            change=factorization_window_estimates(est, 1),
            estimate=est,
            change_var=factorization_window_variances(coeffs, var, n, 1, weights=q),
            estimate_var=factorization_prefix_variances(coeffs, var, n, weights=q),
        )

    def variances(self, layer_var: Sequence[float], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(change, running value) variances of base intervals ``1 .. n`` when every ``y_t``
        has variance ``v = layer_var[0]``: ``v sum_{j<t} f_j^2 / q_{t-1-j}^2`` with ``f`` the
        coefficients of ``1/c'(x)`` (change) or their running sums (running value), ``q = 1``
        without row weights. :meth:`estimate`'s, computed with numpy FFTs (Newton iteration
        for ``1/c'``, FFT convolution for the weights) at every length: equal up to rounding
        (:meth:`estimate` substitutes forward up to 16,384 intervals for bit-identical
        republished rows)."""
        from dpcr.plans.factorization import fftconvolve, series_inverse

        if n == 0:
            return np.zeros(0), np.zeros(0)
        inverse = series_inverse(np.asarray(self.coefficients_upto(n)[:n], dtype=np.float64), n)
        var = float(layer_var[0])
        q2 = None
        if self.factorization == "rescaled":
            q2 = np.asarray(self.row_weights(n)[:n], dtype=np.float64) ** 2

        def sums(f: np.ndarray) -> np.ndarray:
            if q2 is None:
                out: np.ndarray = var * np.cumsum(f * f)
                return out
            weighted: np.ndarray = var * np.maximum(fftconvolve(f * f, 1.0 / q2)[:n], 0.0)
            return weighted

        return sums(inverse), sums(np.cumsum(inverse))

    def weight_stats(self, n: int) -> tuple[WeightStats, WeightStats]:
        """Aggregates of the estimator's weights on ``y_1 .. y_n`` per published change and
        running total (every node shares the one Gaussian event: the published intervals need
        no probing, :mod:`dpcr.release._uncertainty`)."""
        from dpcr.estimators.factorization import factorization_weight_stats

        q = self.row_weights(n) if self.factorization == "rescaled" else None
        return factorization_weight_stats(self.coefficients_upto(n), n, weights=q)

    def describe(self) -> str:
        from dpcr.timeutil import format_duration, format_timestamp

        every = f"{format_duration(self.period)} from {format_timestamp(self.start)}"
        if self.horizon is None:
            span = (f"open-ended, base intervals of {every} (fitted for a planning horizon of "
                    f"{self.planning_horizon} intervals)")
        else:
            span = f"{self.horizon} base intervals of {every} to {format_timestamp(self.end or 0)}"
        if self.factorization == "blt":
            from dpcr.plans.blt_presets import nearest_fit

            fit = nearest_fit(self.fit_participations)
            fitted = "" if fit == 1 else f" fitted for {fit} participations per unit,"
            return (f"exact discrete BLT factorization (buffered linear Toeplitz, integer fixed "
                    f"point),{fitted} {span}; one Gaussian mechanism on the whole vector")
        if self.factorization == "rescaled":
            return (f"exact discrete row-rescaled square-root factorization, {span}; Q C' with "
                    "integer row weights Q, one Gaussian mechanism on the whole vector")
        return (
            f"exact discrete square-root factorization, {span}; "
            f"C' = floor({self.scale} * (1-x)^(-1/2)) "
            "(integer Toeplitz), one Gaussian mechanism on the whole vector"
        )
