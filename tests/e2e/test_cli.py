"""The dpcr command end to end on small changelogs."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import dpcr.release._loop as release_loop
from dpcr.cli import main
from dpcr.config import load_config
from dpcr.errors import BudgetExhaustedError
from dpcr.noise import secure_randomness
from dpcr.store import Store

from .helpers import mutations, releases_per_class, write_config, write_jsonl

#: The public clock of these tests (every interval of the small changelog has closed by then),
#: unless a test gives its own: the wall clock would make the release grow by a day every day.
END = "2025-01-17T00:00:00Z"


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    clock = [] if "--until" in args else ["--until", END]
    assert main(["run", *args, *clock, "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def values(result: dict[str, Any]) -> dict[tuple[str, str, int], float]:
    return {(r["query"], r["key"], r["interval"]): r["change"] for r in result["rows"]}


def test_plan_json_states_the_guarantee_before_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path)  # the changelog file does not even exist
    assert main(["plan", str(cfg), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["epsilon"] <= 1.0 and plan["delta"] == 0.0
    # multi: at most 4 mutations -> 4 releases; monthly: 3 days with daily releases -> 4.
    assert plan["max_releases_per_unit"] == 4
    assert releases_per_class(plan) == {"multi": 4, "monthly": 4}
    assert plan["releases"] is None
    assert main(["plan", str(cfg)]) == 0
    assert "Guarantee" in capsys.readouterr().out


def test_run_rerun_and_append(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = mutations()
    cutoff = "2025-01-07T00:00:00Z"
    first_part = [m for m in log if m["ts"] < cutoff]
    write_jsonl(tmp_path / "log.jsonl", first_part)
    cfg = str(write_config(tmp_path))

    first = run_json(capsys, cfg, "--until", cutoff)  # the public clock closes intervals
    released = first["summary"]["released_intervals"]
    assert released == 6 and first["summary"]["new_intervals"] == released
    assert first["summary"]["simulation"] is False

    again = run_json(capsys, cfg, "--until", cutoff)
    assert again["summary"]["new_intervals"] == 0
    assert values(again) == values(first)  # read back from the store, never re-noised

    write_jsonl(tmp_path / "log.jsonl", first_part + [m for m in log if m["ts"] >= cutoff])
    later = run_json(capsys, cfg, "--until", "2025-01-20T00:00:00Z")
    assert later["summary"]["new_intervals"] > 0
    old = values(first)
    assert {k: v for k, v in values(later).items() if k in old} == old
    assert max(k[2] for k in values(later)) == later["summary"]["released_intervals"]

    with (tmp_path / "out" / "public" / "releases.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == len(later["rows"])


def test_changed_plan_with_same_store_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    run_json(capsys, str(write_config(tmp_path)))
    cfg = write_config(tmp_path, epsilon=5.0)
    assert main(["run", str(cfg), "--quiet"]) == 2
    assert "different plan" in capsys.readouterr().err


def test_simulation_is_deterministic_and_never_publishable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = str(write_config(tmp_path))
    a = run_json(capsys, cfg, "--simulate", "7")
    assert a["summary"]["simulation"] is True
    (tmp_path / "out" / "store.sqlite").unlink()
    assert main(["run", cfg, "--simulate", "7", "--quiet"]) == 2  # outputs of a lost store
    assert "does not hold" in capsys.readouterr().err
    shutil.rmtree(tmp_path / "out")
    b = run_json(capsys, cfg, "--simulate", "7")
    assert values(a) == values(b)
    assert main(["run", cfg, "--quiet"]) == 2
    assert "never be published" in capsys.readouterr().err


def test_release_path_draws_from_the_secure_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    calls = []

    def spy() -> Any:
        rng = secure_randomness()
        calls.append(rng)
        return rng

    monkeypatch.setattr(release_loop, "secure_randomness", spy)
    run_json(capsys, str(write_config(tmp_path)))
    assert len(calls) == 1 and calls[0].secure


def test_budget_filter_refuses_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the noise were too small for the budget, the filter stops the run and the store and
    outputs stay empty."""
    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = write_config(tmp_path)
    real_calibrate = release_loop.calibrate

    def too_generous(config: Any) -> Any:
        cal = real_calibrate(config)
        layers = tuple(
            {
                name: type(e)(scale=e.scale / 10, sensitivity=e.sensitivity)  # type: ignore[union-attr]
                for name, e in layer.items()
            }
            for layer in cal.layers
        )
        return dataclasses.replace(cal, layers=layers)

    monkeypatch.setattr(release_loop, "calibrate", too_generous)
    config = load_config(cfg)
    with pytest.raises(BudgetExhaustedError):
        config.run()
    assert not (tmp_path / "out" / "public" / "releases.csv").exists()
    with Store(config.store_path, fingerprint=config.fingerprint()) as store:
        assert store.released() == [] and store.ledger() == []


