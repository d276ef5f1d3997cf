"""Choosing the constraint's bound with the data owner (``dpcr suggest``, ``release.suggest()``).

For candidate bounds of the constraint (k of at-most-k, B of time-bounded; per class of a hybrid
constraint) the share of mutations and of units that bounding would drop, and the predicted
error of every statistic the release would publish under that bound.

The dropped shares depend on the data. By default they are computed from differentially private
histograms (discrete Laplace noise from the one randomness seam, :mod:`dpcr.noise`) whose budget
``epsilon`` is stated with the output and added to the release's guarantee. Neighbouring
changelogs differ by one unit's whole mutation history (docs/privacy.md, section 1):

* at-most-k: the histogram of ``min(n_u, cap)``, the unit's mutations clamped at ``cap``; one
  unit adds 1 to one bin (L1 sensitivity 1, noise scale ``1/ε``);
* time-bounded, with candidates ``B_1 < … < B_J`` cutting delays (time since the unit's first
  mutation) into bins ``[0, B_1], (B_1, B_2], …, (B_J, ∞)``: the histogram of the bin of each
  unit's last mutation (sensitivity 1), and the histogram of the mutations per delay bin where a
  unit with more than ``cap`` mutations is scaled down to ``cap`` (``floor(c · cap / n_u)`` per
  bin: sensitivity ``cap``); each gets half of ``ε``;
* a hybrid constraint: each unit belongs to one class, so the classes' histograms compose in
  parallel (``ε`` in all).

Everything shown is post-processing of these histograms (negative counts are read as 0), with
the noise's own standard deviation. ``exact=True`` computes the same figures exactly from the raw
data (no noise, no cap): they are not differentially private, labelled operator-only, and never
written to a file.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.accounting.composition import Guarantee
from dpcr.accounting.events import DiscreteLaplaceEvent
from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid, SimpleConstraint, TimeBounded
from dpcr.errors import ConfigError, DpcrError
from dpcr.mechanisms import noise_variance, round_up

if TYPE_CHECKING:
    from dpcr.noise import Randomness
    from dpcr.release._plan_report import QueryError
    from dpcr.release._settings import ReleaseSettings

__all__ = [
    "DEFAULT_BOUNDS",
    "DEFAULT_EPSILON",
    "DEFAULT_KS",
    "OPERATOR_ONLY",
    "BoundRow",
    "ClassSuggestion",
    "Suggestion",
    "count_histogram",
    "delay_histograms",
    "suggest",
]

#: The default budget of the data-dependent figures (pure ε, per unit).
DEFAULT_EPSILON = 0.1
#: Candidate k of an at-most-k class (with the configured k).
DEFAULT_KS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
#: Candidate B of a time-bounded class, in days (with the configured B).
DEFAULT_BOUNDS = tuple(d * 86_400_000_000 for d in (1, 7, 14, 31, 62, 92, 183, 365))
#: Candidates per class at most (each one is a calibration of the plan).
MAX_CANDIDATES = 32
#: The label of exact figures.
OPERATOR_ONLY = (
    "OPERATOR ONLY: exact figures from the raw data, not differentially private; do not publish "
    "or share them (docs/attack-model.md)"
)
_DAY = 86_400_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundRow:
    """One candidate bound of one class: the shares of mutations and of units bounding would
    drop (with the noise's std; 0 when exact) and each statistic's predicted error under it
    (``predicted``; empty, with ``refused`` saying why, when the plan cannot be calibrated)."""

    bound: int
    label: str
    current: bool
    dropped_mutations: float
    dropped_mutations_std: float
    dropped_units: float
    dropped_units_std: float
    predicted: Mapping[str, QueryError] = field(default_factory=dict)
    refused: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassSuggestion:
    """The candidates of one class (``"all"`` for a simple constraint, ``"*"`` a hybrid's
    default): its kind (``"at_most_k"`` or ``"time_bounded"``), its units and mutations (DP
    estimates, or exact) and one row per candidate."""

    name: str
    kind: str
    units: float
    mutations: float
    rows: tuple[BoundRow, ...]
    #: the clamp of a unit's mutations in the DP figures (0: exact figures, no clamp)
    cap: int = 0
    #: at-most-k, DP: the share of units with at least ``cap`` mutations, and its std
    at_cap: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Suggestion:
    """What ``dpcr suggest`` shows. ``exact``: figures from the raw data (operator-only, no
    guarantee); otherwise ``epsilon`` is the budget of the figures and ``combined`` the
    release's guarantee with it (basic composition: both reach the same audience)."""

    exact: bool
    epsilon: float
    release: Guarantee
    combined: Guarantee | None
    classes: tuple[ClassSuggestion, ...]
    unit: str
    simulation: bool = False

    def lines(self) -> list[str]:
        """The plain-text view (``dpcr suggest``)."""
        return suggestion_lines(self)

    def to_json(self) -> dict[str, Any]:
        """The JSON view (``dpcr suggest --json``)."""
        return {
            "exact": self.exact,
            "operator_only": OPERATOR_ONLY if self.exact else None,
            "epsilon": None if self.exact else self.epsilon,
            "simulation": self.simulation,
            "unit": self.unit,
            "release": {"epsilon": self.release.epsilon, "delta": self.release.delta},
            "combined": None if self.combined is None else {
                "epsilon": self.combined.epsilon, "delta": self.combined.delta,
                "method": self.combined.method,
            },
            "classes": [
                {
                    "class": c.name, "kind": c.kind, "units": c.units, "mutations": c.mutations,
                    "cap": c.cap or None, "at_cap": c.at_cap,
                    "candidates": [_row_json(r) for r in c.rows],
                }
                for c in self.classes
            ],
        }  # fmt: skip


def _row_json(r: BoundRow) -> dict[str, Any]:
    return {
        "bound": r.bound, "label": r.label, "current": r.current,
        "dropped_mutations": r.dropped_mutations, "dropped_mutations_std": r.dropped_mutations_std,
        "dropped_units": r.dropped_units, "dropped_units_std": r.dropped_units_std,
        "refused": r.refused,
        "predicted": {
            n: {"release_std": e.release_std, "running_std": e.running_std,
                "final_std": e.final_std}
            for n, e in r.predicted.items()
        },
    }  # fmt: skip


# --- the histograms (the DP mechanism's inputs: one unit's part is bounded) -----------------


def count_histogram(n: np.ndarray, cap: int) -> np.ndarray:
    """``H[m]`` (m = 0 .. cap) = the units with ``min(n_u, cap) = m``; one unit changes one
    bin by 1 (L1 sensitivity 1). ``H[0]`` is 0 (every unit has a mutation).

    >>> count_histogram(np.array([1, 1, 3, 9]), 4).tolist()
    [0, 2, 0, 1, 1]
    """
    return np.bincount(np.minimum(np.asarray(n, np.int64), cap), minlength=cap + 1).astype(np.int64)


def delay_histograms(n: np.ndarray, per_bin: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """From ``per_bin[u, i]``, unit u's mutations in delay bin i (``n[u]`` their sum): the
    histogram of each unit's last bin (sensitivity 1) and the mutations per bin with a unit
    of more than ``cap`` mutations scaled to at most ``cap`` (sensitivity ``cap``).

    >>> g, m = delay_histograms(np.array([3, 8]), np.array([[2, 1, 0], [2, 2, 4]]), 4)
    >>> g.tolist(), m.tolist()
    ([0, 1, 1], [3, 2, 2])
    """
    bins = per_bin.shape[1]
    if not len(n):
        return np.zeros(bins, np.int64), np.zeros(bins, np.int64)
    last = bins - 1 - np.argmax(per_bin[:, ::-1] > 0, axis=1)
    spans = np.bincount(last, minlength=bins).astype(np.int64)
    big = n > cap
    scaled = per_bin.astype(np.int64)
    scaled[big] = (per_bin[big] * cap) // n[big, None]
    return spans, scaled.sum(axis=0)


# --- reading the data -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Units:
    """Per unit of one class: its mutations ``n`` and (time-bounded) per delay bin."""

    n: np.ndarray
    per_bin: np.ndarray | None = None


def _classes(constraint: Constraint) -> dict[str, SimpleConstraint]:
    if isinstance(constraint, Hybrid):
        return constraint.all_classes()
    return {"all": constraint}


def _class_filter(constraint: Constraint, name: str) -> str:
    """SQL over ``_u`` selecting the units of class ``name`` (by their ``cls``): a listed
    class by its value, a hybrid's default ``"*"`` every value not listed; a unit whose value
    is not listed, without a default, is in no class (bounding drops it whole)."""
    from dpcr._sql import lit

    if not isinstance(constraint, Hybrid):
        return "TRUE"
    if name != "*":
        return f"cls = {lit(name)}"
    listed = ", ".join(str(lit(v)) for v in constraint.classes)
    return f"cls NOT IN ({listed})"


def _read_units(settings: ReleaseSettings, edges: Mapping[str, Sequence[int]]) -> dict[str, _Units]:
    """Load the changelog (its valid records, as a run does) and return, per class, its units'
    mutation counts (and per delay bin, cut at ``edges[class]``, for time-bounded classes)."""
    import duckdb

    from dpcr.bounding.sql import bounding_sql
    from dpcr.changelog import load

    con = duckdb.connect()
    try:
        with tempfile.TemporaryDirectory(prefix="dpcr-suggest-") as scratch:
            load(settings.source, con, table="changelog", on_error="quarantine",
                 quarantine_path=Path(scratch) / "quarantine.jsonl",
                 unit_column=settings.unit_column, raw_digests=False, ordered=False,
                 before_rows=False, scratch=Path(scratch))  # fmt: skip
        # A hybrid's class is read from the unit's first row (its ``after``), as bounding does.
        hybrid = isinstance(settings.constraint, Hybrid)
        first = ", arg_min(after, (ts, seq, entry, record)) AS after" if hybrid else ""
        cls = bounding_sql(settings.constraint).class_expr if hybrid else "''"
        con.execute(
            f"""CREATE TEMP TABLE _u AS SELECT unit, n, t0, {cls} AS cls FROM (
                SELECT unit, count(*) AS n, min(ts) AS t0{first} FROM changelog GROUP BY unit)"""
        )
        out: dict[str, _Units] = {}
        for name, c in _classes(settings.constraint).items():
            con.execute(
                f"""CREATE OR REPLACE TEMP TABLE _c AS SELECT unit, n, t0,
                    (row_number() OVER (ORDER BY unit) - 1)::BIGINT AS i
                    FROM _u WHERE {_class_filter(settings.constraint, name)}"""
            )
            n = con.execute("SELECT n FROM _c ORDER BY i").fetchnumpy()["n"]
            per_bin = _per_bin(con, len(n), edges[name]) if isinstance(c, TimeBounded) else None
            out[name] = _Units(n=np.asarray(n, dtype=np.int64), per_bin=per_bin)
        return out
    finally:
        con.close()


def _per_bin(con: Any, units: int, edges: Sequence[int]) -> np.ndarray:
    """``[i, b]``: the mutations of unit i of ``_c`` whose delay (time since the unit's first
    mutation) lies in bin b: b is the number of edges below the delay."""
    bin_of = " + ".join(f"(c.ts - u.t0 > {int(e)})::INTEGER" for e in edges) or "0"
    rows = con.execute(
        f"SELECT u.i, {bin_of} AS b, count(*) AS c FROM changelog c JOIN _c u USING (unit) "
        "GROUP BY ALL"
    ).fetchnumpy()
    out = np.zeros((units, len(edges) + 1), dtype=np.int64)
    index = (np.asarray(rows["i"], np.int64), np.asarray(rows["b"], np.int64))
    np.add.at(out, index, np.asarray(rows["c"], np.int64))
    return out


# --- the figures ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Figures:
    """Per candidate (in order): dropped shares and their stds; the units and mutations; the
    share of units at the clamp and its std (at-most-k)."""

    units: float
    mutations: float
    shares: tuple[tuple[float, float, float, float], ...]
    over_cap: tuple[float, float] | None = None


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _k_figures(h: np.ndarray, ks: Sequence[int], var: float) -> _Figures:
    """Dropped shares under each k, from the histogram ``h`` of mutations per unit (noisy
    counts are read as at least 0; ``var``: the noise variance of one bin)."""
    h = np.maximum(h, 0).astype(float)
    m = np.arange(len(h), dtype=float)
    units, mutations = float(h.sum()), float((m * h).sum())
    over_cap = (_share(float(h[-1]), units), _share(math.sqrt(var), units))
    shares = []
    for k in ks:
        w = np.maximum(m - k, 0.0)
        over = m > k
        shares.append((
            _share(float((w * h).sum()), mutations),
            _share(math.sqrt(var * float((w * w).sum())), mutations),
            _share(float(h[over].sum()), units),
            _share(math.sqrt(var * int(over.sum())), units),
        ))  # fmt: skip
    return _Figures(units=units, mutations=mutations, shares=tuple(shares), over_cap=over_cap)


def _b_figures(spans: np.ndarray, per_bin: np.ndarray, var: tuple[float, float]) -> _Figures:
    """Dropped shares under each edge ``B_j`` (j = 1 .. J), from the units per last delay
    bin and the mutations per delay bin (read as at least 0; ``var``: their noise variances)."""
    g = np.maximum(spans, 0).astype(float)
    mm = np.maximum(per_bin, 0).astype(float)
    units, mutations = float(g.sum()), float(mm.sum())
    shares = []
    for j in range(1, len(g)):
        later = len(g) - j
        shares.append((
            _share(float(mm[j:].sum()), mutations),
            _share(math.sqrt(var[1] * later), mutations),
            _share(float(g[j:].sum()), units),
            _share(math.sqrt(var[0] * later), units),
        ))  # fmt: skip
    return _Figures(units=units, mutations=mutations, shares=tuple(shares))


def _noisy(
    hist: np.ndarray, sensitivity: int, epsilon: Fraction, rng: Randomness
) -> tuple[np.ndarray, DiscreteLaplaceEvent]:
    """``hist`` plus discrete Laplace noise for L1 ``sensitivity`` at ``epsilon`` (the scale
    rounded up: the event's ε is at most ``epsilon``)."""
    from dpcr.noise import discrete_laplace

    event = DiscreteLaplaceEvent(
        scale=round_up(Fraction(sensitivity) / epsilon),
        sensitivity=Fraction(sensitivity),
        dimension=len(hist),
    )
    return hist + discrete_laplace(event.scale, size=len(hist), rng=rng), event


def _class_figures(
    units: _Units,
    c: SimpleConstraint,
    bounds: Sequence[int],
    *,
    cap: int,
    epsilon: Fraction | None,
    rng: Randomness,
) -> tuple[_Figures, float]:
    """The figures of one class (exact when ``epsilon`` is None) and the ε they spend."""
    if isinstance(c, AtMostK):
        if epsilon is None:
            return _k_figures(count_histogram(units.n, int(units.n.max(initial=1))), bounds,
                              0.0), 0.0  # fmt: skip
        noisy, event = _noisy(count_histogram(units.n, cap), 1, epsilon, rng)
        noisy[0] = 0  # (no unit has 0 mutations: the bin is public, not released)
        return _k_figures(noisy, bounds, noise_variance(event)), event.epsilon
    if units.per_bin is None:
        raise ConfigError("internal: the delay bins of a time-bounded class were not read")
    if epsilon is None:
        exact_cap = int(units.n.max(initial=1))
        spans, per_bin = delay_histograms(units.n, units.per_bin, exact_cap)
        return _b_figures(spans, per_bin, (0.0, 0.0)), 0.0
    spans, per_bin = delay_histograms(units.n, units.per_bin, cap)
    g, e_g = _noisy(spans, 1, epsilon / 2, rng)
    m, e_m = _noisy(per_bin, cap, epsilon / 2, rng)
    return _b_figures(g, m, (noise_variance(e_g), noise_variance(e_m))), e_g.epsilon + e_m.epsilon


# --- candidates and their predicted errors ----------------------------------------------------


def _candidates(
    c: SimpleConstraint, ks: Sequence[int] | None, bounds: Sequence[int] | None
) -> tuple[int, ...]:
    """The candidate bounds of a class (sorted, with the configured one)."""
    if isinstance(c, AtMostK):
        return tuple(sorted({*(ks or DEFAULT_KS), c.k}))
    return tuple(sorted({*(bounds or DEFAULT_BOUNDS), c.bound}))


def _with_bound(constraint: Constraint, name: str, bound: int) -> Constraint:
    """``constraint`` with class ``name``'s bound replaced (the class itself when unchanged)."""
    c = _classes(constraint)[name]
    new: SimpleConstraint
    if isinstance(c, AtMostK):
        new = c if c.k == bound else AtMostK(k=bound)
    else:
        new = c if c.bound == bound else TimeBounded(bound=bound)
    if not isinstance(constraint, Hybrid):
        return new
    if name == "*":
        return Hybrid(column=constraint.column, classes=constraint.classes, default=new)
    classes = {**constraint.classes, name: new}
    return Hybrid(column=constraint.column, classes=classes, default=constraint.default)


def _predicted(settings: ReleaseSettings, constraint: Constraint) -> tuple[Any, str | None]:
    """Every statistic's predicted error under ``constraint`` (the plan's own prediction,
    :func:`~dpcr.release._plan_report.plan_report`), or why it cannot be calibrated."""
    from dpcr.release._plan_report import plan_report

    try:
        return plan_report(
            replace(settings, constraint=constraint), intervals=False
        ).predicted, None
    except DpcrError as exc:
        return {}, str(exc)


def _label(c: SimpleConstraint, bound: int) -> str:
    from dpcr.timeutil import format_duration

    return f"k = {bound}" if isinstance(c, AtMostK) else f"B = {format_duration(bound)}"


def _check(epsilon: float, cap: int | None, ks: Sequence[int] | None,
           bounds: Sequence[int] | None) -> None:  # fmt: skip
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) \
            or not 1e-6 <= epsilon <= 10:  # fmt: skip
        raise ConfigError(f"suggest epsilon must be a number from 1e-6 to 10, got {epsilon!r}")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int)
                            or not 1 <= cap <= 100_000):  # fmt: skip
        raise ConfigError(f"suggest cap must be an integer from 1 to 100000, got {cap!r}")
    for name, values, top in (("k", ks, 10**6), ("bound", bounds, 1000 * 366 * _DAY)):
        if values is None:
            continue
        if not values or len(values) > MAX_CANDIDATES or not all(
            isinstance(v, int) and not isinstance(v, bool) and (name == "bound" or v >= 1)
            and 0 <= v <= top for v in values
        ):  # fmt: skip
            raise ConfigError(
                f"suggest candidates {name}: 1 to {MAX_CANDIDATES} values, each "
                f"{'an integer from 1 to 10^6' if name == 'k' else 'a duration'}; got {values!r}"
            )


