"""A run that releases new intervals computes only their rows and appends them to the release
files: the rows, ``releases.csv`` and ``releases.json`` are byte for byte those of computing
and writing every row again from the store, in a session and in separate runs, for every plan
kind and with online consistency; a release file that is not the one recorded is written
whole."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest

import dpcr
import dpcr.release._rows as rows_module
from dpcr.noise import simulation_randomness
from dpcr.release._outputs import OUTPUT_FIELDS, SIMULATION_MARK, write_table
from dpcr.store import Store

KEYS = ("a", "b", "c")
DAYS = 9
PLANS = [
    dpcr.DisjointRelease(start="2025-01-01", period="1d"),
    dpcr.TreeRelease(start="2025-01-01", period="1d", end="2025-01-17"),
    dpcr.TreeRelease(start="2025-01-01", period="1d", branching=3),
    dpcr.SlidingWindowRelease(start="2025-01-01", window="3d", period="1d"),
    dpcr.FactorizationRelease(start="2025-01-01", period="1d", horizon=16),
]


def _lines(seed: int = 5) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for e in range(80):
        day = rnd.randint(1, DAYS)
        row = {"key": rnd.choice(KEYS), "x": rnd.randint(0, 9)}
        out.append({"entry": f"e{e}", "ts": f"2025-01-{day:02d}T10:00:00Z", "op": "insert",
                    "after": row})
        if rnd.random() < 0.4 and day < DAYS:
            out.append({"entry": f"e{e}", "ts": f"2025-01-{day + 1:02d}T11:00:00Z",
                        "op": "delete", "before": row})
    out.sort(key=lambda r: r["ts"])
    return [json.dumps(r) + "\n" for r in out]


def _release(tmp: Path, plan: Any, consistency: bool) -> dpcr.ContinualRelease:
    gaussian = plan.mechanisms == ("gaussian",)
    con = {"by_key": dpcr.Consistency(modes=("nonnegative", "sum_to_total"), total="all"),
           "all": dpcr.Consistency(modes=("nonnegative",))} if consistency else {}
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=dpcr.AtMostK(k=2),
        plan=plan,
        queries=[dpcr.Histogram(name="by_key", column="key", categories=KEYS),
                 dpcr.Count(name="all"), dpcr.Sum(name="x", column="x", lower=0, upper=9)],
        budget=dpcr.Budget(epsilon=1.0, delta=1e-6 if gaussian else 0.0),
        noise=dpcr.DiscreteGaussian() if gaussian else dpcr.DiscreteLaplace(),
        output_dir=tmp / "out",
        consistency=con,
    )


def _whole(release: dpcr.ContinualRelease, tmp: Path, n: int) -> tuple[Any, bytes, bytes]:
    """Every row computed again from the store (no cached rows), and the two files written
    whole from them."""
    settings = release  # (a release is its settings)
    rows_module._LAST.clear()
    with Store(settings.store_path, fingerprint=settings.fingerprint(),
               mode="simulation") as store:  # fmt: skip
        rows = rows_module.released_rows(settings, store, n)
    rows_module._LAST.clear()
    records = [{**r.record(), "simulation": SIMULATION_MARK} for r in rows]
    folder = tmp / "whole"
    folder.mkdir(exist_ok=True)
    write_table(folder, "releases", (*OUTPUT_FIELDS, "simulation"), records, simulation=True)
    return rows, (folder / "releases.csv").read_bytes(), (folder / "releases.json").read_bytes()


def _steps(tmp: Path, plan: Any, *, session: bool, consistency: bool) -> None:
    tmp.mkdir()
    release = _release(tmp, plan, consistency)
    lines = _lines()
    log = tmp / "log.jsonl"
    log.write_text("")
    runner = release.session() if session else None
    for day in range(1, DAYS + 1):
        with log.open("a") as f:
            f.writelines(ln for ln in lines if json.loads(ln)["ts"] < f"2025-01-{day + 1:02d}")
        lines = [ln for ln in lines if json.loads(ln)["ts"] >= f"2025-01-{day + 1:02d}"]
        until = f"2025-01-{day + 1:02d}T00:00:00Z"
        rng = simulation_randomness(day)
        if runner is not None:
            got = runner.run(until=until, rng=rng)
        else:
            got = dataclasses.replace(release, until=until).run(rng=rng)
        rows, csv, js = _whole(release, tmp, day)
        folder = tmp / "out" / "simulation"
        assert list(got.rows) == rows
        assert (folder / "releases.csv").read_bytes() == csv
        assert (folder / "releases.json").read_bytes() == js
        assert max(r.interval for r in rows) == day
    if runner is not None:
        runner.close()


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.kind)
@pytest.mark.parametrize("session", [True, False], ids=["session", "runs"])
def test_appended_rows_are_the_whole_rows(tmp_path: Path, plan: Any, session: bool) -> None:
    _steps(tmp_path / "a", plan, session=session, consistency=False)


@pytest.mark.parametrize("session", [True, False], ids=["session", "runs"])
def test_appended_rows_with_online_consistency(tmp_path: Path, session: bool) -> None:
    _steps(tmp_path / "a", PLANS[0], session=session, consistency=True)


def test_only_the_new_rows_are_computed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step after the first computes the rows of its new interval only (the earlier ones
    come from the last step, or from the release file when the process does not hold them),
    and a release file that is not as recorded is written whole (not appended to)."""
    firsts: list[int] = []
    real = rows_module._released_rows

    def spy(settings: Any, inputs: Any, n: int, *, first: int = 1, method: str) -> Any:
        firsts.append(first)
        return real(settings, inputs, n, first=first, method=method)

    monkeypatch.setattr(rows_module, "_released_rows", spy)
    tmp_path.mkdir(exist_ok=True)
    release = _release(tmp_path, PLANS[0], False)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(_lines()))
    with release.session() as session:
        for day in (3, 4):
            session.run(until=f"2025-01-{day + 1:02d}", rng=simulation_randomness(day))
    assert firsts == [1, 4]
    rows_module._LAST.clear()  # a new process: the earlier rows from the file
    dataclasses.replace(release, until="2025-01-06").run(rng=simulation_randomness(5))
    assert firsts[-1] == 5
    rows_module._LAST.clear()
    path = tmp_path / "out" / "simulation" / "releases.json"
    path.write_text(path.read_text().replace("\n", "\n "))  # (not the file a run wrote)
    got = dataclasses.replace(release, until="2025-01-07").run(rng=simulation_randomness(6))
    _rows, _csv, js = _whole(release, tmp_path, 6)
    assert path.read_bytes() == js
    assert len(got.rows) == 6 * 5
