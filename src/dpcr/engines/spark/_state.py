"""The Spark engine's incremental state: versioned Parquet beside the store, made current only
after the store commits.

A state folder (``<store>.state/spark/``, owner-only: it holds per-unit data) holds numbered
versions and a pointer to the committed one::

    CURRENT              the committed version n (replaced atomically)
    v{n}/HEAD.json       what version n continues from: the store head it belongs to, the
                         configuration, what of the source was consumed, the reports'
                         counters and the exact totals of the settled base intervals
    v{n}/units/          Parquet: the seed rows that run n settled (one table per kind, below)
    v{n}/pending/        Parquet: run n's mutations dated after its t_last (judged again later)
    v{n}/qlines.jsonl    run n's final quarantine lines
    v{n}/okeys.parquet   open keys: the candidate keys run n settled, and the totals by
    v{n}/ototals.parquet key text of the base intervals it settled (:mod:`._open`)

The seed tables (``units``, ``entries``, ``live``; ``keys`` with explicit sequence numbers) only
gain rows: a run writes the rows of the keys it settles as a new *delta* in its own version
folder, and a reader takes the newest version of each key among the deltas its head lists
(reading only the units a run touches). Once the deltas hold more rows than the base they
started from, or there are many of them, the run rewrites the newest rows as one new base:
amortised, a run costs what it settles plus a scan of the state, never a rewrite of it.

A run writes version n + 1 (everything but ``HEAD.json``) while ``CURRENT`` still names n; the
release loop commits the store, then :meth:`SparkPending.commit` writes the head, naming the
store head it now matches, and replaces ``CURRENT``. A run that dies in between leaves n + 1
without a head: the next run removes it. A state whose head does not match the store (a crash
after the store's commit, another configuration, a state lost) is not continued: the step reads
the whole source and writes a fresh state, which gives the same release.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from dpcr._fs import ensure_dir, write_atomic
from dpcr.engines.base import AggregateRequest, StoreHead

#: The state's format; a state of another format is not continued.
FORMAT = "spark-state1"
CURRENT = "CURRENT"
HEAD = "HEAD.json"
#: Tables kept as deltas (newest row per key wins), and their keys.
KEYS = {"units": ("unit",), "entries": ("unit", "entry"), "live": ("unit", "entry")}
#: A table is rewritten as one base once its deltas number more than this (or hold more rows
#: than the base).
MAX_DELTAS = 24


@dataclass(frozen=True, slots=True, kw_only=True)
class Head:
    """One state version: the store head it belongs to (set on commit), the configuration it
    was made for (``fingerprint``, ``spec``), what of the source it consumed (``lines``:
    records numbered up to it, lines or rows; ``bytes`` of a line file; ``files``: the part
    files of a Parquet directory as (name, size, modification time)), ``explicit`` sequence
    numbers seen, the reports' ``counters`` over settled rows and consumed records, the exact
    ``totals`` (q, iv, key, value) and ``clamps`` (q, iv, n) of the ``settled`` base intervals
    (``times``: a digest of their ends), and per table the versions of its deltas (``tables``)
    and their rows (``rows``: base, then each delta)."""

    version: int
    store: StoreHead | None
    fingerprint: str
    spec: str
    lines: int
    bytes: int
    files: tuple[tuple[str, int, int], ...]
    explicit: bool
    counters: dict[str, int]
    totals: tuple[tuple[int, int, int, int], ...]
    clamps: tuple[tuple[int, int, int], ...]
    settled: int
    times: str
    tables: dict[str, tuple[int, ...]] = field(default_factory=dict)
    rows: dict[str, tuple[int, ...]] = field(default_factory=dict)
    pending: bool = False

    def to_json(self) -> str:
        body = {
            "format": FORMAT,
            "version": self.version,
            "store": None
            if self.store is None
            else [self.store.records, self.store.t_last, self.store.token],
            "fingerprint": self.fingerprint,
            "spec": self.spec,
            "lines": self.lines,
            "bytes": self.bytes,
            "files": [list(f) for f in self.files],
            "explicit": self.explicit,
            "counters": dict(sorted(self.counters.items())),
            "totals": [list(t) for t in self.totals],
            "clamps": [list(c) for c in self.clamps],
            "settled": self.settled,
            "times": self.times,
            "tables": {k: list(v) for k, v in sorted(self.tables.items())},
            "rows": {k: list(v) for k, v in sorted(self.rows.items())},
            "pending": self.pending,
        }
        return json.dumps(body, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Head | None:
        """The head in ``text``, or None when it is not one of this format."""
        try:
            d = json.loads(text)
            if d.get("format") != FORMAT or d.get("store") is None:
                return None
            records, t_last, token = d["store"]
            return cls(
                version=int(d["version"]),
                store=StoreHead(records=int(records), t_last=t_last, token=str(token)),
                fingerprint=str(d["fingerprint"]),
                spec=str(d["spec"]),
                lines=int(d["lines"]),
                bytes=int(d["bytes"]),
                files=tuple((str(n), int(s), int(m)) for n, s, m in d["files"]),
                explicit=bool(d["explicit"]),
                counters={str(k): int(v) for k, v in d["counters"].items()},
                totals=tuple((int(a), int(b), int(c), int(e)) for a, b, c, e in d["totals"]),
                clamps=tuple((int(a), int(b), int(c)) for a, b, c in d["clamps"]),
                settled=int(d["settled"]),
                times=str(d["times"]),
                tables={k: tuple(int(x) for x in v) for k, v in d["tables"].items()},
                rows={k: tuple(int(x) for x in v) for k, v in d["rows"].items()},
                pending=bool(d["pending"]),
            )
        except (ValueError, KeyError, TypeError):
            return None


def spec_digest(request: AggregateRequest) -> str:
    """A digest of everything in ``request`` that fixes what the state holds: the queries,
    the constraint, the unit, the source's format and fields (not its path) and the error
    mode. A state made for another is not continued."""
    body = {
        "format": FORMAT,
        "queries": [repr(q) for q in request.queries],
        "constraint": repr(request.constraint),
        "unit_column": request.unit_column,
        "unit_is_entry": request.unit_is_entry,
        "source": repr(replace(request.source, path=Path("-"))),
        "on_error": request.on_error,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


def times_digest(times: Sequence[int]) -> str:
    return hashlib.sha256(",".join(str(int(t)) for t in times).encode()).hexdigest()[:32]


def version_dir(folder: Path, version: int) -> Path:
    return folder / f"v{version}"


def committed(folder: Path) -> Head | None:
    """The committed head (None: no state, or one this code cannot read)."""
    try:
        version = int((folder / CURRENT).read_text().strip())
        return Head.from_json((version_dir(folder, version) / HEAD).read_text())
    except (OSError, ValueError):
        return None


def matching(folder: Path, store: StoreHead, fingerprint: str, spec: str) -> Head | None:
    """The committed head when it belongs to the store's head ``store`` and the same
    configuration; None otherwise (then the run reads the whole source)."""
    head = committed(folder)
    if (
        head is None
        or head.store != store
        or (head.fingerprint, head.spec)
        != (
            fingerprint,
            spec,
        )
    ):
        return None
    return head


def prepare(folder: Path, head: Head | None) -> int:
    """The folder made ready (owner-only) for the next version, whose number is returned and
    whose folder is created empty: versions after the committed one (a run that died before
    its commit) are removed."""
    ensure_dir(folder.parent, 0o700)
    ensure_dir(folder, 0o700)
    base = head.version if head is not None else _current_number(folder)
    for path in folder.iterdir():
        if (
            path.name.startswith("v") and path.name[1:].isdigit() and int(path.name[1:]) > base
        ) or path.name in ("tmp",):
            shutil.rmtree(path, ignore_errors=True)
    ensure_dir(version_dir(folder, base + 1), 0o700)
    return base + 1


def _current_number(folder: Path) -> int:
    try:
        return int((folder / CURRENT).read_text().strip())
    except (OSError, ValueError):
        return 0


def scratch(folder: Path) -> Path:
    """A private scratch folder inside the state folder (emptied by :func:`prepare`)."""
    return ensure_dir(folder / "tmp", 0o700)


def read_seeds(
    spark: SparkSession,
    folder: Path,
    head: Head,
    table: str,
    schema: str,
    units: DataFrame | None,
) -> DataFrame:
    """Table ``table`` of ``head`` (``schema``: its columns): the newest row of each key over
    its deltas (every row for ``keys``), of the units in ``units`` only (None: all)."""
    versions = head.tables.get(table, ())
    if not versions:
        return spark.createDataFrame([], schema)
    paths = [str(version_dir(folder, v) / table) for v in versions]
    frame = spark.read.schema(f"{schema}, v bigint").parquet(*paths)
    if units is not None:
        frame = frame.join(F.broadcast(units), "unit", "left_semi")
    if table not in KEYS:
        return frame.drop("v")
    newest = Window.partitionBy(*KEYS[table]).orderBy(F.col("v").desc())
    return (
        frame.withColumn("_newest", F.row_number().over(newest))
        .where(F.col("_newest") == 1)
        .drop("_newest", "v")
    )


def parquet_rows(path: Path) -> int:
    """Rows of the Parquet files of folder ``path`` (from their footers)."""
    return sum(pq.read_metadata(p).num_rows for p in path.glob("*.parquet"))


def write_table(
    spark: SparkSession,
    folder: Path,
    head: Head | None,
    version: int,
    table: str,
    delta: DataFrame,
    schema: str,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Write ``delta`` (rows of ``table`` settled by run ``version``) into the version's
    folder, as a delta or, when the deltas have grown (:data:`MAX_DELTAS`, or more rows than
    their base), merged with the older ones into one base. Returns the table's versions and
    rows for the new head."""
    target = version_dir(folder, version) / table
    versions = head.tables.get(table, ()) if head is not None else ()
    rows = head.rows.get(table, ()) if head is not None else ()
    delta.withColumn("v", F.lit(version).cast("long")).write.mode("overwrite").parquet(str(target))
    written = parquet_rows(target)
    versions, rows = (*versions, version), (*rows, written)
    if len(versions) > 1 and (len(versions) > MAX_DELTAS or sum(rows[1:]) > rows[0]):
        merged = replace(_empty_head(), tables={table: versions})
        whole = read_seeds(spark, folder, merged, table, schema, None)
        base = version_dir(folder, version) / f"{table}.base"
        whole.withColumn("v", F.lit(version).cast("long")).write.mode("overwrite").parquet(
            str(base)
        )
        shutil.rmtree(target)
        base.rename(target)
        versions, rows = (version,), (parquet_rows(target),)
    return versions, rows