def suggest(
    settings: ReleaseSettings,
    *,
    epsilon: float = DEFAULT_EPSILON,
    exact: bool = False,
    ks: Sequence[int] | None = None,
    bounds: Sequence[int] | None = None,
    cap: int | None = None,
    rng: Randomness | None = None,
) -> Suggestion:
    """Candidate bounds of the constraint with their dropped shares and predicted errors (the
    module docstring). ``ks`` / ``bounds`` (µs): candidates for at-most-k / time-bounded
    classes; ``cap``: the clamp of a unit's mutations in the DP figures (default: four times
    the largest k; 64 for time-bounded classes). ``rng``: None for the secure source; a seeded
    generator marks the output as a simulation (tests)."""
    from dpcr.noise import secure_randomness
    from dpcr.release._calibrate import calibrate

    _check(epsilon, cap, ks, bounds)
    release = calibrate(settings).guarantee  # (refuses a plan outside its budget, before data)
    rng = secure_randomness() if rng is None else rng
    classes = _classes(settings.constraint)
    candidates = {name: _candidates(c, ks, bounds) for name, c in classes.items()}
    units = _read_units(settings, candidates)
    budget = None if exact else Fraction(epsilon)
    spent, out = 0.0, []
    for name, c in classes.items():
        cands = candidates[name]
        class_cap = cap if cap is not None else (4 * max(cands) if isinstance(c, AtMostK)
                                                  else 64)  # fmt: skip
        if isinstance(c, AtMostK) and max(cands) > class_cap:
            raise ConfigError(
                f"suggest cap {class_cap} is below the candidate k = {max(cands)}: the "
                "figures clamp a unit's mutations at cap; raise cap or drop that candidate"
            )
        figures, eps = _class_figures(units[name], c, cands, cap=class_cap, epsilon=budget,
                                      rng=rng)  # fmt: skip
        spent = max(spent, eps)  # classes hold disjoint units: parallel composition
        current = c.k if isinstance(c, AtMostK) else c.bound
        rows = []
        for bound, share in zip(cands, figures.shares, strict=True):
            predicted, refused = _predicted(settings, _with_bound(settings.constraint, name, bound))
            rows.append(BoundRow(
                bound=bound, label=_label(c, bound), current=bound == current,
                dropped_mutations=share[0], dropped_mutations_std=share[1],
                dropped_units=share[2], dropped_units_std=share[3],
                predicted=predicted, refused=refused,
            ))  # fmt: skip
        kind = "at_most_k" if isinstance(c, AtMostK) else "time_bounded"
        out.append(ClassSuggestion(name=name, kind=kind, units=figures.units,
                                   mutations=figures.mutations, rows=tuple(rows),
                                   cap=0 if exact else class_cap,
                                   at_cap=None if exact else figures.over_cap))  # fmt: skip
    combined = None
    if not exact:
        from dpcr.accounting.composition import round_up as up

        combined = Guarantee(epsilon=up(Fraction(release.epsilon) + Fraction(spent)),
                             delta=release.delta, rho=None, method="basic")  # fmt: skip
    return Suggestion(exact=exact, epsilon=0.0 if exact else spent, release=release,
                      combined=combined, classes=tuple(out), unit=settings.unit,
                      simulation=not exact and not rng.secure)  # fmt: skip


