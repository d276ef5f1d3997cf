"""Open keys with seeded noise: how often a key one unit alone holds is published, through the
real release path, against its exact probability (and that against δ₂, the bound ``dpcr plan``
states).

Forty units each hold a key of their own from day 1 (so each key's running value is 1 on both
days of a disjoint two-day release); every key has its own noise, so each seeded run gives 40
independent trials. The exact probability that such a key is published is that of the random
walk 1 + S_t (S_t the sum of t discrete Laplace node noises of the calibrated event) reaching
τ on day 1 or 2, computed by convolution here.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import dpcr
from dpcr.noise import simulation_randomness
from dpcr.release._calibrate import calibrate
from dpcr.release._selection import key_selections
from e2e.helpers import write_jsonl

UNITS = 40
RUNS = 100
DAYS = 2


def release(tmp: Path, name: str) -> dpcr.ContinualRelease:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=dpcr.AtMostK(k=1),
        plan=dpcr.DisjointRelease(start="2025-01-01T00:00:00Z", period="1d",
                                  end=f"2025-01-{DAYS + 1:02d}T00:00:00Z"),
        queries=[dpcr.Histogram(name="zones", column="zone", open=True)],
        budget=dpcr.Budget(epsilon=0.5, delta=0.99),
        output_dir=tmp / name,
    )  # fmt: skip


def exact_probability(settings: dpcr.ContinualRelease, tau: float) -> float:
    """P(1 + S_t >= tau for some t <= DAYS), S_t a sum of t i.i.d. discrete Laplace noises."""
    event = calibrate(settings).layers[0]["zones"]
    q = math.exp(-1 / float(event.scale))
    radius = int(80 * float(event.scale)) + 10
    pmf = (1 - q) / (1 + q) * q ** np.abs(np.arange(-radius, radius + 1))
    width = DAYS * radius
    alive = np.zeros(2 * width + 1)
    alive[width] = 1.0
    published = 0.0
    for _ in range(DAYS):
        alive = np.convolve(alive, pmf)[radius : radius + alive.size]
        hit = 1 + (np.arange(alive.size) - width) >= tau
        published += alive[hit].sum()
        alive[hit] = 0.0
    return float(published)


@pytest.mark.slow
def test_a_key_one_unit_holds_is_published_as_often_as_its_exact_probability(
    tmp_path: Path,
) -> None:
    log = [{"entry": f"u{i}", "ts": "2025-01-01T10:00:00Z", "seq": i + 1, "op": "insert",
            "before": None, "after": {"zone": f"k{i}"}} for i in range(UNITS)]  # fmt: skip
    write_jsonl(tmp_path / "log.jsonl", log)
    settings = release(tmp_path, "plan")
    sel = key_selections(settings)["zones"]
    assert sel.count_per_unit == 1
    p = exact_probability(settings, sel.threshold)
    assert 0.005 < p <= sel.delta / sel.keys_per_unit  # the bound holds for one key, not vacuously
    published = 0
    for seed in range(RUNS):
        run = release(tmp_path, f"run{seed}")
        run.run(until=f"2025-01-{DAYS + 1:02d}T00:00:00Z", rng=simulation_randomness(seed))
        with open(run.output_dir / "simulation" / "releases.csv", encoding="utf-8") as f:
            keys = {line.split(",")[1] for line in f.read().splitlines()[1:]}
        published += len(keys)
    n = UNITS * RUNS
    # two-sided binomial tolerance, false-failure rate < 1e-6 (z = 5; +1 for the discreteness)
    tolerance = 5 * math.sqrt(n * p * (1 - p)) + 1
    assert abs(published - n * p) <= tolerance, (published, n * p, tolerance)
