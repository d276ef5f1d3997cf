"""[[alerts]] end to end through the CLI: plan states each rule's sensitivity, guarantee and
accuracy, and a guarantee that includes the rules (they spend the same budget); run writes
alerts.csv/json and persists the sparse-vector state."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.store import Store
from dpcr.timeutil import parse_timestamp
from e2e.helpers import mutations, write_config, write_jsonl

ALERTS = textwrap.dedent(
    """
    [[alerts]]
    name = "busy"
    statistic = "active"
    what = "running"
    threshold = 5
    cutoff = 2
    epsilon = 0.5

    [[alerts]]
    name = "fare_surge"
    statistic = "fares"
    what = "window"
    window = 3
    threshold = 300
    cutoff = 1
    epsilon = 0.25
    delta = 1e-6
    numeric = true

    [[alerts]]
    name = "zones"
    statistic = "zones"
    what = "running"
    threshold = 2
    cutoff = 3
    epsilon = 0.25
    """
)


def _plan(tmp: Path, capsys: pytest.CaptureFixture[str], **kw: Any) -> dict[str, Any]:
    kw.setdefault("epsilon", 2.0)
    cfg = write_config(tmp, extra_query=ALERTS, **kw)
    assert main(["plan", str(cfg), "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_plan_states_sensitivity_guarantee_accuracy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, capsys)
    rules = {a["name"]: a for a in plan["alerts"]}
    assert rules["busy"]["sensitivity"] == 1  # a count: f ∈ {0, 1}
    assert rules["fare_surge"]["sensitivity"] == pytest.approx(100)  # max(b,0) − min(a,0)
    assert rules["zones"]["sensitivity"] == 1  # one histogram bin
    assert rules["busy"]["epsilon"] == pytest.approx(0.5) and rules["busy"]["delta"] == 0
    assert rules["fare_surge"]["mechanism"]["kind"] == "numeric"
    assert rules["fare_surge"]["accuracy"]["alpha_value"] is not None
    assert rules["busy"]["accuracy"]["beta"] == 0.05 and rules["busy"]["accuracy"]["alpha"] > 0
    alerts_eps = sum(a["epsilon"] for a in plan["alerts"])  # proven: at most the 1.0 declared
    assert 0 < alerts_eps <= 1.0 + 1e-9
    assert plan["epsilon"] <= 2.0 + 1e-9  # the one guarantee covers release and alerts
    assert plan["epsilon"] > alerts_eps
    assert main(["plan", str(tmp_path / "dpcr.toml")]) == 0
    text = capsys.readouterr().out
    assert "Alert" in text and "and its alerts" in text
    assert main(["account", str(tmp_path / "dpcr.toml"), "--json"]) == 0
    account = json.loads(capsys.readouterr().out)
    assert account["worst"]["stated"]["epsilon"] == pytest.approx(plan["epsilon"])


def test_rule_on_a_unit_column_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, extra_query=ALERTS, unit="rider_id")
    assert main(["plan", str(cfg), "--json"]) == 2
    err = capsys.readouterr().err
    assert "any number of entries" in err and "unit = 'entry'" in err


def test_unknown_statistic_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, extra_query=ALERTS.replace('"fares"', '"nope"'))
    assert main(["plan", str(cfg)]) == 2
    assert "not a [[query]] name" in capsys.readouterr().err


def _alerts(tmp: Path) -> list[dict[str, str]]:
    sim = tmp / "out" / "simulation" / "alerts.csv"  # seeded runs publish apart
    with (sim if sim.exists() else tmp / "out" / "public" / "alerts.csv").open() as fh:
        return list(csv.DictReader(fh))


def test_run_writes_alerts_and_resumes_without_renoising(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = mutations()
    cut = "2025-01-07T00:00:00Z"
    write_jsonl(tmp_path / "log.jsonl", [m for m in log if m["ts"] < cut])
    cfg = write_config(tmp_path, extra_query=ALERTS, epsilon=2.0)
    assert main(["run", str(cfg), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["summary"]
    assert set(first["alerts"]) == {"busy", "fare_surge", "zones"}
    assert first["guarantee"]["spent_epsilon"] <= first["guarantee"]["epsilon"] <= 2.0 + 1e-9
    rows1 = _alerts(tmp_path)
    n = first["released_intervals"]
    busy = [r for r in rows1 if r["rule"] == "busy"]
    # one answer per interval until the cutoff is reached
    assert len(busy) <= n and [int(r["interval"]) for r in busy] == list(range(1, len(busy) + 1))
    assert sum(r["above"] == "True" for r in busy) <= 2
    zones = [r for r in rows1 if r["rule"] == "zones"]
    assert {r["key"] for r in zones} <= {"A", "B", "C"}

    config = load_config(cfg)
    with Store(config.store_path, fingerprint=config.fingerprint()) as store:
        states1 = store.alert_states()
    assert states1["busy"]["last_interval"] == n

    assert main(["run", str(cfg), "--quiet"]) == 0  # nothing new: same answers, same state
    capsys.readouterr()
    assert _alerts(tmp_path) == rows1
    with Store(config.store_path, fingerprint=config.fingerprint()) as store:
        assert store.alert_states() == states1

    write_jsonl(tmp_path / "log.jsonl", log)
    assert main(["run", str(cfg), "--json"]) == 0
    later = json.loads(capsys.readouterr().out)["summary"]
    rows2 = _alerts(tmp_path)
    assert rows2[: len(rows1)] == rows1 or all(r in rows2 for r in rows1)
    with Store(config.store_path, fingerprint=config.fingerprint()) as store:
        states2 = store.alert_states()
    assert states2["busy"]["last_interval"] == later["released_intervals"]
    if not states1["busy"]["svt"]["count"] >= 2:  # not halted: the threshold noise is kept
        assert states2["busy"]["svt"]["answered"] > states1["busy"]["svt"]["answered"]


def test_alerts_match_exact_running_values_when_noise_is_negligible(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ε = 10^5 (σ = 0.002) every noise draw is 0 except with probability ~e^-500, so ⊤
    marks exactly the intervals whose exact running count reaches the threshold."""
    rule = textwrap.dedent(
        """
        [[alerts]]
        name = "exact"
        statistic = "active"
        what = "running"
        threshold = 8
        cutoff = 100
        epsilon = 100000
        """
    )
    log = mutations()
    write_jsonl(tmp_path / "log.jsonl", log)
    cfg = write_config(tmp_path, extra_query=rule, constraint="at_most_k = 10", epsilon=100001)
    assert main(["run", str(cfg), "--simulate", "3", "--quiet"]) == 0
    rows = _alerts(tmp_path)
    assert rows and all(r["rule"] == "exact" for r in rows)
    for r in rows:
        end = parse_timestamp(r["end"], name="end")
        live = set()
        for m in log:
            if parse_timestamp(m["ts"], name="ts") <= end:
                if m["op"] == "delete":
                    live.discard(m["entry"])
                else:
                    live.add(m["entry"])
        assert (r["above"] == "True") == (len(live) >= 8), (r, len(live))
    assert any(r["above"] == "True" for r in rows) and any(r["above"] == "False" for r in rows)
