"""Empirical audits: Clopper-Pearson against scipy, mechanism-level audits (a correct Laplace count
stays below its claim; noise 2x too small is caught), and pipeline audits of release plans."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpcr.analysis.audit import (
    audit_laplace,
    audit_pipeline,
    audit_samples,
    betainc,
    clopper_pearson,
)
from dpcr.config import load_config
from dpcr.errors import ConfigError
from dpcr.noise import simulation_randomness
from e2e.helpers import mutations, write_config, write_jsonl


@pytest.mark.parametrize(("k", "n"), [(0, 10), (1, 10), (7, 10), (10, 10), (500, 1000),
                                      (49000, 800000), (3, 100000)])
def test_clopper_pearson_matches_scipy(k: int, n: int) -> None:
    from scipy.stats import beta

    lo, hi = clopper_pearson(k, n, 0.025)
    ref_lo = 0.0 if k == 0 else beta.ppf(0.025, k, n - k + 1)
    ref_hi = 1.0 if k == n else beta.ppf(0.975, k + 1, n - k)
    assert lo == pytest.approx(ref_lo, rel=1e-9, abs=1e-15)
    assert hi == pytest.approx(ref_hi, rel=1e-9, abs=1e-15)
    assert lo <= ref_lo + 1e-12 and hi >= ref_hi - 1e-12  # conservative side


def test_betainc_matches_scipy() -> None:
    from scipy.special import betainc as ref

    for a, b, x in [(1, 1, 0.3), (2.5, 7, 0.1), (300, 20, 0.93), (5e4, 7e5, 0.066)]:
        assert betainc(a, b, x) == pytest.approx(ref(a, b, x), rel=1e-9, abs=1e-14)


def test_correct_laplace_count_stays_below_claim() -> None:
    result = audit_laplace(epsilon=1.0, runs=40_000, rng=simulation_randomness(1))
    assert not result.violated
    assert 0.7 < result.epsilon_lower <= 1.0  # the tight test is in benchmarks/analysis.py


def test_noise_too_small_by_2x_is_caught() -> None:
    result = audit_laplace(epsilon=1.0, runs=20_000, rng=simulation_randomness(2), noise_factor=0.5)
    assert result.violated
    assert result.epsilon_lower > 1.5


def test_identical_distributions_give_no_evidence() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=5000), rng.normal(size=5000)
    result = audit_samples(x, y, epsilon_claimed=0.1)
    assert result.epsilon_lower < 0.1


def test_audit_rejects_tiny_samples() -> None:
    with pytest.raises(ConfigError):
        audit_samples(np.zeros(3), np.zeros(3), epsilon_claimed=1.0)


# --- pipeline audits ------------------------------------------------------------------------------


def _release(tmp: Path, *, mechanism: str = "", constraint: str = "at_most_k = 2") -> Path:
    """Helper changelog plus one entry 'audited' inserted and deleted, at the fare cap, so its
    history reaches the sensitivity of every query (the audit can be near tight)."""
    rows = mutations(n_entries=12)
    seq = 10_000
    for day, op, before, after in [
        (2, "insert", None, {"ticket_id": "audited", "rider_id": "r9", "kind": "multi",
                             "zone": "B", "fare": 100.0, "rides": 0}),
        (4, "delete", {"ticket_id": "audited", "rider_id": "r9", "kind": "multi", "zone": "B",
                       "fare": 100.0, "rides": 0}, None),
    ]:
        seq += 1
        rows.append({"entry": "audited", "ts": f"2025-01-{day:02d}T05:00:00Z", "seq": seq,
                     "op": op, "before": before, "after": after})
    rows.sort(key=lambda m: (m["ts"], m["seq"]))
    write_jsonl(tmp / "log.jsonl", rows)
    path = write_config(tmp, constraint=constraint)
    if mechanism:
        text = path.read_text().replace("epsilon = 1.0", "epsilon = 1.0\n" + mechanism)
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("mechanism", "constraint"),
    [
        ("", "at_most_k = 2"),
        ("", 'time_bounded = "3d"'),
        ('mechanism = "gaussian"\ndelta = 1e-6', "at_most_k = 2"),
    ],
)
def test_pipeline_audit_stays_below_claim_and_catches_broken_noise(
    tmp_path: Path, mechanism: str, constraint: str
) -> None:
    config = load_config(_release(tmp_path, mechanism=mechanism, constraint=constraint))
    result, pair = audit_pipeline(config, runs=20_000, rng=simulation_randomness(5),
                                  unit="audited")
    assert pair.unit == "audited" and len(pair.coordinates) >= 2
    assert not result.violated, result
    assert result.epsilon_lower > 0.2  # the audit sees the entry
    if not mechanism and "at_most_k" in constraint:
        # the audited entry reaches the worst case of at-most-2 (not of the 3-day bound, whose
        # worst entry spans four intervals), so 2x-too-small noise must show
        broken, _ = audit_pipeline(config, runs=20_000, rng=simulation_randomness(6),
                                   unit="audited", noise_factor=0.5)
        assert broken.violated, broken


def test_pipeline_audit_default_unit(tmp_path: Path) -> None:
    config = load_config(_release(tmp_path))
    result, pair = audit_pipeline(config, runs=2000, rng=simulation_randomness(7))
    assert pair.unit and not result.violated


def test_pipeline_audit_unknown_unit(tmp_path: Path) -> None:
    config = load_config(_release(tmp_path))
    with pytest.raises(ConfigError, match="no mutations"):
        audit_pipeline(config, runs=100, rng=simulation_randomness(7), unit="nobody")


def test_pipeline_audit_searches_the_worst_unit(tmp_path: Path) -> None:
    """Without --unit the audit tries the most active units and keeps the one whose pair loses
    the most with the noise off, which never exceeds the claim."""
    from dpcr.analysis.audit import neighbouring_totals

    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = write_config(tmp_path)
    cfg.write_text(cfg.read_text().replace('period = "1d"', 'period = "1d"\nend = "2025-01-17"'))
    config = load_config(cfg)
    worst = neighbouring_totals(config, candidates=30)
    assert worst.searched == 30 and worst.loss > 0
    for unit in ("t0", "t1", "t2"):
        assert neighbouring_totals(config, unit=unit).loss <= worst.loss
    assert worst.loss <= config.explain().epsilon + 1e-12
