"""Open keys: the selection threshold and the guarantee ``plan`` states (dpcr.release._selection,
docs/privacy.md section 12).

The threshold is checked against the exact distribution of the running value's noise (a
convolution of the nodes' probability mass functions, written here independently of the
library's), and the unit's reach (n_u keys, c per key) against a brute force over every
history of a small key alphabet.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.config import parse_config
from dpcr.errors import ConfigError
from dpcr.queries import Histogram
from dpcr.release import ReleaseSettings
from dpcr.release._calibrate import calibrate
from dpcr.release._selection import key_selections, unit_reach


def settings_of(
    tmp_path: Path,
    *,
    mechanism: str = "laplace",
    plan: str = "disjoint",
    constraint: Any = None,
    owner: bool = False,
    **privacy: Any,
) -> ReleaseSettings:
    raw = {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0, "mechanism": mechanism, "delta": 1e-6, **privacy,
                    **({"unit": "user"} if owner else {})},
        "constraint": constraint or {"at_most_k": 3},
        "release": {"start": "2025-01-01", "period": "7d", "end": "2025-12-31", "plan": plan},
        "query": [{"name": "country", "kind": "histogram", "column": "country",
                   "keys": ["fr"]}],
    }  # fmt: skip
    settings = parse_config(raw, base_dir=tmp_path)
    q = Histogram(name="country", column="country", keys=("fr",), open=True)
    return dataclasses.replace(settings, queries=(q,))


def _pmf(event: Any, radius: int) -> np.ndarray:
    """The exact pmf on -radius..radius (the mass beyond is added to the tail by the caller)."""
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    if isinstance(event, DiscreteLaplaceEvent):
        q = math.exp(-1 / float(event.scale))
        return (1 - q) / (1 + q) * q ** np.abs(x)
    assert isinstance(event, DiscreteGaussianEvent)
    wide = np.arange(-40 * radius, 40 * radius + 1, dtype=np.float64)
    s2 = float(event.sigma2)
    return np.exp(-(x**2) / (2 * s2)) / np.exp(-(wide**2) / (2 * s2)).sum()


def exact_selection_probability(settings: ReleaseSettings, threshold: float) -> float:
    """n_u · Σ_t P(S_t >= threshold - c) for a disjoint plan (S_t: the sum of t i.i.d. node
    noises), with the pmf's truncated mass counted as if it were all in the tail."""
    cal = calibrate(settings)
    event = cal.layers[0]["country"]
    n_u, c = unit_reach(settings)
    horizon = settings.plan.schedule().release_count()
    assert horizon
    std = math.sqrt(float(event.scale) ** 2 * 2 if isinstance(event, DiscreteLaplaceEvent)
                    else float(event.sigma2))  # fmt: skip
    radius = int(60 * std) + 10
    one = _pmf(event, radius)
    lost = max(0.0, 1 - one.sum())
    total, dist = 0.0, np.array([1.0])
    for t in range(1, horizon + 1):
        dist = np.convolve(dist, one)
        support = np.arange(len(dist)) - t * radius
        total += dist[support >= threshold - c].sum() + t * lost
    return n_u * total


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_threshold_bounds_the_exact_selection_probability(tmp_path: Path, mechanism: str) -> None:
    settings = settings_of(tmp_path, mechanism=mechanism)
    sel = key_selections(settings)["country"]
    assert sel.delta == pytest.approx(settings.selection_delta)
    exact = exact_selection_probability(settings, sel.threshold)
    assert exact <= sel.delta
    # and not wildly loose: two thirds of the way above c, the exact probability exceeds δ₂
    lower = sel.count_per_unit + (sel.threshold - sel.count_per_unit) * 2 / 3
    assert exact_selection_probability(settings, lower) > sel.delta


def _kept_states(history: tuple[tuple[str | None, str | None], ...]) -> list[str]:
    return [v for before, after in history for v in (before, after) if v is not None]


def _entry_histories(k: int, alphabet: str) -> Any:
    """Every history of one entry of 1..k mutations: (before, after) pairs that chain (the
    first before may be a value, a row that existed before the log; a delete ends it)."""
    values: list[str | None] = [None, *alphabet]
    for n in range(1, k + 1):
        for states in itertools.product(values, repeat=n + 1):
            if any(a is None and b is None for a, b in itertools.pairwise(states)):
                continue
            if None in states[1:-1]:
                continue  # (a deleted entry does not come back)
            yield tuple(itertools.pairwise(states))


