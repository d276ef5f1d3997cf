"""Open keys on Spark (``open = true``, docs/privacy.md sections 12 and 12b): the candidate keys
of open histograms and open grouped sums, their totals by key text, and what an incremental
state keeps of them -- the DuckDB engine's :func:`dpcr.engines.totals.candidate_keys`,
:func:`dpcr.engines.totals.aggregate_query` (an open query's columns) and the state tables
``okeys`` / ``ototals`` (:mod:`dpcr.engines.incremental`).

An open histogram's f is the key itself (text; NULL: no key), an open grouped sum's the text
``'v:key'`` (its value in steps, then the key). The candidate keys are every key a kept row
holds (the rows up to the last release time; in a step, also the key the seed of a row's
(unit, entry) holds), each with the first base interval one holds it in, ordered by that
interval and key; the values have a column per :func:`~dpcr.engines.base.open_columns` key.

A state version keeps two append-only Parquet files per step that settles something:
``okeys.parquet`` (q, key, iv: the candidate keys that settled rows hold first, each once) and
``ototals.parquet`` (q, iv, key, value: the exact non-zero totals of the settled base
intervals). The head lists the versions holding them (``tables``); once more than
:data:`~dpcr.engines.spark._state.MAX_DELTAS` hold them, a step writes them all as one file.
They are written and read on the driver, which collects the candidates and totals anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dpcr.engines.base import open_columns
from dpcr.engines.spark._records import is_open
from dpcr.engines.spark._state import MAX_DELTAS, Head, version_dir
from dpcr.engines.state import merge_open
from dpcr.queries import GroupedSum, Query

__all__ = ["OpenState", "candidates", "columns", "fill", "key_of", "merged", "read_state",
           "value_of", "write_state"]

#: The state's tables of open queries, and the Arrow schema of each.
SCHEMAS = {
    "okeys": pa.schema([("q", pa.int32()), ("key", pa.string()), ("iv", pa.int64())]),
    "ototals": pa.schema(
        [("q", pa.int32()), ("iv", pa.int64()), ("key", pa.string()), ("value", pa.int64())]
    ),
}


def key_of(query: Query, f: Column) -> Column:
    """The key of open query ``query``'s f ``f`` (NULL: no key): the text itself (a
    histogram), or the text after the first ``':'`` (a grouped sum's ``'v:key'``), as
    :func:`dpcr.engines.totals.open_key_sql`."""
    if isinstance(query, GroupedSum):
        return f.substr(F.instr(f, ":") + 1, F.length(f))
    return f


def value_of(f: Column) -> Column:
    """The value (steps) of an open grouped sum's f ``'v:key'``, as
    :func:`dpcr.engines.totals.open_value_sql`."""
    return F.substring_index(f, ":", 1).cast("long")


def candidates(
    bounded: DataFrame | None, queries: Sequence[Query], *, seeded: bool = False
) -> dict[str, dict[str, int]]:
    """Per open query, its candidate keys in ``bounded`` (every key a kept row holds, and
    with ``seeded`` the key its seed ``s_f{i}`` holds, dated by the row), with the first base
    interval, ordered by that interval and key."""
    opened = [i for i, q in enumerate(queries) if is_open(q)]
    out: dict[str, dict[str, int]] = {queries[i].name: {} for i in opened}
    if not opened or bounded is None:
        return out
    items = []
    for i in opened:
        q = queries[i]
        items.append(F.struct(F.lit(i).alias("q"), key_of(q, F.col(f"f{i}")).alias("key")))
        if seeded:
            items.append(F.struct(F.lit(i).alias("q"), key_of(q, F.col(f"s_f{i}")).alias("key")))
    held = (
        bounded.where(F.col("kept"))
        .select("iv", F.explode(F.array(*items)).alias("h"))
        .select("iv", F.col("h.q").alias("q"), F.col("h.key").alias("key"))
        .where(F.col("key").isNotNull())
    )
    found: dict[int, list[tuple[int, str]]] = {i: [] for i in opened}
    for r in held.groupBy("q", "key").agg(F.min("iv").alias("iv")).collect():
        found[int(r["q"])].append((int(r["iv"]), str(r["key"])))
    for i, keys in found.items():
        out[queries[i].name] = {key: iv for iv, key in sorted(keys)}
    return out


def columns(
    queries: Sequence[Query], found: dict[str, dict[str, int]]
) -> dict[str, tuple[str, ...]]:
    """Per open query, the keys of its values' columns (:func:`open_columns`)."""
    return {q.name: open_columns(q, found.get(q.name, {})) for q in queries if is_open(q)}


def fill(
    rows: Sequence[Any],
    queries: Sequence[Query],
    first: int,
    width: int,
    keys: dict[str, tuple[str, ...]],
) -> dict[str, np.ndarray]:
    """The (intervals ``first ..`` × keys) totals of every query from rows (q, iv, key, okey,
    t) of :func:`dpcr.engines.spark._bound._totals`; ``keys``: the open queries' columns
    (:func:`columns`), whose rows name the key by its text ``okey``."""
    values = {
        q.name: np.zeros((width, len(keys.get(q.name, q.keys))), dtype=np.int64) for q in queries
    }
    column_of = {name: {k: j for j, k in enumerate(ks)} for name, ks in keys.items()}
    for r in rows:
        name = queries[int(r["q"])].name
        j = column_of[name][str(r["okey"])] if name in column_of else int(r["key"])
        values[name][int(r["iv"]) - first, j] += int(r["t"])
    return values


@dataclass(frozen=True, slots=True)
class OpenState:
    """What a state version keeps of its open queries: per query number, the candidate keys
    (first interval) and the (interval, key, total) of the settled intervals read."""

    keys: dict[int, dict[str, int]] = field(default_factory=dict)
    totals: dict[int, list[tuple[int, str, int]]] = field(default_factory=dict)


def _table(folder: Path, head: Head | None, name: str) -> pa.Table:
    """Table ``name`` of ``head``: the files of the versions it lists, in version order."""
    versions = head.tables.get(name, ()) if head is not None else ()
    parts = [pq.read_table(version_dir(folder, v) / f"{name}.parquet") for v in versions]
    return pa.concat_tables(parts) if parts else SCHEMAS[name].empty_table()


def read_state(folder: Path, head: Head | None, *, lo: int, first: int) -> OpenState:
    """The candidate keys of ``head``'s state and its totals of intervals ``lo .. first - 1``
    (the settled ones a result needs)."""
    state = OpenState()
    keys = _table(folder, head, "okeys")
    for q, key, iv in zip(*(keys.column(c).to_pylist() for c in ("q", "key", "iv")), strict=True):
        state.keys.setdefault(int(q), {})[str(key)] = int(iv)
    totals = _table(folder, head, "ototals")
    iv = totals.column("iv")
    totals = totals.filter(pc.and_(pc.greater_equal(iv, lo), pc.less(iv, first)))
    columns = (totals.column(c).to_pylist() for c in ("q", "iv", "key", "value"))
    for q, i, key, value in zip(*columns, strict=True):
        state.totals.setdefault(int(q), []).append((int(i), str(key), int(value)))
    return state


def merged(
    queries: Sequence[Query],
    state: OpenState,
    found: dict[str, dict[str, int]],
    values: dict[str, np.ndarray],
    *,
    lo: int,
    hi: int,
    first: int,
) -> tuple[dict[str, dict[str, int]], dict[str, np.ndarray]]:
    """Per open query, its candidate keys and totals of intervals ``lo .. hi``: the state's
    (settled intervals, before ``first``) and this step's (``found``, ``values``: intervals
    ``first ..``), by :func:`dpcr.engines.state.merge_open`, as the DuckDB engine merges them."""
    out_keys: dict[str, dict[str, int]] = {}
    out_values: dict[str, np.ndarray] = {}
    for i, q in enumerate(queries):
        if is_open(q):
            out_keys[q.name], out_values[q.name] = merge_open(
                q, state.keys.get(i, {}), state.totals.get(i, ()), found.get(q.name, {}),
                values[q.name], lo=lo, hi=hi, first=first,
            )  # fmt: skip
    return out_keys, out_values


def write_state(
    folder: Path,
    head: Head | None,
    version: int,
    queries: Sequence[Query],
    known: dict[int, dict[str, int]],
    step: tuple[dict[str, dict[str, int]], dict[str, np.ndarray]],
    *,
    first: int,
    settled: int,
) -> dict[str, tuple[int, ...]]:
    """Write what settles of the open queries into version ``version``: the candidate keys
    first held by base interval ``settled`` that ``head``'s state (``known``: its keys) lacks,
    and the totals of intervals ``first .. settled`` (``step``: this step's candidate keys and
    totals, from interval ``first``). Returns the versions holding each table for the new
    head."""
    found, values = step
    new: dict[str, list[tuple[Any, ...]]] = {"okeys": [], "ototals": []}
    for i, q in enumerate(queries):
        if not is_open(q):
            continue
        held = known.get(i, {})
        new["okeys"] += [(i, k, iv) for k, iv in found.get(q.name, {}).items()
                         if iv <= settled and k not in held]  # fmt: skip
        keys = open_columns(q, found.get(q.name, {}))
        for iv in range(first, settled + 1):
            row = values[q.name][iv - first]
            new["ototals"] += [(i, iv, keys[j], int(row[j])) for j in np.flatnonzero(row)]
    tables: dict[str, tuple[int, ...]] = {}
    for name, rows in new.items():
        versions = head.tables.get(name, ()) if head is not None else ()
        schema = SCHEMAS[name]
        table = pa.table([list(c) for c in zip(*rows, strict=True)] if rows else
                         [[] for _ in schema.names], schema=schema)  # fmt: skip
        merge = len(versions) >= MAX_DELTAS
        if merge:
            table = pa.concat_tables([_table(folder, head, name), table])
        if merge or rows:
            pq.write_table(table, version_dir(folder, version) / f"{name}.parquet")
            versions = (version,) if merge else (*versions, version)
        if versions:
            tables[name] = versions
    return tables
