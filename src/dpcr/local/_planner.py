"""Choose a continual LDP protocol by its predicted error, before any data is read.

The prediction uses a *workload model* (a synthetic population with the given domain, horizon and
changes per entry, :func:`dpcr.local.synthetic_population`, of at most 20 000 entries), never the
data, and evaluates :func:`dpcr.local.exact_mse` on it for the given population size: the exact
variance (erratum 8) for flat and tree schedules; for sampled schedules the randomized-response
variance and the sampling variance with the random group sizes (``E[1/m]``, not ``1/E[m]``) and
the covariance between groups (window answers: the same, over the signed nodes of a window).
Every estimator is unbiased, so this is the protocol's MSE on the
model population; on a real population of the same shape it differs only by the population's own
moments (about 1 % on the benchmark, whose protocols are ranked identically).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpcr.errors import ConfigError
from dpcr.local._population import synthetic_population
from dpcr.local._protocols import LocalProtocol, all_protocols
from dpcr.local._service import exact_mse

__all__ = ["PlanRow", "plan_protocols", "predicted_mse"]

_MODEL_ENTRIES = 20_000


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRow:
    protocol: LocalProtocol
    predicted_mse: float


def predicted_mse(
    protocol: LocalProtocol,
    states: np.ndarray,
    t: int,
    *,
    population: int | None = None,
    window: int | None = None,
) -> float:
    """Mean over bins of the exact MSE of ``estimate(t, window=window)`` on the workload
    ``states``, for a population of ``population`` entries with the same per-entry moments
    (default: ``len(states)``).
    """
    return float(exact_mse(protocol, states, t, population=population, window=window).mean())


def plan_protocols(
    *,
    domain: int,
    horizon: int,
    epsilon: float,
    population: int,
    mutations: int | None = None,
    bound: int | None = None,
    changes: int = 2,
    fanouts: Sequence[int] = (2,),
    window: int | None = None,
    step: int = 1,
    t: int | None = None,
    seed: int = 0,
) -> list[PlanRow]:
    """Every valid protocol with its predicted MSE at period ``t``, best first.

    The constraint is ``mutations=K`` (the workload model's entries change ``K - 2`` times) or
    ``bound=B`` (B-time-bounded, in periods; the model's entries change ``changes`` times and may
    be deleted, all within B periods of their insertion). ``fanouts`` are the tree fanouts to
    consider (default: 2 only). With ``window=W`` the answer ranked is the histogram's change
    over the W periods ending at ``t``: window protocols (released every ``step`` periods)
    against the difference of two prefix estimates of every other protocol; ``t`` defaults to
    the last release time (the last period without a window).

    >>> rows = plan_protocols(domain=4, horizon=16, mutations=4, epsilon=2.0, population=1000)
    >>> rows[0].predicted_mse <= rows[-1].predicted_mse
    True
    """
    if (mutations is None) == (bound is None):
        raise ConfigError("give exactly one constraint: mutations=K or bound=B")
    protocols = list(
        all_protocols(
            domain=domain,
            horizon=horizon,
            epsilon=epsilon,
            mutations=mutations,
            bound=bound,
            fanouts=fanouts,
            window=window,
            step=step,
        )
    )
    if t is None:
        t = horizon - 1 if window is None else (horizon // step) * step - 1
    model_n = min(population, _MODEL_ENTRIES)
    states = synthetic_population(
        entries=model_n,
        domain=domain,
        horizon=horizon,
        seed=seed,
        max_changes=max(0, mutations - 2) if mutations is not None else changes,
        within=bound,
    )
    rows = [
        PlanRow(
            protocol=p,
            predicted_mse=predicted_mse(p, states, t, population=population, window=window),
        )
        for p in protocols
    ]
    return sorted(rows, key=lambda r: r.predicted_mse)
