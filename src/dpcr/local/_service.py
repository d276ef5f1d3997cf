"""Client and server of a continual local-DP protocol, and a vectorised simulation.

The client holds one entry's state on its device and emits reports; no raw value leaves it. The
server tallies reports per node and estimates the histogram at any period, with per-bin standard
errors. The simulation produces the server's tallies for a whole population at once.

>>> from dpcr.local import LocalProtocol, LocalClient, LocalServer
>>> from dpcr.noise import secure_randomness
>>> proto = LocalProtocol(domain=3, horizon=4, mutations=4, epsilon=4.0,
...                       encoding="split", schedule="flat", oracle="grr")
>>> client = LocalClient(proto, rng=secure_randomness())
>>> server = LocalServer(proto, population=1)
>>> client.set(2)                      # inserted with value 2
>>> server.update(client.report(0))    # every period, changed or not
>>> est = server.estimate(0)
>>> est.histogram.shape, est.standard_error.shape
((3,), (3,))
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from dpcr.errors import ConfigError
from dpcr.local._bounding import bound_states
from dpcr.local._oracles import numpy_generator
from dpcr.local._protocols import LocalProtocol, Node
from dpcr.noise import Randomness, require_secure, secure_randomness

__all__ = [
    "LocalClient",
    "LocalEstimate",
    "LocalServer",
    "Report",
    "exact_mse",
    "exact_variance",
    "simulate",
    "true_answer",
    "true_histogram",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """One entry's randomized report(s) for one node; ``payload`` has one array per oracle
    (a GRR report is a 0-d int array, an OUE report a bit vector)."""

    node: Node
    payload: tuple[np.ndarray, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalEstimate:
    """Estimated histogram at the end of period ``t`` and per-bin standard errors; with
    ``window`` set, ``histogram`` is the histogram's change over the ``window`` periods ending
    at ``t``."""

    t: int
    histogram: np.ndarray
    standard_error: np.ndarray
    window: int | None = None


class LocalClient:
    """One entry on its device. ``set(value)`` records its current value (None: absent or
    deleted), as often as it changes; ``report(t)`` closes period ``t`` and returns the reports
    due (possibly none). The client enforces the protocol's constraint on its own history
    (:func:`dpcr.local.bound_states`); ``dropped`` counts the changes it did not apply.

    Reports are randomized with the OS's secure generator; a seeded generator is refused (use
    :meth:`for_simulation` in tests).
    """

    def __init__(self, protocol: LocalProtocol, *, rng: Randomness | None = None) -> None:
        rng = secure_randomness() if rng is None else rng
        require_secure(rng, "a local client's report")
        self._init(protocol, rng)

    @classmethod
    def for_simulation(cls, protocol: LocalProtocol, *, rng: Randomness) -> LocalClient:
        """A client driven by any generator (tests and simulations only)."""
        self = cls.__new__(cls)
        self._init(protocol, rng)
        return self

    def _init(self, protocol: LocalProtocol, rng: Randomness) -> None:
        self._protocol = protocol
        self._rng = rng
        self._value = protocol.domain  # null
        self._raw: list[int] = []
        self._history: list[int] = []
        self._dropped = 0
        self._level: int | None = None
        self._period: int | None = None
        if protocol.schedule == "random-level":
            self._level = int(rng.integers(protocol.levels, 1)[0])
        elif protocol.schedule == "random-period":
            self._period = int(rng.integers(protocol.horizon, 1)[0])

    @property
    def dropped(self) -> int:
        """Changes of this entry's state that the constraint did not allow (not reported)."""
        return self._dropped

    @property
    def assignment(self) -> int | None:
        """The public, data-independent level or period this client reports at (None: all)."""
        return self._level if self._level is not None else self._period

    def set(self, value: int | None) -> None:
        d = self._protocol.domain
        if value is None:
            self._value = d
            return
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= value < d:
            raise ConfigError(f"value must be an int in [0, {d}) or None, got {value!r}")
        self._value = int(value)

    def report(self, t: int) -> list[Report]:
        p = self._protocol
        if t != len(self._history):
            raise ConfigError(f"periods must be reported in order: expected {len(self._history)}")
        if t >= p.horizon:
            raise ConfigError(f"period {t} is past the horizon {p.horizon}")
        self._raw.append(self._value)
        bounded = bound_states(np.array([self._raw]), p.constraint, domain=p.domain)
        self._history.append(int(bounded.states[0, t]))
        self._dropped = int(bounded.dropped[0])
        out = []
        for node in p.nodes_ending_at(t):
            level = node[0]
            if self._level is not None and level != self._level:
                continue
            if self._period is not None and t != self._period:
                continue
            start, end = p.node_span(node)
            old = self._history[start - 1] if start > 0 else p.domain
            inputs = p.encode(np.array([old]), np.array([self._history[end]]))
            payload = tuple(
                o.randomize(x, self._rng)[0] for o, x in zip(p.oracles(level), inputs, strict=True)
            )
            out.append(Report(node=node, payload=payload))
        return out