def _empty_head() -> Head:
    return Head(
        version=0,
        store=None,
        fingerprint="",
        spec="",
        lines=0,
        bytes=0,
        files=(),
        explicit=False,
        counters={},
        totals=(),
        clamps=(),
        settled=0,
        times="",
    )


QLine = tuple[int, int, str]  # record, part, quarantine line


def quarantine_lines(folder: Path, head: Head | None) -> Iterator[QLine]:
    """The final quarantine lines of earlier runs, in (record, part) order."""
    if head is None:
        return iter(())
    files = [version_dir(folder, v) / "qlines.jsonl" for v in head.tables.get("qlines", ())]
    return heapq.merge(*(_qlines(f) for f in files))


def _qlines(path: Path) -> Iterator[QLine]:
    with path.open(encoding="utf-8") as f:
        for text in f:
            record, part, line = json.loads(text)
            yield int(record), int(part), str(line)


def write_qlines(
    folder: Path, head: Head | None, version: int, lines: Sequence[QLine]
) -> tuple[int, ...]:
    """Write this run's final quarantine lines; returns the versions holding them all (merged
    into one file once there are many)."""
    versions = head.tables.get("qlines", ()) if head is not None else ()
    if not lines and len(versions) <= MAX_DELTAS:
        return versions
    merge = len(versions) >= MAX_DELTAS
    every = heapq.merge(quarantine_lines(folder, head), sorted(lines)) if merge else sorted(lines)

    def write(f: Any) -> None:
        for record, part, line in every:
            f.write(json.dumps([record, part, line], ensure_ascii=False) + "\n")

    write_atomic(version_dir(folder, version) / "qlines.jsonl", write, mode=0o600, durable=False)
    return (version,) if merge else (*versions, version)


@dataclass
class SparkPending:
    """Version ``head.version`` of the state in ``folder``, written but not current:
    :meth:`commit` makes it current once the store has committed (see the module
    docstring)."""

    folder: Path
    head: Head
    done: bool = False

    def commit(self, store: StoreHead) -> None:
        """Record the store's head in the version and make it current; then remove the
        versions nothing refers to."""
        if self.done:
            return
        target = version_dir(self.folder, self.head.version)
        head = replace(self.head, store=store)
        write_atomic(target / HEAD, head.to_json(), mode=0o600)
        write_atomic(self.folder / CURRENT, f"{head.version}\n", mode=0o600)
        self.done = True
        used = {v for versions in head.tables.values() for v in versions} | {head.version}
        for path in self.folder.iterdir():
            name = path.name
            if name.startswith("v") and name[1:].isdigit() and int(name[1:]) < head.version:
                if int(name[1:]) not in used:
                    shutil.rmtree(path, ignore_errors=True)
                else:  # its deltas stay; its head and pending rows are no longer read
                    (path / HEAD).unlink(missing_ok=True)
                    shutil.rmtree(path / "pending", ignore_errors=True)
