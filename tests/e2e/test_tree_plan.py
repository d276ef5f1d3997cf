"""`plan = "tree"` end to end: plan, run, restart with appended data (old nodes reused)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.errors import ConfigError
from dpcr.store import Store

from .helpers import mutations, per_layer, releases_per_class, write_config, write_jsonl

DAILY = '[release]\nstart = "2025-01-01T00:00:00Z"\nperiod = "1d"\n'


def tree_config(tmp: Path, release: str, *, epsilon: float = 1.0, name: str = "dpcr.toml") -> str:
    path = write_config(tmp, epsilon=epsilon, name=name, plan=None)
    text = path.read_text(encoding="utf-8")
    if "plan = " not in release:  # the disjoint plan, explicitly (the default is auto)
        release += 'plan = "disjoint"\n'
    if DAILY not in text:
        raise AssertionError("helpers.write_config changed its [release] table")
    path.write_text(text.replace(DAILY, release), encoding="utf-8")
    return str(path)


#: The public clock of these tests: every interval of the small changelog is closed by then.
END = "2025-01-17T00:00:00Z"
CUT = "2025-01-07T00:00:00Z"


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """``dpcr run --json``; the clock is ``--until END`` unless the test gives one."""
    clock = [] if "--until" in args else ["--until", END]
    assert main(["run", *args, *clock, "--json", "--quiet"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


TREE_H4 = DAILY.replace('period = "1d"\n', 'period = "1d"\nplan = "tree"\nheight = 4\n')
GROWING = DAILY.replace('period = "1d"\n', 'period = "1d"\nplan = "tree"\nestimator = "plain"\n')


def test_plan_counts_from_filters_and_candidate_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tree_config(tmp_path, TREE_H4)  # no changelog needed: the plan reads no data
    assert main(["plan", cfg, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # multi: at most 4 mutations -> 4 nodes per layer (h k = 16); monthly: B = 3d, W = 1d:
    # ceil(3 / 2^l) + 1 = 4, 3, 2, 2 (erratum 1; the paper's sum(3/2^l + 1) = 9.625 is too small)
    assert per_layer(plan) == {"multi": [4, 4, 4, 4], "monthly": [4, 3, 2, 2]}
    assert releases_per_class(plan) == {"multi": 16, "monthly": 11}
    assert plan["epsilon"] <= 1.0 and plan["epsilon"] > 0.99
    assert {layer["share"] for layer in plan["layers"]} == {1 / 16}
    assert main(["plan", cfg]) == 0
    text = capsys.readouterr().out
    assert "tree release (HDCR)" in text and "Guarantee" in text
    assert "tree c=2 + Honaker" in text and "disjoint (DCR)" in text  # Plan.table()


def test_growing_tree_plan_spends_telescoping_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tree_config(tmp_path, GROWING)
    assert main(["plan", cfg, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    shares = [layer["share"] for layer in plan["layers"]]
    assert shares[0] == pytest.approx(1 / 2 / 4)  # 1/((0+1)(0+2)), split over 4 nodes
    assert shares[1] == pytest.approx(1 / 6 / 4)
    assert plan["tail_share"] == pytest.approx(1 / 65)
    assert plan["epsilon"] <= 1.0


def test_run_restart_reuses_released_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = mutations()
    first_part = [m for m in log if m["ts"] < "2025-01-07T00:00:00Z"]
    write_jsonl(tmp_path / "log.jsonl", first_part)
    cfg = tree_config(tmp_path, TREE_H4)

    first = run_json(capsys, cfg, "--simulate", "1", "--until", CUT)
    n1 = first["summary"]["released_intervals"]
    assert n1 >= 5 and first["summary"]["plan"]["kind"] == "tree"
    config = load_config(cfg)
    with Store(config.store_path, fingerprint=config.fingerprint(), mode="simulation") as st:
        nodes1 = {(n.query, n.key, n.layer, n.index): n.value for n in st.released()}
        ledger1 = st.ledger()
    # every node closed by n1 base intervals, once per query key (5 keys in all)
    closed = [(0, j) for j in range(n1)] + [(1, j) for j in range(n1 // 2)]
    closed += [(2, j) for j in range(n1 // 4)]
    assert sorted({(lv, i) for _, _, lv, i in nodes1}) == sorted(closed)
    assert len(nodes1) == 5 * len(closed) and len(ledger1) == 3 * len(closed)

    again = run_json(capsys, cfg, "--simulate", "2", "--until", CUT)  # nothing new to draw
    assert again["summary"]["new_intervals"] == 0 and again["summary"]["plan"]["new_nodes"] == 0
    assert again["rows"] == first["rows"]

    write_jsonl(tmp_path / "log.jsonl", log)  # append the rest of the changelog
    second = run_json(capsys, cfg, "--simulate", "3")
    n2 = second["summary"]["released_intervals"]
    assert n2 > n1 and second["summary"]["new_intervals"] == n2 - n1
    with Store(config.store_path, fingerprint=config.fingerprint(), mode="simulation") as st:
        nodes2 = {(n.query, n.key, n.layer, n.index): n.value for n in st.released()}
    assert {k: nodes2[k] for k in nodes1} == nodes1  # never re-noised
    assert len(nodes2) > len(nodes1)
    # earlier running totals only use nodes closed by then: unchanged by the restart
    old = [r for r in second["rows"] if r["interval"] <= n1]
    assert old == first["rows"]
    by_interval = {(r["query"], r["key"], r["interval"]): r for r in second["rows"]}
    assert len(by_interval) == 5 * n2
    assert second["summary"]["guarantee"]["spent_epsilon"] <= 1.0


def exact_running(rows: list[dict[str, Any]]) -> dict[tuple[str, str, int], float]:
    return {(r["query"], r["key"], r["interval"]): r["estimate"] for r in rows}


@pytest.mark.parametrize("estimator", ["honaker", "plain"])
def test_estimates_match_disjoint_release_without_noise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], estimator: str
) -> None:
    """With an enormous budget the count and histogram nodes get noise 0 (ε per node >= 600:
    P[noise != 0] = 2q/(1+q) with q <= e^-300), so the tree's running totals must equal the
    disjoint release's exact prefix sums. (The clamped sum has sensitivity 10^4 grid units.)"""
    write_jsonl(tmp_path / "log.jsonl", mutations())
    dcr = tmp_path / "dcr"
    tree = tmp_path / "tree"
    dcr.mkdir()
    tree.mkdir()
    (dcr / "log.jsonl").write_text((tmp_path / "log.jsonl").read_text())
    (tree / "log.jsonl").write_text((tmp_path / "log.jsonl").read_text())
    release = TREE_H4.replace("height = 4\n", f'height = 3\nestimator = "{estimator}"\n')
    a = run_json(capsys, tree_config(dcr, DAILY, epsilon=28800), "--simulate", "5")
    b = run_json(capsys, tree_config(tree, release, epsilon=28800), "--simulate", "6")
    want = {k: v for k, v in exact_running(a["rows"]).items() if k[0] != "fares"}
    got = {k: v for k, v in exact_running(b["rows"]).items() if k[0] != "fares"}
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-6)
    stds = {r["interval"]: r["std_estimate"] for r in b["rows"] if r["query"] == "active"}
    assert all(math.isfinite(s) and s >= 0 for s in stds.values())


