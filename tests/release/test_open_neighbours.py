"""The neighbouring-changelog harness (:mod:`release.test_neighbours`) over an open histogram.

For D' = a changelog and D = D' without one unit's whole history, released with the noise off
(the stored values are the exact ones the mechanisms perturb, every candidate key's, selected
or not):

* the candidate keys of D are among those of D', and D' has at most n_u more, and the unit adds
  at most c to any key's running count: n_u and c as the threshold is computed with them
  (:func:`dpcr.release._selection.unit_reach`);
* the values of D's candidate keys (every node) and of the other queries differ by a pair loss
  within what the declared mechanism over K_D is calibrated to (docs/privacy.md, section 12):
  the stated ε under Laplace noise; the release's δ₁ at ε under Gaussian noise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpcr
import dpcr.release._draw as release_draw
import dpcr.release._open as release_open
from dpcr.noise import simulation_randomness
from dpcr.release._selection import unit_reach
from e2e.helpers import write_jsonl
from release.test_neighbours import (
    CONSTRAINTS,
    END,
    PLANS,
    adversarial_log,
    busiest_units,
    pair_delta,
    pair_loss,
    released,
    without,
)


@pytest.fixture(autouse=True)
def noise_off(monkeypatch: pytest.MonkeyPatch) -> None:
    identity = lambda values, event, rng: values  # noqa: E731
    monkeypatch.setattr(release_draw, "add_noise", identity)
    monkeypatch.setattr(release_open, "add_noise", identity)


def open_log(seed: int) -> list[dict[str, Any]]:
    """:func:`adversarial_log` with keys some units alone hold: r3's and r4's tickets are in
    zones of their own (``A-r3``, ...), and ticket t1 is in a zone of its own."""
    out = []
    for m in adversarial_log(seed):
        m = dict(m)
        for side in ("before", "after"):
            row = m[side]
            if row is None:
                continue
            row = dict(row)
            if row["rider_id"] in ("r3", "r4"):
                row["zone"] = f"{row['zone']}-{row['rider_id']}"
            if m["entry"] == "t1":
                row["zone"] = "t1-only"
            m[side] = row
        out.append(m)
    return out


def open_release(
    tmp: Path,
    name: str,
    log: list[dict[str, Any]],
    *,
    plan: Any,
    constraint: Any,
    unit: str,
    noise: Any,
) -> dpcr.ContinualRelease:
    folder = tmp / name
    folder.mkdir()
    write_jsonl(folder / "log.jsonl", log)
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=folder / "log.jsonl"),
        unit=unit,
        constraint=constraint,
        plan=plan,
        queries=[
            dpcr.Count(name="active"),
            dpcr.Sum(name="fares", column="fare", lower=0, upper=100, grid=0.5),
            dpcr.Histogram(name="zones", column="zone", open=True),
        ],
        budget=dpcr.Budget(epsilon=1.0, delta=1e-6),
        noise=noise,
        output_dir=folder / "out",
    )  # fmt: skip


def candidate_keys(values: dict[Any, int]) -> set[str]:
    return {key for (query, key, _lv, _i) in values if query == "zones"}


def running(values: dict[Any, int]) -> dict[str, np.ndarray]:
    """A disjoint release's running count of each key, per interval (nodes (0, i))."""
    out: dict[str, np.ndarray] = {}
    for (query, key, layer, index), v in values.items():
        if query == "zones" and layer == 0:
            out.setdefault(key, np.zeros(16, dtype=np.int64))[index - 1] += v
    return {k: np.cumsum(v) for k, v in out.items()}


def pairs(
    tmp: Path, *, plan: Any, constraint: Any, unit: str, noise: Any, candidates: int = 5,
    log: list[dict[str, Any]] | None = None, build: Any = None,
) -> Any:  # fmt: skip
    """(unit, D''s settings, D''s values, D's values, events, report) for the ``candidates``
    units with the most mutations (of ``log``, by default :func:`open_log`) and the units that
    hold keys alone (t1, r3, r4); ``build(tmp, name, log, **kw)`` makes each release (by
    default :func:`open_release`)."""
    log = open_log(7) if log is None else log
    build = open_release if build is None else build
    column = None if unit == "entry" else unit
    kw = {"plan": plan, "constraint": constraint, "unit": unit, "noise": noise}
    full = build(tmp, "Dp", log, **kw)
    full.run(until=END, rng=simulation_randomness(0))
    values_full, events = released(full)
    report = full.explain()
    ranked = busiest_units(log, column)
    chosen = ranked[:candidates]
    chosen += [u for u in ("t1", "r3", "r4") if u in ranked and u not in chosen]
    for i, u in enumerate(chosen):
        other = build(tmp, f"D-{i}", without(log, u, column), **kw)
        other.run(until=END, rng=simulation_randomness(0))
        values_d, _ = released(other)
        yield u, full, values_full, values_d, events, report


BOUNDED = [(c, u) for c in ("at_most_k", "op_limits", "state_machine")
           for u in ("entry", "rider_id")]  # fmt: skip


