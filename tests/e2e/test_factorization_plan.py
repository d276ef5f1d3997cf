"""`plan = "factorization"` end to end: plan, run, restart reuses released values, exactness."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.errors import ConfigError, StoreError
from dpcr.store import Store

from .helpers import mutations, write_jsonl
from .test_tree_plan import CUT, DAILY, run_json, tree_config

FACT = DAILY.replace('period = "1d"\n', 'period = "1d"\nplan = "factorization"\nhorizon = 16\n')
GAUSS = 'epsilon = {eps}\ndelta = 1e-6\nmechanism = "gaussian"\n'


def fact_config(tmp: Path, release: str = FACT, *, epsilon: float = 1.0) -> str:
    cfg = tree_config(tmp, release, epsilon=epsilon)
    text = Path(cfg).read_text(encoding="utf-8")
    old = f"epsilon = {epsilon}\n"
    if old not in text:
        raise AssertionError("helpers.write_config changed its [privacy] table")
    Path(cfg).write_text(text.replace(old, GAUSS.format(eps=epsilon)), encoding="utf-8")
    return cfg


def test_plan_states_one_gaussian_mechanism(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = fact_config(tmp_path)
    assert main(["plan", cfg, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # the vector is accounted through its continuous surrogate (docs/privacy.md, section 6c)
    assert plan["plan"] == "factorization" and plan["method"] == "pld"
    assert 0.99 < plan["epsilon"] <= 1.0
    layer = plan["layers"][0]
    # multi: at most 4 intervals; monthly: B = 3d, W = 1d: ceil(3) + 1 = 4 (a run)
    assert layer["instances_per_unit"] == 1  # one vector release
    details = plan["details"]
    assert details["participations"] == {"multi": 4, "monthly": 4}
    # the integer C' loses almost nothing against the real square root (sens^2 = 21.413)
    assert details["sensitivity"]["multi"] ** 2 == pytest.approx(21.413, abs=1e-3)
    assert main(["plan", cfg]) == 0
    text = capsys.readouterr().out
    assert "exact discrete square-root factorization" in text and "Guarantee" in text
    assert "sqrt Toeplitz" in text  # the planner's candidate table


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"exactly one of release\.end or release\.horizon"):
        load_config(fact_config(tmp_path, FACT.replace("horizon = 16\n", "")))
    both = FACT.replace("horizon = 16\n", 'horizon = 16\nend = "2025-02-01T00:00:00Z"\n')
    with pytest.raises(ConfigError, match="exactly one"):
        load_config(fact_config(tmp_path, both))
    end = FACT.replace("horizon = 16\n", 'end = "2025-01-17T00:00:00Z"\n')
    assert load_config(fact_config(tmp_path, end)).plan == load_config(fact_config(tmp_path)).plan
    laplace = tree_config(tmp_path, FACT)  # the helper's default mechanism is Laplace
    assert main(["plan", laplace]) == 2
    with pytest.raises(ConfigError, match="Gaussian noise only"):
        load_config(laplace)


def test_run_restart_reuses_released_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = mutations()
    write_jsonl(tmp_path / "log.jsonl", [m for m in log if m["ts"] < "2025-01-07T00:00:00Z"])
    cfg = fact_config(tmp_path)
    first = run_json(capsys, cfg, "--simulate", "1", "--until", CUT)
    n1 = first["summary"]["released_intervals"]
    assert n1 >= 5 and first["summary"]["plan"]["kind"] == "factorization"
    config = load_config(cfg)

    def stored() -> tuple[dict[tuple[str, str, int], int], list[Any]]:
        with Store(config.store_path, fingerprint=config.fingerprint(), mode="simulation") as st:
            return {(r.query, r.key, r.index): r.value for r in st.released()}, st.ledger()

    y1, ledger1 = stored()
    assert len(y1) == 5 * n1 and [(lv, i, q) for lv, i, q, _ in ledger1] == [
        (0, 1, "active"),
        (0, 1, "fares"),
        (0, 1, "zones"),
    ]
    again = run_json(capsys, cfg, "--simulate", "2", "--until", CUT)  # nothing new to draw
    assert again["summary"]["new_intervals"] == 0 and again["rows"] == first["rows"]

    write_jsonl(tmp_path / "log.jsonl", log)  # append the rest
    second = run_json(capsys, cfg, "--simulate", "3")
    n2 = second["summary"]["released_intervals"]
    assert n1 < n2 <= 16 and second["summary"]["new_intervals"] == n2 - n1
    y2, ledger2 = stored()
    assert {k: y2[k] for k in y1} == y1  # released once, never re-noised
    assert ledger2 == ledger1  # one event for the whole plan: the restart added none
    # running totals of old intervals depend on y_1 .. y_t only: unchanged
    assert [r for r in second["rows"] if r["interval"] <= n1] == first["rows"]
    assert (
        second["summary"]["guarantee"]["spent_epsilon"]
        == pytest.approx(first["summary"]["guarantee"]["spent_epsilon"])
        and second["summary"]["guarantee"]["spent_epsilon"] <= 1.0
    )

    # a changed plan is refused by the store's fingerprint
    Path(cfg).write_text(Path(cfg).read_text().replace("horizon = 16", "horizon = 17"))
    with pytest.raises(StoreError, match="different plan"):
        from dpcr.noise import simulation_randomness

        load_config(cfg).run(rng=simulation_randomness(4))


def test_huge_budget_gives_exact_running_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """eps = 9 * 10^5 (near the largest budget dpcr accepts): the noise of y is ~6000 against the
    scale 2^20, so count and histogram estimates are within a few hundredths of the exact running
    totals (a disjoint release whose Laplace noise is 0 with probability 1 - e^-1000): rounded,
    they ARE the exact totals (error > 0.5 is > 10 reported stds). The clamped sum (sensitivity
    10^4 grid units) is checked to 6 reported stds (false failure 2e-9 per row)."""
    write_jsonl(tmp_path / "log.jsonl", mutations())
    dcr, fact = tmp_path / "dcr", tmp_path / "fact"
    for d in (dcr, fact):
        d.mkdir()
        (d / "log.jsonl").write_text((tmp_path / "log.jsonl").read_text())
    a = run_json(capsys, tree_config(dcr, DAILY, epsilon=900000), "--simulate", "5")
    b = run_json(capsys, fact_config(fact, epsilon=900000), "--simulate", "6")
    want = {(r["query"], r["key"], r["interval"]): r for r in a["rows"]}
    got = {(r["query"], r["key"], r["interval"]): r for r in b["rows"]}
    assert got.keys() == {k for k in want if k[2] <= 16}
    for k, r in got.items():
        exact = want[k]
        if k[0] == "fares":
            assert abs(r["estimate"] - exact["estimate"]) <= 6 * r["std_estimate"]
            assert abs(r["change"] - exact["change"]) <= 6 * r["std_change"]
        else:
            assert r["std_estimate"] < 0.05 and r["std_change"] < 0.05
            assert round(r["estimate"]) == exact["estimate"]
            assert round(r["change"]) == exact["change"]
