"""Incremental steps on Spark (``SparkEngine.aggregate_step``).

After each of several appends, a step that reads only the new records and the state gives what
one run over the whole source gives: the DuckDB engine's result (load report, quarantine file
byte for byte, bounding report, totals, time range) at every step and, at the last step,
Spark's own full run too -- for every constraint kind, with late records, duplicates across
steps, an entry deleted and inserted again across steps, a pending mutation judged again when
an earlier one arrives, and records quarantined in a later step. A crash between the state
write and its commit, before or after the store's commit, changes no result. A Parquet folder
grows by part files; a rewritten or misplaced part file is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

pytest.importorskip("pyspark")

from dpcr.bounding.constraints import AtMostK, Constraint
from dpcr.changelog import JsonlSource, ParquetSource
from dpcr.engines.base import (
    AggregateRequest,
    Consumed,
    EngineResult,
    EngineStateRef,
    Pending,
    StoreHead,
)
from dpcr.engines.duckdb import DuckDBEngine
from dpcr.engines.spark import SparkEngine
from dpcr.errors import StoreError
from dpcr.queries import Query
from engines.helpers import (
    CONSTRAINTS,
    DAY,
    HOUR,
    OPEN_QUERIES,
    QUERIES,
    SPARK,
    T0,
    generate,
    run_cuts,
    zones_release,
)

pytestmark = pytest.mark.slow

TIMES = tuple(T0 + DAY * i for i in range(1, 7))
#: (last line of the generated changelog, first and last interval) of each step; a step
#: settles the rows dated by the end of its last interval.
STEPS = ((1 / 3, 1, 2), (2 / 3, 3, 4), (1.0, 5, 6))


@pytest.fixture(scope="module")
def engine() -> Any:
    conf = {
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "2g",
        "spark.ui.showConsoleProgress": "false",
    }
    spark_engine = SparkEngine(master="local[2]", conf=conf)
    yield spark_engine
    spark_engine.stop()


def _rec(entry: str, ts: int, op: str, status: str | None, **extra: Any) -> str:
    row = {"owner": "u9", "status": status, "k": "a", "kind": "long", "v": 3}
    rec: dict[str, Any] = {"entry": entry, "ts": ts // 1_000_000, "op": op, **extra}
    if op == "delete":
        rec["before"] = row
    else:
        rec["after"] = row
    return json.dumps(rec)


def handmade(step: int) -> list[str]:
    """Records for the cases a generated changelog may miss (step 0, 1, 2 settle at days 2,
    4, 6): r1 inserted, deleted, inserted again; p1's update arrives before its insert, dated
    after it (pending, quarantined, then valid); d1's update repeats its insert's explicit
    sequence number a step later (duplicate); l1 gets records dated in released intervals
    (late: it freezes); a later step brings records that are not valid at all."""
    d = (T0, T0 + DAY, T0 + 2 * DAY, T0 + 3 * DAY, T0 + 4 * DAY)
    if step == 0:
        return [
            _rec("r1", d[1] + 2 * HOUR, "insert", "issued"),
            _rec("p1", d[3] + 5 * HOUR, "update", "activated"),
            _rec("d1", d[3] + HOUR, "insert", "issued", seq=1),
            _rec("l1", d[1] + 3 * HOUR, "insert", "issued"),
        ]
    if step == 1:
        return [
            _rec("r1", d[2] + 6 * HOUR, "delete", "issued"),
            _rec("p1", d[2] + 4 * HOUR, "insert", "issued"),
            _rec("d1", d[3] + 2 * HOUR, "update", "activated", seq=1),
            _rec("l1", d[1] + 6 * HOUR, "update", "activated"),
            _rec("l1", d[3], "update", "used"),
        ]
    return [
        _rec("r1", d[4] + 3 * HOUR, "insert", "issued"),
        "not json",
        json.dumps({"entry": "q1", "ts": d[4] // 1_000_000, "op": "upsert", "after": {}}),
    ]


def chunks(seed: int, unit_column: bool) -> list[list[str]]:
    """The lines each step appends: a third of a generated changelog and the handmade ones."""
    lines = generate(seed, unit_column=unit_column)
    out, start = [], 0
    for k, (share, _lo, _hi) in enumerate(STEPS):
        end = round(len(lines) * share)
        out.append(lines[start:end] + handmade(k))
        start = end
    return out


@dataclass
class Release:
    """A release's successive steps, as the release loop makes them: the store's head after
    each commit, the freeze points, the state folder."""

    engine: SparkEngine
    tmp: Path
    source: Any
    constraint: Constraint
    unit_column: bool
    store: StoreHead = field(default_factory=StoreHead)
    frozen: tuple[Any, ...] = ()
    queries: tuple[Query, ...] = QUERIES

    def request(self, lo: int, hi: int) -> AggregateRequest:
        return AggregateRequest(
            source=self.source,
            queries=self.queries,
            constraint=self.constraint,
            release_times=TIMES[:hi],
            first_interval=lo,
            clock=TIMES[hi - 1],
            unit_column="owner" if self.unit_column else None,
            unit_is_entry=not self.unit_column,
            on_error="quarantine",
            exclude_late=None
            if self.store.t_last is None
            else (self.store.records, self.store.t_last),
            frozen=self.frozen,
        )

    def ref(self, hi: int) -> EngineStateRef:
        return EngineStateRef(
            folder=self.tmp / "state", store=self.store, fingerprint="f", settle_at=TIMES[hi - 1]
        )

    def step(self, lo: int, hi: int) -> tuple[AggregateRequest, EngineResult, Pending]:
        """One step, checked against the DuckDB engine's run over the whole source."""
        request = self.request(lo, hi)
        size = Path(self.source.path).stat().st_size if Path(self.source.path).is_file() else 0
        consumed = Consumed(bytes=int(self.store.token or 0), size=size)
        q_step = self.tmp / "quarantine_step.jsonl"
        result, pending = self.engine.aggregate_step(
            replace(request, consumed=consumed, quarantine_path=q_step), self.ref(hi)
        )
        full = duckdb_full(request, self.tmp)
        assert_same(full, result, q_step)
        return request, result, pending

    def commit_store(self, result: EngineResult, hi: int) -> StoreHead:
        """The store's head after it committed the step (the token: the bytes consumed)."""
        size = Path(self.source.path).stat().st_size if Path(self.source.path).is_file() else 0
        self.store = StoreHead(records=result.load.records, t_last=TIMES[hi - 1], token=str(size))
        self.frozen = result.load.frozen
        return self.store


