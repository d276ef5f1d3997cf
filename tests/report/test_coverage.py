"""In a simulation, the report's 95 % bands cover the truth at their nominal rate.

A sliding-window plan releases every window (and every histogram key) with its own independent
noise draw, so the N = windows × keys coverage indicators of one seeded simulation are
independent Bernoulli(p), where p = P(|Z| ≤ 1.96·std) is computed exactly from the noise's pmf
(discrete Gaussian: ∝ exp(-z²/2σ²); discrete Laplace: ∝ exp(-|z|/s)) and the band's std (read
from the report). The observed count must lie in the central region of Binomial(N, p) that has
probability ≥ 1 − 10^-6 (10^-6 / 2 in each tail, from scipy's exact binomial quantiles): a
correct report fails this test with probability at most 10^-6. Separately, p itself is the
nominal 0.95 up to the noise's discreteness: within 0.005 for the discrete Gaussian at these
scales, and 0.93-0.95 for a single discrete Laplace draw (docs/report.md).
"""

from __future__ import annotations

import json
import math
import random
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import binom

from dpcr.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dpcr.cli import main
from dpcr.config import load_config
from dpcr.report.html import Z95

from .helpers import embedded

KEYS = [f"k{i:03d}" for i in range(100)]
FALSE_FAILURE = 1e-6


def _changelog(path: Path, *, entries: int = 1500, seed: int = 4) -> None:
    """Entries inserted over January with a key each; some move to another key, some end."""
    rnd = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for e in range(entries):
        day, hour = rnd.randint(1, 28), rnd.randint(0, 23)
        row = {"key": rnd.choice(KEYS)}
        rows.append({"entry": f"e{e}", "ts": f"2025-01-{day:02d}T{hour:02d}:00:00Z",
                     "seq": 3 * e + 1, "op": "insert", "before": None, "after": row})
        if rnd.random() < 0.5 and day < 28:
            new = {"key": rnd.choice(KEYS)}
            rows.append({"entry": f"e{e}", "ts": f"2025-01-{day + 1:02d}T{hour:02d}:00:00Z",
                         "seq": 3 * e + 2, "op": "update", "before": row, "after": new})
            row = new
        if rnd.random() < 0.3 and day < 27:
            rows.append({"entry": f"e{e}", "ts": f"2025-01-{day + 2:02d}T{hour:02d}:00:00Z",
                         "seq": 3 * e + 3, "op": "delete", "before": row, "after": None})
    rows.sort(key=lambda r: (r["ts"], r["seq"]))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _config(tmp: Path, mechanism: str) -> Path:
    keys = ", ".join(f'"{k}"' for k in KEYS)
    text = textwrap.dedent(
        f"""
        [source]
        format = "jsonl"
        path = "log.jsonl"

        [privacy]
        epsilon = 1.0
        delta = {1e-6 if mechanism == "gaussian" else 0}
        mechanism = "{mechanism}"

        [constraint]
        at_most_k = 3

        [release]
        plan = "window"
        start = "2025-01-01T00:00:00Z"
        period = "1d"
        window = "2d"

        [[query]]
        name = "by_key"
        kind = "histogram"
        column = "key"
        keys = [{keys}]

        [output]
        dir = "out"
        """
    )
    path = tmp / "dpcr.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _coverage_probability(event: object, std: float) -> float:
    """P(|Z| ≤ Z95·std) for the event's integer noise Z, exactly (tails beyond 60 std are
    below 10^-300)."""
    half = math.floor(Z95 * std)
    z = np.arange(-math.ceil(60 * std) - 1, math.ceil(60 * std) + 2, dtype=np.float64)
    if isinstance(event, DiscreteGaussianEvent):
        logw = -(z ** 2) / (2 * float(event.sigma2))
    elif isinstance(event, DiscreteLaplaceEvent):
        logw = -np.abs(z) / float(event.scale)
    else:
        raise AssertionError(f"unexpected event {event!r}")
    w = np.exp(logw - logw.max())
    return float(w[np.abs(z) <= half].sum() / w.sum())


@pytest.mark.parametrize(("mechanism", "nominal"), [("gaussian", (0.945, 0.955)),
                                                   ("laplace", (0.93, 0.955))])
def test_bands_cover_the_truth_at_the_nominal_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mechanism: str,
    nominal: tuple[float, float],
) -> None:
    _changelog(tmp_path / "log.jsonl")
    cfg = _config(tmp_path, mechanism)
    assert main(["run", str(cfg), "--until", "2025-02-01", "--simulate", "20251124",
                 "--quiet"]) == 0
    capsys.readouterr()
    data = embedded((tmp_path / "out" / "simulation" / "report.html").read_text())
    truth = {(t["key"], t["interval"]): t["value"] for t in data["truth"]}
    rows = data["rows"]
    n = len(rows)
    assert n == 31 * len(KEYS)
    stds = {r["std_estimate"] for r in rows}
    assert len(stds) == 1  # one layer: every window has the same noise
    std = stds.pop()
    event = load_config(cfg).explain().layers[0].events["by_key"]
    p = _coverage_probability(event, std)
    assert nominal[0] <= p <= nominal[1], p
    covered = sum(
        abs(r["estimate"] - truth[(r["key"], r["interval"])]) <= Z95 * r["std_estimate"]
        for r in rows
    )
    lo = binom.ppf(FALSE_FAILURE / 2, n, p)
    hi = binom.isf(FALSE_FAILURE / 2, n, p)
    assert lo <= covered <= hi, (covered, n, p, lo, hi)
