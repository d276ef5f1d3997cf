"""Accountants: one interface, several composition methods, the tightest correct one wins.

Every accountant has ``supports(event)``, ``compose(event, count=1)`` (validates first, then
records; a rejected event changes nothing), ``epsilon(delta)`` and ``delta(epsilon)``. An
accountant composes a *multiset* of leaf events (composed and self-composed events are
flattened), so its answer depends only on which mechanisms ran and how often.

Methods (each sound: it never reports less than the truth; floating-point errors are rounded
towards a larger ε or δ):

* ``basic`` -- Σ ε_i, Σ δ_i.
* ``advanced`` -- Dwork-Rothblum-Vadhan with the ε the lecture notes dropped (docs/errata.md
  erratum 4): the largest-ε mechanisms composed basically, the rest by
  ``sqrt(2 ln(1/δ') Σ ε_i²) + Σ ε_i (e^ε_i − 1)`` with δ' = δ − Σ δ_i; the split point is
  optimised, so the result is never above basic.
* ``optimal`` -- Kairouz-Oh-Viswanath 2015: the exact optimal composition of k (ε, δ)-DP
  mechanisms, δ_total(ε') = 1 − (1−δ)^k (1 − Σ_l C(k,l) [e^{(k−l)ε} − e^{ε'+lε}]_+ / (1+e^ε)^k).
  Heterogeneous (ε_i, δ_i) are bounded by (max ε, max δ) (a valid upper bound).
* ``rdp`` -- Rényi DP from the exact per-mechanism curves (Laplace, Gaussian, discrete Laplace,
  randomized response, pure DP as binary RR; discrete Gaussian and zCDP as α·ρ), summed, and
  converted by ε = min_α R(α) + log(1 − 1/α) − (log δ + log α)/(α − 1) (Canonne-Kamath-Steinke
  2020, Prop. 12).
* ``zcdp`` -- exact ε sums and ρ sums (:mod:`dpcr.accounting.composition`).
* ``pld`` -- privacy-loss distributions. Gaussians only: exact (μ² = Σ μ_i², Balle-Wang formula);
  a discrete Gaussian vector, or one whose sensitivity is not an integer, counts as its
  continuous surrogate, corrected by a proven coupling (:mod:`~dpcr.accounting._dg_coupling`).
  One lattice mechanism (randomized response, pure DP, discrete Laplace with integer
  sensitivity) k times: exact convolution on its loss lattice. Otherwise dp-accounting's
  pessimistic PLDs, one ``self_compose`` per distinct event and a balanced tree of ``compose``.
  (We never use its ``PLDAccountant``, which ignores ``count`` for randomized response.)

Every method here is for a fixed (non-adaptive) list of mechanisms; the privacy filter for
adaptively chosen releases uses running sums (:mod:`dpcr.accounting.filters`).

This module is the facade: the base class and one private module per method
(``_accountant_base``, ``_basic``, ``_kov``, ``_zcdp_acc``, ``_rdp``, ``_pld``) are
imported here, and ``ACCOUNTANTS``, :func:`compare`, :func:`tightest` and
:func:`stated_guarantee` combine them.

>>> from dpcr.accounting.events import LaplaceEvent, SelfComposedEvent
>>> g = tightest(SelfComposedEvent(event=LaplaceEvent(scale=10.0), count=1000), delta=1e-6)
>>> g.method, round(g.epsilon, 2)
('pld', 18.95)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache

from dpcr._lastused import LastUsed
from dpcr.accounting._accountant_base import (
    Accountant,
    Multiset,
    _canonical,
    _check_delta,
    _pure_parameters,
    flatten,
)
from dpcr.accounting._basic import AdvancedAccountant, BasicAccountant
from dpcr.accounting._dg_coupling import _dg_exact
from dpcr.accounting._kov import KovAccountant
from dpcr.accounting._kov import kov_delta as kov_delta
from dpcr.accounting._pld import PldAccountant
from dpcr.accounting._pld import _discrete_gaussian_pld as _discrete_gaussian_pld
from dpcr.accounting._pld import _gaussian_mu as _gaussian_mu
from dpcr.accounting._rdp import RdpAccountant
from dpcr.accounting._rdp import rdp_epsilon as rdp_epsilon
from dpcr.accounting._zcdp_acc import ZcdpAccountant, _float_cost
from dpcr.accounting.composition import (
    Guarantee,
    cost_of,
    guarantee_of_cost,
    round_up,
)
from dpcr.accounting.events import DiscreteGaussianEvent, DpEvent, exact_key
from dpcr.errors import UnsupportedEventError

__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "AdvancedAccountant",
    "BasicAccountant",
    "KovAccountant",
    "PldAccountant",
    "RdpAccountant",
    "ZcdpAccountant",
    "compare",
    "flatten",
    "own_pld",
    "stated_guarantee",
    "tightest",
]


# --- all methods -------------------------------------------------------------------------------

ACCOUNTANTS: Mapping[str, type[Accountant]] = {
    "basic": BasicAccountant,
    "advanced": AdvancedAccountant,
    "optimal": KovAccountant,
    "zcdp": ZcdpAccountant,
    "rdp": RdpAccountant,
    "pld": PldAccountant,
}


def compare(event: DpEvent, *, delta: float) -> dict[str, float | None]:
    """ε at ``delta`` of ``event`` under every method (None where a method does not apply)."""
    return dict(_compare(_canonical(flatten(event)), _check_delta(delta)))


@lru_cache(maxsize=4096)
def _compare(items: Multiset, delta: float) -> tuple[tuple[str, float | None], ...]:
    out: list[tuple[str, float | None]] = []
    for name, cls in ACCOUNTANTS.items():
        acc = cls()
        if not all(acc._supports_leaf(e) for e, _ in items):
            out.append((name, None))
            continue
        if name == "pld" and delta == 0:
            out.append((name, None))  # PLD ε at δ = 0 is the basic one; leave it to basic
            continue
        eps = acc._epsilon(items, delta) if items else 0.0
        out.append((name, eps if math.isfinite(eps) else None))
    return tuple(out)


def tightest(event: DpEvent, *, delta: float) -> Guarantee:
    """The smallest ε over every method that supports ``event`` (each is an upper bound)."""
    delta = _check_delta(delta)
    items = _canonical(flatten(event))
    if not items:
        return Guarantee(epsilon=0.0, delta=0.0, rho=0.0, method="none")
    results = [(eps, name) for name, eps in _compare(items, delta) if eps is not None]
    if not results:
        raise UnsupportedEventError(
            f"no accountant supports {event!r} at delta = {delta}; Gaussian-type events need "
            "delta > 0"
        )
    eps, name = min(results, key=lambda r: r[0])  # ties: the simplest method (listed first)
    rho = _rho_of(items)
    pure = all(_pure_parameters(e) is not None and _pure_parameters(e)[1] == 0 for e, _ in items)  # type: ignore[index]
    return Guarantee(
        epsilon=eps, delta=0.0 if (pure and name in ("basic",)) else delta, rho=rho, method=name
    )


#: The guarantees :func:`stated_guarantee` gave, by the event's :func:`exact_key` and the δ
#: (its type and ``repr``): a continual release checks the same few compositions at every step
#: (a unit meets at most its participation's count of instances of each kind). The 1,024 used
#: last are kept; a call that raises leaves nothing.
_STATED: LastUsed[tuple[object, ...], Guarantee] = LastUsed(1024)


def stated_guarantee(event: DpEvent, *, delta: float) -> Guarantee:
    """The guarantee dpcr states for ``event`` (``plan``, the filter and the odometer all use it).

    * Only pure events (Laplace, discrete Laplace, randomized response, pure DP): pure
      (Σ ε_i)-DP with δ = 0 by basic composition, which is exact for pure ε. A tighter ε at a
      δ > 0 exists (``tightest``, usually PLD) and ``dpcr account`` shows it, but dpcr states
      the pure guarantee, which is what Laplace noise is calibrated to.
    * Otherwise: :func:`tightest` at ``delta`` (needs ``delta > 0``).

    >>> from fractions import Fraction
    >>> from dpcr.accounting.events import DiscreteLaplaceEvent, SelfComposedEvent
    >>> lap = DiscreteLaplaceEvent(scale=Fraction(10), sensitivity=Fraction(1))
    >>> stated_guarantee(SelfComposedEvent(event=lap, count=3), delta=1e-6).describe()
    '(ε = 0.3, δ = 0)-DP, 0.015-zCDP [basic]'
    """
    key = exact_key(event)
    if key is None:
        return _stated(event, delta=delta)
    return _STATED.made((key, type(delta), repr(delta)), lambda: _stated(event, delta=delta))


def _stated(event: DpEvent, *, delta: float) -> Guarantee:
    """:func:`stated_guarantee`, computed."""
    delta = _check_delta(delta)
    items = _canonical(flatten(event))
    if not items:
        return Guarantee(epsilon=0.0, delta=0.0, rho=0.0, method="none")
    pars = [_pure_parameters(e) for e, _ in items]
    if all(p is not None and p[1] == 0 for p in pars):
        total = sum((cost_of(e).pure_epsilon * c for e, c in items), Fraction(0))  # exact
        return Guarantee(epsilon=round_up(total), delta=0.0, rho=_rho_of(items), method="basic")
    if delta == 0:
        return guarantee_of_cost(cost_of(event), delta=delta)  # raises: zCDP needs δ > 0
    return tightest(event, delta=delta)


def own_pld(event: DiscreteGaussianEvent) -> bool:
    """Whether the ``pld`` method accounts ``event`` by the discrete Gaussian's own (grid)
    privacy-loss distribution -- one coordinate, an integer sensitivity, and no discrete
    Gaussian of another kind in the same composition -- rather than by its continuous
    surrogate in closed form (:mod:`~dpcr.accounting._dg_coupling`)."""
    return _dg_exact(event)


def _rho_of(items: Multiset) -> float | None:
    """ρ of the composition as zCDP, rounded up (float sums rounded outward past 64 items)."""
    try:
        if len(items) > 64:
            return round_up(_float_cost(items).total_rho)
        return round_up(sum((cost_of(e).total_rho * c for e, c in items), Fraction(0)))
    except UnsupportedEventError:
        return None
