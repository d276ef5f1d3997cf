"""Choose a continual LDP protocol by its predicted error, before any data is read.

The prediction uses a *workload model* (a synthetic population with the given size, domain and
horizon, :func:`dpcr.local.synthetic_population`), never the data: the exact variance
(erratum 8) for flat and tree schedules; for sampled schedules the randomized-response variance
of the expected sample, rescaled, plus the variance of sampling ``m = n/levels`` (or ``n/T``) of
``n`` entries without replacement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpcr.local._population import synthetic_population
from dpcr.local._protocols import LocalProtocol, all_protocols
from dpcr.local._service import exact_variance

__all__ = ["PlanRow", "plan_protocols", "predicted_mse"]

_MODEL_ENTRIES = 20_000


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRow:
    protocol: LocalProtocol
    predicted_mse: float


def predicted_mse(protocol: LocalProtocol, states: np.ndarray, t: int) -> float:
    """Predicted mean (over bins) squared error of ``estimate(t)`` on population ``states``."""
    if not protocol.sampled:
        return float(exact_variance(protocol, states, t).mean())
    n = states.shape[0]
    groups = protocol.levels if protocol.schedule == "random-level" else protocol.horizon
    m = n / groups
    scale = n / m
    var = np.zeros(protocol.domain)
    for node in protocol.prefix_nodes(t):
        level = node[0]
        for o, w, x in zip(
            protocol.oracles(level),
            protocol.weights(level),
            protocol.node_inputs(states, node),
            strict=True,
        ):
            counts = np.bincount(x, minlength=o.categories)
            var += scale**2 * o.linear_variance(w, counts / groups)
        y = sum(
            w.T[x]
            for w, x in zip(
                protocol.weights(level), protocol.node_inputs(states, node), strict=True
            )
        )  # (n, d) contributions
        var += scale**2 * m * (1 - m / n) * np.asarray(y).var(axis=0, ddof=1)
    return float(var.mean())


def plan_protocols(
    *,
    domain: int,
    horizon: int,
    mutations: int,
    epsilon: float,
    population: int,
    t: int | None = None,
    seed: int = 0,
) -> list[PlanRow]:
    """Every valid protocol with its predicted MSE at period ``t`` (default: the last), best first.

    >>> rows = plan_protocols(domain=4, horizon=16, mutations=4, epsilon=2.0, population=1000)
    >>> rows[0].predicted_mse <= rows[-1].predicted_mse
    True
    """
    t = horizon - 1 if t is None else t
    model_n = min(population, _MODEL_ENTRIES)
    states = synthetic_population(
        entries=model_n,
        domain=domain,
        horizon=horizon,
        seed=seed,
        max_changes=max(0, mutations - 2),
    )
    factor = population / model_n  # every variance term is linear in the population size
    rows = [
        PlanRow(protocol=p, predicted_mse=factor * predicted_mse(p, states, t))
        for p in all_protocols(domain=domain, horizon=horizon, mutations=mutations, epsilon=epsilon)
    ]
    return sorted(rows, key=lambda r: r.predicted_mse)