def duckdb_full(request: AggregateRequest, tmp: Path) -> EngineResult:
    source = request.source
    if isinstance(source, ParquetSource) and Path(source.path).is_dir():
        one = tmp / "whole.parquet"  # the parts in name order, as one file
        parts = sorted(str(p) for p in Path(source.path).glob("*.parquet"))
        duckdb.sql(f"COPY (SELECT * FROM read_parquet({parts})) TO '{one}' (FORMAT parquet)")
        source = replace(source, path=one)
    return DuckDBEngine().aggregate(
        replace(request, source=source, quarantine_path=tmp / "quarantine_full.jsonl")
    )


def assert_same(full: EngineResult, step: EngineResult, q_step: Path) -> None:
    q_full = full.load.quarantine_path
    assert q_full is not None
    assert q_step.read_bytes() == Path(q_full).read_bytes()
    assert replace(step.load, quarantine_path=q_full, source=full.load.source) == full.load
    assert step.aggregates.report == full.aggregates.report
    a, b = full.aggregates, step.aggregates
    assert (b.first_interval, b.last_interval) == (a.first_interval, a.last_interval)
    assert list(b.values) == list(a.values)
    for name, arr in a.values.items():
        np.testing.assert_array_equal(b.values[name], arr, err_msg=name)
    # (open histograms: the candidate keys, in their order, with their first intervals)
    assert [list(c.items()) for c in b.candidates.values()] == [
        list(c.items()) for c in a.candidates.values()
    ]
    assert list(b.candidates) == list(a.candidates)
    assert (step.min_ts, step.max_ts, step.not_yet_due, step.missing_columns) == (
        full.min_ts,
        full.max_ts,
        full.not_yet_due,
        full.missing_columns,
    )


