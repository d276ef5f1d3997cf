"""The HTML reports: self-contained, public content only, numbers equal to the store's; the
simulation's exact series; the operator report apart and owner-only."""

from __future__ import annotations

import itertools
import json
import math
import re
import stat
from pathlib import Path

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.errors import ConfigError
from dpcr.release import rank_plans, stored_result
from dpcr.report.data import ReportData, budget_by_interval
from dpcr.report.html import SECTIONS, embed_json
from e2e.helpers import mutations, write_config, write_jsonl

from .helpers import embedded, section, table_rows

UNTIL = "2025-01-10"
STATISTICS = {"active", "zones[A]", "zones[B]", "zones[C]", "fares"}


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    return write_config(tmp_path, on_error="quarantine")


def test_run_writes_a_self_contained_public_report(
    cfg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(cfg), "--until", UNTIL, "--quiet"]) == 0
    out = capsys.readouterr().out
    html = (cfg.parent / "out" / "public" / "report.html").read_text()
    assert "report.html" in out
    for name in SECTIONS:
        assert f'<section id="{name}">' in html
    # self-contained: nothing is fetched (no src/href at all), and the page forbids requests
    assert not re.search(r'\b(src|href)=', html)
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "default-src 'none'" in html
    # public only: no operator diagnostics, no exact series
    for secret in ("quarantined", "mutations kept", "operator", "tombstones", "truth",
                   "SIMULATION"):
        assert secret not in html
    assert set(re.findall(r'data-statistic="([^"]+)"', html)) == STATISTICS
    # two per statistic (running value, change) and the budget
    assert html.count('<svg') == 2 * len(STATISTICS) + 1
    # the statistics lead: before the plan, the budget and the planner
    assert html.index('<section id="statistics">') < html.index('<section id="plan">')
    assert html.index('class="headline"') < html.index('<section id="statistics">')


