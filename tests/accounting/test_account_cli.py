"""``dpcr account`` end to end through :func:`dpcr.cli.main`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dpcr.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from e2e.helpers import write_config


def _gaussian(cfg: Path, *, histogram: bool = True) -> Path:
    text = cfg.read_text().replace(
        "epsilon = 1.0", 'epsilon = 1.0\ndelta = 1e-6\nmechanism = "gaussian"'
    )
    if not histogram:
        text = text.replace(
            '[[query]]\nname = "zones"\nkind = "histogram"\ncolumn = "zone"\n'
            'keys = ["A", "B", "C"]\n',
            "",
        )
    cfg.write_text(text)
    return cfg


def test_laplace_every_method_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path)  # hybrid: multi at most 4, monthly 3 days of daily releases
    assert main(["account", str(cfg), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["classes"]) == {"multi", "monthly"}
    assert out["methods"] == ["basic", "advanced", "optimal", "zcdp", "rdp", "pld"]
    worst = out["worst"]
    # pure Laplace with δ = 0: basic is exact and is what dpcr plan states
    assert worst["epsilon"]["basic"] == pytest.approx(1.0)
    assert worst["tightest"] == "basic"
    assert worst["stated"] == {
        "epsilon": worst["epsilon"]["basic"],
        "delta": 0.0,
        "method": "basic",
    }
    assert main(["plan", str(cfg), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["epsilon"], plan["delta"], plan["method"]) == (
        worst["stated"]["epsilon"],
        0.0,
        "basic",
    )
    assert main(["account", str(cfg)]) == 0
    text = capsys.readouterr().out
    assert "worst class" in text and "class multi" in text and "*" in text
    assert "Stated by dpcr plan" in text


def test_gaussian_tightest_is_what_plan_states(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _gaussian(write_config(tmp_path), histogram=False)
    assert main(["account", str(cfg), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    worst = out["worst"]
    eps = {m: v for m, v in worst["epsilon"].items() if v is not None}
    assert set(eps) == {"zcdp", "rdp", "pld"}
    assert worst["tightest"] == "pld" == worst["stated"]["method"]
    assert eps["pld"] == min(eps.values()) <= 1.0
    assert eps["zcdp"] > 1.0  # noise calibrated to PLD: the zCDP conversion would exceed it
    assert main(["plan", str(cfg), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["method"] == "pld" and plan["epsilon"] == eps["pld"]
    assert plan["delta"] == 1e-6
