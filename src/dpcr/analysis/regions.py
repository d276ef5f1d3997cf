"""Exact privacy regions and privacy profiles of finite mechanisms.

A finite mechanism is a row-stochastic matrix ``M`` (row x is the output distribution M(x)) and a
neighbour relation on its rows (papers/coupled-worlds-streaming-composition.txt, section 1). For a
pair of neighbours with rows P = M(x), Q = M(x'), the privacy region is the zonotope

    R(M, x, x') = {(P·α, Q·(1 − α)) : 0 ≤ α ≤ 1},

and M is (ε, δ)-DP iff every pair's region lies in R(ε, δ) (Theorem 2). Writing s = e^ε, the
smallest such δ is the *hockey-stick divergence*

    δ(s) = max_T P(T) − s·Q(T) = Σ_y max(0, P(y) − s·Q(y))          (erratum 6: sums over y ∈ T),

attained by the Neyman-Pearson sets T = {y : P(y)/Q(y) > s}. Each pair contributes the points
(Q(T_k), P(T_k)) of its likelihood-ratio-sorted prefixes T_k, and δ(s) = max over those points of
A − s·B: the mechanism's whole privacy profile is the *upper convex hull* of the points of all
pairs. Its segment slopes are the tangent slopes e^{ε_i} and the hull values the shifts δ_i,
so the profile is exact and finite: ``PrivacyProfile`` stores the hull vertices as rationals.

Exactness. Probabilities are ``Fraction``s. Rows are put on one common denominator D; when
64·D < 2^62 all sums are exact int64 numpy arithmetic (likelihood ratios are sorted in floating
point and every adjacent pair is then re-checked exactly by integer cross-multiplication, falling
back to a rational sort on any disagreement); otherwise Python integers are used. Hull
orientation tests use Python integers. δ at a rational slope is exact; ε = ln(s) is irrational and
is computed in 60-digit decimal arithmetic and rounded *up* to a float where a bound is reported.

>>> rr = randomized_response(Fraction(3, 4))            # e^ε = 3
>>> prof = privacy_profile(rr)
>>> prof.delta_at_slope(Fraction(1)), prof.delta_at_slope(Fraction(3))
(Fraction(1, 2), Fraction(0, 1))
>>> round(prof.epsilon(0.0), 12) == round(math.log(3), 12)
True
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Literal

import numpy as np

from dpcr.errors import ConfigError

__all__ = [
    "FiniteMechanism",
    "LossDistribution",
    "PrivacyProfile",
    "decimal_ln",
    "loss_distribution",
    "privacy_profile",
    "profile_of_points",
    "randomized_response",
    "region_polygon",
    "sorted_prefix_points",
]

_PREC = 60
_INT64_SAFE = 2**62
#: The most exact (ratio, mass) products one composition of loss distributions may take (about
#: a few seconds of exact rational arithmetic): beyond it the computation is refused, not run.
MAX_LOSS_PAIRS = 1_000_000


def decimal_ln(value: Fraction) -> Decimal:
    """ln(value) to 60 significant digits."""
    if value <= 0:
        raise ConfigError(f"ln needs a positive value, got {value!r}")
    with localcontext() as ctx:
        ctx.prec = _PREC + 10
        out = (Decimal(value.numerator) / Decimal(value.denominator)).ln()
        ctx.prec = _PREC
        return +out


def _float_up(value: Decimal) -> float:
    """Smallest float >= ``value`` (``value`` held to 60 digits; one extra ulp covers that)."""
    out = float(value)
    if Decimal(out) < value:
        out = math.nextafter(out, math.inf)
    return math.nextafter(out, math.inf) if out != 0 else out


def _as_fraction(value: object, where: str) -> Fraction:
    if isinstance(value, bool):
        raise ConfigError(f"{where} must be a probability, got {value!r}")
    if isinstance(value, Fraction | int):
        out = Fraction(value)
    elif isinstance(value, str):
        try:
            out = Fraction(value)
        except ValueError as exc:
            raise ConfigError(f"{where} is not a number: {value!r}") from exc
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{where} must be finite, got {value!r}")
        out = Fraction(value)
    else:
        raise ConfigError(
            f"{where} must be a number (Fraction, int, float or 'a/b'), got {value!r}"
        )
    if not 0 <= out <= 1:
        raise ConfigError(f"{where} must lie in [0, 1], got {value!r}")
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class FiniteMechanism:
    """A mechanism on finite inputs and outputs: ``probabilities[x][y]`` = Pr[M(x) = y].

    ``neighbours`` lists ordered pairs (x, x') of row indices; both orders of a pair are needed for
    the usual symmetric DP guarantee (:meth:`from_rows` adds them). Each row must sum to exactly 1
    (rationals are compared exactly; floats are taken at their exact binary value).
    """

    probabilities: tuple[tuple[Fraction, ...], ...]
    neighbours: tuple[tuple[int, int], ...]
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        rows = self.probabilities
        if not rows or not rows[0]:
            raise ConfigError("a finite mechanism needs at least one input and one output")
        width = len(rows[0])
        for i, row in enumerate(rows):
            if len(row) != width:
                raise ConfigError(f"row {i} has {len(row)} outputs, row 0 has {width}")
            if sum(row, Fraction(0)) != 1:
                raise ConfigError(
                    f"row {i} sums to {sum(row, Fraction(0))}, not 1; give exact rationals "
                    "(e.g. '1/3') so each row sums to exactly 1"
                )
        if not self.neighbours:
            raise ConfigError("give at least one neighbouring pair (x, x')")
        for x, y in self.neighbours:
            if not (0 <= x < len(rows) and 0 <= y < len(rows)) or x == y:
                raise ConfigError(
                    f"neighbour pair ({x}, {y}) must name two different rows in 0..{len(rows) - 1}"
                )
        if self.inputs and len(self.inputs) != len(rows):
            raise ConfigError(f"{len(self.inputs)} input names for {len(rows)} rows")
        if self.outputs and len(self.outputs) != width:
            raise ConfigError(f"{len(self.outputs)} output names for {width} outputs")

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[Sequence[object]],
        *,
        neighbours: Literal["all", "adjacent"] | Iterable[Sequence[int]] = "all",
        symmetric: bool = True,
        inputs: Sequence[str] = (),
        outputs: Sequence[str] = (),
    ) -> FiniteMechanism:
        """Build from nested lists; ``neighbours`` is "all" pairs, "adjacent" (x, x+1), or pairs."""
        probs = tuple(
            tuple(_as_fraction(v, f"probabilities[{i}][{j}]") for j, v in enumerate(row))
            for i, row in enumerate(rows)
        )
        n = len(probs)
        pairs: list[tuple[int, int]]
        if neighbours == "all":
            pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
        elif neighbours == "adjacent":
            pairs = [(i, i + 1) for i in range(n - 1)]
        else:
            if isinstance(neighbours, str):  # type: ignore[unreachable]
                raise ConfigError(f"neighbours must be 'all', 'adjacent' or pairs: {neighbours!r}")
            pairs = []
            for p in neighbours:
                if len(p) != 2:
                    raise ConfigError(f"a neighbour pair has two row indices, got {p!r}")
                pairs.append((int(p[0]), int(p[1])))
        if symmetric:
            pairs = pairs + [(j, i) for i, j in pairs]
        unique = tuple(dict.fromkeys(pairs))
        return cls(
            probabilities=probs, neighbours=unique, inputs=tuple(inputs), outputs=tuple(outputs)
        )

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.probabilities), len(self.probabilities[0])

    def integer_matrix(self) -> tuple[np.ndarray, int]:
        """(numerators, D) with probabilities[x][y] = numerators[x, y] / D exactly."""
        denom = 1
        for row in self.probabilities:
            for v in row:
                denom = math.lcm(denom, v.denominator)
        big = denom * self.shape[1] >= _INT64_SAFE
        nums = [[v.numerator * (denom // v.denominator) for v in row] for row in self.probabilities]
        arr = np.array(nums, dtype=object if big else np.int64)
        return arr, denom


def randomized_response(p_truth: Fraction, *, k: int = 2) -> FiniteMechanism:
    """k-ary randomized response: report the true value with probability ``p_truth``, else one of
    the other k − 1 values uniformly. ε = ln(p_truth (k − 1) / (1 − p_truth)) when p_truth ≥ 1/k."""
    p = Fraction(p_truth)
    if not 0 < p < 1 or k < 2:
        raise ConfigError(f"need 0 < p_truth < 1 and k >= 2, got p_truth={p_truth!r}, k={k!r}")
    other = (1 - p) / (k - 1)
    rows = [[p if i == j else other for j in range(k)] for i in range(k)]
    return FiniteMechanism.from_rows(rows, neighbours="all", symmetric=False)


# --- the profile: upper hull of (Q(T), P(T)) points ----------------------------------------------


def _upper_hull(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Upper convex hull of integer points (sorted by x ascending, ties by y descending), exact.

    Only the part with non-increasing slopes from the leftmost-highest point onward is kept,
    which is what max_k (A_k − s B_k), s ≥ 0, needs."""
    hull: list[tuple[int, int]] = []
    for p in points:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            # keep the middle point only if it lies strictly above the chord (a right turn)
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def _pareto(b: np.ndarray, a: np.ndarray) -> list[tuple[int, int]]:
    """Points (b, a) not dominated by one with smaller-or-equal b and larger-or-equal a."""
    order = np.lexsort((-a, b)) if a.dtype != object else sorted(
        range(len(b)), key=lambda i: (b[i], -a[i])
    )
    bs, as_ = b[order], a[order]
    if as_.dtype != object:
        prev_max = np.maximum.accumulate(np.concatenate(([-1], as_[:-1])))
        keep = as_ > prev_max
        return [(int(x), int(y)) for x, y in zip(bs[keep], as_[keep], strict=True)]
    out: list[tuple[int, int]] = []
    best = -1
    for x, y in zip(bs, as_, strict=True):
        if y > best:
            out.append((int(x), int(y)))
            best = y
    return out


def sorted_prefix_points(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative (Q(T_k), P(T_k)) of each row pair, outputs sorted by P/Q descending (exactly).

    ``p`` and ``q`` are (pairs, outputs) integer arrays; the results have
    shape (pairs, outputs)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(q > 0, p.astype(float) / np.where(q > 0, q, 1).astype(float), np.inf)
    key = np.where((p == 0) & (q == 0), -1.0, key)  # zero-mass outputs last
    order = np.argsort(-key, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, axis=1)
    qs = np.take_along_axis(q, order, axis=1)
    # exact check of the float sort: p_i q_{i+1} >= p_{i+1} q_i for every adjacent pair (in
    # Python integers unless the products surely fit in int64)
    pc, qc = ps, qs
    if ps.dtype != object and max(int(ps.max(initial=0)), int(qs.max(initial=0))) >= 2**31:
        pc, qc = ps.astype(object), qs.astype(object)
    bad = np.asarray(pc[:, :-1] * qc[:, 1:] < pc[:, 1:] * qc[:, :-1], dtype=bool)
    rows = np.nonzero(bad.any(axis=1))[0]
    for r in rows:
        idx = sorted(
            range(p.shape[1]),
            key=lambda j: (
                -(Fraction(int(p[r, j]), int(q[r, j])) if q[r, j] else math.inf)
                if (p[r, j] or q[r, j])
                else 1
            ),
        )
        ps[r] = p[r, idx]
        qs[r] = q[r, idx]
    return np.cumsum(qs, axis=1), np.cumsum(ps, axis=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrivacyProfile:
    """The exact privacy profile δ(s) = max_k (A_k − s B_k), s = e^ε, of a mechanism.

    ``vertices`` are the upper-hull vertices (B_k, A_k) = (Q(T_k), P(T_k)) as Fractions, B
    increasing; the first has B = 0 (its A is δ at ε = ∞, the mass the worst pair puts where its
    neighbour puts none), the segment slopes (A_{k+1} − A_k)/(B_{k+1} − B_k) decrease.
    """

    vertices: tuple[tuple[Fraction, Fraction], ...]

    @property
    def slopes(self) -> tuple[Fraction, ...]:
        """Tangent slopes e^{ε_i} (hull segment slopes), decreasing; those ≥ 1 matter for DP."""
        v = self.vertices
        return tuple(
            (v[k + 1][1] - v[k][1]) / (v[k + 1][0] - v[k][0]) for k in range(len(v) - 1)
        )

    def delta_at_slope(self, slope: Fraction) -> Fraction:
        """Exact δ(s) for a rational slope s = e^ε ≥ 0."""
        s = Fraction(slope)
        return max(max(a - s * b for b, a in self.vertices), Fraction(0))

    def delta(self, epsilon: float) -> float:
        """δ(ε), from e^ε in 60-digit arithmetic (rounded up to the next float)."""
        if not epsilon >= 0:
            raise ConfigError(f"epsilon must be >= 0, got {epsilon!r}")
        if math.isinf(epsilon):
            return float(self.delta_at_infinity)
        with localcontext() as ctx:
            ctx.prec = _PREC
            s = Decimal(epsilon).exp()
            best = max(Decimal(a.numerator) / a.denominator
                       - s * Decimal(b.numerator) / b.denominator for b, a in self.vertices)
        return _float_up(max(best, Decimal(0)))

    @property
    def delta_at_infinity(self) -> Fraction:
        return self.vertices[0][1] if self.vertices[0][0] == 0 else Fraction(0)

    def slope_for(self, delta: Fraction) -> Fraction | None:
        """Smallest slope s with δ(s) ≤ ``delta`` (exact), None when δ(∞) > delta."""
        d = Fraction(delta)
        if self.delta_at_infinity > d:
            return None
        # δ(s) = max_k A_k − s B_k ≤ d  ⇔  s ≥ (A_k − d)/B_k for every k with B_k > 0
        need = [(a - d) / b for b, a in self.vertices if b > 0]
        return max([Fraction(0), *need])

    def epsilon(self, delta: float) -> float:
        """Smallest ε ≥ 0 with δ(ε) ≤ ``delta``, rounded up to a float (inf if none)."""
        exact = self.epsilon_decimal(delta)
        return math.inf if exact is None else _float_up(exact)

    def epsilon_decimal(self, delta: float | Fraction) -> Decimal | None:
        """ε(δ) = ln s(δ) to 60 digits (``None`` for ε = ∞)."""
        s = self.slope_for(Fraction(delta))
        if s is None:
            return None
        return decimal_ln(s) if s > 1 else Decimal(0)

    def tangents(self) -> list[tuple[float, Fraction]]:
        """The tangent (ε_i, δ_i) pairs: ε_i = ln(slope_i) ≥ 0 (rounded up), δ_i exact."""
        out: list[tuple[float, Fraction]] = []
        for s in self.slopes:
            if s >= 1:
                out.append((_float_up(decimal_ln(s)) if s > 1 else 0.0, self.delta_at_slope(s)))
        return out

    def curve(self, epsilons: Sequence[float]) -> list[float]:
        return [self.delta(e) for e in epsilons]


def profile_of_points(b: np.ndarray, a: np.ndarray, denominator: int) -> PrivacyProfile:
    """Profile from integer prefix points (b, a) over ``denominator`` (any shape; flattened)."""
    bf, af = np.asarray(b).ravel(), np.asarray(a).ravel()
    zero = np.zeros(1, dtype=bf.dtype)
    front = _pareto(np.concatenate((zero, bf)), np.concatenate((zero, af)))
    hull = _upper_hull(front)
    return PrivacyProfile(
        vertices=tuple((Fraction(x, denominator), Fraction(y, denominator)) for x, y in hull)
    )


def privacy_profile(mechanism: FiniteMechanism) -> PrivacyProfile:
    """The exact profile of ``mechanism``: the worst neighbour pair at every ε at once."""
    nums, denom = mechanism.integer_matrix()
    xs = np.array([x for x, _ in mechanism.neighbours])
    ys = np.array([y for _, y in mechanism.neighbours])
    b, a = sorted_prefix_points(nums[xs], nums[ys])
    return profile_of_points(b, a, denom)


def region_polygon(profile: PrivacyProfile) -> list[tuple[float, float]]:
    """Vertices (float) of the convex privacy region {(Pr[M(x)∈S], Pr[M(x')∈S̄])} the profile
    describes (closed under the swap of x and x'), counter-clockwise from (0, 1)."""
    # lower-left chain: (1 − A, B) for each hull vertex, plus its mirror (B, 1 − A)
    chain = [(1 - float(a), float(b)) for b, a in profile.vertices]
    mirror = [(y, x) for x, y in chain]
    pts = sorted(set(chain + mirror + [(0.0, 1.0), (1.0, 0.0)]))
    # convex hull (monotone chain), lower then upper; the upper half is the point reflection
    lower: list[tuple[float, float]] = []
    for p in pts:
        while len(lower) >= 2 and _cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    upper = [(1 - x, 1 - y) for x, y in lower]
    return lower + upper[1:-1]


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


# --- exact composition of one neighbouring pair --------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LossDistribution:
    """Outputs of one pair (P, Q) grouped by likelihood ratio: ``masses[r] = (P mass, Q mass)``.

    The ratio ``None`` holds outputs with Q = 0 < P. Composition multiplies ratios and masses, so
    the k-fold composition of a pair is exact and small (its support is the ratio products)."""

    masses: tuple[tuple[Fraction | None, Fraction, Fraction], ...]

    def compose(self, other: LossDistribution) -> LossDistribution:
        pairs = len(self.masses) * len(other.masses)
        if pairs > MAX_LOSS_PAIRS:
            raise ConfigError(
                f"composing these loss distributions takes {pairs:,} exact products, more than "
                f"{MAX_LOSS_PAIRS:,}; compose fewer rounds or smaller mechanisms"
            )
        out: dict[Fraction | None, tuple[Fraction, Fraction]] = {}
        for r1, p1, q1 in self.masses:
            for r2, p2, q2 in other.masses:
                r = None if r1 is None or r2 is None else r1 * r2
                p0, q0 = out.get(r, (Fraction(0), Fraction(0)))
                out[r] = (p0 + p1 * p2, q0 + q1 * q2)
        return LossDistribution(masses=tuple((r, p, q) for r, (p, q) in out.items()))

    def power(self, k: int) -> LossDistribution:
        if k < 1:
            raise ConfigError(f"composition count must be >= 1, got {k!r}")
        out, base, n = None, self, k
        while n:
            if n & 1:
                out = base if out is None else out.compose(base)
            n >>= 1
            if n:
                base = base.compose(base)
        assert out is not None
        return out

    def profile(self) -> PrivacyProfile:
        items = sorted(
            self.masses, key=lambda m: (m[0] is not None, -(m[0] or 0))
        )
        denom = 1
        for _, p, q in items:
            denom = math.lcm(denom, p.denominator, q.denominator)
        bs, as_ = [], []
        bsum = asum = 0
        for _, p, q in items:
            bsum += int(q * denom)
            asum += int(p * denom)
            bs.append(bsum)
            as_.append(asum)
        return profile_of_points(np.array(bs, dtype=object), np.array(as_, dtype=object), denom)


def loss_distribution(mechanism: FiniteMechanism, x: int, x_prime: int) -> LossDistribution:
    """The pair (M(x), M(x')) grouped by likelihood ratio."""
    p, q = mechanism.probabilities[x], mechanism.probabilities[x_prime]
    out: dict[Fraction | None, tuple[Fraction, Fraction]] = {}
    for pi, qi in zip(p, q, strict=True):
        if pi == 0 and qi == 0:
            continue
        r = None if qi == 0 else pi / qi
        p0, q0 = out.get(r, (Fraction(0), Fraction(0)))
        out[r] = (p0 + pi, q0 + qi)
    return LossDistribution(masses=tuple((r, a, b) for r, (a, b) in out.items()))
