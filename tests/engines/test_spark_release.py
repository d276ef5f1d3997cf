"""End to end: a simulated release run by the Spark engine writes the same releases.csv, byte for
byte, as the DuckDB engine (same seed), in a first run and a resumed one with late records and
a record that is not UTF-8 (quarantined by both, the release going on)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from dpcr.engines import EngineConfig
from dpcr.noise import simulation_randomness
from e2e.helpers import mutations, write_jsonl
from engines.helpers import SPARK, run_cuts, stored_outputs, zones_release

pytestmark = pytest.mark.slow

CUT = "2025-01-04T00:00:00Z"
END = "2025-01-09T00:00:00Z"


def test_releases_are_byte_identical(tmp_path: Path) -> None:
    log = mutations()
    late = [dict(m, ts="2025-01-02T12:00:00Z") for m in log[-3:]]  # dated in a released interval
    outputs = []
    for name, engine in (("duckdb", EngineConfig()), ("spark", SPARK)):
        tmp = tmp_path / name
        tmp.mkdir()
        write_jsonl(tmp / "log.jsonl", [m for m in log if m["ts"] < CUT])
        release = zones_release(tmp, engine)
        release.run(until=CUT, rng=simulation_randomness(11))
        write_jsonl(
            tmp / "log.jsonl",
            [m for m in log if m["ts"] < CUT] + late + [m for m in log if m["ts"] >= CUT],
        )
        with (tmp / "log.jsonl").open("ab") as f:  # one unit's record in Latin-1
            after = {"ticket_id": "l1", "kind": "multi", "zone": "café", "fare": 1.0}
            m = {"entry": "l1", "ts": "2025-01-05T10:00:00Z", "op": "insert", "after": after}
            f.write(json.dumps(m, ensure_ascii=False).encode("latin-1") + b"\n")
        second = release.run(until=END, rng=simulation_randomness(12))
        csv = sorted((tmp / "out").rglob("releases.csv"))
        assert csv, f"no releases.csv under {tmp / 'out'}"
        diagnostics = dict(second.diagnostics)
        changelog = dict(diagnostics.pop("changelog"))
        quarantine = Path(changelog.pop("quarantine_file")).read_bytes()
        outputs.append(([p.read_bytes() for p in csv], diagnostics, changelog, quarantine))
    assert outputs[0] == outputs[1]
    assert outputs[0][2]["late"] > 0 and outputs[0][2]["quarantined"]["bad_encoding"] == 1


def test_open_histogram_releases_are_byte_identical(tmp_path: Path) -> None:
    """An open histogram released over three runs with appends (the Spark engine continues its
    state in the second and third): with the same seeded noise, the same releases.csv byte for
    byte, the same released values of every candidate key and the same keys' first and
    selection intervals as the DuckDB engine."""
    import dpcr
    from release.test_open_keys import END, EPSILON, START, log_of, tau, zones_for

    log = log_of(zones_for(tau(tmp_path)), lone="L")
    cuts = ("2025-01-03T00:00:00Z", "2025-01-06T00:00:00Z", END)
    outputs = []
    for name, engine in (("duckdb", EngineConfig()), ("spark", SPARK)):
        tmp = tmp_path / name
        tmp.mkdir()
        path = tmp / "log.jsonl"
        path.write_text("")
        release = dpcr.ContinualRelease(
            source=dpcr.sources.Jsonl(path=path),
            constraint=dpcr.AtMostK(k=3),
            plan=dpcr.DisjointRelease(start=START, period="1d", end=END),
            queries=[dpcr.Count(name="active"),
                     dpcr.Histogram(name="zones", column="zone", open=True)],
            budget=dpcr.Budget(epsilon=EPSILON, delta=1e-6),
            output_dir=tmp / "out",
            engine=engine,
        )  # fmt: skip
        run_cuts(release, path, log, cuts, 30)
        csv = (tmp / "out" / "simulation" / "releases.csv").read_bytes()
        outputs.append((csv, *stored_outputs(release)))
        if name == "spark":  # (the third run continued the state)
            state = release.store_path.with_name(release.store_path.name + ".state") / "spark"
            current = (state / "CURRENT").read_text().strip()
            head = json.loads((state / f"v{current}" / "HEAD.json").read_text())
            assert head["tables"]["okeys"] and int(current) == 3
    assert outputs[0] == outputs[1]
    keys = outputs[0][2]["zones"]
    assert {"A", "B", "C", "D", "L", "L2"} <= set(keys)
    assert {k for k, (_first, sel) in keys.items() if sel is not None} >= {"A", "B", "D"}
