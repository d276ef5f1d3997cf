"""The reports read one read-only snapshot of the store, without the run lock: ``dpcr report``
works while a step holds the store, a snapshot does not move when a run commits beside it, and
a follower writes both reports after each step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpcr.cli import main
from dpcr.config import load_config
from dpcr.errors import StoreError
from dpcr.store import Store
from e2e.helpers import empty_follower_release, mutations, write_config, write_jsonl

from .helpers import embedded

EARLY, LATE = "2025-01-05", "2025-01-10"


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    write_jsonl(tmp_path / "log.jsonl", mutations())
    return write_config(tmp_path, on_error="quarantine")


def _intervals(html: str) -> int:
    return max(int(r["interval"]) for r in embedded(html)["rows"])


def test_report_works_while_a_run_holds_the_store(
    cfg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(cfg), "--until", EARLY, "--quiet", "--no-report"]) == 0
    settings = load_config(cfg)
    with Store(settings.store_path, fingerprint=settings.fingerprint()):  # a step in progress
        assert main(["report", str(cfg), "--quiet"]) == 0, capsys.readouterr().err
    public = cfg.parent / "out" / "public" / "report.html"
    assert _intervals(public.read_text()) == 4
    assert (cfg.parent / "out" / "operator" / "report.html").exists()


def test_a_snapshot_does_not_move_while_a_run_commits(cfg: Path) -> None:
    assert main(["run", str(cfg), "--until", EARLY, "--quiet", "--no-report"]) == 0
    settings = load_config(cfg)
    path, fp = settings.store_path, settings.fingerprint()
    with Store(path, fingerprint=fp, snapshot=True) as snap:
        before = (snap.source_state(), len(snap.released()), snap.recorded_head())
        assert main(["run", str(cfg), "--until", LATE, "--quiet", "--no-report"]) == 0
        assert (snap.source_state(), len(snap.released()), snap.recorded_head()) == before
        with pytest.raises(StoreError, match="read-only snapshot"), snap.transaction():
            pass
    with Store(path, fingerprint=fp, snapshot=True) as snap:
        assert snap.source_state().interval > before[0].interval
        assert len(snap.released()) > before[1]


def test_a_snapshot_older_than_the_public_files_is_taken_again(
    cfg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run commits its store before writing its public files: a report whose snapshot was
    taken just before that commit meets files it cannot account for, and reads a newer one."""
    import dpcr.report.data as data

    assert main(["run", str(cfg), "--until", EARLY, "--quiet", "--no-report"]) == 0
    real, calls = data.gather, []

    def gather_after_a_run(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # a run commits and publishes between the snapshot and its reads
            assert main(["run", str(cfg), "--until", LATE, "--quiet", "--no-report"]) == 0
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "gather", gather_after_a_run)
    assert main(["report", str(cfg), "--quiet"]) == 0
    assert len(calls) == 2
    assert _intervals((cfg.parent / "out" / "public" / "report.html").read_text()) == 9


def test_a_snapshot_needs_a_store_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="run `dpcr run` first"):
        Store(tmp_path / "none" / "store.sqlite", fingerprint="x", snapshot=True)
    assert not (tmp_path / "none").exists()


def test_a_follower_writes_both_reports_after_each_step(tmp_path: Path) -> None:
    from dpcr.cdc.follow import Follower
    from dpcr.commands.follow import _reporter

    release, follow = empty_follower_release(tmp_path)
    day, t0 = 86_400_000_000, 1_735_689_600_000_000  # 2025-01-01T00:00Z
    events: list[str] = []
    follower = Follower(release, follow, dsn="host=x", wall=lambda: t0)
    follower.after_step = _reporter(release, lambda e, **f: events.append(e), follower.health)
    public = tmp_path / "out" / "public" / "report.html"
    operator = tmp_path / "out" / "operator" / "report.html"
    with follower._session:
        follower.step(t0 + 3 * day)
        assert _intervals(public.read_text()) == 3 and operator.exists()
        follower.step(t0 + 5 * day)
        assert _intervals(public.read_text()) == 5
    assert "warning" not in events
    # the operator report shows the follower's health as of its last step
    html = operator.read_text()
    assert '<section id="follower">' in html and "released_intervals" in html
    health = tmp_path / "out" / "operator" / "follow-health.json"
    assert health.stat().st_mode & 0o077 == 0


def test_the_operator_report_draws_runs_and_published_beside_exact(cfg: Path) -> None:
    from dpcr.report.truth import exact_series

    assert main(["run", str(cfg), "--until", EARLY, "--quiet", "--no-report"]) == 0
    assert main(["run", str(cfg), "--until", LATE, "--quiet", "--no-report"]) == 0
    operator = cfg.parent / "out" / "operator" / "report.html"
    assert main(["report", str(cfg), "--quiet"]) == 0
    html = operator.read_text()
    assert 'class="chart runs"' in html and 'class="chart exact"' not in html
    assert main(["report", str(cfg), "--quiet", "--exact"]) == 0
    html = operator.read_text()
    exact = exact_series(load_config(cfg), simulation=False)
    assert html.count('class="chart exact"') == len(exact) == 5
    public = (cfg.parent / "out" / "public" / "report.html").read_text()
    assert "exact value" not in public and "published and exact" not in public
    assert "truth" not in embedded(public)
