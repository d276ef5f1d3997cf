"""End to end through ``dpcr.cli.main``: ``dpcr analyze region|cw-stream|summary-privacy`` on the
specs in examples/analysis/ and ``dpcr audit`` on a small release config."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dpcr.cli import main
from e2e.helpers import mutations, write_config, write_jsonl

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "analysis"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def _svg(path: Path) -> ET.Element:
    root = ET.fromstring(path.read_text(encoding="utf-8"))
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def test_region_randomized_response(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svg, prof = tmp_path / "rr.svg", tmp_path / "profile.svg"
    code, out = _run(capsys, "analyze", "region", str(EXAMPLES / "randomized_response.toml"),
                     "--svg", str(svg), "--profile-svg", str(prof))
    assert code == 0, out
    assert "1.098612" in out  # ε = ln 3 (rounded up), the one tangent with δ = 0
    assert "0.0704295" in out  # δ(1) = 3/4 − e/4
    assert "holds" in out
    root = _svg(svg)
    assert root.find("{http://www.w3.org/2000/svg}polygon") is not None
    assert len(root.findall("{http://www.w3.org/2000/svg}polyline")) == 2  # R(ε, δ) boundary
    _svg(prof)


def test_region_composition_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "analyze", "region", str(EXAMPLES / "rr_composition.json"),
                     "--json")
    assert code == 0
    data = json.loads(out)
    assert data["rounds"] == 3
    # RR(3/4)² ∘ RR(2/3): e^ε = 3·3·2 = 18 at δ = 0, then slopes 9/2 (δ = 9/32) and 2 (δ = 7/16)
    assert [(t["slope"], t["delta"]) for t in data["tangents"]] == [
        ("18", "0"), ("9/2", "9/32"), ("2", "7/16")]
    assert data["claim"]["holds"]


def test_region_violated_claim_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "rr.json"
    spec.write_text(json.dumps({
        "mechanism": {"randomized_response": {"p_truth": "3/4"}},
        "claim": {"epsilon": 1.0, "delta": 0.01},  # δ(1) = 0.0704 > 0.01
    }))
    code, out = _run(capsys, "analyze", "region", str(spec))
    assert code == 1 and "VIOLATED" in out and "0.0704295" in out


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"mechanism": {"rows": [["1/2", "1/3"], ["1/2", "1/2"]]}}, "sums to"),
        ({"mechanism": {"rows": [[1]], "colour": "red"}}, "unknown key"),
        ({}, "exactly one of"),
        ({"mechanisms": [{"randomized_response": {"p_truth": "3/4"}},
                         {"randomized_response": {"p_truth": "3/4", "k": 3}}]}, "same inputs"),
    ],
)
def test_region_spec_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   spec: dict[str, object], message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(spec))
    code, out = _run(capsys, "analyze", "region", str(path))
    assert code == 2 and "error:" in out and message in out


def test_cw_stream_noisy_count_looseness(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    svg = tmp_path / "cw.svg"
    code, out = _run(capsys, "analyze", "cw-stream", str(EXAMPLES / "cw_noisy_count.toml"),
                     "--svg", str(svg))
    assert code == 0, out
    # exact ε_t vs Theorem 4's ε_max + (t − 1)γ, t = 1, 2, 3
    for exact, bound in [("0.8109", "0.8109"), ("1.4171", "2.064"), ("1.6982", "3.316")]:
        assert exact in out and bound in out
    assert "γ = 1.25276" in out
    assert len(_svg(svg).findall("{http://www.w3.org/2000/svg}polyline")) == 2


def test_cw_stream_bernoulli_window(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "analyze", "cw-stream", str(EXAMPLES / "cw_bernoulli_window.toml"),
                     "--json")
    assert code == 0
    data = json.loads(out)
    assert data["gamma"] == "inf" and not data["assumption_1"]
    last = data["steps"][-1]
    assert last["t"] == 6
    assert last["exact_epsilon"] == pytest.approx(0.6931471805599453)  # ln 2
    assert last["exact_delta"] == pytest.approx(1 / 4)  # given z, P1(unseen sum 0) = 1/4 = δ_max
    assert last["bound_epsilon"] == "inf"


def test_summary_privacy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svg = tmp_path / "summary.svg"
    code, out = _run(capsys, "analyze", "summary-privacy", str(EXAMPLES / "summary_privacy.toml"),
                     "--svg", str(svg))
    assert code == 0, out
    # Π_1, Π_2 (worst history), exact Π of both, Theorem 0.1: (1/4)·(5/8 · 4)·(3/4 · 4)
    assert "5/8" in out and "3/4" in out and "11/16" in out and "15/8" in out
    _svg(svg)
    code, out = _run(capsys, "analyze", "summary-privacy", str(EXAMPLES / "summary_privacy.toml"),
                     "--json")
    data = json.loads(out)
    assert [m["pi"] for m in data["mechanisms"]] == ["5/8", "3/4"]
    assert data["prefixes"][-1]["exact"] == "11/16" and data["blind_guess"] == "1/2"


def test_summary_privacy_missing_history(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    text = (EXAMPLES / "summary_privacy.toml").read_text()
    cut = text.index("[mechanisms.after.upper]")
    path = tmp_path / "s.toml"
    path.write_text(text[:cut])
    code, out = _run(capsys, "analyze", "summary-privacy", str(path))
    assert code == 2 and "upper" in out


# --- dpcr audit -----------------------------------------------------------------------------------


def _release(tmp: Path) -> Path:
    """A small changelog plus an entry 'audited' inserted and deleted at the fare cap."""
    rows = mutations(n_entries=12)
    after = {"ticket_id": "audited", "rider_id": "r9", "kind": "multi", "zone": "B",
             "fare": 100.0, "rides": 0}
    rows += [
        {"entry": "audited", "ts": "2025-01-02T05:00:00Z", "seq": 10_001, "op": "insert",
         "before": None, "after": after},
        {"entry": "audited", "ts": "2025-01-04T05:00:00Z", "seq": 10_002, "op": "delete",
         "before": after, "after": None},
    ]
    rows.sort(key=lambda m: (m["ts"], m["seq"]))
    write_jsonl(tmp / "log.jsonl", rows)
    return write_config(tmp, constraint="at_most_k = 2")


def test_audit_consistent_and_broken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(_release(tmp_path))
    code, out = _run(capsys, "audit", config, "--runs", "20000", "--unit", "audited",
                     "--seed", "5")
    assert code == 0, out
    assert "SIMULATION" in out and "consistent" in out and "'audited'" in out
    code, out = _run(capsys, "audit", config, "--runs", "20000", "--unit", "audited",
                     "--seed", "6", "--noise-factor", "0.5", "--json")
    assert code == 1
    data = json.loads(out)
    assert data["violated"] and data["epsilon_lower"] > data["epsilon_claimed"] == 1.0
    assert data["seed"] == 6 and data["unit"] == "audited"
    assert not (tmp_path / "out").exists()  # nothing released, no store


def test_audit_unknown_unit_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "audit", str(_release(tmp_path)), "--runs", "100",
                     "--unit", "nobody")
    assert code == 2 and "no mutations" in out


def test_cw_finite_private_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "analyze", "cw-finite", str(EXAMPLES / "cw_private_blocks.toml"))
    assert code == 0, out
    assert "Pr[value] = 1/2, 1/4, 1/4" in out and "every database owns a private block" in out
    for exact, bound in [("1.0116", "1.0116"), ("1.96361", "2.51568"), ("2.143", "4.01976")]:
        assert exact in out and bound in out
    assert "BELOW EXACT" not in out


def test_cw_finite_window_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "analyze", "cw-finite", str(EXAMPLES / "cw_finite_window.toml"),
                     "--json")
    assert code == 0, out
    data = json.loads(out)
    steps = data["steps"]
    assert [r["t"] for r in steps] == [1, 2, 3, 4]
    assert all(r["holds"] and r["setting"] == "sliding window" for r in steps)
    assert steps[1]["owners"] == [True, True] and steps[3]["owners"] == [True, False, False, True]
    assert steps[0]["exact_slope"] == steps[0]["bound_slope"]  # one step: the bound is exact


def test_cw_finite_custom_layout_and_errors(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cw.json"
    spec.write_text(json.dumps({
        "distribution": ["1/2", "1/2"], "block": 1,
        "layout": {"databases": [[0, 1], [1, 2]], "aux": [0]},
        "kernel": {"type": "noisy_sum", "keep": "1/2"},
    }))
    code, out = _run(capsys, "analyze", "cw-finite", str(spec))
    assert code == 0 and "BELOW" in out
    code, out = _run(capsys, "analyze", "cw-finite", str(spec), "--json")
    (row,) = json.loads(out)["steps"]
    assert row["setting"] is None and not row["holds"]  # aux is the oldest row, not X_{t↓}
    spec.write_text(json.dumps({"distribution": ["1/2", "1/3"], "n": 2}))
    code, out = _run(capsys, "analyze", "cw-finite", str(spec))
    assert code == 2 and "error:" in out and "sum to 5/6" in out
    spec.write_text(json.dumps({"distribution": ["1/2", "1/2"], "n": 2, "kernel": "median"}))
    code, out = _run(capsys, "analyze", "cw-finite", str(spec))
    assert code == 2 and "kernel.type" in out