class LocalServer:
    """Tallies reports per node; ``estimate(t)`` is the unbiased histogram at the end of ``t``."""

    def __init__(self, protocol: LocalProtocol, *, population: int) -> None:
        if isinstance(population, bool) or not isinstance(population, int) or population < 1:
            raise ConfigError(f"population must be an int >= 1, got {population!r}")
        self._protocol = protocol
        self._population = population
        self._reports: dict[Node, int] = {}
        self._counts: dict[Node, list[np.ndarray]] = {}

    def _slot(self, node: Node) -> list[np.ndarray]:
        counts = self._counts.get(node)
        if counts is None:
            counts = [
                np.zeros(o.categories, dtype=np.int64) for o in self._protocol.oracles(node[0])
            ]
            self._counts[node] = counts
            self._reports[node] = 0
        return counts

    def update(self, reports: Iterable[Report]) -> None:
        """Add client reports (validated first, then tallied)."""
        batch = list(reports)
        for r in batch:
            level, index = r.node
            if not (
                0 <= level < self._protocol.levels and 0 <= index < self._protocol.node_count(level)
            ):
                raise ConfigError(f"report for unknown node {r.node!r}")
            if len(r.payload) != len(self._protocol.oracles(level)):
                raise ConfigError(f"report for node {r.node!r} has the wrong number of parts")
        for r in batch:
            slot = self._slot(r.node)
            for i, (o, x) in enumerate(
                zip(self._protocol.oracles(r.node[0]), r.payload, strict=True)
            ):
                slot[i] += o.tally(np.atleast_1d(x))
            self._reports[r.node] += 1

    def add_counts(self, node: Node, *, reports: int, counts: tuple[np.ndarray, ...]) -> None:
        """Add the tallies of ``reports`` reports for ``node`` at once (vectorised simulation)."""
        slot = self._slot(node)
        for i, c in enumerate(counts):
            slot[i] += np.asarray(c, dtype=np.int64)
        self._reports[node] += int(reports)

    def node_estimate(self, node: Node) -> tuple[np.ndarray, np.ndarray]:
        """(estimate, variance estimate) of one node's contribution, per bin."""
        p = self._protocol
        d = p.domain
        m = self._reports.get(node, 0)
        if m == 0:
            if p.sampled:
                return np.full(d, np.nan), np.full(d, np.nan)
            return np.zeros(d), np.zeros(d)
        level = node[0]
        est = np.zeros(d)
        rr_var = np.zeros(d)
        sq = np.zeros(d)  # Σ over the sample of y², y = the entry's contribution to a bin
        for o, w, c in zip(p.oracles(level), p.weights(level), self._counts[node], strict=True):
            chat = o.debias(c, m)
            est += w @ chat
            rr_var += o.conservative_variance(w, c, m)
            sq += (w**2) @ chat
        if not p.sampled:
            return est, rr_var
        n = self._population
        scale = n / m
        # sampling without replacement of m of n entries: Var = scale² m (1 - m/n) S², with the
        # population second moment S² ≈ (n/m) Σ_sample y² / (n - 1) (mean not subtracted: upward)
        s2 = np.maximum(sq, 0.0) * scale / max(n - 1, 1)
        return scale * est, scale**2 * rr_var + scale**2 * m * (1 - m / n) * s2

    def estimate(self, t: int, *, window: int | None = None) -> LocalEstimate:
        """The histogram at the end of ``t`` (a window protocol: the change over its window
        ending at ``t``); with ``window=W``, the change over the W periods ending at ``t``."""
        hist = np.zeros(self._protocol.domain)
        var = np.zeros(self._protocol.domain)
        for node, sign in self._protocol.answer_nodes(t, window=window):
            e, v = self.node_estimate(node)
            hist += sign * e
            var += v
        if self._protocol.schedule == "window":
            window = self._protocol.window
        return LocalEstimate(
            t=t, histogram=hist, standard_error=np.sqrt(np.maximum(var, 0.0)), window=window
        )


