"""The row-rescaled square root and the open-ended BLT end to end: plan, run, restart reuses
released values, a changed matrix is refused; the default plan is auto."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import dpcr
from dpcr.cli import main
from dpcr.config import load_config
from dpcr.errors import ConfigError
from dpcr.release import rank_plans
from dpcr.store import Store

from .helpers import mutations, write_config, write_jsonl
from .test_tree_plan import CUT, DAILY, run_json

RELEASES = {
    "rescaled": 'plan = "factorization"\nfactorization = "rescaled"\nhorizon = 16\n',
    "blt": 'plan = "factorization"\nfactorization = "blt"\nplanning_horizon = 64\n',
}


def gaussian_config(tmp: Path, release: str) -> str:
    path = write_config(tmp, plan=None, constraint='time_bounded = "3d"')
    text = path.read_text(encoding="utf-8")
    assert DAILY in text and "epsilon = 1.0\n" in text
    text = text.replace(DAILY, DAILY + release).replace(
        "epsilon = 1.0\n", 'epsilon = 1.0\ndelta = 1e-6\nmechanism = "gaussian"\n')
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("kind", sorted(RELEASES))
def test_run_restart_reuses_released_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    log = mutations()
    write_jsonl(tmp_path / "log.jsonl", [m for m in log if m["ts"] < "2025-01-07T00:00:00Z"])
    cfg = gaussian_config(tmp_path, RELEASES[kind])
    config = load_config(cfg)
    assert config.plan.factorization == kind
    first = run_json(capsys, cfg, "--simulate", "1", "--until", CUT)
    n1 = first["summary"]["released_intervals"]
    assert n1 >= 5

    def stored() -> tuple[dict[tuple[str, str, int], int], list[Any]]:
        with Store(config.store_path, fingerprint=config.fingerprint(), mode="simulation") as st:
            return {(r.query, r.key, r.index): r.value for r in st.released()}, st.ledger()

    y1, ledger1 = stored()
    assert len(y1) == 5 * n1 and len(ledger1) == 3  # one vector mechanism per query
    write_jsonl(tmp_path / "log.jsonl", log)
    second = run_json(capsys, cfg, "--simulate", "3", "--until", "2025-01-17T00:00:00Z")
    n2 = second["summary"]["released_intervals"]
    assert n2 > n1 and second["summary"]["new_intervals"] == n2 - n1
    y2, ledger2 = stored()
    assert {k: y2[k] for k in y1} == y1 and ledger2 == ledger1  # never re-noised
    assert [r for r in second["rows"] if r["interval"] <= n1] == first["rows"]
    assert second["summary"]["guarantee"]["spent_epsilon"] <= 1.0

    changed = RELEASES[kind].replace("horizon = 16", "horizon = 17").replace(
        "planning_horizon = 64", "planning_horizon = 65536")
    Path(cfg).write_text(Path(cfg).read_text().replace(RELEASES[kind], changed))
    assert load_config(cfg).fingerprint() != config.fingerprint()


def test_plan_output_and_config_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = gaussian_config(tmp_path, RELEASES["blt"])
    assert main(["plan", cfg]) == 0
    out = capsys.readouterr().out
    assert "exact discrete BLT factorization" in out and "planning horizon of 64" in out
    assert "Plans ranked by the worst running-value std over 64 intervals" in out
    both = RELEASES["blt"] + 'end = "2025-02-01T00:00:00Z"\n'
    with pytest.raises(ConfigError, match="planning_horizon is for open-ended"):
        load_config(gaussian_config(tmp_path, both))
    with pytest.raises(ConfigError, match="finite horizon"):
        load_config(gaussian_config(tmp_path, 'plan = "factorization"\n'
                                              'factorization = "rescaled"\n'))
    with pytest.raises(ConfigError, match="planning_horizon"):
        load_config(gaussian_config(tmp_path, "planning_horizon = 0\n"))


def test_auto_is_the_default_and_uses_the_planning_horizon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without [release] plan the planner chooses: an open-ended Gaussian release gets the BLT
    factorization fitted for its planning horizon (default 1024, or declared)."""
    default = load_config(gaussian_config(tmp_path, ""))
    assert isinstance(default.plan, dpcr.FactorizationRelease)
    assert default.plan.factorization == "blt" and default.plan.planning_horizon == 1024
    declared = load_config(gaussian_config(tmp_path, "planning_horizon = 4096\n"))
    assert declared.plan.planning_horizon == 4096 and declared.horizon == 4096
    assert declared.explain().horizon == 4096
    assert declared.fingerprint() != default.fingerprint()
    # a finite Gaussian year of days: both square roots are candidates, the best one is chosen
    year = load_config(gaussian_config(tmp_path, 'end = "2026-01-01T00:00:00Z"\n'))
    ranked = rank_plans(year)
    assert ranked[0].plan == year.plan
    kinds = {getattr(r.plan, "factorization", None) for r in ranked}
    assert {"sqrt", "rescaled"} <= kinds
    # pure DP: a tree; the choice is part of the plan the store is bound to
    laplace = write_config(tmp_path, plan=None)
    laplace.write_text(laplace.read_text().replace(DAILY, DAILY + 'end = "2026-01-01T00:00:00Z"\n'))
    chosen = load_config(laplace)
    assert isinstance(chosen.plan, dpcr.TreeRelease)
    assert main(["plan", str(laplace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"] == "tree"
