"""The Gaussian search's ρ kept beside the store (``<store>.calibrations``): a later process
calibrates to exactly what the search gives, without searching; a damaged, stale or linked
file is only a cold cache, and a kept ρ the budget does not allow is refused."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

import dpcr
from dpcr.errors import BudgetExhaustedError
from dpcr.noise import simulation_randomness
from dpcr.release import _calibrate, _kept_rho, rank_plans


def _settings(folder: Path, plan: Any = None) -> Any:
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=folder / "log.jsonl"),
        constraint=dpcr.AtMostK(k=3),
        plan=plan or dpcr.DisjointRelease(start="2025-01-01", period="1d", end="2025-03-01"),
        queries=[dpcr.Count(name="n"), dpcr.Sum(name="s", column="v", lower=0, upper=100)],
        budget=dpcr.Budget(epsilon=1.0, delta=1e-6),
        noise=dpcr.DiscreteGaussian(),
        output_dir=folder / "out",
    )


def _forget(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process remembers nothing: every calibration is computed or read from the file."""
    monkeypatch.setattr(_calibrate, "_CALIBRATIONS", {})
    monkeypatch.setattr(_kept_rho, "_KEPT_READ", {})
    monkeypatch.setattr(_kept_rho, "_KEPT_NEW", {})


def _count_searches(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Count the searches (each still runs: the count is what the test checks)."""
    searches: list[float] = []
    search = _calibrate.largest_rho

    def counted(*args: Any) -> float:
        searches.append(search(*args))
        return searches[-1]

    monkeypatch.setattr(_calibrate, "largest_rho", counted)
    return searches


def _store(settings: Any) -> Path:
    store = Path(settings.store_path)
    store.parent.mkdir(parents=True, exist_ok=True)
    store.touch()  # (a store exists: the kept ρ are written beside it)
    return store


def test_a_kept_rho_gives_the_calibration_the_search_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = [None, dpcr.TreeRelease(start="2025-01-01", period="1d", end="2025-03-01",
                                    branching=4)]  # fmt: skip
    _forget(monkeypatch)
    searched = [_calibrate.calibrate(_settings(tmp_path, p)) for p in plans]
    store = _store(_settings(tmp_path))
    _kept_rho.save_calibrations(store)
    lines = _kept_rho.calibrations_cache(store).read_text().splitlines()
    assert len(lines) == 2 and all(len(line.split(" ")[0]) == 64 for line in lines)
    assert os.stat(_kept_rho.calibrations_cache(store)).st_mode & 0o777 == 0o600

    _forget(monkeypatch)
    searches = _count_searches(monkeypatch)
    kept = [_calibrate.calibrate(_settings(tmp_path, p)) for p in plans]
    assert searches == []
    for a, b in zip(searched, kept, strict=True):
        assert a == b and repr(a) == repr(b)
        assert a.guarantee == b.guarantee and a.per_class == b.per_class

    # another release's store: its own file, nothing kept there yet
    _forget(monkeypatch)
    _calibrate.calibrate(_settings(tmp_path / "other"))
    assert len(searches) == 1


def test_the_report_ranking_is_the_same_from_kept_rho(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path)
    _forget(monkeypatch)
    searches = _count_searches(monkeypatch)
    cold = rank_plans(settings)
    assert len(searches) >= 4
    _kept_rho.save_calibrations(_store(settings))
    _forget(monkeypatch)
    searches.clear()
    warm = rank_plans(settings)
    assert searches == []
    assert [(r.plan, r.score, r.report.predicted) for r in cold] == [
        (r.plan, r.score, r.report.predicted) for r in warm
    ]


def test_a_run_keeps_its_rho_and_the_next_run_releases_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "log.jsonl").write_text(json.dumps(
        {"entry": "1", "ts": "2025-01-02T07:57:37Z", "op": "insert", "before": None,
         "after": {"v": 14.0}}) + "\n")  # fmt: skip
    _forget(monkeypatch)
    first = _settings(tmp_path).run(until="2025-02-01", rng=simulation_randomness(3))
    assert _kept_rho.calibrations_cache(_settings(tmp_path).store_path).exists()
    _forget(monkeypatch)
    searches = _count_searches(monkeypatch)
    second = _settings(tmp_path).run(until="2025-03-01", rng=simulation_randomness(3))
    assert searches == []
    assert first.summary["guarantee"] == second.summary["guarantee"]
    assert second.new_intervals == 28


def test_a_damaged_stale_or_linked_file_is_a_cold_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path)
    _forget(monkeypatch)
    expected = _calibrate.calibrate(settings)
    store = _store(settings)
    _kept_rho.save_calibrations(store)
    path = _kept_rho.calibrations_cache(store)
    good = path.read_text()
    key, value = good.split()

    for text in (f"{key} 0x1.2p\n", f"{key[:-1]} {value}\n", f"{key} -{value}\n", "\x00\xff",
                 f"{key} inf\n", ""):  # fmt: skip
        path.write_text(text)
        _forget(monkeypatch)
        searches = _count_searches(monkeypatch)
        assert _calibrate.calibrate(settings) == expected
        assert len(searches) == 1, text

    # the code that computes the calibration changed: the kept ρ is not used
    path.write_text(good)
    _forget(monkeypatch)
    monkeypatch.setattr(_kept_rho, "_code_digest", lambda: "another")
    searches = _count_searches(monkeypatch)
    assert _calibrate.calibrate(settings) == expected and len(searches) == 1
    monkeypatch.undo()

    # a link is neither read nor written through
    path.unlink()
    (tmp_path / "elsewhere").write_text(good)
    path.symlink_to(tmp_path / "elsewhere")
    _forget(monkeypatch)
    searches = _count_searches(monkeypatch)
    assert _calibrate.calibrate(settings) == expected and len(searches) == 1
    _kept_rho.save_calibrations(store)
    assert path.is_symlink() and (tmp_path / "elsewhere").read_text() == good


def test_a_kept_rho_beyond_the_budget_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path)
    _forget(monkeypatch)
    _calibrate.calibrate(settings)
    store = _store(settings)
    _kept_rho.save_calibrations(store)
    path = _kept_rho.calibrations_cache(store)
    key, value = path.read_text().split()
    path.write_text(f"{key} {(float.fromhex(value) * 1.01).hex()}\n")  # (1 % less noise)
    _forget(monkeypatch)
    with pytest.raises(BudgetExhaustedError):
        _calibrate.calibrate(settings)


def test_nothing_is_kept_for_laplace_noise_or_without_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _forget(monkeypatch)
    laplace = dataclasses.replace(_settings(tmp_path), noise=dpcr.DiscreteLaplace())
    _calibrate.calibrate(laplace)
    assert _kept_rho._KEPT_NEW == {}
    settings = _settings(tmp_path)
    _calibrate.calibrate(settings)
    _kept_rho.save_calibrations(settings.store_path)  # (no store: nothing written)
    assert not _kept_rho.calibrations_cache(settings.store_path).exists()
    assert not settings.store_path.parent.exists()
