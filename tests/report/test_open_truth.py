"""A simulation report's true curves of an open histogram: the declared keys and every key it
publishes (from the store), each the exact running count of the data."""

from __future__ import annotations

import shutil
from pathlib import Path

from dpcr.config import load_config
from dpcr.noise import simulation_randomness
from dpcr.report.truth import exact_series
from dpcr.store import Store

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "open_v1"


def test_the_true_curves_cover_the_published_open_keys(tmp_path: Path) -> None:
    for f in ("dpcr.toml", "log.jsonl"):
        shutil.copy(FIXTURE / f, tmp_path / f)
    release = load_config(tmp_path / "dpcr.toml")
    release.run(until="2025-01-11T00:00:00Z", rng=simulation_randomness(3))
    with Store(release.store_path, fingerprint=release.fingerprint(), mode="simulation") as st:
        keys = st.open_keys()["zones"]
    published = {k for k, r in keys.items() if r.selected is not None}
    # (the log: A 150 entries on day 1 and 100 on day 2, above the threshold of about 133;
    # B, C, D, E and L below it)
    assert published == {"A"} and {"B", "C", "D", "E", "L"} <= set(keys)
    truth = exact_series(release)
    assert {k for q, k in truth if q == "zones"} == published
    assert truth[("zones", "A")] == [150.0] + [250.0] * 9
    assert truth[("active", "")][-1] == 250 + 80 + 10 + 81 + 90 + 1


def test_plan_says_it_cannot_count_the_rows_of_open_keys(tmp_path: Path) -> None:
    from dpcr.report.text import plan_lines

    shutil.copy(FIXTURE / "dpcr.toml", tmp_path / "dpcr.toml")
    settings = load_config(tmp_path / "dpcr.toml")
    (line,) = [x for x in plan_lines(settings, settings.explain()) if "releases.csv" in x]
    assert "for zones, a row per interval of each key published" in line
    assert "at most 10 rows a key" in line and "no count of these rows is stated" in line
