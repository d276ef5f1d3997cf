"""Continual local-DP protocols: what each entry reports, when, and at which ε.

Timeline: periods ``0 .. T-1``; an entry's state at the end of period t is a value in ``0 .. d-1``
or null (encoded ``d``: not inserted yet, or deleted). Every entry is enrolled from period 0 and
reports on a schedule fixed before any data is seen, so *when* an entry reports never depends on
when it changes.

A node ``(level, index)`` covers periods ``[index 2^level, (index + 1) 2^level - 1]`` (fanout 2,
capped at T) and is reported at the end of its last period. Its input for one entry is

* ``"mutation"`` (paper section 6): the net mutation ``(old, new)`` over the node, in
  ``M = (R ∪ {null})²``, ``(null, null)`` when nothing changed; one report over ``|M| = (d+1)²``;
* ``"split"``: the same ``old`` and ``new``, reported separately (two reports over ``d + 1``
  categories at half the node's ε each);
* ``"value"``: the state at the end of the node (one report over ``d + 1`` categories).

Schedules: ``"flat"`` (every entry, every period: level 0), ``"tree"`` (every entry, every node of
every level: the HDCR), ``"random-level"`` (each entry one uniformly random level, all of its nodes;
the estimator rescales by ``n / n_level``), ``"random-period"`` (each entry one uniformly random
period; value encoding only).

Privacy (docs/local-dp.md has the proofs). An entry makes at most ``K = mutations`` mutations
(insert and delete included). A mutation/split node's input is a function of the mutations in the
node's time range, so two histories make at most ``c_l = min(2K, N_l)`` of the ``N_l`` nodes of
level l differ (:func:`dpcr.local.local_tree_count`); each node gets ``ε / c_l`` (tree: ``ε`` over
``Σ_l c_l``). A value report depends on the whole prefix, so flat value reports get ``ε / T``
("fresh randomization with the budget split") and a single random-period report gets ``ε``.
Assignment of levels/periods is data-independent public randomness, so the guarantee is the worst
assignment.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dpcr.errors import ConfigError
from dpcr.local._oracles import FrequencyOracle, GeneralizedRR, UnaryEncoding, exp_ratio

__all__ = ["ENCODINGS", "ORACLES", "SCHEDULES", "LocalProtocol", "Node", "all_protocols"]

ENCODINGS = ("mutation", "split", "value")
SCHEDULES = ("flat", "tree", "random-level", "random-period")
ORACLES = ("grr", "oue")

Node = tuple[int, int]


def _int(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalProtocol:
    """One continual LDP protocol for entries with values in ``0 .. domain-1``.

    >>> p = LocalProtocol(domain=4, horizon=64, mutations=4, epsilon=2.0,
    ...                   encoding="mutation", schedule="flat", oracle="grr")
    >>> p.name, p.level_count(0), round(p.per_entry_epsilon(), 6) <= 2.0
    ('mutation/flat/grr', 8, True)
    """

    domain: int
    horizon: int
    mutations: int
    epsilon: float
    encoding: str
    schedule: str
    oracle: str = "grr"
    _oracles: dict[int, tuple[FrequencyOracle, ...]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        _int(self.domain, "domain", 1)
        _int(self.horizon, "horizon", 1)
        _int(self.mutations, "mutations", 1)
        if not (isinstance(self.epsilon, int | float) and 0 < self.epsilon < math.inf):
            raise ConfigError(f"epsilon must be finite and > 0, got {self.epsilon!r}")
        if self.encoding not in ENCODINGS:
            raise ConfigError(f"encoding must be one of {ENCODINGS}, got {self.encoding!r}")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.oracle not in ORACLES:
            raise ConfigError(f"oracle must be one of {ORACLES}, got {self.oracle!r}")
        if self.encoding == "value" and self.schedule in ("tree", "random-level"):
            raise ConfigError(
                "value encoding reports the whole state, which every node depends on; use "
                "schedule='flat' or 'random-period' (or a mutation/split encoding for trees)"
            )
        if self.encoding != "value" and self.schedule == "random-period":
            raise ConfigError("schedule='random-period' reports a value: use encoding='value'")

    # ---- structure -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"{self.encoding}/{self.schedule}/{self.oracle}"

    @property
    def levels(self) -> int:
        if self.schedule in ("flat", "random-period"):
            return 1
        return max(1, math.ceil(math.log2(self.horizon))) + 1 if self.horizon > 1 else 1

    @property
    def sampled(self) -> bool:
        """True when each entry reports to a random subset of nodes (the estimate rescales)."""
        return self.schedule in ("random-level", "random-period")

    def node_count(self, level: int) -> int:
        return -(-self.horizon // (1 << level))

    def node_span(self, node: Node) -> tuple[int, int]:
        level, index = node
        return index << level, min((index + 1) << level, self.horizon) - 1

    def nodes_ending_at(self, t: int) -> list[Node]:
        out = []
        for level in range(self.levels):
            length = 1 << level
            if (t + 1) % length == 0 or t == self.horizon - 1:
                out.append((level, t >> level))
        return out

    def prefix_nodes(self, t: int) -> list[Node]:
        """The nodes whose estimates sum to the histogram at the end of period ``t``."""
        if not 0 <= t < self.horizon:
            raise ConfigError(f"t must be in [0, {self.horizon - 1}], got {t!r}")
        if self.encoding == "value":
            return [(0, t)]
        if self.levels == 1:
            return [(0, s) for s in range(t + 1)]
        out: list[Node] = []
        pos = 0
        for level in range(self.levels - 1, -1, -1):
            length = 1 << level
            while pos % length == 0 and pos + length <= t + 1:
                out.append((level, pos >> level))
                pos += length
        return out  # greedy binary decomposition of t + 1 always ends at level 0

    # ---- privacy ---------------------------------------------------------------------------
    def level_count(self, level: int) -> int:
        """How many of this level's reports two histories of one entry can make differ."""
        if self.encoding == "value":
            return self.horizon if self.schedule == "flat" else 1
        cap = min(2 * self.mutations, self.node_count(level))
        if self.schedule == "tree":
            return sum(min(2 * self.mutations, self.node_count(lv)) for lv in range(self.levels))
        return cap

    def node_epsilon(self, level: int) -> float:
        return self.epsilon / self.level_count(level)

    def oracles(self, level: int) -> tuple[FrequencyOracle, ...]:
        """The frequency oracle(s) of one report at ``level`` (two for the split encoding)."""
        cached = self._oracles.get(level)
        if cached is not None:
            return cached
        d = self.domain
        cls = GeneralizedRR if self.oracle == "grr" else UnaryEncoding
        eps = self.node_epsilon(level)
        out: tuple[FrequencyOracle, ...]
        if self.encoding == "mutation":
            out = (cls(categories=(d + 1) ** 2, ratio=exp_ratio(eps)),)
        elif self.encoding == "split":
            half = cls(categories=d + 1, ratio=exp_ratio(eps / 2))
            out = (half, half)
        else:
            out = (cls(categories=d + 1, ratio=exp_ratio(eps)),)
        self._oracles[level] = out
        return out

    def node_ratio(self, level: int) -> Fraction:
        """Exact likelihood-ratio bound of one node's report(s)."""
        r = Fraction(1)
        for o in self.oracles(level):
            r *= o.ratio
        return r

    def per_entry_epsilon(self) -> float:
        """ln of the exact worst-case ratio: Σ over differing reports, worst level/assignment."""
        if self.schedule == "tree":
            return self.level_count(0) * math.log(self.node_ratio(0))
        return max(
            self.level_count(lv) * math.log(self.node_ratio(lv)) for lv in range(self.levels)
        )

    # ---- encoding --------------------------------------------------------------------------
    def weights(self, level: int) -> tuple[np.ndarray, ...]:
        """Per oracle, the (d × categories) matrix taking debiased counts to the node's estimate
        (the paper's ``M_δv`` for the mutation encoding)."""
        d = self.domain
        if self.encoding == "mutation":
            a = np.zeros((d, (d + 1) ** 2))
            for old in range(d + 1):
                for new in range(d + 1):
                    m = old * (d + 1) + new
                    if new < d:
                        a[new, m] += 1
                    if old < d:
                        a[old, m] -= 1
            return (a,)
        eye = np.eye(d, d + 1)
        if self.encoding == "split":
            return (-eye, eye)
        return (eye,)

    def encode(self, old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, ...]:
        """Oracle inputs from the states before (``old``) and at the end (``new``) of a node."""
        d = self.domain
        old = np.asarray(old, dtype=np.int64)
        new = np.asarray(new, dtype=np.int64)
        if self.encoding == "value":
            return (new,)
        same = old == new
        o = np.where(same, d, old)
        n = np.where(same, d, new)
        if self.encoding == "split":
            return (o, n)
        return (o * (d + 1) + n,)

    def node_inputs(self, states: np.ndarray, node: Node) -> tuple[np.ndarray, ...]:
        """Oracle inputs of every row of ``states`` (shape (n, T), null = d) for ``node``."""
        start, end = self.node_span(node)
        new = states[:, end]
        old = states[:, start - 1] if start > 0 else np.full(states.shape[0], self.domain)
        return self.encode(old, new)


def all_protocols(
    *, domain: int, horizon: int, mutations: int, epsilon: float
) -> Iterable[LocalProtocol]:
    """Every valid (encoding, schedule, oracle) combination for one setting."""
    for enc in ENCODINGS:
        for sch in SCHEDULES:
            for orc in ORACLES:
                try:
                    yield LocalProtocol(
                        domain=domain,
                        horizon=horizon,
                        mutations=mutations,
                        epsilon=epsilon,
                        encoding=enc,
                        schedule=sch,
                        oracle=orc,
                    )
                except ConfigError:
                    continue