def test_malformed_records_raise_or_quarantine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = mutations()
    bad = [
        dict(log[0], entry="x1", op="upsert", seq=10_001),
        dict(log[0], entry="x2", ts="not a time", seq=10_002),
        dict(log[0], entry="x3", op="update", seq=10_003),  # never inserted
    ]
    write_jsonl(tmp_path / "log.jsonl", log + bad)
    cfg = write_config(tmp_path)
    assert main(["run", str(cfg), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "record" in err and "op" in err

    cfg = write_config(tmp_path, on_error="quarantine")
    result = run_json(capsys, str(cfg))
    assert "changelog" not in result["summary"]  # exact counts are operator-only
    ch = result["diagnostics"]["changelog"]
    assert sum(ch["quarantined"].values()) == 3
    assert ch["records"] == ch["valid"] + 3
    quarantine = tmp_path / "out" / "operator" / "quarantine.jsonl"
    assert len(quarantine.read_text().splitlines()) == 3
    assert quarantine.stat().st_mode & 0o077 == 0  # owner-only
    assert (tmp_path / "out" / "operator").stat().st_mode & 0o077 == 0


def test_unit_column_bounds_people_not_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations(n_entries=40))
    cfg = write_config(tmp_path, unit="rider_id", constraint="at_most_k = 3")
    result = run_json(capsys, str(cfg), "--simulate", "1")
    b = result["diagnostics"]["bounding"]
    assert b["units"] == 7  # riders r0..r6
    assert b["kept"] <= 7 * 3
    assert b["dropped"]["at_most_k"] == b["mutations"] - b["kept"]


def test_late_records_are_counted_not_released_into_closed_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = mutations()
    cutoff = "2025-01-07T00:00:00Z"
    first_part = [m for m in log if m["ts"] < cutoff]
    write_jsonl(tmp_path / "log.jsonl", first_part)
    cfg = str(write_config(tmp_path))
    first = run_json(capsys, cfg, "--until", cutoff)
    late = {
        "entry": "late-1",
        "ts": "2025-01-02T05:00:00Z",
        "seq": 99_999,
        "op": "insert",
        "before": None,
        "after": {
            "ticket_id": "late-1",
            "rider_id": "r1",
            "kind": "multi",
            "zone": "A",
            "fare": 5.0,
            "rides": 0,
        },
    }
    write_jsonl(tmp_path / "log.jsonl", [*first_part, late])
    second = run_json(capsys, cfg, "--until", cutoff)
    assert second["diagnostics"]["bounding"]["late"] == 1
    assert values(second) == values(first)


def test_rewritten_history_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = mutations()
    write_jsonl(tmp_path / "log.jsonl", log)
    cfg = str(write_config(tmp_path))
    run_json(capsys, cfg)
    changed = [dict(m, after=dict(m["after"], zone="C")) if m["op"] == "insert" else m for m in log]
    write_jsonl(tmp_path / "log.jsonl", changed)
    assert main(["run", cfg, "--quiet"]) == 2
    assert "rewritten history" in capsys.readouterr().err
    write_jsonl(tmp_path / "log.jsonl", log[: len(log) // 2])
    assert main(["run", cfg, "--quiet"]) == 2
    assert "append-only" in capsys.readouterr().err


def test_gaussian_release_spends_at_most_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = write_config(tmp_path)
    text = cfg.read_text().replace(
        "epsilon = 1.0", 'epsilon = 1.0\ndelta = 1e-6\nmechanism = "gaussian"'
    )
    cfg.write_text(text)
    assert main(["plan", str(cfg), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert 0.99 < plan["epsilon"] <= 1.0 and plan["delta"] == 1e-6
    assert {m["type"] for m in plan["layers"][0]["mechanisms"].values()} == {"discrete_gaussian"}
    result = run_json(capsys, str(cfg))
    assert result["summary"]["guarantee"]["spent_epsilon"] <= 1.0
    assert result["summary"]["new_intervals"] > 0


def test_ledger_records_each_release_with_its_event_and_grid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = write_config(tmp_path)
    result = run_json(capsys, str(cfg))
    config = load_config(cfg)
    with Store(config.store_path, fingerprint=config.fingerprint()) as store:
        ledger = store.ledger()
    assert len(ledger) == 3 * result["summary"]["released_intervals"]
    grids = {q: e["grid"] for _layer, _i, q, e in ledger}
    assert grids == {"active": "1", "zones": "1", "fares": "1/100"}
    assert {e["type"] for _layer, _i, _q, e in ledger} == {"discrete_laplace"}


def test_sqlite_install_triggers_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    db = tmp_path / "app.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v REAL)")
    assert main(["sqlite-install-triggers", str(db), "t", "--key", "id"]) == 0
    assert "installed" in capsys.readouterr().out
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO t VALUES (1, 2.5)")
        con.execute("UPDATE t SET v = 3 WHERE id = 1")
        con.execute("DELETE FROM t WHERE id = 1")
        ops = [r[0] for r in con.execute("SELECT op FROM dpcr_changelog ORDER BY seq")]
    assert ops == ["insert", "update", "delete"]
    assert main(["sqlite-install-triggers", str(db), "missing", "--key", "id"]) == 2
    assert "missing" in capsys.readouterr().err


def test_explicit_release_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = write_config(tmp_path)
    text = cfg.read_text().replace(
        'start = "2025-01-01T00:00:00Z"\nperiod = "1d"',
        'times = ["2025-01-03T00:00:00Z", "2025-01-04T12:00:00Z", "2025-01-09T00:00:00Z"]',
    )
    cfg.write_text(text)
    assert main(["plan", str(cfg), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["releases"] == 3
    # multi: min(k=4, 3 releases); monthly 3 days: all 3 releases reachable
    assert releases_per_class(plan) == {"multi": 3, "monthly": 3}
    result = run_json(capsys, str(cfg))
    ends = sorted({r["end"] for r in result["rows"]})
    assert ends == ["2025-01-03T00:00:00Z", "2025-01-04T12:00:00Z", "2025-01-09T00:00:00Z"]


def test_unwritable_output_and_interrupt_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = write_config(tmp_path)
    cfg.write_text(cfg.read_text().replace('dir = "out"', 'dir = "log.jsonl/out"'))
    assert main(["run", str(cfg), "--quiet", "--until", "2025-01-10"]) == 2
    err = capsys.readouterr().err
    assert "cannot create" in err and "Traceback" not in err

    def interrupted(args: Any) -> int:
        raise KeyboardInterrupt

    import dpcr.cli

    monkeypatch.setattr(dpcr.cli, "_cmd_plan", interrupted)
    assert main(["plan", str(write_config(tmp_path))]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_until_in_the_future_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = write_config(tmp_path)
    assert main(["run", str(cfg), "--quiet", "--until", "2999-01-01"]) == 2
    assert "in the future" in capsys.readouterr().err
    assert not (tmp_path / "out" / "public" / "releases.csv").exists()


def test_the_data_never_close_an_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One unit's far-future record publishes nothing more than the clock allows (it used to
    close thousands of empty intervals), and is counted as not yet due."""
    log = mutations()
    future = dict(log[0], entry="future", ts="2200-01-02T00:00:00Z", seq=99_999)
    write_jsonl(tmp_path / "log.jsonl", [*log, future])
    result = run_json(capsys, str(write_config(tmp_path)), "--until", "2025-01-20T00:00:00Z")
    assert result["summary"]["released_intervals"] == 19
    assert result["diagnostics"]["changelog"]["not_yet_due"] == 1


def test_an_empty_source_is_said_to_the_operator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing to read still releases noise on the public clock (whether to publish never
    depends on the data), and the operator is told."""
    write_jsonl(tmp_path / "log.jsonl", [])
    assert main(["run", str(write_config(tmp_path)), "--until", "2025-01-05"]) == 0
    out = capsys.readouterr().out
    assert "no valid record" in out and "4 new this run" in out


def test_a_column_no_row_has_is_refused_before_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    cfg = write_config(tmp_path)
    cfg.write_text(cfg.read_text().replace('column = "fare"', 'column = "fair"'))
    assert main(["run", str(cfg), "--quiet", "--until", "2025-01-10"]) == 2
    assert "'fair'" in capsys.readouterr().err
    assert not (tmp_path / "out" / "public" / "releases.csv").exists()


def test_base64_text_in_a_summed_debezium_column_is_a_warning_not_a_stop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record whose fare reads "none" (base64, as an undeclared decimal is): the run goes on
    and its operator lines name the column and [source] decimal_scales; "raise" stops."""
    lines = []
    for i, m in enumerate(mutations()):
        if m["op"] != "insert":
            continue
        after = dict(m["after"], fare="none") if i == 3 else m["after"]
        ms = 1735689600000 + i * 60_000
        payload = {"op": "c", "before": None, "after": after, "source": {"ts_ms": ms, "lsn": i}}
        lines.append(json.dumps({"payload": payload}))
    (tmp_path / "log.json").write_text("\n".join(lines) + "\n")
    source = 'format = "debezium"\npath = "log.json"\nkey = "ticket_id"'
    cfg = write_config(tmp_path, source=source, on_error="quarantine")
    assert main(["run", str(cfg), "--until", "2025-01-05", "--simulate", "1"]) == 0
    out = capsys.readouterr().out
    assert "warning:" in out and "'fare' holds base64 text" in out and "decimal_scales" in out
    strict = write_config(tmp_path, source=source, on_error="raise", name="strict.toml")
    strict.write_text(strict.read_text().replace('dir = "out"', 'dir = "out2"'))
    assert main(["run", str(strict), "--until", "2025-01-05", "--simulate", "1"]) == 2
    assert "decimal_scales" in capsys.readouterr().err