def true_histogram(states: np.ndarray, t: int, domain: int) -> np.ndarray:
    """The true histogram at the end of period ``t`` (null excluded)."""
    return np.bincount(states[:, t], minlength=domain + 1)[:domain]


def true_answer(
    protocol: LocalProtocol, states: np.ndarray, t: int, *, window: int | None = None
) -> np.ndarray:
    """What ``estimate(t, window=window)`` estimates, from the states the clients keep
    (:func:`dpcr.local.bound_states`)."""
    d = protocol.domain
    kept = bound_states(states, protocol.constraint, domain=d).states
    if protocol.schedule == "window":
        window = protocol.window
    if window is None:
        return true_histogram(kept, t, d)
    before = true_histogram(kept, t - window, d) if t - window >= 0 else np.zeros(d, np.int64)
    return np.asarray(true_histogram(kept, t, d) - before)


def _members(protocol: LocalProtocol, n: int, rng: Randomness) -> np.ndarray | None:
    if protocol.schedule == "random-level":
        return rng.integers(protocol.levels, n)
    if protocol.schedule == "random-period":
        return rng.integers(protocol.horizon, n)
    return None


def _kept(protocol: LocalProtocol, states: np.ndarray) -> np.ndarray:
    states = np.asarray(states)
    if states.ndim != 2 or states.shape[1] != protocol.horizon:
        raise ConfigError(
            f"states must have shape (entries, {protocol.horizon}), got {states.shape}"
        )
    return bound_states(states, protocol.constraint, domain=protocol.domain).states


def simulate(
    protocol: LocalProtocol, states: np.ndarray, *, rng: Randomness, exact: bool = False
) -> LocalServer:
    """Run every entry of ``states`` (shape (n, T), values 0..d-1, null = d) through the protocol.

    Each entry's history is bounded first, as its client would (:func:`dpcr.local.bound_states`).
    Assignments (levels, periods) come from ``rng``. With ``exact=True`` every report is drawn
    through the randomness seam exactly as a client would; otherwise the per-node output counts
    are drawn from their exact law (binomial/multinomial sums of the same reports) by a numpy
    generator seeded from ``rng`` -- the same distribution, far fewer draws.
    """
    states = _kept(protocol, states)
    n = states.shape[0]
    server = LocalServer(protocol, population=n)
    assign = _members(protocol, n, rng)
    gen = None if exact else numpy_generator(rng)
    for level in range(protocol.levels):
        oracles = protocol.oracles(level)
        for index in range(protocol.node_count(level)):
            node = (level, index)
            rows = states
            if assign is not None:
                key = level if protocol.schedule == "random-level" else index
                rows = states[assign == key]
            inputs = protocol.node_inputs(rows, node)
            counts = []
            for o, x in zip(oracles, inputs, strict=True):
                if gen is None:
                    counts.append(o.tally(o.randomize(x, rng)))
                else:
                    counts.append(o.simulate_counts(np.bincount(x, minlength=o.categories), gen))
            server.add_counts(node, reports=rows.shape[0], counts=tuple(counts))
    return server


def exact_variance(
    protocol: LocalProtocol, states: np.ndarray, t: int, *, window: int | None = None
) -> np.ndarray:
    """Exact per-bin variance of ``estimate(t, window=window)`` for a non-sampled schedule
    (erratum 8 formula ``Σ_x (diag(p_x) - p_x p_xᵀ)`` through the linear estimator; nodes are
    independent) on the states the clients keep."""
    if protocol.sampled:
        raise ConfigError("exact_variance is for non-sampled schedules (flat, tree, window)")
    states = _kept(protocol, states)
    var = np.zeros(protocol.domain)
    for node, _sign in protocol.answer_nodes(t, window=window):
        level = node[0]
        for o, w, x in zip(
            protocol.oracles(level),
            protocol.weights(level),
            protocol.node_inputs(states, node),
            strict=True,
        ):
            var += o.linear_variance(w, np.bincount(x, minlength=o.categories))
    return var