@pytest.mark.parametrize(("constraint", "unit"), BOUNDED)
def test_candidate_keys_and_a_units_running_contribution(
    tmp_path: Path, constraint: str, unit: str
) -> None:
    most_new = most_added = 0
    for u, s, values_full, values_d, _events, _report in pairs(
        tmp_path,
        plan=PLANS["disjoint"],
        constraint=CONSTRAINTS[constraint],
        unit=unit,
        noise=dpcr.DiscreteLaplace(),
    ):
        n_u, c_max = unit_reach(s)
        k_full, k_d = candidate_keys(values_full), candidate_keys(values_d)
        assert k_d <= k_full, u
        assert len(k_full - k_d) <= n_u, (u, sorted(k_full - k_d))
        most_new = max(most_new, len(k_full - k_d))
        run_full, run_d = running(values_full), running(values_d)
        for key, series in run_full.items():
            added = np.abs(series - run_d.get(key, np.zeros_like(series)))
            assert added.max() <= c_max, (u, key, added.max())
            most_added = max(most_added, int(added.max()))
    assert most_new >= 1 and most_added >= 1  # (the pairs differ: the test can fail)


CASES = [
    ("disjoint", "at_most_k", "entry", "laplace"),
    ("tree", "at_most_k", "rider_id", "laplace"),
    ("window", "state_machine", "entry", "laplace"),
    ("factorization", "op_limits", "entry", "gaussian"),
    ("tree", "op_limits", "rider_id", "gaussian"),
    ("disjoint", "state_machine", "rider_id", "gaussian"),
]


@pytest.mark.parametrize(("plan", "constraint", "unit", "noise"), CASES)
def test_the_values_of_the_smaller_candidate_set_stay_within_the_stated_guarantee(
    tmp_path: Path, plan: str, constraint: str, unit: str, noise: str
) -> None:
    noises = {"laplace": dpcr.DiscreteLaplace(), "gaussian": dpcr.DiscreteGaussian()}
    worst, who = 0.0, ""
    for u, s, values_full, values_d, events, report in pairs(
        tmp_path,
        plan=PLANS[plan],
        constraint=CONSTRAINTS[constraint],
        unit=unit,
        noise=noises[noise],
    ):
        kept = candidate_keys(values_d)
        restricted = {c: v for c, v in values_full.items() if c[0] != "zones" or c[1] in kept}
        if noise == "gaussian":  # the pair's δ at ε within the release's δ₁ (ρ: none stated)
            ratio = pair_delta(s, restricted, values_d, events, s.budget.epsilon) / s.release_delta
        else:
            ratio = pair_loss(s, restricted, values_d, events) / report.epsilon
        if ratio > worst:
            worst, who = ratio, u
    assert 0 < worst <= 1 + 1e-9, f"unit {who}: the pair's loss is {worst:.4g} x the stated one"


#: Every plan with an end, every constraint that caps mutations, unit mode and noise.
ALL_CASES = [
    (plan, con, unit, noise)
    for plan in ("disjoint", "tree", "window", "factorization")
    for con in ("at_most_k", "op_limits", "state_machine")
    for unit in ("entry", "rider_id")
    for noise in ("laplace", "gaussian")
    if not (plan == "factorization" and noise == "laplace")
]


@pytest.mark.slow
@pytest.mark.parametrize(("plan", "constraint", "unit", "noise"), ALL_CASES)
def test_every_case_stays_within_the_stated_guarantee(
    tmp_path: Path, plan: str, constraint: str, unit: str, noise: str
) -> None:
    test_the_values_of_the_smaller_candidate_set_stay_within_the_stated_guarantee(
        tmp_path, plan, constraint, unit, noise
    )


def test_the_harness_catches_an_open_histogram_calibrated_as_a_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry moving between keys changes two of them (L1 = 2): calibrated for L1 = 1, the
    stated ε is below a pair's loss over D's candidate keys, and the harness says so."""
    from fractions import Fraction

    import dpcr.release._calibrate as calibrate_module
    from dpcr.queries import Histogram

    # a ticket moved P -> Q -> R on three days, among tickets that stay in P, Q and R
    def row(e: str, zone: str) -> dict[str, Any]:
        return {"ticket_id": e, "rider_id": "r" + e, "kind": "multi", "zone": zone,
                "fare": 5.0, "rides": 0}  # fmt: skip

    log = [
        {
            "entry": f"s{z}",
            "ts": "2025-01-01T01:00:00Z",
            "seq": i,
            "op": "insert",
            "before": None,
            "after": row(f"s{z}", z),
        }
        for i, z in enumerate("PQR")
    ]
    for day, (old, new) in enumerate([(None, "P"), ("P", "Q"), ("Q", "R")], start=1):
        log.append({"entry": "m", "ts": f"2025-01-0{day}T05:00:00Z", "seq": 10 + day,
                    "op": "insert" if old is None else "update",
                    "before": old and row("m", old), "after": row("m", new)})  # fmt: skip

    def worst(folder: Path) -> float:
        folder.mkdir()
        out = 0.0
        for _u, s, values_full, values_d, events, report in pairs(
            folder, plan=PLANS["disjoint"], constraint=CONSTRAINTS["at_most_k"], unit="entry",
            noise=dpcr.DiscreteLaplace(), log=log, candidates=1,
        ):  # fmt: skip
            kept = candidate_keys(values_d)
            mine = {c: v for c, v in values_full.items() if c[0] == "zones" and c[1] in kept}
            theirs = {c: v for c, v in values_d.items() if c[0] == "zones"}
            # (the histogram's share of ε: one of three queries of equal weight)
            out = max(out, pair_loss(s, mine, theirs, events) / (report.epsilon / 3))
        return out

    assert 0.8 < worst(tmp_path / "good") <= 1 + 1e-9  # (5 of the 6 the calibration allows)
    monkeypatch.setattr(Histogram, "l1_sensitivity", property(lambda self: Fraction(1)))
    monkeypatch.setattr(calibrate_module, "_CALIBRATIONS", {})
    assert worst(tmp_path / "broken") > 1 + 1e-6
