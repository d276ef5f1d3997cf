"""Open histograms (``open = true``, issue 35) through the release: every candidate key gets a
counter, a key is published from the first interval whose noisy running estimate reaches the
threshold, and nothing public depends on a key that is not published.

With the noise off the released values are the exact ones, so selection is "the exact running
count, from the interval the key appeared in, reaches tau"; with seeded noise, a run over the
whole log and a run per interval (the incremental state, new keys drawn their earlier nodes
when they appear) publish the same bytes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import dpcr
import dpcr.release._draw as release_draw
import dpcr.release._open as release_open
from dpcr.noise import simulation_randomness
from dpcr.release._open import key_thresholds
from dpcr.release._selection import key_selections
from dpcr.store import Store
from e2e.helpers import write_jsonl

START = "2025-01-01T00:00:00Z"
END = "2025-01-11T00:00:00Z"
#: ε of these releases: large enough for thresholds of tens (τ ≈ 50 with the disjoint plan)
EPSILON = 8.0


def noise_off(monkeypatch: pytest.MonkeyPatch) -> None:
    identity = lambda values, event, rng: values  # noqa: E731
    monkeypatch.setattr(release_draw, "add_noise", identity)
    monkeypatch.setattr(release_open, "add_noise", identity)


def log_of(zones: dict[str, list[int]], *, lone: str | None = None) -> list[dict[str, Any]]:
    """A changelog: for each zone, one new entry on each listed day (10:00); ``lone``: one
    entry of its own in zone ``lone`` on day 2, moved to zone ``lone + "2"`` on day 5 (a key
    a single unit holds, twice)."""
    out: list[dict[str, Any]] = []
    seq = 0

    def emit(entry: str, day: int, op: str, before: Any, after: Any) -> None:
        nonlocal seq
        seq += 1
        out.append({"entry": entry, "ts": f"2025-01-{day:02d}T10:00:00Z", "seq": seq,
                    "op": op, "before": before, "after": after})  # fmt: skip

    for zone, days in zones.items():
        for n, day in enumerate(days):
            emit(f"{zone}-{n}", day, "insert", None, {"zone": zone, "fare": 1})
    if lone is not None:
        emit("lone", 2, "insert", None, {"zone": lone, "fare": 1})
        emit("lone", 5, "update", {"zone": lone, "fare": 1}, {"zone": lone + "2", "fare": 1})
    out.sort(key=lambda m: (m["ts"], m["seq"]))
    return out


def zones_for(tau: float) -> dict[str, list[int]]:
    """Zone A reaches ``tau`` on day 2, B appears and reaches it on day 4, C stays below it
    (from day 2), D appears on day 3 and reaches it on day 8 (one entry per listed day)."""
    t = math.ceil(tau)
    return {"A": [1] * (t - 1) + [2], "B": [4] * t, "C": [2] * (t - 1),
            "D": [3] + [6] * (t - 3) + [8] * 2}  # fmt: skip


def release(
    tmp: Path,
    log: list[dict[str, Any]],
    *,
    plan: Any = None,
    name: str = "out",
    keys: tuple[str, ...] | None = None,
    unit: str = "entry",
) -> dpcr.ContinualRelease:
    path = tmp / f"{name}.jsonl"
    write_jsonl(path, log)
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=path),
        unit=unit,
        constraint=dpcr.AtMostK(k=3),
        plan=plan or dpcr.DisjointRelease(start=START, period="1d", end=END),
        queries=[dpcr.Count(name="active"),
                 dpcr.Histogram(name="zones", column="zone", keys=keys, open=True)],
        budget=dpcr.Budget(epsilon=EPSILON, delta=1e-6),
        output_dir=tmp / name,
    )  # fmt: skip


def tau(tmp: Path, **kw: Any) -> float:
    """The threshold of ``zones`` in :func:`release` (a function of the settings alone)."""
    return key_selections(release(tmp, [], name="settings", **kw))["zones"].threshold


#: The zones of the tests with the disjoint plan and the entry as the unit.
ZONES: dict[str, list[int]] = {}


@pytest.fixture(autouse=True)
def zones(tmp_path: Path) -> None:
    ZONES.clear()
    ZONES.update(zones_for(tau(tmp_path)))


def public_rows(settings: dpcr.ContinualRelease) -> dict[tuple[str, int], float]:
    """(key, interval) -> published running value of ``zones``, from releases.csv."""
    import csv

    folder = settings.output_dir / "simulation"
    with (folder / "releases.csv").open(encoding="utf-8") as fh:
        return {(r["key"], int(r["interval"])): float(r["estimate"])
                for r in csv.DictReader(fh) if r["query"] == "zones"}  # fmt: skip


def public_files(settings: dpcr.ContinualRelease) -> dict[str, bytes]:
    folder = settings.output_dir / "simulation"
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


def exact_running(zones: dict[str, list[int]], key: str, day: int) -> int:
    return sum(1 for d in zones.get(key, []) if d <= day)


def test_noise_off_selection_is_the_exact_running_count_reaching_tau(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    noise_off(monkeypatch)
    s = release(tmp_path, log_of(ZONES))
    s.run(until=END, rng=simulation_randomness(0))
    threshold = key_thresholds(s)["zones"]
    assert threshold == tau(tmp_path) > 10
    rows = public_rows(s)
    for key in ZONES:
        days = [d for d in range(1, 11) if exact_running(ZONES, key, d) >= threshold]
        published = sorted(i for k, i in rows if k == key)
        assert published == (list(range(days[0], 11)) if days else []), key
        for i in published:
            assert rows[(key, i)] == exact_running(ZONES, key, i)
    with Store(s.store_path, fingerprint=s.fingerprint(), mode="simulation") as st:
        keys = st.open_keys()["zones"]
    assert {k: (r.appeared, r.selected) for k, r in keys.items()} == {
        "A": (1, 2),
        "B": (4, 4),
        "C": (2, None),
        "D": (3, 8),
    }


def test_declared_keys_of_an_open_histogram_are_always_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    noise_off(monkeypatch)
    s = release(tmp_path, log_of(ZONES), keys=("C", "Z"))
    s.run(until=END, rng=simulation_randomness(0))
    rows = public_rows(s)
    for key in ("C", "Z"):
        assert sorted(i for k, i in rows if k == key) == list(range(1, 11))
    assert rows[("C", 10)] == len(ZONES["C"]) and rows[("Z", 10)] == 0
    assert sorted({k for k, _ in rows}) == ["A", "B", "C", "D", "Z"]


@pytest.mark.parametrize("plan", ["disjoint", "tree"])
def test_a_run_per_interval_publishes_what_one_run_does(tmp_path: Path, plan: str) -> None:
    """Seeded noise: the incremental state, and keys that appear later (their earlier nodes
    drawn when they appear), give the bytes of one run over the whole log."""
    plans = {"disjoint": dpcr.DisjointRelease(start=START, period="1d", end=END),
             "tree": dpcr.TreeRelease(start=START, period="1d", end=END)}  # fmt: skip
    log = log_of(ZONES, lone="L")
    whole = release(tmp_path, log, plan=plans[plan], name="whole")
    whole.run(until=END, rng=simulation_randomness(3))
    steps = release(tmp_path, log, plan=plans[plan], name="steps")
    for day in range(2, 12):
        steps.run(until=f"2025-01-{day:02d}T00:00:00Z", rng=simulation_randomness(3))
    a, b = public_files(whole), public_files(steps)
    assert a["releases.csv"] == b["releases.csv"]
    with Store(whole.store_path, fingerprint=whole.fingerprint(), mode="simulation") as st:
        values_a, keys_a = {(r.query, r.key, r.layer, r.index): r.value
                            for r in st.released()}, st.open_keys()  # fmt: skip
    with Store(steps.store_path, fingerprint=steps.fingerprint(), mode="simulation") as st:
        values_b, keys_b = {(r.query, r.key, r.layer, r.index): r.value
                            for r in st.released()}, st.open_keys()  # fmt: skip
    assert values_a == values_b and keys_a == keys_b
    assert {"A", "B", "C", "D", "L", "L2"} <= set(keys_a["zones"])


def test_a_rerun_publishes_the_same_bytes(tmp_path: Path) -> None:
    s = release(tmp_path, log_of(ZONES, lone="L"))
    s.run(until="2025-01-06T00:00:00Z", rng=simulation_randomness(5))
    first = public_files(s)
    s.run(until="2025-01-06T00:00:00Z", rng=simulation_randomness(5))
    assert public_files(s) == first


def test_no_public_file_shows_a_key_that_is_not_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the noise off, a unit's keys that stay below tau change no public byte: the
    public folder of the log with them is the folder of the log without them (the store's
    public head leaves out the values of keys not selected)."""
    noise_off(monkeypatch)
    lone = log_of(ZONES, lone="secret-zone")
    # (the lone entry also counts in `active`: in the other log it is there without a zone)
    twin = [
        m
        if m["entry"] != "lone"
        else dict(m, before=m["before"] and {"fare": 1}, after={"fare": 1})
        for m in lone
    ]
    with_it = release(tmp_path, lone, name="with")
    with_it.run(until=END, rng=simulation_randomness(0))
    without = release(tmp_path, twin, name="without")
    without.run(until=END, rng=simulation_randomness(0))
    files = public_files(with_it)
    for name, data in files.items():
        assert b"secret-zone" not in data, name
    with Store(with_it.store_path, fingerprint=with_it.fingerprint(),
               mode="simulation") as st:  # fmt: skip
        keys = st.open_keys()["zones"]
    assert keys["secret-zone"].selected is None and keys["secret-zone2"].selected is None
    head = json.loads(files["release-head.json"])["store_head"]
    assert head == json.loads(public_files(without)["release-head.json"])["store_head"]
    assert files == public_files(without)


