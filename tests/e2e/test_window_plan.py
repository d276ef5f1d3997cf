"""`plan = "window"` (direct SWCR) end to end: counts, exact windows, restart reuses releases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.store import Store

from .helpers import mutations, per_layer, write_jsonl
from .test_tree_plan import CUT, DAILY, run_json, tree_config


def window(w: str, p: str) -> str:
    return DAILY.replace('period = "1d"\n', f'period = "{p}"\nplan = "window"\nwindow = "{w}"\n')


def test_plan_counts_are_theorems_4_5_and_4_6(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tree_config(tmp_path, window("2d", "1d"))
    assert main(["plan", cfg, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # multi: k ceil(W/P) = 4 * 2; monthly: ceil((B + W) / P) = ceil(5d / 1d)
    assert per_layer(plan) == {"multi": [8], "monthly": [5]}
    assert plan["max_releases_per_unit"] == 8
    assert plan["layers"][0]["share"] == pytest.approx(1 / 8)
    assert 0.99 < plan["epsilon"] <= 1.0
    assert main(["plan", cfg]) == 0
    text = capsys.readouterr().out
    assert "sliding window (SWCR)" in text and "direct window (SWCR)" in text


def prefix(rows: list[dict[str, Any]]) -> dict[tuple[str, str, int], float]:
    return {(r["query"], r["key"], r["interval"]): r["estimate"] for r in rows}


@pytest.mark.parametrize("w,p,days_w,days_p", [("2d", "1d", 2, 1), ("3d", "2d", 3, 2)])
def test_windows_are_exact_changes_and_restart_reuses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], w: str, p: str, days_w: int, days_p: int
) -> None:
    """With a huge budget the count/histogram windows carry noise 0 (ε per window >= 1200), so
    each must equal the difference of the disjoint release's exact running totals."""
    log = mutations()
    dcr, win = tmp_path / "dcr", tmp_path / "win"
    dcr.mkdir()
    win.mkdir()
    write_jsonl(dcr / "log.jsonl", log)
    write_jsonl(win / "log.jsonl", [m for m in log if m["ts"] < "2025-01-07T00:00:00Z"])
    exact = prefix(run_json(capsys, tree_config(dcr, DAILY, epsilon=28800), "--simulate", "1")[
        "rows"])
    cfg = tree_config(win, window(w, p), epsilon=28800)

    first = run_json(capsys, cfg, "--simulate", "2", "--until", CUT)
    n1 = first["summary"]["released_intervals"]
    assert n1 >= 2 and first["summary"]["new_intervals"] == n1
    write_jsonl(win / "log.jsonl", log)
    second = run_json(capsys, cfg, "--simulate", "3")
    n2 = second["summary"]["released_intervals"]
    assert n2 > n1 and second["summary"]["new_intervals"] == n2 - n1
    assert [r for r in second["rows"] if r["interval"] <= n1] == first["rows"]

    for r in second["rows"]:
        if r["query"] == "fares":
            continue
        hi, lo = r["interval"] * days_p, r["interval"] * days_p - days_w
        want = exact[(r["query"], r["key"], hi)] - exact.get((r["query"], r["key"], lo), 0.0)
        assert r["estimate"] == want, r
    config = load_config(cfg)
    with Store(config.store_path, fingerprint=config.fingerprint(), mode="simulation") as st:
        assert st.source_state().interval == n2
        assert len(st.ledger()) == 3 * n2  # one ledger row per window and query
    assert second["summary"]["guarantee"]["spent_epsilon"] <= 28800
