"""Exact output distributions of sparse-vector variants, for auditing their privacy.

The noises are two-sided geometric (discrete Laplace) with P[X = x] = (1−p)/(1+p) · p^{|x|}; the
parameter p (= e^{-1/scale}) may be a :class:`~fractions.Fraction`, so every probability below is
an exact rational. The only infinite sum, over the threshold noise ρ, is cut at |ρ| ≤ ``cut``; its
remainder P[|ρ| > cut] = 2p^{cut+1}/(1+p) bounds the error, so each output gets a certified
interval [lower, upper] and a claimed ratio bound is checked as upper_D ≤ e^ε · lower_D'.

Variants (Lyu, Su, Li 2017 list the published ones that are not private):

* ``"sparse"`` — the algorithm of :mod:`dpcr.svt._sparse`: fresh threshold noise after each ⊤,
  halt at ``cutoff`` ⊤ (cutoff 1 is AboveThreshold).
* ``"no_threshold_noise"`` — ρ = 0: every ⊥ leaks (LSL Alg. 6-style).
* ``"no_halt"`` — one threshold noise reused after ⊤ and no cutoff (LSL Alg. 5).
* ``"numeric_reuses_query_noise"`` — a ⊤ also reveals f_i + ν_i with the comparison's own noise
  (LSL Alg. 3); outputs are then (answers, value).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

__all__ = ["Audit", "audit", "output_distribution", "outputs"]

Number = Fraction | float
Output = tuple[tuple[int, ...], int | None]  # answers (1 = ⊤, 0 = ⊥), value or None
VARIANTS = ("sparse", "no_threshold_noise", "no_halt", "numeric_reuses_query_noise")


def _pmf(p: Number, x: int) -> Number:
    return (1 - p) / (1 + p) * p ** abs(x)


def _below(p: Number, t: int) -> Number:
    """P[X < t]."""
    if t <= 0:
        return p ** (1 - t) / (1 + p)
    return 1 - p**t / (1 + p)


def _tail(p: Number, cut: int) -> Number:
    return 2 * p ** (cut + 1) / (1 + p)


@cache
def _segment(
    f: tuple[int, ...],
    ans: tuple[int, ...],
    threshold: int,
    p: Number,
    q: Number,
    cut: int,
    noisy_threshold: bool,
    value: int | None,
) -> tuple[Number, Number]:
    """[lower, upper] of P[answers of f are ans | one threshold noise for the whole segment].

    With ``value`` set, the last answer is ⊤ and its released value f + ν equals ``value``."""

    def given(rho: int) -> Number:
        level = threshold + rho
        prob: Number = 1
        for i, (fi, a) in enumerate(zip(f, ans, strict=True)):
            if value is not None and i == len(f) - 1:
                prob *= _pmf(q, value - fi) if value >= level else 0
            elif a:
                prob *= 1 - _below(q, level - fi)
            else:
                prob *= _below(q, level - fi)
        return prob

    if not noisy_threshold:
        v = given(0)
        return v, v
    lower: Number = sum((_pmf(p, r) * given(r) for r in range(-cut, cut + 1)), start=0)
    return lower, min(lower + _tail(p, cut), 1)


def outputs(variant: str, k: int, cutoff: int = 1, values: Sequence[int] = ()) -> list[Output]:
    """Every output of ``variant`` on k queries: (answers, released value or None)."""
    seqs: set[tuple[int, ...]] = set()
    for seq in itertools.product((0, 1), repeat=k):
        tops = [i for i, a in enumerate(seq) if a]
        if variant != "no_halt" and len(tops) >= cutoff:
            seq = seq[: tops[cutoff - 1] + 1]
        seqs.add(seq)
    out: list[Output] = []
    for s in sorted(seqs):
        if variant == "numeric_reuses_query_noise" and s[-1] == 1:
            out.extend((s, v) for v in values)
        else:
            out.append((s, None))
    return out


def output_distribution(
    variant: str,
    f: Sequence[int],
    *,
    threshold: int,
    p: Number,
    q: Number,
    cutoff: int = 1,
    cut: int = 30,
    values: Sequence[int] = (),
) -> dict[Output, tuple[Number, Number]]:
    """{output: (lower, upper)} of ``variant`` on query values ``f``.

    ``p``: threshold-noise parameter, ``q``: query-noise parameter (a scale-s discrete Laplace
    has parameter e^{-1/s})."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if variant == "numeric_reuses_query_noise" and cutoff != 1:
        raise ValueError("the numeric variant is audited with cutoff 1")
    f = tuple(int(x) for x in f)
    noisy = variant != "no_threshold_noise"
    dist: dict[Output, tuple[Number, Number]] = {}
    for o in outputs(variant, len(f), cutoff, values):
        ans, value = o
        m = len(ans)
        lo: Number = 1
        hi: Number = 1
        if variant in ("sparse", "no_threshold_noise"):
            # a fresh threshold noise per segment ending at a ⊤ (or at the end)
            start = 0
            for i in range(m):
                if ans[i] == 1 or i == m - 1:
                    seg = _segment(
                        f[start : i + 1], ans[start : i + 1], threshold, p, q, cut, noisy, None
                    )
                    lo, hi = lo * seg[0], min(hi * seg[1], 1)
                    start = i + 1
        else:
            lo, hi = _segment(f[:m], ans, threshold, p, q, cut, True, value)
        dist[o] = (lo, hi)
    return dist


@dataclass(frozen=True, slots=True, kw_only=True)
class Audit:
    """Largest certified lower bound on P_D(o)/P_D'(o) and smallest certified upper bound over
    all pairs and outputs, with a witness for the upper one."""

    certified_max: Number  # max over (D, D', o) of upper_D / lower_D'  (privacy holds if ≤ e^ε)
    witnessed_max: Number  # max over (D, D', o) of lower_D / upper_D'  (ε is violated if > e^ε)
    witness: tuple[tuple[int, ...], tuple[int, ...], Output | None]


def audit(
    variant: str,
    pairs: Iterable[tuple[Sequence[int], Sequence[int]]],
    *,
    threshold: int,
    p: Number,
    q: Number,
    cutoff: int = 1,
    cut: int = 30,
    values: Sequence[int] = (),
) -> Audit:
    """Exact likelihood ratios of ``variant`` over neighbouring query vectors ``pairs``."""
    cache: dict[tuple[int, ...], dict[Output, tuple[Number, Number]]] = {}

    def dist(f: Sequence[int]) -> dict[Output, tuple[Number, Number]]:
        key = tuple(int(x) for x in f)
        if key not in cache:
            cache[key] = output_distribution(
                variant, key, threshold=threshold, p=p, q=q, cutoff=cutoff, cut=cut, values=values
            )
        return cache[key]

    cert: Number = 0
    wit: Number = 0
    witness: tuple[tuple[int, ...], tuple[int, ...], Output | None] = ((), (), None)
    for a, b in pairs:
        da, db = dist(a), dist(b)
        for o, (lo_a, hi_a) in da.items():
            lo_b, hi_b = db[o]
            if lo_b > 0:
                cert = max(cert, hi_a / lo_b)
            elif hi_a > 0:
                cert = float("inf")
            if hi_b > 0 and lo_a / hi_b > wit:
                wit = lo_a / hi_b
                witness = (tuple(a), tuple(b), o)
    return Audit(certified_max=cert, witnessed_max=wit, witness=witness)
