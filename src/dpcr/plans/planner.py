"""Planner: the exact worst-case variance of every candidate plan at equal privacy.

Units: variances are in units of ``sigma_1^2``, the variance one sensitivity-1 count needs at the
same privacy: ``1 / (2 rho)`` at zCDP ``rho`` (Gaussian noise, ``mode="zcdp"``) or ``2 / epsilon^2``
at pure ``epsilon`` (Laplace noise, ``mode="pure"``, the setting of Thm 4.8/4.9). The privacy of
each candidate is computed from its filters (counts from :mod:`dpcr.plans.counts`,
:mod:`dpcr.plans.tree`, :mod:`dpcr.plans.window`; L2 sensitivities from
:mod:`dpcr.plans.factorization`); the noise is then scaled so that every candidate spends exactly
the budget:

* count-based plans (DCR, tree, direct window): a unit touches at most ``N`` releases, each with
  sensitivity 1, so each release gets ``rho / N`` (variance ``N``) or ``epsilon / N`` (Laplace
  variance ``N^2``);
* factorization plans (zCDP only): noise variance ``sens^2``.

Time is in base intervals (``W`` = ``base`` µs); a time-bounded constraint's ``B`` is in µs.

>>> from dpcr.bounding.constraints import AtMostK
>>> best = plan_prefix(AtMostK(k=1), horizon=2**10, base=1).best
>>> best.name, round(best.max_std, 2)
('sqrt (row-rescaled)', 3.1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from dpcr.bounding.constraints import AtMostK, Hybrid, TimeBounded
from dpcr.errors import ConfigError
from dpcr.estimators.tree import honaker_variances
from dpcr.plans.counts import periodic_most_span
from dpcr.plans.factorization import (
    BLT,
    rescaled_sqrt,
    sqrt_coefficients,
    toeplitz_sensitivity2,
    window_error2,
)
from dpcr.plans.factorization_plan import MAX_HORIZON
from dpcr.plans.tree import layer_counts, prefix_digits
from dpcr.plans.window import (
    SlidingWindowRelease,
    window_tree_height,
    window_tree_shape,
    window_tree_variance,
)

__all__ = ["Candidate", "Plan", "participations", "plan_prefix", "plan_window"]

Constraint = AtMostK | TimeBounded | Hybrid
Mode = Literal["zcdp", "pure"]
BRANCHINGS = (2, 3, 4, 8, 16)
#: Factorization candidates are listed up to the longest horizon a factorization plan runs.
_MAX_FACTORIZATION = MAX_HORIZON


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    name: str
    params: dict[str, object]
    max_variance: float
    note: str = ""

    @property
    def max_std(self) -> float:
        return math.sqrt(self.max_variance)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    candidates: tuple[Candidate, ...]
    best: Candidate = field(init=False)

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ConfigError("no candidate plan applies")
        object.__setattr__(self, "best", min(self.candidates, key=lambda c: c.max_variance))

    def table(self) -> str:
        # (no star: in every table dpcr prints, * marks the release's own plan)
        lines = [f"{'candidate, least noise first':<34} {'max std / sigma_1':>18}  note"]
        for c in sorted(self.candidates, key=lambda c: c.max_variance):
            lines.append(f"{c.name:<34} {c.max_std:>18.3f}  {c.note}")
        return "\n".join(lines)


def _classes(constraint: Constraint) -> dict[str, AtMostK | TimeBounded]:
    if isinstance(constraint, Hybrid):
        return dict(constraint.all_classes())
    return {"all": constraint}


def participations(constraint: Constraint, *, base: int) -> list[tuple[int, bool]]:
    """Per class: (how many base intervals one unit touches, whether they form one run)."""
    out = []
    for con in _classes(constraint).values():
        if isinstance(con, AtMostK):
            out.append((con.k, False))
        else:
            out.append((periodic_most_span(con.bound, base), True))
    return out


def _count_var(n_touched: int, nodes: float, mode: Mode) -> float:
    """Variance of a sum of ``nodes`` releases when a unit touches ``n_touched`` releases."""
    per = n_touched if mode == "zcdp" else n_touched**2
    return per * nodes


def _tree_total(constraint: Constraint, *, base: int, c: int, height: int, horizon: int) -> int:
    counts = layer_counts(constraint, base=base, c=c, height=height, base_intervals=horizon)
    return max(sum(v) for v in counts.values())


def _height(horizon: int, c: int) -> int:
    h, size = 1, c
    while size < horizon:
        size *= c
        h += 1
    return h


def _fact_sens2(coeffs: np.ndarray, constraint: Constraint, base: int) -> float:
    return max(toeplitz_sensitivity2(coeffs, m) for m, _ in participations(constraint, base=base))


def _tree_pair(
    name: str, params: dict[str, object], variances: tuple[float, float], note: str
) -> list[Candidate]:
    """A tree candidate with its plain node sums and with Honaker's estimator (``variances``:
    the largest variance of each)."""
    plain, hon = variances
    return [
        Candidate(name=name, params=params, max_variance=plain, note=note),
        Candidate(
            name=f"{name} + Honaker",
            params={**params, "estimator": "honaker"},
            max_variance=hon,
            note=note,
        ),
    ]


def plan_prefix(
    constraint: Constraint,
    *,
    horizon: int,
    base: int,
    mode: Mode = "zcdp",
    blt: BLT | None = None,
    branchings: tuple[int, ...] = BRANCHINGS,
) -> Plan:
    """Candidates for running counts after base intervals ``1 .. horizon``."""
    if horizon < 1:
        raise ConfigError(f"horizon must be >= 1 base interval, got {horizon}")
    cands: list[Candidate] = []
    dcr_n = max(min(m, horizon) for m, _ in participations(constraint, base=base))
    cands.append(
        Candidate(
            name="disjoint (DCR)",
            params={"plan": "disjoint"},
            max_variance=_count_var(dcr_n, horizon, mode),
            note=f"{dcr_n} releases per unit",
        )
    )
    n = np.arange(1, horizon + 1)
    for c in branchings:
        h = _height(horizon, c)
        total = _tree_total(constraint, base=base, c=c, height=h, horizon=horizon)
        s = _count_var(total, 1.0, mode)
        digits = prefix_digits(n, c=c, height=h)
        plain = float((digits.sum(axis=0)).max()) * s
        hon = float((np.asarray(honaker_variances([s] * h, c=c)) @ digits).max())
        params: dict[str, object] = {"plan": "tree", "branching": c, "height": h}
        cands += _tree_pair(f"tree c={c}", params, (plain, hon), f"h={h}, {total} nodes per unit")
    if mode == "zcdp" and horizon <= _MAX_FACTORIZATION:
        f = sqrt_coefficients(horizon)
        sens2 = _fact_sens2(f, constraint, base)
        cands.append(
            Candidate(
                name="sqrt Toeplitz",
                params={"plan": "factorization", "kind": "sqrt"},
                max_variance=sens2 * float(f @ f),
                note=f"sens^2={sens2:.3f} (exact)",
            )
        )
        resc = rescaled_sqrt(horizon)
        m_max = max(m for m, _ in participations(constraint, base=base))
        rs2 = float(min(m_max, horizon) ** 2)
        cands.append(
            Candidate(
                name="sqrt (row-rescaled)",
                params={"plan": "factorization", "kind": "rescaled"},
                max_variance=rs2 * float(resc.error2.max()),
                note="sens^2=1 (exact)" if m_max == 1 else f"sens^2<={rs2:g} (Cauchy-Schwarz)",
            )
        )
        if blt is not None:
            b = blt.noise_coefficients(horizon)
            bs2 = _fact_sens2(blt.c_coefficients(horizon), constraint, base)
            cands.append(
                Candidate(
                    name=f"BLT ({blt.buffers} buffers)",
                    params={"plan": "factorization", "kind": "blt"},
                    max_variance=bs2 * float(b @ b),
                    note=f"sens^2={bs2:.3f} (exact)",
                )
            )
    return Plan(candidates=tuple(cands))


def plan_window(
    constraint: Constraint,
    *,
    window: int,
    period: int,
    horizon: int,
    mode: Mode = "zcdp",
    branchings: tuple[int, ...] = BRANCHINGS,
    blt: BLT | None = None,
) -> Plan:
    """Candidates for a sliding window of ``window`` µs every ``period`` µs over ``horizon`` µs."""
    cands: list[Candidate] = []
    direct = SlidingWindowRelease(start=0, window=window, period=period).direct_count(constraint)
    cands.append(
        Candidate(
            name="direct window (SWCR)",
            params={"plan": "window"},
            max_variance=_count_var(direct, 1.0, mode),
            note=f"{direct} windows per unit",
        )
    )
    g, w, s, _ = window_tree_shape(window=window, period=period, c=2)
    base_horizon = max(horizon // g, w)
    dcr_n = max(min(m, base_horizon) for m, _ in participations(constraint, base=g))
    cands.append(
        Candidate(
            name="sum of disjoint (DCR)",
            params={"plan": "disjoint", "base": g},
            max_variance=_count_var(dcr_n, w, mode),
            note=f"{w} intervals per window",
        )
    )
    for c in branchings:
        h = window_tree_height(w, c)
        total = _tree_total(constraint, base=g, c=c, height=h, horizon=base_horizon)
        sv = _count_var(total, 1.0, mode)
        plain = window_tree_variance(w=w, s=s, c=c, layer_var=[sv] * h)
        hon = window_tree_variance(w=w, s=s, c=c, layer_var=honaker_variances([sv] * h, c=c))
        params: dict[str, object] = {"plan": "tree", "branching": c, "height": h, "base": g}
        note = f"base={g}, h={h}, {total} nodes per unit"
        cands += _tree_pair(f"window from tree c={c}", params, (plain, hon), note)
    if mode == "zcdp" and base_horizon <= _MAX_FACTORIZATION:
        f = sqrt_coefficients(base_horizon)
        sens2 = _fact_sens2(f, constraint, g)
        cands.append(
            Candidate(
                name="sqrt Toeplitz, prefix difference",
                params={"plan": "factorization", "kind": "sqrt", "base": g},
                max_variance=sens2 * window_error2(f, w),
                note=f"sens^2={sens2:.3f} (exact)",
            )
        )
        if blt is not None:
            b = blt.noise_coefficients(base_horizon)
            bs2 = _fact_sens2(blt.c_coefficients(base_horizon), constraint, g)
            cands.append(
                Candidate(
                    name="BLT, prefix difference",
                    params={"plan": "factorization", "kind": "blt", "base": g},
                    max_variance=bs2 * window_error2(b, w),
                    note=f"sens^2={bs2:.3f} (exact)",
                )
            )
    return Plan(candidates=tuple(cands))
