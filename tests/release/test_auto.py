"""``plan = "auto"``: the best running-total plan by the predicted error of the running values."""

from __future__ import annotations

from pathlib import Path

import pytest

import dpcr
from dpcr.cli import main
from dpcr.config import load_config
from dpcr.release import rank_plans
from e2e.helpers import write_config


def test_auto_picks_the_best_ranked_plan_and_is_deterministic(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, plan="auto")
    cfg.write_text(cfg.read_text().replace(
        'period = "1d"\n', 'period = "1d"\nend = "2026-01-01"\n'))
    chosen = load_config(cfg)
    assert not isinstance(chosen.plan, dpcr.DisjointRelease)  # a year of days: a tree wins
    ranked = rank_plans(chosen)
    assert ranked[0].plan == chosen.plan
    assert ranked[0].score <= min(r.score for r in ranked)
    disjoint = next(r for r in ranked if isinstance(r.plan, dpcr.DisjointRelease))
    assert ranked[0].score < 0.8 * disjoint.score
    for r in ranked:  # every candidate is calibrated within the same budget
        assert r.report.epsilon <= 1.0 + 1e-12
    assert load_config(cfg).fingerprint() == chosen.fingerprint()


def test_a_forced_plan_much_worse_than_the_best_is_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, constraint="at_most_k = 1")
    text = cfg.read_text()
    cfg.write_text(text.replace('period = "1d"\n', 'period = "1d"\nend = "2030-01-01"\n'))
    assert main(["plan", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "Plans ranked" in out and "warning: the configured plan" in out