def test_the_reports_numbers_are_the_stores(cfg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every number of the embedded data is the store's (rows), the settings' (plan, ranking)
    or the accounting of what the store released (budget); the visible tables show the same."""
    assert main(["run", str(cfg), "--until", "2025-01-05", "--quiet"]) == 0
    assert main(["run", str(cfg), "--until", UNTIL, "--quiet"]) == 0
    capsys.readouterr()
    html = (cfg.parent / "out" / "public" / "report.html").read_text()
    data = embedded(html)
    settings = load_config(cfg)
    stored = stored_result(settings)
    assert data["rows"] == stored.records()
    assert data["summary"]["guarantee"] == stored.summary["guarantee"]
    assert "truth" not in data and data["simulation"] is False
    report = settings.explain()
    assert data["plan"]["epsilon"] == report.epsilon
    assert {c: v["releases"] for c, v in data["plan"]["per_class"].items()} == {
        c: v.releases for c, v in report.per_class.items()}
    # the budget after the last interval is what the store's last run spent; never decreasing
    spent = [b["spent_epsilon"] for b in data["budget"]]
    assert spent[-1] == pytest.approx(stored.summary["guarantee"]["spent_epsilon"], rel=1e-12)
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(spent))
    assert max(spent) <= settings.budget.epsilon * (1 + 1e-9)
    assert [r["released_intervals"] for r in data["runs"]] == [4, 9]  # days closed per run
    assert data["budget"] == json.loads(json.dumps(budget_by_interval(settings, 9)))
    ranked = rank_plans(settings, known=report)
    assert [r["plan"] for r in data["ranking"]] == [r.plan.describe() for r in ranked]
    assert [r["score"] for r in data["ranking"]] == [r.score for r in ranked]
    # the visible tables show the embedded numbers
    stat = re.search(r'data-statistic="active">(.*?)</section>', html, re.S)
    assert stat is not None
    shown = table_rows(stat.group(1))
    active = [r for r in data["rows"] if r["query"] == "active"]
    assert [row[3] for row in shown] == [f"{r['estimate']:.6g}" for r in active]
    assert [row[5] for row in shown] == [
        f"{r['estimate_lo']:.6g} .. {r['estimate_hi']:.6g}" for r in active]
    assert all(r["estimate_lo"] <= r["estimate"] <= r["estimate_hi"] for r in active)
    runs = table_rows(section(html, "budget"))
    assert [row[4] for row in runs] == [f"{r['spent_epsilon']:.6g}" for r in data["runs"]]


def test_operator_report_is_apart_owner_only_and_marked(
    cfg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (cfg.parent / "log.jsonl").open("a").write("not json\n")
    assert main(["run", str(cfg), "--until", UNTIL, "--quiet"]) == 0
    capsys.readouterr()
    private = cfg.parent / "out" / "operator" / "report.html"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(private.parent.stat().st_mode) == 0o700
    text = private.read_text()
    assert text.count("SENSITIVE") >= 2
    diagnostics = json.loads((private.parent / "diagnostics.json").read_text())
    quarantined = diagnostics["changelog"]["quarantined"]
    assert sum(quarantined.values()) == 1
    last = table_rows(text)[-1]
    assert last[2:4] == [str(diagnostics["changelog"]["records"]),
                         str(diagnostics["changelog"]["valid"])]
    assert "quarantined" not in (cfg.parent / "out" / "public" / "report.html").read_text()


def test_report_command_reads_only_the_store(
    cfg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(cfg)]) == 2  # nothing released yet
    assert "run `dpcr run` first" in capsys.readouterr().err
    assert main(["run", str(cfg), "--until", UNTIL, "--quiet", "--no-report",
                 "--simulate", "3"]) == 0
    assert not (cfg.parent / "out" / "simulation" / "report.html").exists()
    out = cfg.parent / "r.html"
    assert main(["report", str(cfg), "--simulation", "-o", str(out), "--quiet"]) == 0
    assert "SIMULATION" in out.read_text()
    assert (cfg.parent / "out" / "operator" / "simulation-report.html").exists()
    # a release report of a simulation store is refused by the store
    assert main(["report", str(cfg), "-o", str(out)]) == 2


def test_a_release_report_can_never_hold_exact_values() -> None:
    with pytest.raises(ConfigError, match="simulation"):
        ReportData(simulation=False, summary={}, rows=(), plan={}, budget=[], runs=[],
                   ranking=[], planner_table=[], alert_rules=[], alerts=[],
                   truth={("q", ""): [1.0]})


def test_embedded_json_is_safe_inside_a_script_element() -> None:
    text = embed_json({"a": "</script><b>&amp;", "b": math.inf})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><b>&amp;", "b": None}


def test_simulation_truth_is_the_noise_free_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The simulation's exact series equals what a release with (almost) no noise publishes:
    the same data at ε = 9·10^5, where the counts' discrete Laplace scale is ~10^-5 (a nonzero
    draw has probability ~10^-40000) and the sum's (grid 0.01) is ~0.04; seeded, so the
    comparison is deterministic."""
    write_jsonl(tmp_path / "log.jsonl", mutations(n_entries=60, days=12, seed=5))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    noisy = write_config(tmp_path / "a", source='format = "jsonl"\npath = "../log.jsonl"')
    exact = write_config(tmp_path / "b", source='format = "jsonl"\npath = "../log.jsonl"',
                         epsilon=9e5)
    for c in (noisy, exact):
        assert main(["run", str(c), "--until", "2025-01-14", "--simulate", "11", "--quiet"]) == 0
    capsys.readouterr()
    truth = embedded((tmp_path / "a" / "out" / "simulation" / "report.html").read_text())
    oracle = embedded((tmp_path / "b" / "out" / "simulation" / "report.html").read_text())
    got = {(t["query"], t["key"], t["interval"]): t["value"] for t in truth["truth"]}
    want = {(r["query"], r["key"], r["interval"]): (r["estimate"], r["std_estimate"])
            for r in oracle["rows"]}
    assert got.keys() == want.keys() and len(got) == 13 * 5
    for k, (value, std) in want.items():
        if k[0] == "fares":
            assert abs(got[k] - value) <= 10 * std + 1e-9, k
        else:
            assert got[k] == value, k
    # the realised error shown is the published value minus the truth
    html = (tmp_path / "a" / "out" / "simulation" / "report.html").read_text()
    assert html.count('class="realised"') == len(STATISTICS)
    assert 'stroke-dasharray="6 4"' in html  # the dashed true series


def test_alerts_section_shows_the_published_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from svt.test_alerts_e2e import ALERTS

    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = write_config(tmp_path, extra_query=ALERTS, epsilon=2.0)
    assert main(["run", str(cfg), "--until", UNTIL, "--quiet"]) == 0
    capsys.readouterr()
    out = tmp_path / "out" / "public"
    html = (out / "report.html").read_text()
    data = embedded(html)
    published = json.loads((out / "alerts.json").read_text())
    assert data["alerts"] == published  # the same answers as alerts.json
    assert [r["name"] for r in data["alert_rules"]] == ["busy", "fare_surge", "zones"]
    shown = table_rows(section(html, "alerts"))
    above = [a for a in published if a["above"]]
    assert len(shown) == 3 + len(above)
    assert f"{len(above)} answers above threshold out of {len(published)}" in html
    assert data["plan"]["epsilon"] <= 2.0


def _budget_directly(settings: object, n: int) -> list[dict[str, object]]:
    """:func:`budget_by_interval` composed from scratch at every mark: every instance due by
    the mark (``plan.due(0, i)``), every layer's events listed one by one."""
    from dpcr.accounting.guarantee import layered_guarantee
    from dpcr.release import calibrate
    from dpcr.report.data import BUDGET_POINTS

    cal = calibrate(settings)
    plan = settings.plan  # type: ignore[attr-defined]
    marks = sorted({max(1, round(n * k / BUDGET_POINTS)) for k in range(1, BUDGET_POINTS + 1)}
                   | {n}) if n > BUDGET_POINTS else list(range(1, n + 1))  # fmt: skip
    events = [cal.layer_event(layer) for layer in range(len(cal.layers))]
    out = []
    for i in marks:
        layer_events: list[list[object]] = [[] for _ in events]
        for layer, _idx in {plan.instance(node) for node in plan.due(0, i)}:
            if layer < len(events):
                layer_events[layer].append(events[layer])
        g, per_class = layered_guarantee(
            layer_events, plan.participation(settings.constraint, reporting=i),  # type: ignore[attr-defined]
            delta=settings.budget.delta, extra=cal.alerts,  # type: ignore[attr-defined]
        )
        out.append((i, g.epsilon, g.delta, {c: (p.epsilon, p.delta) for c, p in per_class.items()}))
    return out


@pytest.mark.parametrize("plan", [
    'plan = "disjoint"', 'plan = "tree"\nbranching = 2', 'plan = "tree"\nbranching = 8',
    'plan = "window"\nwindow = "7d"', 'plan = "tree"\nbranching = 2\nestimator = "plain"',
    'plan = "factorization"\nfactorization = "sqrt"',
])  # fmt: skip
@pytest.mark.parametrize("n", [9, 365])
def test_the_budget_curve_is_the_composition_at_every_mark(
    tmp_path: Path, plan: str, n: int
) -> None:
    """The budget curve, composed incrementally and once per distinct (counts, participation),
    equals the composition from scratch at every mark, for every plan kind, a short and a long
    release (whose marks skip intervals)."""
    gaussian = "factorization" in plan
    privacy = 'epsilon = 1.0\ndelta = 1e-6\nmechanism = "gaussian"' if gaussian else "epsilon = 1.0"
    cfg = tmp_path / "dpcr.toml"
    cfg.write_text(
        f'[source]\nformat = "jsonl"\npath = "log.jsonl"\n\n[privacy]\n{privacy}\n\n'
        '[constraint]\nat_most_k = 3\n\n'
        f'[release]\n{plan}\nstart = "2025-01-01T00:00:00Z"\nperiod = "1d"\n'
        'end = "2026-01-01T00:00:00Z"\n\n[[query]]\nname = "active"\nkind = "count"\n\n'
        '[output]\ndir = "out"\n'
    )
    settings = load_config(cfg)
    got = [(b["interval"], b["spent_epsilon"], b["spent_delta"],
            {c: (v["epsilon"], v["delta"]) for c, v in b["per_class"].items()})
           for b in budget_by_interval(settings, n)]  # fmt: skip
    assert got == _budget_directly(settings, n)
    # (a curve that rises over the first days, so the check compares a real curve; a
    # factorization's one layer is charged in full from its first release)
    assert len({g[1] for g in got}) > 1 or gaussian or n > 9


def test_tick_labels_are_readable_for_any_period() -> None:
    from dpcr.report.html import tick_labels

    days = ["2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z"]
    assert tick_labels(days) == ["2025-01-01", "2025-01-02"]
    hours = ["2025-01-01T01:00:00Z", "2025-01-01T02:00:00Z", "2025-01-02T00:00:00Z"]
    assert tick_labels(hours) == ["01-01 01:00", "01-01 02:00", "01-02 00:00"]
    seconds = ["2025-01-01T01:00:10Z", "2025-01-01T01:00:20Z"]
    assert tick_labels(seconds) == ["01-01 01:00:10", "01-01 01:00:20"]


def test_the_plan_section_lists_each_querys_participation(tmp_path: Path) -> None:
    """Per-op limits: the count of every row changes at inserts and deletes only, so it is
    charged for fewer releases than the sum (docs/privacy.md, section 3b)."""
    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = write_config(tmp_path, on_error="quarantine",
                       constraint="at_most_k = 4\ninserts = 1\ndeletes = 1")
    assert main(["run", str(cfg), "--until", UNTIL, "--quiet"]) == 0
    html = (cfg.parent / "out" / "public" / "report.html").read_text()
    plan = section(html, "plan")
    assert "<h3>Per query</h3>" in plan
    rows = {r[0]: (r[1], int(r[2])) for r in table_rows(plan) if len(r) == 3 and r[0] in {
        "active", "zones", "fares"}}
    assert rows["active"][0] == "insert, delete"
    assert rows["fares"][0] == "insert, update, delete"
    assert rows["active"][1] < rows["fares"][1]