def _inverse_mean_nonempty(population: int, groups: int) -> float:
    """``E[1/m | m >= 1]`` for ``m ~ Binomial(population, 1/groups)``, summed over the pmf (all of
    it within 40 standard deviations of the mean; the rest is below 1e-300)."""
    if groups == 1:
        return 1.0 / population
    n, prob = population, 1.0 / groups
    mean, sd = n * prob, math.sqrt(n * prob * (1 - prob))
    lo = max(1, math.floor(mean - 40 * sd))
    hi = min(n, math.ceil(mean + 40 * sd) + 1)
    k = np.arange(lo, hi + 1, dtype=float)
    log_pmf0 = (
        math.lgamma(n + 1)
        - math.lgamma(lo + 1)
        - math.lgamma(n - lo + 1)
        + lo * math.log(prob)
        + (n - lo) * math.log1p(-prob)
    )
    # pmf(k) / pmf(k - 1) = (n - k + 1) / k * prob / (1 - prob)
    steps = np.log((n - k[1:] + 1) / k[1:]) + math.log(prob / (1 - prob))
    log_pmf = log_pmf0 + np.concatenate(([0.0], np.cumsum(steps)))
    pmf = np.exp(log_pmf - log_pmf.max())
    return float((pmf / k).sum() / pmf.sum())


def exact_mse(
    protocol: LocalProtocol,
    states: np.ndarray,
    t: int,
    *,
    population: int | None = None,
    window: int | None = None,
) -> np.ndarray:
    """Exact per-bin mean squared error of ``estimate(t, window=window)`` on ``states`` (every
    estimator here is unbiased, so this is its variance), for every schedule.

    Non-sampled schedules: :func:`exact_variance`. Sampled schedules (each entry one uniform
    group g of G: a level, or a period; group counts m_g ~ Binomial(n, 1/G)): the estimate is
    ``Σ_g (n/m_g) Σ_{i in g} ŷ_i^g`` with ``ŷ_i^g`` entry i's debiased reports for the answer's
    (signed) nodes of group g. Given the assignment, randomized response adds
    ``(n/m_g)² Σ_{i in g} v_i^g``; the groups are a uniform random partition given the counts,
    so (sampling without replacement, and ``Cov(n ȳ_g, n ȳ_h) = -n S_gh`` for disjoint samples)

        MSE = Σ_g n² E[1/m_g | m_g >= 1] (V_g + S_gg) - n S_tot,

    with ``V_g`` the mean RR variance per entry, ``S_gg`` the population variance (ddof 1) of the
    true contribution ``y^g``, and ``S_tot`` that of ``Σ_g y^g`` (the entry's whole contribution).
    The estimate is undefined when a used group is empty (probability at most
    ``G (1 - 1/G)^n``); the MSE is conditional on it not being so (exact when one group is used,
    as at the last period of a power-of-two horizon).

    ``population`` (the planner) evaluates the same per-entry moments for a population of that
    size instead of ``len(states)``.
    """
    states = _kept(protocol, states)
    rows = states.shape[0]
    n = rows if population is None else population
    if not protocol.sampled:
        return np.asarray(exact_variance(protocol, states, t, window=window) * (n / rows))
    if rows < 2:
        raise ConfigError("exact_mse of a sampled schedule needs at least 2 entries")
    d = protocol.domain
    rr: dict[int, np.ndarray] = {}
    contrib: dict[int, np.ndarray] = {}
    for node, sign in protocol.answer_nodes(t, window=window):
        level = node[0]
        key = level if protocol.schedule == "random-level" else node[1]
        v = rr.setdefault(key, np.zeros(d))
        y = contrib.setdefault(key, np.zeros((rows, d)))
        for o, w, x in zip(
            protocol.oracles(level),
            protocol.weights(level),
            protocol.node_inputs(states, node),
            strict=True,
        ):
            v += o.linear_variance(w, np.bincount(x, minlength=o.categories)) / rows
            y += sign * w.T[x]
    groups = protocol.levels if protocol.schedule == "random-level" else protocol.horizon
    inv = _inverse_mean_nonempty(n, groups)
    mse = np.zeros(d)
    for key, y in contrib.items():
        mse += n**2 * inv * (rr[key] + y.var(axis=0, ddof=1))
    total = sum(contrib.values())
    mse -= n * np.asarray(total).var(axis=0, ddof=1)
    return mse
