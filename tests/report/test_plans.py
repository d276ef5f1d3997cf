"""Every plan kind's report: the sections render, the numbers are the store's, and in a
simulation the true series is the one the published values estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.release import stored_result
from dpcr.report.html import SECTIONS
from e2e.helpers import mutations, write_config, write_jsonl

from .helpers import embedded

DAILY = 'period = "1d"\n'
PLANS = {
    "disjoint": DAILY + 'plan = "disjoint"\n',
    "tree": DAILY + 'plan = "tree"\nbranching = 4\n',
    "window": DAILY + 'plan = "window"\nwindow = "3d"\n',
    "factorization": DAILY + 'plan = "factorization"\nhorizon = 16\n',
}
#: A seeded simulation whose every error is within 10 stds: for Laplace noise (the heaviest tail
#: here) P(|Z| > 10σ) = exp(-10·√2) < 10^-6 per value, so a seed that fails this is a bug.
WITHIN = 10.0


@pytest.mark.parametrize("kind", list(PLANS))
def test_report_of_every_plan_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations(n_entries=40, days=12, seed=9))
    cfg = write_config(tmp_path, plan=None)
    text = cfg.read_text(encoding="utf-8").replace(DAILY, PLANS[kind], 1)
    if kind == "factorization":
        text = text.replace("epsilon = 1.0\n", 'epsilon = 1.0\ndelta = 1e-6\nmechanism = '
                            '"gaussian"\n', 1)
    cfg.write_text(text, encoding="utf-8")
    settings = load_config(cfg)
    assert settings.plan.kind == kind
    assert main(["run", str(cfg), "--until", "2025-01-14", "--quiet", "--simulate", "5"]) == 0
    capsys.readouterr()
    html = (tmp_path / "out" / "simulation" / "report.html").read_text(encoding="utf-8")
    for name in SECTIONS:
        assert f'<section id="{name}">' in html
    data = embedded(html)
    assert data["rows"] == stored_result(settings, simulation=True).records()
    assert bool(data["ranking"]) == (kind != "window")  # windows are not running totals
    truth = {(t["query"], t["key"], t["interval"]): t["value"] for t in data["truth"]}
    assert len(truth) == len(data["rows"]) == 13 * 5
    for r in data["rows"]:
        error = r["estimate"] - truth[(r["query"], r["key"], r["interval"])]
        assert abs(error) <= WITHIN * r["std_estimate"] + 1e-9, (kind, r)
    spent = data["budget"][-1]["spent_epsilon"]
    assert spent == pytest.approx(data["summary"]["guarantee"]["spent_epsilon"], rel=1e-12)