def _append(path: Path, lines: list[str]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


@pytest.mark.parametrize(
    ("seed", "c", "unit_column"),
    [(0, 0, False), (1, 2, False), (2, 3, False), (3, 4, True), (4, 5, False), (5, 6, False)],
    ids=["at_most_k", "time_bounded", "state_machine", "hybrid_units", "hybrid_machine",
         "op_limits"],
)
def test_steps_equal_full_runs(
    engine: SparkEngine, tmp_path: Path, seed: int, c: int, unit_column: bool
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("")
    release = Release(engine, tmp_path, JsonlSource(path=path), CONSTRAINTS[c], unit_column)
    for k, (lines, (_share, lo, hi)) in enumerate(
        zip(chunks(seed, unit_column), STEPS, strict=True)
    ):
        _append(path, lines)
        request, result, pending = release.step(lo, hi)
        assert engine.continues(
            replace(request, consumed=Consumed(bytes=int(release.store.token or 0))),
            release.ref(hi),
        ) == (k > 0)
        pending.commit(release.commit_store(result, hi))
    # Spark's own full run of the last request
    whole = engine.aggregate(replace(request, quarantine_path=tmp_path / "q_spark.jsonl"))
    assert_same(whole, result, tmp_path / "quarantine_step.jsonl")
    assert result.load.late > 0 and result.load.quarantined
    assert result.load.quarantined.get("duplicate") and "bad_json" in result.load.quarantined


@pytest.mark.parametrize(
    ("seed", "c", "unit_column"), [(10, 0, False), (11, 4, True)], ids=["entry", "owner"]
)
def test_open_histogram_steps_equal_full_runs(
    engine: SparkEngine, tmp_path: Path, seed: int, c: int, unit_column: bool
) -> None:
    """Open histograms across steps with appends: candidate keys first held in a settled
    interval come from the state, later ones from the step; every step's candidates and
    per-key totals are the DuckDB engine's over the whole source, and the last is Spark's own
    full run's."""
    path = tmp_path / "c.jsonl"
    path.write_text("")
    release = Release(engine, tmp_path, JsonlSource(path=path), CONSTRAINTS[c], unit_column,
                      queries=QUERIES[:1] + QUERIES[4:5] + OPEN_QUERIES)  # fmt: skip
    seen: list[dict[str, int]] = []
    for lines, (_share, lo, hi) in zip(chunks(seed, unit_column), STEPS, strict=True):
        _append(path, lines)
        request, result, pending = release.step(lo, hi)
        pending.commit(release.commit_store(result, hi))
        seen.append(dict(result.aggregates.candidates["v_open"]))
    whole = engine.aggregate(replace(request, quarantine_path=tmp_path / "q_spark.jsonl"))
    assert_same(whole, result, tmp_path / "quarantine_step.jsonl")
    # keys appear over the steps, and a key keeps the first interval it was held in
    assert len(seen[0]) < len(seen[-1])
    assert all(seen[-1][k] == iv for k, iv in seen[0].items())
    state = tmp_path / "state"
    current = (state / "CURRENT").read_text().strip()
    head = json.loads((state / f"v{current}" / "HEAD.json").read_text())
    assert head["tables"]["okeys"] and head["tables"]["ototals"]


def test_a_crash_before_the_state_commit_changes_nothing(
    engine: SparkEngine, tmp_path: Path
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("")
    release = Release(engine, tmp_path, JsonlSource(path=path), AtMostK(k=3), True)
    parts = chunks(5, True)
    _append(path, parts[0])
    _request, result, pending = release.step(1, 2)
    pending.commit(release.commit_store(result, 2))
    _append(path, parts[1])
    release.step(3, 4)  # the run dies before the store commits: nothing is committed
    _request, again, pending = release.step(3, 4)  # the next run continues the same state
    release.commit_store(again, 4)  # the store commits, and the run dies before the state's
    _append(path, parts[2])
    request, result, pending = release.step(5, 6)  # the state is behind the store: read all
    consumed = Consumed(bytes=int(release.store.token))
    assert not engine.continues(replace(request, consumed=consumed), release.ref(6))
    pending.commit(release.commit_store(result, 6))
    state = tmp_path / "state"
    versions = sorted(p.name for p in state.iterdir() if p.name.startswith("v"))
    current = (state / "CURRENT").read_text().strip()
    head = json.loads((state / f"v{current}" / "HEAD.json").read_text())
    assert head["store"][0] == result.load.records and len(versions) <= 3


def _parquet(lines: list[str], path: Path) -> None:
    """The valid-JSON lines as one Parquet part file (before/after as JSON text)."""
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    rows = [r for r in rows if isinstance(r, dict)]
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    src = path.with_suffix(".jsonl")
    src.write_text(text)
    cols = (
        "{'entry': 'VARCHAR', 'ts': 'VARCHAR', 'seq': 'VARCHAR', 'op': 'VARCHAR', "
        "'before': 'JSON', 'after': 'JSON'}"
    )
    duckdb.sql(
        f"COPY (SELECT entry, ts, seq, op, before::VARCHAR AS before, after::VARCHAR AS after "
        f"FROM read_json('{src}', format = 'newline_delimited', columns = {cols}, "
        f"ignore_errors = true) WHERE op IS NOT NULL) TO '{path}' (FORMAT parquet)"
    )
    src.unlink()


def test_a_parquet_folder_grows_by_part_files(engine: SparkEngine, tmp_path: Path) -> None:
    folder = tmp_path / "log"
    folder.mkdir()
    release = Release(engine, tmp_path, ParquetSource(path=folder), CONSTRAINTS[3], False)
    for k, (lines, (_share, lo, hi)) in enumerate(zip(chunks(6, False), STEPS, strict=True)):
        _parquet(lines, folder / f"part-{k:05d}.parquet")
        _request, result, pending = release.step(lo, hi)
        pending.commit(release.commit_store(result, hi))
    assert release.frozen
    # A part file sorting before the consumed ones, or a consumed one rewritten: refused.
    _parquet(chunks(7, False)[0], folder / "part-00000a.parquet")
    request = replace(release.request(6, 6), quarantine_path=tmp_path / "q.jsonl")
    with pytest.raises(StoreError, match="sorts before"):
        engine.aggregate_step(request, release.ref(6))
    (folder / "part-00000a.parquet").unlink()
    _parquet(chunks(7, False)[0], folder / "part-00001.parquet")
    with pytest.raises(StoreError, match="rewritten history"):
        engine.aggregate_step(request, release.ref(6))


def test_release_runs_continue_the_state_and_match_duckdb(tmp_path: Path) -> None:
    """Three release runs through the loop, appending between them (records dated in released
    intervals, a record that is not valid): the Spark engine continues its state in the
    second and third runs and writes what the DuckDB engine writes, byte for byte."""
    from dpcr.engines import EngineConfig
    from e2e.helpers import mutations

    log = mutations(n_entries=24, days=8)
    cuts = ("2025-01-03T00:00:00Z", "2025-01-06T00:00:00Z", "2025-01-10T00:00:00Z")
    late = [dict(m, ts="2025-01-02T12:00:00Z") for m in log[-2:]]

    def extra(k: int) -> list[str]:  # (late records in the third run; a line not JSON after)
        return ([json.dumps(m) for m in late] if k == 2 else []) + (["{"] if k else [])

    outputs = []
    for name, config in (("duckdb", EngineConfig()), ("spark", SPARK)):
        tmp = tmp_path / name
        tmp.mkdir()
        release = zones_release(tmp, config)
        (tmp / "log.jsonl").write_text("")
        result = run_cuts(release, tmp / "log.jsonl", log, cuts, 20, extra)
        csv = sorted((tmp / "out").rglob("releases.csv"))
        diagnostics = dict(result.diagnostics)
        changelog = dict(diagnostics.pop("changelog"))
        quarantine = Path(changelog.pop("quarantine_file")).read_bytes()
        outputs.append(([p.read_bytes() for p in csv], diagnostics, changelog, quarantine))
        if name == "spark":
            state = release.store_path.with_name(release.store_path.name + ".state") / "spark"
            current = (state / "CURRENT").read_text().strip()
            head = json.loads((state / f"v{current}" / "HEAD.json").read_text())
            lines = len((tmp / "log.jsonl").read_bytes().splitlines())
            assert head["lines"] == lines and head["store"][0] == lines
    assert outputs[0] == outputs[1]
    assert outputs[0][2]["late"] > 0 and outputs[0][2]["quarantined"]
