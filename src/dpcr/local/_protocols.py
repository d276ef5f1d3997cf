"""Continual local-DP protocols: what each entry reports, when, and at which ε.

Timeline: periods ``0 .. T-1``; an entry's state at the end of period t is a value in ``0 .. d-1``
or null (encoded ``d``: not inserted yet, or deleted). Every entry is enrolled from period 0 and
reports on a schedule fixed before any data is seen, so *when* an entry reports never depends on
when it changes.

A node ``(level, index)`` of a tree with fanout c covers periods
``[index c^level, (index + 1) c^level - 1]`` (capped at T) and is reported at the end of its last
period. A window node ``(0, i)`` covers the W periods ending at ``(i + 1) P - 1`` (P = ``step``).
A node's input for one entry is

* ``"mutation"`` (paper section 6): the net mutation ``(old, new)`` over the node, in
  ``M = (R ∪ {null})²``, ``(null, null)`` when nothing changed; one report over ``|M| = (d+1)²``;
* ``"split"``: the same ``old`` and ``new``, reported separately (two reports over ``d + 1``
  categories at half the node's ε each);
* ``"value"``: the state at the end of the node (one report over ``d + 1`` categories).

Schedules: ``"flat"`` (every entry, every period: level 0), ``"tree"`` (every entry, every node of
every level: the HDCR), ``"random-level"`` (each entry one uniformly random level, all of its nodes;
the estimator rescales by ``n / n_level``), ``"random-period"`` (each entry one uniformly random
period; value encoding only), ``"window"`` (every entry, every window of W periods released every
P periods: the SWCR; the answer is the histogram's change over the window).

Constraints (exactly one): ``mutations=K`` (at most K mutations, insert and delete included) or
``bound=B`` (B-time-bounded: every mutation in the periods ``x .. x + B`` after the insertion
period x). Clients enforce it (:func:`dpcr.local.bound_states`): a change the constraint does not
allow is dropped and the entry keeps its last kept state (freeze).

Privacy (docs/local-dp.md has the proofs). A mutation/split node's input is a function of the
mutations in the node's time range, so two histories make a node differ only if one of them
touches it. ``level_count(l)`` is the most nodes of level l (of all levels for the tree) two
histories can make differ: at most K, ``min(2K, N_l)`` (Cor 5.1, 5.3) and ``min(2K⌈W/P⌉, N)``
for windows (Cor 5.4); B-time-bounded, the largest union of the nodes two runs ``[x, x + B]``
meet, enumerated over the T insertion periods (exact; on long horizons it equals Cor 5.2's
``2 MostSpan``, erratum 1's ``2(⌈B/c^l⌉ + 1)`` per level and Cor 5.5's ``2⌈(B + W)/P⌉``). Each
node gets ``ε / count``. A value report depends on the whole prefix, so flat value reports get
``ε / T`` and a single random-period report gets ``ε``. Assignment of levels/periods is
data-independent public randomness, so the guarantee is the worst assignment.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dpcr.bounding.constraints import AtMostK, TimeBounded
from dpcr.errors import ConfigError
from dpcr.local._counts import local_window_count
from dpcr.local._oracles import FrequencyOracle, GeneralizedRR, UnaryEncoding, exp_ratio

__all__ = [
    "ENCODINGS",
    "ORACLES",
    "SCHEDULES",
    "LocalProtocol",
    "Node",
    "SignedNode",
    "all_protocols",
]

ENCODINGS = ("mutation", "split", "value")
SCHEDULES = ("flat", "tree", "random-level", "random-period", "window")
ORACLES = ("grr", "oue")

_EXACT_HORIZON = 1024

Node = tuple[int, int]
SignedNode = tuple[Node, int]


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
    >>> weekly = LocalProtocol(domain=4, horizon=52, bound=2, epsilon=2.0,
    ...                        encoding="mutation", schedule="tree", fanout=4)
    >>> weekly.name, weekly.levels, weekly.level_count(0)
    ('mutation/tree(c=4)/grr', 4, 15)
    """

    domain: int
    horizon: int
    epsilon: float
    encoding: str
    schedule: str
    oracle: str = "grr"
    mutations: int | None = None
    bound: int | None = None
    fanout: int = 2
    window: int | None = None
    step: int = 1
    _oracles: dict[int, tuple[FrequencyOracle, ...]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    _counts: dict[int, int] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        _int(self.domain, "domain", 1)
        _int(self.horizon, "horizon", 1)
        if (self.mutations is None) == (self.bound is None):
            raise ConfigError(
                "give exactly one constraint: mutations=K (at most K) or bound=B "
                "(B-time-bounded, in periods)"
            )
        if self.mutations is not None:
            _int(self.mutations, "mutations", 1)
        if self.bound is not None:
            _int(self.bound, "bound", 0)
        _int(self.fanout, "fanout", 2)
        _int(self.step, "step", 1)
        if not (isinstance(self.epsilon, int | float) and 0 < self.epsilon < math.inf):
            raise ConfigError(f"epsilon must be finite and > 0, got {self.epsilon!r}")
        if self.encoding not in ENCODINGS:
            raise ConfigError(f"encoding must be one of {ENCODINGS}, got {self.encoding!r}")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.oracle not in ORACLES:
            raise ConfigError(f"oracle must be one of {ORACLES}, got {self.oracle!r}")
        self._check_combination()

    def _check_combination(self) -> None:
        if self.encoding == "value" and self.schedule in ("tree", "random-level", "window"):
            raise ConfigError(
                "value encoding reports the whole state, which every node depends on; use "
                "schedule='flat' or 'random-period' (or a mutation/split encoding for trees "
                "and windows)"
            )
        if self.encoding != "value" and self.schedule == "random-period":
            raise ConfigError("schedule='random-period' reports a value: use encoding='value'")
        if self.schedule == "window":
            _int(self.window, "window", 1)
            if self.step > self.horizon:
                raise ConfigError(
                    f"step = {self.step} leaves no window within the horizon {self.horizon}"
                )
        elif self.window is not None or self.step != 1:
            raise ConfigError("window and step belong to schedule='window'")
        if self.fanout != 2 and self.schedule not in ("tree", "random-level"):
            raise ConfigError("fanout belongs to schedule='tree' or 'random-level'")

    # ---- structure -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        schedule = self.schedule
        if self.fanout != 2:
            schedule += f"(c={self.fanout})"
        if self.schedule == "window":
            schedule += f"(W={self.window},P={self.step})"
        return f"{self.encoding}/{schedule}/{self.oracle}"

    @property
    def constraint(self) -> AtMostK | TimeBounded:
        """The per-entry constraint (time units: periods)."""
        if self.mutations is not None:
            return AtMostK(k=self.mutations)
        return TimeBounded(bound=int(self.bound or 0))

    @property
    def levels(self) -> int:
        if self.schedule not in ("tree", "random-level") or self.horizon == 1:
            return 1
        top = 1
        while self.fanout**top < self.horizon:
            top += 1
        return top + 1

    @property
    def sampled(self) -> bool:
        """True when each entry reports to a random subset of nodes (the estimate rescales)."""
        return self.schedule in ("random-level", "random-period")

    def node_length(self, level: int) -> int:
        return int(self.fanout**level)

    def node_count(self, level: int) -> int:
        if self.schedule == "window":
            return self.horizon // self.step
        return -(-self.horizon // self.node_length(level))

    def node_span(self, node: Node) -> tuple[int, int]:
        level, index = node
        if self.schedule == "window":
            end = (index + 1) * self.step - 1
            return max(0, end - int(self.window or 0) + 1), end
        length = self.node_length(level)
        return index * length, min((index + 1) * length, self.horizon) - 1

    def nodes_ending_at(self, t: int) -> list[Node]:
        if self.schedule == "window":
            i = (t + 1) // self.step - 1
            return [(0, i)] if (t + 1) % self.step == 0 and i < self.node_count(0) else []
        out = []
        for level in range(self.levels):
            length = self.node_length(level)
            if (t + 1) % length == 0 or t == self.horizon - 1:
                out.append((level, t // length))
        return out

    def _check_t(self, t: int) -> None:
        if isinstance(t, bool) or not isinstance(t, int | np.integer) or not 0 <= t < self.horizon:
            raise ConfigError(f"t must be an integer in [0, {self.horizon - 1}], got {t!r}")

    def prefix_nodes(self, t: int) -> list[Node]:
        """The nodes whose estimates sum to the histogram at the end of period ``t``."""
        self._check_t(t)
        if self.schedule == "window":
            raise ConfigError(
                "a window protocol estimates the change over each window, not the histogram: "
                "use answer_nodes(t) at a release time"
            )
        if self.encoding == "value":
            return [(0, t)]
        if self.levels == 1:
            return [(0, s) for s in range(t + 1)]
        out: list[Node] = []
        pos = 0
        for level in range(self.levels - 1, -1, -1):
            length = self.node_length(level)
            while pos % length == 0 and pos + length <= t + 1:
                out.append((level, pos // length))
                pos += length
        return out  # greedy base-c decomposition of t + 1 always ends at level 0

    def answer_nodes(self, t: int, *, window: int | None = None) -> list[SignedNode]:
        """Signed nodes whose estimates sum to the answer at the end of period ``t``.

        ``window=None``: the histogram (a window protocol: the change over its window ending at
        ``t``, a release time). ``window=W``: the histogram's change over the W periods ending at
        ``t``, as the difference of two prefix estimates (nodes in both cancel) or, for a window
        protocol with the same W, its own window node.
        """
        self._check_t(t)
        if self.schedule == "window":
            if window not in (None, self.window):
                raise ConfigError(f"this protocol releases windows of {self.window} periods")
            if (t + 1) % self.step != 0:
                raise ConfigError(
                    f"windows are released at the end of periods t with (t + 1) % {self.step} == 0"
                )
            return [((0, (t + 1) // self.step - 1), 1)]
        plus = self.prefix_nodes(t)
        if window is None:
            return [(n, 1) for n in plus]
        _int(window, "window", 1)
        minus = self.prefix_nodes(t - window) if t - window >= 0 else []
        common = set(plus) & set(minus)
        return [(n, 1) for n in plus if n not in common] + [
            (n, -1) for n in minus if n not in common
        ]

    # ---- privacy ---------------------------------------------------------------------------
    def _run_nodes(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """Per insertion period x, the first and last node index of ``level`` that the run
        ``[x, x + B]`` meets (an interval; empty when first > last)."""
        x = np.arange(self.horizon)
        end = np.minimum(x + int(self.bound or 0), self.horizon - 1)
        if self.schedule == "window":
            # window i spans [(i + 1) P - W, (i + 1) P - 1]: it meets [x, end] iff
            # (i + 1) P - 1 >= x and (i + 1) P - W <= end
            lo = -(-(x + 1) // self.step) - 1
            hi = np.minimum((end + int(self.window or 0)) // self.step - 1, self.node_count(0) - 1)
            return lo, hi
        length = self.node_length(level)
        return x // length, end // length

    def _bounded_count(self, levels: Sequence[int]) -> int:
        """Largest union of the nodes two B-time-bounded histories touch.

        A history inserted in period x changes state only in ``[x, x + B]``, so the nodes it
        touches are a subset of those that run meets; enumerating every pair of insertion
        periods is exact. Beyond :data:`_EXACT_HORIZON` periods the closed forms (Cor 5.2, 5.5,
        erratum 1), which are upper bounds and exact on long horizons, are used instead.
        """
        if self.horizon > _EXACT_HORIZON:
            return self._bounded_closed_form(levels)
        union = np.zeros((self.horizon, self.horizon), dtype=np.int64)
        for level in levels:
            lo, hi = self._run_nodes(level)
            size = np.maximum(hi - lo + 1, 0)
            common = np.minimum(hi[:, None], hi[None, :]) - np.maximum(lo[:, None], lo[None, :])
            union += size[:, None] + size[None, :] - np.maximum(common + 1, 0)
        return int(union.max())

    def _bounded_closed_form(self, levels: Sequence[int]) -> int:
        b = int(self.bound or 0)
        if self.schedule == "window":
            return local_window_count(
                period=self.step,
                window=int(self.window or 0),
                constraint=TimeBounded(bound=b),
                releases=self.node_count(0),
            )
        return sum(
            min(2 * (-(-b // self.node_length(lv)) + 1), self.node_count(lv)) for lv in levels
        )

    def level_count(self, level: int) -> int:
        """How many of this level's reports two histories of one entry can make differ (for the
        tree: of all levels' reports, which share one ε)."""
        key = -1 if self.schedule == "tree" else level
        cached = self._counts.get(key)
        if cached is not None:
            return cached
        levels = range(self.levels) if self.schedule == "tree" else [level]
        if self.encoding == "value":
            count = self.horizon if self.schedule == "flat" else 1
        elif self.bound is not None:
            count = self._bounded_count(levels)
        elif self.schedule == "window":
            count = local_window_count(
                period=self.step,
                window=int(self.window or 0),
                constraint=self.constraint,
                releases=self.node_count(0),
            )
        else:
            k = int(self.mutations or 0)
            count = sum(min(2 * k, self.node_count(lv)) for lv in levels)
        self._counts[key] = count
        return count

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
    *,
    domain: int,
    horizon: int,
    epsilon: float,
    mutations: int | None = None,
    bound: int | None = None,
    fanouts: Sequence[int] = (2,),
    window: int | None = None,
    step: int = 1,
) -> Iterable[LocalProtocol]:
    """Every valid (encoding, schedule, oracle) combination for one setting: one per fanout for
    tree schedules; with ``window``, also the window schedule of that W and ``step``."""
    LocalProtocol(  # the shared fields, checked once (the loop skips invalid pairs only)
        domain=domain,
        horizon=horizon,
        epsilon=epsilon,
        mutations=mutations,
        bound=bound,
        encoding="mutation",
        schedule="flat",
    )
    for c in fanouts:
        _int(c, "fanout", 2)
    if window is not None:
        _int(window, "window", 1)
        _int(step, "step", 1)
        if step > horizon:
            raise ConfigError(f"step = {step} leaves no window within the horizon {horizon}")
    for enc in ENCODINGS:
        for sch in SCHEDULES:
            if sch == "window" and window is None:
                continue
            extra: list[dict[str, int]]
            if sch in ("tree", "random-level"):
                extra = [{"fanout": c} for c in fanouts]
            elif sch == "window":
                extra = [{"window": int(window or 0), "step": step}]
            else:
                extra = [{}]
            for orc in ORACLES:
                for kw in extra:
                    try:
                        yield LocalProtocol(
                            domain=domain,
                            horizon=horizon,
                            mutations=mutations,
                            bound=bound,
                            epsilon=epsilon,
                            encoding=enc,
                            schedule=sch,
                            oracle=orc,
                            **kw,
                        )
                    except ConfigError:  # an invalid (encoding, schedule) pair
                        continue
