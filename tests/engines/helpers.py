"""Shared pieces of the engine reference tests."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dpcr
from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid, TimeBounded
from dpcr.bounding.state_machine import OpLimits, StateMachine
from dpcr.engines import EngineConfig
from dpcr.queries import Count, Events, GroupedSum, Histogram, Query, Sum

# A generated JSONL changelog with ties in timestamps, records out of time order, every
# quarantine reason, moving updates (with a unit column), non-numeric sums and unknown
# histogram keys (:func:`generate`), with queries and constraints of every kind.


#: A local Spark engine small enough for the tests.
SPARK = EngineConfig(
    name="spark",
    master="local[2]",
    conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
)


def zones_release(tmp: Path, engine: EngineConfig) -> dpcr.ContinualRelease:
    """A daily release of a count and a histogram of ``zone`` over ``tmp/log.jsonl`` (at most
    3 mutations per entry, ε = 1), on ``engine``, with its outputs in ``tmp/out``."""
    return dpcr.ContinualRelease(
        source=dpcr.sources.Jsonl(path=tmp / "log.jsonl"),
        constraint=dpcr.AtMostK(k=3),
        plan=dpcr.DisjointRelease(start="2025-01-01", period="1d"),
        queries=[
            dpcr.Count(name="active"),
            dpcr.Histogram(name="zones", column="zone", categories=("A", "B", "C")),
        ],
        budget=dpcr.Budget(epsilon=1.0),
        output_dir=tmp / "out",
        engine=engine,
    )


def run_cuts(
    release: dpcr.ContinualRelease, path: Path, log: Sequence[dict[str, Any]],
    cuts: Sequence[str], seed: int, extra: Callable[[int], list[str]] = lambda k: [],
) -> Any:
    """Run ``release`` (reading the JSON lines at ``path``) at each of ``cuts``, the k-th run
    with ``simulation_randomness(seed + k)``, after appending to ``path`` the records of ``log``
    dated from the cut before (the first: from the beginning) to this one, then the lines
    ``extra(k)``. The last run's result."""
    from dpcr.noise import simulation_randomness

    start, result = "", None
    for k, cut in enumerate(cuts):
        lines = [json.dumps(m) for m in log if start <= m["ts"] < cut] + extra(k)
        with path.open("a", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
        result = release.run(until=cut, rng=simulation_randomness(seed + k))
        start = cut
    return result


def stored_outputs(
    release: dpcr.ContinualRelease,
) -> tuple[dict[tuple[str, str, int, int], int], dict[str, dict[str, tuple[int, int | None]]]]:
    """What the store of ``release`` (a simulation) holds: every released value by (query,
    key, layer, index), and per open histogram its candidate keys' (first, selection)
    intervals."""
    from dpcr.store import Store

    with Store(release.store_path, fingerprint=release.fingerprint(),
               mode="simulation") as st:  # fmt: skip
        values = {(r.query, r.key, r.layer, r.index): r.value for r in st.released()}
        keys = {q: {k: (r.appeared, r.selected) for k, r in ks.items()}
                for q, ks in st.open_keys().items()}  # fmt: skip
    return values, keys


def append_mutation(
    mutations: list[dict[str, Any]],
    base: dict[str, Any],
    *,
    unit: str,
    new_unit: str,
    op: str,
    row: Any,
    after: Any,
) -> None:
    """Append one canonical mutation; an update moving the entry to another unit is a delete
    in the old unit and an insert in the new one (docs/privacy.md, section 8)."""
    if new_unit != unit:
        mutations.append({**base, "unit": unit, "op": "delete", "before": row, "after": None})
        mutations.append({**base, "unit": new_unit, "op": "insert", "before": None, "after": after})
    else:
        mutations.append({**base, "unit": unit, "op": op, "before": row, "after": after})


HOUR = 3_600_000_000
DAY = 24 * HOUR
T0 = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
STATES = ("issued", "activated", "used", "expired")
MACHINE = StateMachine(
    column="status",
    initial=("issued",),
    transitions=("issued -> activated -> used -> expired", "issued -> expired"),
    terminal=("expired",),
)
QUERIES: tuple[Query, ...] = (
    Count(name="live"),
    Count(name="live_a", where={"k": ["a"]}),
    Sum(name="v", column="v", lower=0, upper=10),
    Sum(name="neg", column="v", lower=-4, upper=-1, grid=0.5),
    Histogram(name="k", column="k", categories=("a", "b", "c")),
    Histogram(name="k_other", column="k", categories=("a", "b"), unknown="other"),
    Events(name="new_short", op="insert", where={"kind": "short"}),
    Events(name="updates", op="update"),
    Events(name="to_used", op="update", before={"status": ["issued", "activated"]},
           where={"status": "used"}),
    Events(name="gone_a", op="delete", where={"k": "a"}),
)
#: Open histograms (issue 35): keys from the data -- with a declared key, under a filter, and
#: over a column of numbers, text and missing values (``7`` and ``"7"`` are one key).
OPEN_QUERIES: tuple[Query, ...] = (
    Histogram(name="k_open", column="k", keys=("b",), open=True),
    Histogram(name="status_short", column="status", open=True, where={"kind": ["short"]}),
    Histogram(name="v_open", column="v", open=True),
)
#: Grouped sums (``kind = "sum"`` with ``by``): declared keys that drop the other values or
#: collect them under ``other`` (under a filter), and open keys following the open histograms of
#: :data:`OPEN_QUERIES` (same column, ``where`` and declared keys): text keys with a declared
#: one, a filtered column, and the summed column itself (``7`` and ``"7"`` are one key).
GROUPED_QUERIES: tuple[Query, ...] = (
    GroupedSum(name="v_by_k", column="v", lower=-4, upper=10, grid=0.5, by="k",
               categories=("a", "b")),
    GroupedSum(name="v_by_kind", column="v", lower=0, upper=2, by="kind",
               categories=("short", "long"), unknown="other", where={"k": ["a", "b"]}),
    GroupedSum(name="v_by_k_open", column="v", lower=-4, upper=10, by="k", categories=("b",),
               open=True, keys_from="k_open"),
    GroupedSum(name="neg_by_status", column="v", lower=-4, upper=-1, grid=0.5, by="status",
               open=True, keys_from="status_short", where={"kind": ["short"]}),
    GroupedSum(name="v_by_v", column="v", lower=0, upper=10, by="v", open=True,
               keys_from="v_open"),
)  # fmt: skip
CONSTRAINTS: tuple[Constraint, ...] = (
    AtMostK(k=2),
    AtMostK(k=4),
    TimeBounded(bound=30 * HOUR),
    MACHINE,
    Hybrid(
        column="kind",
        classes={"short": AtMostK(k=1), "long": TimeBounded(bound=2 * DAY)},
        default=AtMostK(k=3),
    ),
    Hybrid(column="kind", classes={"short": MACHINE, "long": AtMostK(k=3)}),
    # per-op limits: each entry inserted once, deleted once, its kind never changed
    OpLimits(limit=3, deletes=1, immutable=("kind",)),
)


def _when(rng: random.Random, ts: int) -> Any:
    """The timestamp as ISO text or epoch seconds (both forms the loader reads)."""
    if rng.random() < 0.5:
        return ts // 1_000_000
    when = datetime.fromtimestamp(ts / 1_000_000, tz=UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _row(rng: random.Random, owner: str, state: int) -> dict[str, Any]:
    v: Any = rng.choice([rng.randint(-6, 14), round(rng.uniform(-5, 12), 2), "x", None, "7"])
    row: dict[str, Any] = {
        "owner": owner,
        "status": STATES[min(state, 3)] if rng.random() > 0.05 else "lost",
        "k": rng.choice(["a", "b", "c", "z"]),
        "kind": rng.choice(["short", "long", "other"]),
    }
    if v is not None:
        row["v"] = v
    return row


def generate(seed: int, *, unit_column: bool) -> list[str]:
    """Lines of a JSONL changelog (some of them invalid on purpose)."""
    rng = random.Random(seed)
    times = [T0 + rng.randrange(0, 6 * DAY, HOUR) for _ in range(12)]  # few values: ties
    out: list[dict[str, Any] | str] = []
    for e in range(rng.randint(6, 14)):
        owner = f"u{rng.randint(0, 3)}"
        ts = sorted(rng.sample(times, rng.randint(1, 6)))
        row: dict[str, Any] | None = None
        state = 0
        for i, t in enumerate(ts):
            rec: dict[str, Any] = {"entry": f"e{e}", "ts": _when(rng, t)}
            if rng.random() < 0.3:
                rec["seq"] = rng.randint(0, 5)
            if i == 0 or row is None:
                new = _row(rng, owner, 0)
                rec |= {"op": "insert", "after": new}
                row = new
            elif i == len(ts) - 1 and rng.random() < 0.4:
                rec |= {"op": "delete", "before": row}
                row = None
            else:
                state += rng.choice([0, 1, 1, 2])
                if unit_column and rng.random() < 0.2:
                    owner = f"u{rng.randint(0, 3)}"  # a moving update
                new = _row(rng, owner, state)
                rec |= {"op": "update", "after": new}
                if rng.random() < 0.8:
                    rec["before"] = row
                row = new
            out.append(rec)
    # Every quarantine reason at least once.
    bad: list[dict[str, Any] | str] = [
        "not json",
        "[1, 2]",
        {"entry": "b1", "ts": _when(rng, times[0]), "op": "insert", "after": 5},
        {
            "entry": "b2",
            "ts": _when(rng, times[1]),
            "op": "insert",
            "before": {"a": 1},
            "after": {"a": 1},
        },
        {"entry": "b3", "ts": _when(rng, times[2]), "op": "upsert", "after": {}},
        {"ts": _when(rng, times[3]), "op": "insert", "after": {"owner": "u1"}},
        {"entry": "b4", "ts": "yesterday", "op": "insert", "after": {"owner": "u1"}},
        {
            "entry": "b5",
            "ts": _when(rng, times[4]),
            "seq": "x1",
            "op": "insert",
            "after": {"owner": "u1"},
        },
        {"entry": "b6", "ts": _when(rng, times[5]), "op": "insert", "after": {"k": "a"}},
        {"entry": "b7", "ts": _when(rng, times[6]), "op": "update", "after": {"owner": "u2"}},
        {"entry": "b8", "ts": _when(rng, times[7]), "op": "delete", "before": {"owner": "u2"}},
        {
            "entry": "b9",
            "ts": _when(rng, times[8]),
            "seq": 1,
            "op": "insert",
            "after": {"owner": "u3", "v": 1},
        },
        {
            "entry": "b9",
            "ts": _when(rng, times[9]),
            "seq": 1,
            "op": "update",
            "before": {"owner": "u3"},
            "after": {"owner": "u3"},
        },
        {
            "entry": "b9",
            "ts": _when(rng, times[9]),
            "seq": 2,
            "op": "insert",
            "after": {"owner": "u3"},
        },
        "",
    ]
    for b in bad:
        out.insert(rng.randrange(len(out) + 1), b)
    # Out-of-order arrival: swap a few neighbours.
    for _ in range(len(out) // 4):
        i = rng.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]
    return [r if isinstance(r, str) else json.dumps(r) for r in out]