@pytest.mark.parametrize("unit", ["entry", "owner"])
def test_a_key_one_unit_holds_is_never_published_when_tau_exceeds_its_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unit: str
) -> None:
    """Noise off, tau above the most one unit adds to one key (1 per entry; an owner here
    holds 3 entries in one zone): a zone only that unit holds is never published."""
    noise_off(monkeypatch)
    log = log_of(zones_for(tau(tmp_path, unit=unit)))
    for m in log:
        m["after"] = dict(m["after"], owner=m["entry"])
    for n, day in enumerate((2, 3, 3)):
        log.append({"entry": f"solo-{n}", "ts": f"2025-01-{day:02d}T12:00:00Z", "seq": 900 + n,
                    "op": "insert", "before": None,
                    "after": {"zone": "solo" if unit == "owner" else f"solo{n}",
                              "owner": "u-solo", "fare": 1}})  # fmt: skip
    log.sort(key=lambda m: (m["ts"], m["seq"]))
    s = release(tmp_path, log, unit="entry" if unit == "entry" else "owner")
    s.run(until=END, rng=simulation_randomness(0))
    keys = {k for k, _ in public_rows(s)}
    assert not any(k.startswith("solo") for k in keys)
    assert {"A", "B", "D"} <= keys


def test_the_full_read_and_the_incremental_state_publish_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data step that reads the whole source every run (sources without a position) and
    the one that carries the incremental state give the same release, run by run."""
    import dpcr.release._engine as release_engine

    log = log_of(ZONES, lone="L")
    state = release(tmp_path, log, name="state")
    whole = release(tmp_path, log, name="whole")
    for day in (3, 6, 11):
        until = f"2025-01-{day:02d}T00:00:00Z"
        state.run(until=until, rng=simulation_randomness(4))
        with monkeypatch.context() as m:
            m.setattr(release_engine, "eligible", lambda settings: False)
            whole.run(until=until, rng=simulation_randomness(4))
        assert public_files(state)["releases.csv"] == public_files(whole)["releases.csv"]
    assert not (tmp_path / "whole" / "store.sqlite.state" / "state.duckdb").exists()
    assert (tmp_path / "state" / "store.sqlite.state" / "state.duckdb").exists()


def test_the_report_shows_when_each_key_appeared_and_no_other_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the CLI, noise off: the public report says from which interval each key that
    appeared is published, and no public file names a candidate key that is not published."""
    from dpcr.cli import main

    noise_off(monkeypatch)
    write_jsonl(tmp_path / "log.jsonl", log_of(ZONES, lone="lonezoneq7"))
    (tmp_path / "dpcr.toml").write_text(
        '[source]\nformat = "jsonl"\npath = "log.jsonl"\n[privacy]\n'
        f"epsilon = {EPSILON}\ndelta = 1e-6\n"
        '[constraint]\nat_most_k = 3\n[release]\nplan = "disjoint"\n'
        f'start = "{START}"\nend = "{END}"\nperiod = "1d"\n[[query]]\nname = "zones"\n'
        'kind = "histogram"\ncolumn = "zone"\nopen = true\n', encoding="utf-8",
    )  # fmt: skip
    assert main(["run", str(tmp_path / "dpcr.toml"), "--simulate", "2", "--until", END]) == 0
    folder = tmp_path / "out" / "simulation"
    report = (folder / "report.html").read_text(encoding="utf-8")
    assert "Published from interval" in report and "Keys published from a later" in report
    for path in folder.rglob("*"):
        if path.is_file():
            assert b"lonezoneq7" not in path.read_bytes(), path.name


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE open_values SET vals = zeroblob(length(vals)) WHERE rowid = "
        "(SELECT min(rowid) FROM open_values)",
        "DELETE FROM open_values WHERE rowid = (SELECT min(rowid) FROM open_values)",
        "UPDATE open_keysets SET keys = replace(keys, '\"A\"', '\"A2\"')",
    ],
)
def test_an_edited_unpublished_value_is_noticed(tmp_path: Path, tamper: str) -> None:
    """The values of keys not published are outside the public head; the store's own head of
    them notices an edit (or a loss, which would draw them again) before the next run."""
    import sqlite3

    from dpcr.errors import RewrittenError

    s = release(tmp_path, log_of(ZONES, lone="L"))
    s.run(until="2025-01-06T00:00:00Z", rng=simulation_randomness(5))
    with Store(s.store_path, fingerprint=s.fingerprint(), mode="simulation") as st:
        waiting = [k for k, r in st.open_keys()["zones"].items() if r.selected is None]
    assert waiting
    con = sqlite3.connect(s.store_path)
    with con:
        assert con.execute(tamper).rowcount == 1
    con.close()
    with pytest.raises(RewrittenError, match="edited or is corrupt"):
        s.run(until="2025-01-08T00:00:00Z", rng=simulation_randomness(5))
