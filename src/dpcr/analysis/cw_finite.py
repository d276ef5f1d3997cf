"""Exact coupled-worlds (CW) privacy of a finite mechanism on finite i.i.d. rows, by enumeration.

Setting (papers/coupled-worlds-streaming-composition.txt). Rows are i.i.d. draws from a finite
distribution D on the values 0..K−1 (:class:`RowDistribution`). The rows are cut into blocks of
``block`` rows; each database X_i of a :class:`Layout` is a list of blocks, and a
:class:`WindowMechanism` M (any finite kernel on the n = |X_i| rows, in their order) runs on every
database: G = (M(X_1), …, M(X_t)). The private information is one row's value v; alt replaces that
row by a fresh draw from D. The adversary's auxiliary information Z is the rows of the layout's
``aux`` blocks (for a stream, the note's X_{t↓}: the last (1 − c)n rows of the final window).

Theorem 3 of the note: G is (ε, δ)-CW private iff, for every private row, value v and auxiliary
value z, the two-row mechanism [Pr[G(X) | v, z], Pr[G(alt(X)) | v, z]] is (ε, δ)-DP. So the
exact CW privacy profile is the privacy profile (:mod:`dpcr.analysis.regions`) of all those pairs,
in both orders: :func:`cw_exact` enumerates every assignment of the layout's rows, in exact
integer arithmetic, and returns it as a :class:`~dpcr.analysis.regions.PrivacyProfile` together
with the note's quantities for G (the largest likelihood ratio on outputs both worlds produce and
the mass one world puts where the other puts none).

Theorem 4 (the composition theorem; :func:`cw_step_bound`): for one database X_i with its own
auxiliary rows X_{i↓} (the rows of X_i that the adversary knows or a later database reuses: for a
stream, the window minus its oldest block) and the private row among the others, the slopes
e^{ε_{j|z}} = P0(y_j | z)/P1(y_j | z) give ε_max, the shift at the smallest slope gives δ_max, and
γ = max over outputs y of 𝒲 and all z, z' of |ln P0(y | z)/P1(y | z')| (Assumptions 1 and 3;
γ = ∞ when Assumption 1 fails). The theorem bounds ε_t ≤ ε_max + (t − 1)γ and δ_t ≤ t·δ_max.
Everything is rational: the bound's slope e^{ε_t} = e^{ε_max}·(e^γ)^{t−1} is a fraction, so
:func:`check_theorem4` decides exactly whether the bound is below the exact value.

Figure 2 (4) of the note: composition works as long as each database owns one private block (a
block no other database holds). :meth:`Layout.private_blocks` builds that layout,
X_i = (s_i, p_i, s_{i+1}) with shared blocks s and private blocks p; :meth:`Layout.owners` tells
which databases own one.

>>> from fractions import Fraction as F
>>> rows = RowDistribution.of([F(1, 2), F(1, 4), F(1, 4)])         # values 0, 1, 2
>>> mech = WindowMechanism.noisy_sum(values=3, n=2, keep=F(1, 2))   # true sum half the time
>>> check = check_theorem4(rows, mech, Layout.sliding_window(n=2, block=1, steps=2))
>>> check.holds, check.exact.slope <= check.bound_slope
(True, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcr.analysis.regions import (
    PrivacyProfile,
    decimal_ln,
    profile_of_points,
    sorted_prefix_points,
)
from dpcr.errors import ConfigError

__all__ = [
    "CwExactProfile",
    "CwStepBound",
    "Layout",
    "RowDistribution",
    "Theorem4Check",
    "WindowMechanism",
    "check_theorem4",
    "cw_exact",
    "cw_step_bound",
]

#: The most row assignments one enumeration visits (K^rows), and the most (assignment, joint
#: output) products it forms (K^rows · m^t): beyond them the computation is refused, not run.
MAX_ASSIGNMENTS = 1 << 18
MAX_PRODUCTS = 4_000_000
_INT64_SAFE = 2**62


def _frac(value: object, where: str) -> Fraction:
    """An exact probability from a Fraction, int, 'a/b' string or float (its binary value)."""
    if isinstance(value, bool) or not isinstance(value, Fraction | int | float | str):
        raise ConfigError(f"{where} must be a number or a string like '3/4', got {value!r}")
    try:
        return Fraction(value)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise ConfigError(f"{where} is not a number: {value!r}") from None


def _float_up(value: Fraction) -> float:
    out = float(value)
    return out if Fraction(out) >= value else math.nextafter(out, math.inf)


def _ln_up(slope: Fraction | None) -> float:
    """ln(slope) rounded up to a float; ∞ for ``None`` (an unbounded ratio)."""
    if slope is None:
        return math.inf
    if slope <= 1:
        return 0.0
    value = decimal_ln(slope)
    out = float(value)
    return math.nextafter(out, math.inf)


@dataclass(frozen=True, slots=True, kw_only=True)
class RowDistribution:
    """The distribution D of one row: ``probabilities[v]`` = Pr[row = v], v = 0..K−1, exact."""

    probabilities: tuple[Fraction, ...]

    def __post_init__(self) -> None:
        if len(self.probabilities) < 2:
            raise ConfigError("a row distribution needs at least two values")
        if not all(isinstance(p, Fraction) for p in self.probabilities):
            raise ConfigError("row probabilities must be Fractions; build with RowDistribution.of")
        if any(not 0 <= p <= 1 for p in self.probabilities):
            raise ConfigError(f"row probabilities must lie in [0, 1], got {self.probabilities}")
        total = sum(self.probabilities, Fraction(0))
        if total != 1:
            raise ConfigError(
                f"row probabilities sum to {total}, not exactly 1; write them as 'a/b'"
            )
        if sum(1 for p in self.probabilities if p > 0) < 2:
            raise ConfigError("a row distribution with one possible value has nothing private")

    @classmethod
    def of(cls, probabilities: Iterable[object]) -> RowDistribution:
        return cls(probabilities=tuple(_frac(p, "a row probability") for p in probabilities))

    @classmethod
    def bernoulli(cls, p: Fraction) -> RowDistribution:
        return cls.of([1 - Fraction(p), Fraction(p)])

    @property
    def values(self) -> int:
        return len(self.probabilities)


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowMechanism:
    """A finite mechanism on a database of ``n`` rows with values 0..``values``−1.

    ``probabilities[w][y]`` = Pr[M = y] on the database whose rows, read in order as a base-K
    number with the first row most significant, equal w (K^n rows, each summing to exactly 1)."""

    values: int
    n: int
    probabilities: tuple[tuple[Fraction, ...], ...]

    def __post_init__(self) -> None:
        if self.values < 2 or self.n < 1:
            raise ConfigError(f"need values >= 2 and n >= 1, got {self.values}, {self.n}")
        if len(self.probabilities) != self.values**self.n:
            raise ConfigError(
                f"the kernel needs K^n = {self.values**self.n} rows, one per database, "
                f"got {len(self.probabilities)}"
            )
        width = len(self.probabilities[0])
        if not all(isinstance(v, Fraction) for row in self.probabilities for v in row):
            raise ConfigError("kernel probabilities must be Fractions; build with from_function")
        for w, row in enumerate(self.probabilities):
            if len(row) != width or any(not 0 <= v <= 1 for v in row):
                raise ConfigError(f"kernel row {w} must have {width} probabilities in [0, 1]")
            if sum(row, Fraction(0)) != 1:
                raise ConfigError(f"kernel row {w} sums to {sum(row, Fraction(0))}, not 1")

    @classmethod
    def from_function(
        cls, *, values: int, n: int, kernel: Callable[[tuple[int, ...]], Sequence[object]]
    ) -> WindowMechanism:
        """Kernel from a function of the database's rows (a tuple, first row first)."""
        if values < 2 or n < 1 or values**n > MAX_ASSIGNMENTS:
            raise ConfigError(
                f"a kernel on {n} rows of {values} values has K^n = {values}^{n} rows; need "
                f"values >= 2, n >= 1 and K^n <= {MAX_ASSIGNMENTS:,}"
            )
        rows = []
        for w in range(values**n):
            rows_w = tuple((w // values ** (n - 1 - k)) % values for k in range(n))
            rows.append(tuple(_frac(v, f"kernel{rows_w}") for v in kernel(rows_w)))
        return cls(values=values, n=n, probabilities=tuple(rows))

    @classmethod
    def of_sum(cls, *, values: int, n: int, rows: Sequence[Sequence[object]]) -> WindowMechanism:
        """Kernel of the sum of the rows: ``rows[s]`` is the output distribution at sum s
        (n·(K − 1) + 1 rows); a count kernel for Bernoulli rows."""
        top = n * (values - 1)
        if len(rows) != top + 1:
            raise ConfigError(f"a sum kernel needs n·(K − 1) + 1 = {top + 1} rows, one per sum")
        exact = [tuple(_frac(v, f"kernel row {i}") for v in r) for i, r in enumerate(rows)]
        return cls.from_function(values=values, n=n, kernel=lambda x: exact[sum(x)])

    @classmethod
    def noisy_sum(cls, *, values: int, n: int, keep: Fraction) -> WindowMechanism:
        """The true sum with probability ``keep``, else uniform on 0..n·(K − 1)."""
        size = n * (values - 1) + 1
        k = Fraction(keep)
        if not 0 <= k <= 1:
            raise ConfigError(f"keep must lie in [0, 1], got {keep}")
        rows = [[k * (i == s) + (1 - k) / size for i in range(size)] for s in range(size)]
        return cls.of_sum(values=values, n=n, rows=rows)

    @property
    def outputs(self) -> int:
        return len(self.probabilities[0])

    def integer_matrix(self) -> tuple[list[list[int]], int]:
        """(numerators, e) with probabilities[w][y] = numerators[w][y] / e exactly."""
        e = 1
        for row in self.probabilities:
            for v in row:
                e = math.lcm(e, v.denominator)
        return [[v.numerator * (e // v.denominator) for v in row] for row in self.probabilities], e


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Blocks of ``block`` rows, the databases as lists of block ids, and the auxiliary blocks.

    Every database has the same number of blocks (one mechanism runs on each). Blocks are
    numbered 0..``blocks``−1; a block in no database and not auxiliary is allowed (it adds
    nothing). ``aux`` is the auxiliary information Z of the composed analysis."""

    block: int
    databases: tuple[tuple[int, ...], ...]
    aux: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.block < 1 or not self.databases or not self.databases[0]:
            raise ConfigError("a layout needs block >= 1 and at least one non-empty database")
        width = len(self.databases[0])
        for i, db in enumerate(self.databases):
            if len(db) != width or len(set(db)) != len(db) or min(db) < 0:
                raise ConfigError(
                    f"database {i} must list {width} different block ids >= 0, got {list(db)}"
                )
        if len(set(self.aux)) != len(self.aux) or any(b < 0 for b in self.aux):
            raise ConfigError(f"aux must list different block ids >= 0, got {list(self.aux)}")
        if not set(self.aux) <= {b for db in self.databases for b in db}:
            raise ConfigError("every auxiliary block must belong to a database")

    @classmethod
    def sliding_window(cls, *, n: int, block: int, steps: int) -> Layout:
        """The note's stream: windows of n rows, the oldest ``block`` rows replaced each step;
        the auxiliary information is the final window's last n − block rows (X_{t↓})."""
        if block < 1 or n < block or n % block:
            raise ConfigError(
                f"the window n={n} must be a positive multiple of the block b={block}"
            )
        if steps < 1:
            raise ConfigError(f"steps must be >= 1, got {steps}")
        width = n // block
        dbs = tuple(tuple(range(i, i + width)) for i in range(steps))
        return cls(block=block, databases=dbs, aux=dbs[-1][1:])

    @classmethod
    def private_blocks(cls, *, block: int, steps: int) -> Layout:
        """Figure 2 (4): X_i = (s_i, p_i, s_{i+1}); s_i is shared with X_{i−1}, p_i is owned by
        X_i alone; the auxiliary information is the final database's last block s_{t+1}."""
        if steps < 1:
            raise ConfigError(f"steps must be >= 1, got {steps}")
        dbs = tuple((2 * i, 2 * i + 1, 2 * i + 2) for i in range(steps))
        return cls(block=block, databases=dbs, aux=(2 * steps,))

    @property
    def blocks(self) -> int:
        return max(b for db in self.databases for b in db) + 1

    @property
    def n(self) -> int:
        return len(self.databases[0]) * self.block

    def owners(self) -> tuple[bool, ...]:
        """For each database, whether it owns a block no other database holds."""
        count: dict[int, int] = {}
        for db in self.databases:
            for b in db:
                count[b] = count.get(b, 0) + 1
        return tuple(any(count[b] == 1 for b in db) for db in self.databases)

    def is_sliding_window(self) -> bool:
        width = len(self.databases[0])
        return all(db == tuple(range(i, i + width)) for i, db in enumerate(self.databases))

    def theorem_setting(self) -> str | None:
        """The note's setting this layout is in, where Theorem 4's bound is proved: "sliding
        window" (auxiliary = the final window minus its oldest block) or "private blocks"
        (Figure 2 (4), as :meth:`private_blocks` builds it); ``None`` otherwise (the bound's
        formula can still be evaluated, but it is not a guarantee: it fails, for instance, on a
        sliding window whose auxiliary information is the oldest block)."""
        last = self.databases[-1]
        if self.is_sliding_window() and self.aux == last[1:]:
            return "sliding window"
        t = len(self.databases)
        if self == Layout.private_blocks(block=self.block, steps=t):
            return "private blocks"
        return None

    def step_aux(self, i: int) -> tuple[int, ...]:
        """X_{i↓}: the blocks of database i that are auxiliary or held by a later database."""
        later = set(self.aux).union(*[set(db) for db in self.databases[i + 1 :]])
        return tuple(b for b in self.databases[i] if b in later)


# --- enumeration ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pairs:
    """For every private row ρ, value v and auxiliary value z: the joint output numerators of
    world 0 (given v, z) and world 1 (given z), both over ``den[k]`` (k indexes (ρ, v, z))."""

    world0: np.ndarray  # (pairs, outputs), Python ints
    world1: np.ndarray
    den: list[int]
    private_rows: list[int]  # the private row of each pair (block-major row index)


def _enumerate(rows: RowDistribution, mech: WindowMechanism, layout: Layout) -> _Pairs:
    k_vals, b = rows.values, layout.block
    if mech.values != k_vals or mech.n != layout.n:
        raise ConfigError(
            f"the mechanism takes {mech.n} rows of {mech.values} values; the layout's databases "
            f"have {layout.n} rows of {k_vals} values"
        )
    n_rows = layout.blocks * b
    t = len(layout.databases)
    if n_rows > MAX_ASSIGNMENTS.bit_length() or t > MAX_PRODUCTS.bit_length():
        raise ConfigError(
            f"enumeration over {n_rows} rows and {t} databases is too large; keep K^rows <= "
            f"{MAX_ASSIGNMENTS:,}"
        )
    count = k_vals**n_rows
    m_t = mech.outputs**t
    if count > MAX_ASSIGNMENTS or count * m_t > MAX_PRODUCTS:
        raise ConfigError(
            f"enumeration visits K^rows = {k_vals}^{n_rows} assignments with m^t = {m_t} joint "
            f"outputs; keep K^rows <= {MAX_ASSIGNMENTS:,} and their product <= {MAX_PRODUCTS:,}"
        )
    d = 1
    for p in rows.probabilities:
        d = math.lcm(d, p.denominator)
    dnum = np.array([int(p * d) for p in rows.probabilities], dtype=object)
    kern, e = mech.integer_matrix()
    small = d ** (n_rows + 1) * e**t < _INT64_SAFE
    dtype: type = np.int64 if small else object
    a = np.arange(count, dtype=np.int64)
    xs = (a[:, None] // (k_vals ** np.arange(n_rows, dtype=np.int64))) % k_vals  # row r's value
    weight = np.ones(count, dtype=dtype)
    for r in range(n_rows):
        weight = weight * dnum[xs[:, r]].astype(dtype)
    kmat: np.ndarray = np.array(kern, dtype=dtype)
    joint = np.ones((count, 1), dtype=dtype)
    for db in layout.databases:
        cols = [blk * b + j for blk in db for j in range(b)]
        code = np.zeros(count, dtype=np.int64)
        for c in cols:
            code = code * k_vals + xs[:, c]
        step = kmat[code]  # (count, m): step i is the slower axis, earlier steps fastest
        joint = (step[:, :, None] * joint[:, None, :]).reshape(count, -1)
    mass = weight[:, None] * joint
    aux_rows = [blk * b + j for blk in layout.aux for j in range(b)]
    zcode = np.zeros(count, dtype=np.int64)
    for c in aux_rows:
        zcode = zcode * k_vals + xs[:, c]
    held = {blk for db in layout.databases for blk in db} - set(layout.aux)
    private = [blk * b + j for blk in sorted(held) for j in range(b)]
    w0, w1, dens, owners = [], [], [], []
    nz = k_vals ** len(aux_rows)
    for rho in private:
        key = xs[:, rho] * nz + zcode
        order = np.argsort(key, kind="stable")
        keys, starts = np.unique(key[order], return_index=True)
        sums = np.add.reduceat(mass[order], starts, axis=0)
        table = {int(kk): sums[i].astype(object) for i, kk in enumerate(keys)}
        for z in range(nz):
            present = [v for v in range(k_vals) if v * nz + z in table]
            if not present:
                continue
            world1 = sum((table[v * nz + z] for v in present[1:]), table[present[0] * nz + z])
            total = int(world1.sum())
            for v in present:
                dv = int(dnum[v])
                if dv == 0 or total == 0:
                    continue  # Pr[v] = 0 or Pr[z] = 0: nothing to condition on
                # P0 = N·d / (d_v·T) and P1 = M / T: one denominator d_v·T for both
                w0.append(table[v * nz + z] * d)
                w1.append(world1 * dv)
                dens.append(dv * total)
                owners.append(rho)
    return _Pairs(np.array(w0, dtype=object), np.array(w1, dtype=object), dens, owners)


def _max_ratio(a: np.ndarray, b: np.ndarray) -> Fraction:
    """max a_y/b_y over outputs with both positive (0 when none)."""
    best = Fraction(0)
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        if x > 0 and y > 0 and x * best.denominator > best.numerator * y:
            best = Fraction(x, y)
    return best


# --- the exact profile ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CwExactProfile:
    """Exact CW privacy of G on a layout, worst private row, value and auxiliary value z.

    ``slope`` = e^ε of the note's ε_t: the largest likelihood ratio P0/P1 or P1/P0 on outputs both
    worlds produce; ``delta`` its δ_t: the largest mass one world puts where the other puts none
    (conditional on z). ``worst_row`` is the private row with the largest ratio (rows numbered
    block by block: block·``block`` + j). ``profile`` is the whole exact profile δ(ε) (Theorem 3:
    the privacy profile of all the pairs)."""

    slope: Fraction
    delta: Fraction
    worst_row: int
    profile: PrivacyProfile

    @property
    def epsilon(self) -> float:
        """ln ``slope``, rounded up."""
        return _ln_up(self.slope)

    def delta_at_slope(self, slope: Fraction) -> Fraction:
        """Exact δ_G at e^ε = ``slope``: the worst Σ_y max(0, P(y) − slope·Q(y))."""
        return self.profile.delta_at_slope(slope)


def cw_exact(rows: RowDistribution, mech: WindowMechanism, layout: Layout) -> CwExactProfile:
    """The exact CW profile of G = (M(X_1), …, M(X_t)) on ``layout`` by enumeration."""
    pairs = _enumerate(rows, mech, layout)
    if not pairs.den:
        raise ConfigError("the layout has no private row: every block is auxiliary")
    slope, delta, worst = Fraction(0), Fraction(0), pairs.private_rows[0]
    for k, den in enumerate(pairs.den):
        for a, b in ((pairs.world0[k], pairs.world1[k]), (pairs.world1[k], pairs.world0[k])):
            r = _max_ratio(a, b)
            if r > slope:
                slope, worst = r, pairs.private_rows[k]
            delta = max(delta, Fraction(int(a[b == 0].sum()), den))
    common = 1
    for den in pairs.den:
        common = math.lcm(common, den)
    scale = np.array([common // den for den in pairs.den], dtype=object)[:, None]
    p, q = pairs.world0 * scale, pairs.world1 * scale
    bs, as_ = sorted_prefix_points(np.concatenate((p, q)), np.concatenate((q, p)))
    return CwExactProfile(
        slope=slope, delta=delta, worst_row=worst, profile=profile_of_points(bs, as_, common)
    )


# --- Theorem 4 -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CwStepBound:
    """One step's ε_max, δ_max and γ as exact slopes (``None`` = ∞), over every database.

    ``assumption_1``: every output any (z, v) can produce is produced under all of them, in both
    worlds, and some output is (the note's 𝒲 is the whole support). ``owners``: the databases that
    own a private block (Figure 2 (4))."""

    slope_max: Fraction | None
    delta_max: Fraction
    gamma_slope: Fraction | None
    assumption_1: bool
    owners: tuple[bool, ...]

    @property
    def epsilon_max(self) -> float:
        return _ln_up(self.slope_max)

    @property
    def gamma(self) -> float:
        return _ln_up(self.gamma_slope)

    def bound_slope(self, t: int) -> Fraction | None:
        """e^{ε_t} of Theorem 4: e^{ε_max}·(e^γ)^{t−1} (``None`` = ∞)."""
        if self.slope_max is None or (t > 1 and self.gamma_slope is None):
            return None
        return self.slope_max * (self.gamma_slope or 1) ** (t - 1)

    def bound_delta(self, t: int) -> Fraction:
        return min(Fraction(1), t * self.delta_max)

    def theorem4(self, t: int) -> tuple[float, float]:
        """(ε_max + (t − 1)γ, min(1, t·δ_max)), ε rounded up."""
        return _ln_up(self.bound_slope(t)), _float_up(self.bound_delta(t))


def cw_step_bound(rows: RowDistribution, mech: WindowMechanism, layout: Layout) -> CwStepBound:
    """ε_max, δ_max, γ of one step: each database with its own auxiliary rows X_{i↓}."""
    slope_max: Fraction | None = Fraction(1)
    delta_max, gamma = Fraction(0), Fraction(1)
    assumption = True
    seen: set[tuple[int, ...]] = set()
    for i, db in enumerate(layout.databases):
        pattern = tuple(db.index(blk) for blk in layout.step_aux(i))
        if pattern in seen:
            continue  # the same positions are auxiliary: the same quantities
        seen.add(pattern)
        alone = Layout(block=layout.block, databases=(db,), aux=layout.step_aux(i))
        pairs = _enumerate(rows, mech, alone)
        if not pairs.den:
            continue
        dens = np.array(pairs.den, dtype=object)[:, None]
        both = (pairs.world0 > 0) & (pairs.world1 > 0)
        support = (pairs.world0 > 0) | (pairs.world1 > 0)
        w_set = both.all(axis=0)
        assumption = assumption and bool(w_set.any()) and bool((support.any(axis=0) == w_set).all())
        for k, den in enumerate(pairs.den):
            a, b = pairs.world0[k], pairs.world1[k]
            if (support[k] & ~both[k]).any():
                slope_max = None
            ratios = [
                max(Fraction(int(x), int(y)), Fraction(int(y), int(x)))
                for x, y in zip(a[both[k]], b[both[k]], strict=True)
            ]
            if ratios and slope_max is not None:
                slope_max = max(slope_max, max(ratios))
            s_min = min(ratios) if ratios else Fraction(1)
            for p, q in ((a, b), (b, a)):
                excess = sum(
                    (max(Fraction(0), int(x) - s_min * int(y)) for x, y in zip(p, q, strict=True)),
                    Fraction(0),
                )
                delta_max = max(delta_max, excess / den)
        if w_set.any():
            # conditional probabilities on 𝒲 for every (ρ, v, z), then all ratios across pairs
            c0 = [
                [Fraction(int(x), int(den)) for x in row[w_set]]
                for row, den in zip(pairs.world0, dens[:, 0], strict=True)
            ]
            c1 = [
                [Fraction(int(x), int(den)) for x in row[w_set]]
                for row, den in zip(pairs.world1, dens[:, 0], strict=True)
            ]
            for j in range(int(w_set.sum())):
                hi0, lo0 = max(r[j] for r in c0), min(r[j] for r in c0)
                hi1, lo1 = max(r[j] for r in c1), min(r[j] for r in c1)
                gamma = max(gamma, hi0 / lo1, hi1 / lo0)
    return CwStepBound(
        slope_max=slope_max,
        delta_max=delta_max,
        gamma_slope=gamma if assumption else None,
        assumption_1=assumption,
        owners=layout.owners(),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Theorem4Check:
    """Theorem 4's bound for t = len(layout.databases) against the exact CW profile of G.

    ``setting`` names the note's setting the layout is in (``None``: the bound is evaluated but
    not proved for this layout). ``holds`` is decided exactly: the exact slope ≤ the bound's
    slope, the exact δ_t ≤ t·δ_max, and the exact δ_G at the bound's ε ≤ t·δ_max (a bound of ∞
    always holds)."""

    t: int
    setting: str | None
    step: CwStepBound
    exact: CwExactProfile
    bound_slope: Fraction | None
    bound_delta: Fraction
    delta_at_bound: Fraction | None

    @property
    def applies(self) -> bool:
        """Whether the note proves the bound for this layout (:meth:`Layout.theorem_setting`)."""
        return self.setting is not None

    @property
    def holds(self) -> bool:
        if self.bound_slope is None or self.delta_at_bound is None:
            return True
        return (
            self.exact.slope <= self.bound_slope
            and self.exact.delta <= self.bound_delta
            and self.delta_at_bound <= self.bound_delta
        )


def check_theorem4(rows: RowDistribution, mech: WindowMechanism, layout: Layout) -> Theorem4Check:
    """Theorem 4 for t = the layout's number of databases, checked against exact enumeration."""
    step = cw_step_bound(rows, mech, layout)
    exact = cw_exact(rows, mech, layout)
    t = len(layout.databases)
    slope = step.bound_slope(t)
    return Theorem4Check(
        t=t,
        setting=layout.theorem_setting(),
        step=step,
        exact=exact,
        bound_slope=slope,
        bound_delta=step.bound_delta(t),
        delta_at_bound=None if slope is None else exact.delta_at_slope(slope),
    )
