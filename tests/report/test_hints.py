"""``dpcr plan`` hints when a statistic's predicted noise is what thousands of rows contribute
(issue 33, point 6c): computed from the configuration alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.e2e.helpers import write_config

from dpcr.cli import main
from dpcr.config import load_config


@pytest.mark.parametrize("epsilon", [0.01, 1.0])
def test_plan_hints_only_when_the_noise_swamps_thousands_of_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], epsilon: float
) -> None:
    """ε = 0.01 (daily releases over the planning horizon): every statistic's 95 % interval
    is over 10,000 rows' contribution, one hint each; ε = 1: none. No source exists: nothing
    is read."""
    config = write_config(tmp_path, epsilon=epsilon)
    assert main(["plan", str(config)]) == 0
    hints = [line for line in capsys.readouterr().out.splitlines() if line.startswith("hint:")]
    if epsilon == 1.0:
        assert hints == []
        return
    assert [h.split(":")[1].strip() for h in hints] == ["active", "zones", "fares"]
    assert "the clamp's largest value" in hints[2] and "ε = 0.01" in hints[0]


def test_the_rule_is_the_half_width_against_one_rows_contribution(tmp_path: Path) -> None:
    from dpcr.report.hints import NOISE_HINT_ROWS, noise_hint_lines

    settings = load_config(write_config(tmp_path, epsilon=0.01))
    report = settings.explain()
    lines = noise_hint_lines(settings, report)
    for q, line in zip(settings.queries, lines, strict=True):
        err = report.predicted[q.name]
        width = err.running_half_width or 1.96 * err.running_std
        scale = 100.0 if q.name == "fares" else 1.0  # (fares: a sum clamped to [0, 100])
        assert width >= NOISE_HINT_ROWS * scale
        assert f"the contribution of {width / scale:,.0f} rows" in line