def _running_reach(history: Any, key: str) -> int:
    """The most the history adds to ``key``'s running value at any point."""
    value, best = 0, 0
    for before, after in history:
        value += (after == key) - (before == key)
        best = max(best, value)
    return best


@pytest.mark.parametrize("k", [1, 2, 3])
def test_unit_reach_of_an_entry_is_the_brute_force(tmp_path: Path, k: int) -> None:
    settings = settings_of(tmp_path, constraint={"at_most_k": k})
    keys = max(len(set(_kept_states(h))) for h in _entry_histories(k, "abcde"))
    reach = max(_running_reach(h, "a") for h in _entry_histories(k, "abcde"))
    assert unit_reach(settings) == (keys, reach) == (k + 1, 1)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_unit_reach_of_an_owner_bounds_the_brute_force(tmp_path: Path, k: int) -> None:
    """A unit of several entries: k mutations split over entries in every way."""
    settings = settings_of(tmp_path, constraint={"at_most_k": k}, owner=True)
    n_u, c = unit_reach(settings)
    best_keys = best_reach = 0
    for parts in _compositions(k):
        pools = [list(h for h in _entry_histories(p, "abcdefg") if len(h) == p) for p in parts]
        for combo in itertools.product(*pools):
            best_keys = max(best_keys, len({v for h in combo for v in _kept_states(h)}))
            best_reach = max(best_reach, sum(_running_reach(h, "a") for h in combo))
    assert best_keys <= n_u and best_reach <= c
    assert best_reach == c  # k inserts into one key reach k


def _compositions(k: int) -> list[tuple[int, ...]]:
    return [p for n in range(1, k + 1) for p in itertools.product(range(1, k + 1), repeat=n)
            if sum(p) <= k]  # fmt: skip


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_plan_states_the_release_plus_selection_within_budget(
    tmp_path: Path, mechanism: str
) -> None:
    settings = settings_of(tmp_path, mechanism=mechanism)
    g = calibrate(settings).guarantee
    sel = settings.selection_delta
    assert sel > 0 and g.method.endswith("+selection")
    assert g.delta <= settings.budget.delta
    assert settings.release_delta + math.exp(settings.budget.epsilon) * sel <= (
        settings.budget.delta * (1 + 1e-12)
    )
    if mechanism == "laplace":  # the release is pure: all of δ is the selection's
        assert settings.release_delta == 0
        assert g.delta == pytest.approx(math.exp(g.epsilon) * sel, rel=1e-9)
    else:
        assert settings.release_delta == pytest.approx(settings.budget.delta / 2)


def test_a_given_selection_delta_is_used_and_checked(tmp_path: Path) -> None:
    settings = settings_of(tmp_path, mechanism="gaussian", selection_delta=1e-7)
    assert settings.selection_delta == 1e-7
    assert key_selections(settings)["country"].delta == 1e-7
    with pytest.raises(ConfigError, match="leaves no δ for the release"):
        settings_of(tmp_path, mechanism="gaussian", selection_delta=4e-7)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"delta": 0.0}, "set privacy.delta > 0"),
        ({"constraint": {"time_bounded": "30d"}}, "time bound alone"),
    ],
)
def test_open_keys_refuse_what_cannot_be_bounded(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_of(tmp_path, **change)


def test_without_open_keys_nothing_changes(tmp_path: Path) -> None:
    settings = settings_of(tmp_path)
    declared = dataclasses.replace(
        settings, queries=(Histogram(name="country", column="country", keys=("fr",)),)
    )
    assert declared.selection_delta == 0 and declared.release_delta == declared.budget.delta
    assert key_selections(declared) == {}
    assert "+selection" not in calibrate(declared).guarantee.method


def test_plan_shows_the_threshold_in_text_and_json(tmp_path: Path) -> None:
    from dpcr.report.text import plan_lines

    settings = settings_of(tmp_path)
    report = settings.explain()
    sel = key_selections(settings)["country"]
    assert report.selections == {"country": sel}
    assert report.to_json()["selection"]["country"]["threshold"] == sel.threshold
    assert report.delta <= settings.budget.delta and report.method == "basic+selection"
    text = "\n".join(plan_lines(settings, report))
    assert f"running value reaches {sel.threshold:.6g}" in text
