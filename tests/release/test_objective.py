"""``[release] objective``: what plan = "auto" minimises, shown in ``dpcr plan``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpcr.config import parse_config
from dpcr.errors import ConfigError
from dpcr.release import rank_plans
from dpcr.report.text import ranking_lines


def raw(**release: Any) -> dict[str, Any]:
    return {
        "source": {"format": "jsonl", "path": "log.jsonl"},
        "privacy": {"epsilon": 1.0},
        "constraint": {"at_most_k": 4},
        "release": {"start": "2025-01-01", "period": "7d", "end": "2025-12-31", **release},
        "query": [{"name": "n", "kind": "count"}],
    }


def test_final_picks_the_plan_with_the_least_std_at_the_horizon(tmp_path: Path) -> None:
    worst = parse_config(raw(), base_dir=tmp_path)
    final = parse_config(raw(objective="final"), base_dir=tmp_path)
    assert (worst.objective, final.objective) == ("worst", "final")
    ranked = rank_plans(worst)
    by_worst = min(ranked, key=lambda r: r.report.predicted["n"].running_std)
    by_final = min(ranked, key=lambda r: r.report.predicted["n"].final_std)
    assert by_worst.plan != by_final.plan  # this horizon tells the two apart
    assert worst.plan == by_worst.plan and final.plan == by_final.plan
    report = final.explain()
    assert report.objective == "final" and report.to_json()["objective"] == "final"
    assert 'objective = "final"' in ranking_lines(final, report)[0]
    assert 'objective = "worst"' in ranking_lines(worst, worst.explain())[0]


def test_an_unknown_objective_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"release\.objective must be 'worst'") as err:
        parse_config(raw(objective="mean"), base_dir=tmp_path)
    assert "\n" not in str(err.value)