# --- the text view ----------------------------------------------------------------------------

_KINDS = {"at_most_k": "at most k mutations", "time_bounded": "mutations within B of insertion"}


def _pct(share: float, std: float, exact: bool) -> str:
    return f"{100 * share:.2f} %" if exact else f"{100 * share:.2f} % ± {100 * std:.2f}"


def _std(x: float) -> str:
    return f"±{x:,.0f}" if x >= 1000 else f"±{x:.3g}"


def _errors(e: QueryError) -> str:
    return f"{_std(e.release_std)} / {_std(e.running_std)}"


def suggestion_lines(s: Suggestion) -> list[str]:
    """The header (what the figures are and the guarantee of this output), then per class a
    table: each candidate's dropped shares and every statistic's predicted stds."""
    per = s.unit
    if s.exact:
        lines = [
            OPERATOR_ONLY,
            "Dropped shares: exact, from every valid record (no noise, no clamp).",
        ]
    else:
        combined = s.combined or s.release
        lines = [
            f"Dropped shares: differentially private, ε = {s.epsilon:.6g} per {per} (discrete "
            "Laplace histograms of mutations per unit; ± is the noise's std).",
            f"Guarantee of this output: ({s.epsilon:.6g}, 0)-DP per {per}; with the release's "
            f"({s.release.epsilon:.6g}, {s.release.delta:.3g}): ({combined.epsilon:.6g}, "
            f"{combined.delta:.3g})-DP per {per} for whoever sees both [basic composition].",
        ]
        if s.simulation:
            lines.insert(0, "SIMULATION: seeded noise, for tests only")
    for c in s.classes:
        what = (
            "every unit"
            if c.name == "all"
            else ("other classes" if c.name == "*" else f"class {c.name}")
        )
        amount = "" if s.exact else "about "
        clamp = f"; a unit's mutations clamped at {c.cap}" if c.cap else ""
        if c.at_cap is not None:
            clamp += f" ({_pct(*c.at_cap, False)} of units reach it: raise --cap if many do)"
        lines.append(
            f"{what} ({_KINDS[c.kind]}): {amount}{c.units:,.0f} units, {c.mutations:,.0f} "
            f"mutations{clamp}"
        )
        names = list(next((r.predicted for r in c.rows if r.predicted), {}))
        head = ["bound", "dropped mutations", "dropped units", *names]
        cells = [
            [
                ("→ " if r.current else "") + r.label,
                _pct(r.dropped_mutations, r.dropped_mutations_std, s.exact),
                _pct(r.dropped_units, r.dropped_units_std, s.exact),
                *([_errors(r.predicted[n]) for n in names] if r.predicted
                  else [f"refused: {r.refused}"]),
            ]
            for r in c.rows
        ]  # fmt: skip
        widths = [max(len(row[i]) for row in [head, *cells] if i < len(row))
                  for i in range(len(head))]  # fmt: skip
        lines.append("  " + "  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
        lines.extend("  " + "  ".join(v.rjust(w) for v, w in zip(row, widths, strict=False))
                     for row in cells)  # fmt: skip
    lines.append(
        "Statistics: predicted noise std of one interval's change / of the running value "
        "(worst over the plan's horizon), as `dpcr plan` states them; → marks the configured "
        "bound."
    )
    return lines
