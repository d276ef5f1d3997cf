"""Stores written by dpcr before the unified store schema (fixtures/v1: written by the previous
release's `dpcr run --simulate 1` on the first days of a changelog) open, migrate and continue:
the same fingerprint is accepted, every released value is kept, nothing is re-noised."""

from __future__ import annotations

import csv
import shutil
import sqlite3
from pathlib import Path

import pytest

from dpcr.config import load_config
from dpcr.noise import simulation_randomness
from dpcr.store import Store
from e2e.helpers import mutations, write_jsonl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "v1"


@pytest.mark.parametrize("kind", ["disjoint", "tree", "window", "factorization"])
def test_schema_1_store_continues(tmp_path: Path, kind: str) -> None:
    shutil.copy(FIXTURES / f"{kind}.toml", tmp_path / "dpcr.toml")
    (tmp_path / f"out_{kind}").mkdir()
    store_path = tmp_path / f"out_{kind}" / "store.sqlite"
    shutil.copy(FIXTURES / f"{kind}.sqlite", store_path)
    with sqlite3.connect(store_path) as raw:
        assert raw.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("1",)
    log = mutations()
    write_jsonl(tmp_path / "log.jsonl", [m for m in log if m["ts"] < "2025-01-07T00:00:00Z"])
    release = load_config(tmp_path / "dpcr.toml")

    # the previous release closed 5 days by its data; the same clock now: nothing new
    again = release.run(until="2025-01-06T00:00:00Z", rng=simulation_randomness(2))
    assert again.new_intervals == 0
    with (FIXTURES / f"{kind}.releases.csv").open() as fh:
        old = list(csv.DictReader(fh))
    got = {(r.query, r.key, r.interval): r for r in again.rows}
    assert len(got) == len(old) > 0
    for row in old:
        new = got[(row["query"], row["key"], int(row["interval"]))]
        assert new.estimate == pytest.approx(float(row["estimate"]), rel=1e-12, abs=1e-9)
        assert new.std_estimate == pytest.approx(float(row["std_estimate"]), rel=1e-9)
    with Store(store_path, fingerprint=release.fingerprint(), mode="simulation") as st:
        before = {(r.query, r.key, r.layer, r.index): r.value for r in st.released()}

    write_jsonl(tmp_path / "log.jsonl", log)
    later = release.run(until="2025-01-17T00:00:00Z", rng=simulation_randomness(3))
    assert later.new_intervals > 0
    with Store(store_path, fingerprint=release.fingerprint(), mode="simulation") as st:
        after = {(r.query, r.key, r.layer, r.index): r.value for r in st.released()}
    assert {k: after[k] for k in before} == before  # never re-noised
    assert later.summary["guarantee"]["spent_epsilon"] <= 1.0
