"""Summary-statistic privacy (papers/summary-statistic-privacy-composition.txt), exactly.

A data distribution has a parameter θ in a finite set Θ with prior P(θ); a secret g(θ) (a label);
a mechanism releases θ' with probability P(θ' | θ). The adversary's best guess of the secret
succeeds with probability

    Π = sup_ĝ P(ĝ(θ') = g(θ)) = Σ_θ' max_s Σ_{θ : g(θ) = s} P(θ) P(θ' | θ),

(tolerance 0: the guess must equal the secret). For m mechanisms applied adaptively (mechanism i
sees θ and θ'_1..θ'_{i−1}), the seed's Theorem 0.1 bounds Π ≤ a · ∏_i Π_i / b with a = max prior,
b = min prior. :func:`composed_summary_privacy` computes the exact Π of the composition by
enumerating every history, so the bound can be checked; for an adaptive mechanism Π_i is taken as
the worst case over histories (:func:`adaptive_component_privacy`).

>>> prior = {"lo": Fraction(1, 2), "hi": Fraction(1, 2)}
>>> secret = {"lo": 0, "hi": 1}
>>> flip = {"lo": {"lo": Fraction(3, 4), "hi": Fraction(1, 4)},
...         "hi": {"lo": Fraction(1, 4), "hi": Fraction(3, 4)}}
>>> summary_privacy(prior, secret, flip)
Fraction(3, 4)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from fractions import Fraction

from dpcr.errors import ConfigError

__all__ = [
    "AdaptiveMechanism",
    "adaptive_component_privacy",
    "composed_summary_privacy",
    "composition_bound",
    "summary_privacy",
]

Kernel = Mapping[Hashable, Mapping[Hashable, Fraction]]
#: mechanism i: (θ, history of earlier outputs) -> distribution of θ'_i
AdaptiveMechanism = Callable[[Hashable, tuple[Hashable, ...]], Mapping[Hashable, Fraction]]


def _check_prior(prior: Mapping[Hashable, Fraction]) -> None:
    if not prior:
        raise ConfigError("the prior needs at least one parameter value θ")
    if any(p <= 0 for p in prior.values()) or sum(prior.values(), Fraction(0)) != 1:
        raise ConfigError("the prior must be positive and sum to exactly 1 (use rationals)")


def _check_distribution(dist: Mapping[Hashable, Fraction], where: str) -> None:
    if any(p < 0 for p in dist.values()) or sum(dist.values(), Fraction(0)) != 1:
        raise ConfigError(f"{where} must be a distribution summing to exactly 1")


def _pi(joint: Mapping[Hashable, Mapping[Hashable, Fraction]]) -> Fraction:
    """Σ_output max_secret mass, from joint[output][secret]."""
    return sum((max(by_secret.values()) for by_secret in joint.values()), Fraction(0))


def summary_privacy(
    prior: Mapping[Hashable, Fraction], secret: Mapping[Hashable, Hashable], mechanism: Kernel
) -> Fraction:
    """Exact Π of a one-shot mechanism ``mechanism[θ][θ'] = P(θ' | θ)``."""
    _check_prior(prior)
    joint: dict[Hashable, dict[Hashable, Fraction]] = {}
    for theta, p in prior.items():
        dist = mechanism[theta]
        _check_distribution(dist, f"P(θ' | θ={theta!r})")
        for out, q in dist.items():
            row = joint.setdefault(out, {})
            row[secret[theta]] = row.get(secret[theta], Fraction(0)) + p * q
    return _pi(joint)


def composed_summary_privacy(
    prior: Mapping[Hashable, Fraction],
    secret: Mapping[Hashable, Hashable],
    mechanisms: Sequence[AdaptiveMechanism],
) -> Fraction:
    """Exact Π of the adaptive composition: the adversary sees all outputs θ'_1..θ'_m."""
    _check_prior(prior)
    # histories[(θ, h)] = P(θ) P(h | θ)
    layer: dict[tuple[Hashable, tuple[Hashable, ...]], Fraction] = {
        (theta, ()): p for theta, p in prior.items()
    }
    for i, mech in enumerate(mechanisms):
        nxt: dict[tuple[Hashable, tuple[Hashable, ...]], Fraction] = {}
        for (theta, hist), w in layer.items():
            dist = mech(theta, hist)
            _check_distribution(dist, f"mechanism {i + 1} at θ={theta!r}, history {hist!r}")
            for out, q in dist.items():
                if q:
                    key = (theta, (*hist, out))
                    nxt[key] = nxt.get(key, Fraction(0)) + w * q
        layer = nxt
    joint: dict[Hashable, dict[Hashable, Fraction]] = {}
    for (theta, hist), w in layer.items():
        row = joint.setdefault(hist, {})
        row[secret[theta]] = row.get(secret[theta], Fraction(0)) + w
    return _pi(joint)


def adaptive_component_privacy(
    prior: Mapping[Hashable, Fraction],
    secret: Mapping[Hashable, Hashable],
    mechanism: AdaptiveMechanism,
    histories: Sequence[tuple[Hashable, ...]],
) -> Fraction:
    """Π_i of one adaptive mechanism: the worst one-shot Π over the given earlier histories."""
    return max(
        summary_privacy(prior, secret, {t: mechanism(t, h) for t in prior}) for h in histories
    )


def composition_bound(
    prior: Mapping[Hashable, Fraction], components: Sequence[Fraction]
) -> Fraction:
    """Theorem 0.1: a · ∏ Π_i / b (a = max prior, b = min prior); capped at 1 by the caller."""
    _check_prior(prior)
    a, b = max(prior.values()), min(prior.values())
    out = a
    for pi in components:
        out *= pi / b
    return out