def test_gaussian_tree_and_reported_std(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = tree_config(tmp_path, TREE_H4)
    text = Path(cfg).read_text().replace("epsilon = 1.0\n", 'epsilon = 1.0\ndelta = 1e-6\n'
                                         'mechanism = "gaussian"\n')
    Path(cfg).write_text(text)
    assert main(["plan", cfg, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # histogram nodes are vectors: their continuous surrogate (docs/privacy.md, section 6c)
    assert plan["method"] == "pld" and plan["epsilon"] <= 1.0
    result = run_json(capsys, cfg, "--simulate", "7")
    node_std = plan["layers"][0]["noise_std"]["active"]
    rows = {r["interval"]: r for r in result["rows"] if r["query"] == "active"}
    # interval 1 is one leaf; Honaker never does worse than the plain sum of the canonical nodes
    assert rows[1]["std_estimate"] == pytest.approx(node_std)
    assert rows[4]["std_estimate"] < node_std  # [0, 4) is one layer-2 node, refined by its leaves


def test_tree_config_errors(tmp_path: Path) -> None:
    bad = TREE_H4.replace("height = 4\n", "height = 4\nbranching = 1\n")
    with pytest.raises(ConfigError, match="branching"):
        load_config(tree_config(tmp_path, bad))
    bad = TREE_H4.replace("height = 4\n", 'estimator = "median"\n')
    with pytest.raises(ConfigError, match="estimator"):
        load_config(tree_config(tmp_path, bad))
    bad = TREE_H4.replace("height = 4\n", "height = 4\nwindow = \"2d\"\n")
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(tree_config(tmp_path, bad))


def test_demo_data_tree_and_window_plans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bundled transit demo (small scale) under a growing tree and a 28-day window every 7
    days; a run up to June, then a restart to the end of the data reuses what was released."""
    import subprocess
    import sys

    demo = Path(__file__).resolve().parents[2] / "examples" / "transit"
    subprocess.run(
        [sys.executable, str(demo / "generate.py"), "--out", str(tmp_path / "data"),
         "--scale", "0.02", "--quiet", "--serial"],
        check=True,
    )
    base = (demo / "dpcr.toml").read_text(encoding="utf-8").replace(
        'dir = "../../out"', 'dir = "out"')
    weekly = 'start = "2025-01-01T00:00:00Z"\nperiod = "7d"\n'
    assert weekly in base
    plans = {
        "tree": weekly + 'plan = "tree"\n',
        "window": weekly + 'plan = "window"\nwindow = "28d"\n',
    }
    for name, release in plans.items():
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(base.replace(weekly, release).replace('dir = "out"', f'dir = "{name}"'))
        first = run_json(capsys, str(cfg), "--until", "2025-06-01", "--simulate", "1")
        n1 = first["summary"]["released_intervals"]
        assert n1 == 21  # weekly releases (or base intervals) ending by June 1
        second = run_json(capsys, str(cfg), "--simulate", "2", "--until", "2026-01-01")
        n2 = second["summary"]["released_intervals"]
        assert n2 == 52 and second["summary"]["new_intervals"] == 31
        assert [r for r in second["rows"] if r["interval"] <= n1] == first["rows"]
        assert second["summary"]["guarantee"]["spent_epsilon"] <= 2.0
        assert {r["query"] for r in second["rows"]} == {
            "active_tickets", "tickets_by_zone", "active_fares"
        }
