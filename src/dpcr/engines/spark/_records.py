"""The per-record pass of the Spark engine, run on the executors inside ``mapInArrow``.

Everything that depends on one record alone -- reading its fields, parsing its timestamp and
sequence number, the phase-1 checks of :func:`dpcr.changelog.load`, and every value that a query
or the constraint reads from the row after the change -- is computed here, batch by batch, by
the very SQL the DuckDB engine runs: the batch is written to a small local file in the source's
format and staged with :func:`dpcr.changelog._stage.stage`, then checked with the loader's
phase-1 SQL, and the row values come from the same expression builders as
:mod:`dpcr.engines.duckdb` and :mod:`dpcr.bounding.sql`. So the two engines cannot parse a
record differently. Everything that relates records to each other (duplicates, liveness,
freezing, bounding, aggregation) is done by Spark (:mod:`dpcr.engines.spark._load`,
:mod:`dpcr.engines.spark._bound`).

Each batch arrives with the global record number of each of its lines or rows (the numbering
the loader gives the whole source); a batch's local record ``i`` is mapped back to the ``i``-th
of them.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dpcr._sql import json_path
from dpcr.bounding.constraints import Constraint, Hybrid
from dpcr.bounding.sql import bounding_sql, finite_number_sql
from dpcr.bounding.state_machine import StateMachine
from dpcr.changelog import JsonlSource, ParquetSource
from dpcr.queries import GroupedSum, Histogram, Query, Sum, has_open_keys

#: The column of a batch that carries its global record numbers (not a changelog field).
RECORD = "__dpcr_record"


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordSpec:
    """What the per-record pass computes. ``wanted``: the columns whose presence is checked
    (:func:`dpcr.engines.duckdb.missing_columns`); ``release_times``: t_1 .. t_n, to give each
    record its base interval."""

    source: JsonlSource | ParquetSource
    unit_column: str | None
    queries: tuple[Query, ...]
    constraint: Constraint
    wanted: tuple[str, ...]
    release_times: tuple[int, ...]
    batch_rows: int = 100_000


def machines(constraint: Constraint) -> list[StateMachine]:
    """The distinct state machines of ``constraint``, in the order :func:`bounding_sql` numbers
    them."""
    simple = (
        list(constraint.all_classes().values()) if isinstance(constraint, Hybrid) else [constraint]
    )
    out: list[StateMachine] = []
    for c in simple:
        if isinstance(c, StateMachine) and c not in out:
            out.append(c)
    return out


def is_open(query: Query) -> bool:
    """Whether ``query`` has open keys: its f is text, an open histogram's key itself or an
    open grouped sum's ``'v:key'`` (:func:`dpcr.engines._fvalues.f_sql`)."""
    return has_open_keys(query)


def f_type(query: Query) -> str:
    """The Spark type of ``query``'s f: text (open keys), else a number."""
    return "string" if is_open(query) else "bigint"


def no_f(query: Query) -> tuple[int | None, str]:
    """f before an entry's first row and after its delete, with its Spark type: 0, a
    histogram's or a grouped sum's no key (-1), open keys' NULL text."""
    if is_open(query):
        return None, "string"
    return (-1 if isinstance(query, Histogram | GroupedSum) else 0), "bigint"


def error_histograms(queries: tuple[Query, ...]) -> list[int]:
    return [i for i, q in enumerate(queries) if isinstance(q, Histogram) and q.unknown == "error"]


_ARROW = {"bigint": pa.int64(), "int": pa.int32(), "string": pa.string(), "boolean": pa.bool_()}


def output_schema(spec: RecordSpec) -> pa.Schema:
    """The Arrow schema of the pass's output rows (:func:`output_ddl`)."""
    pairs = [c.split(" ") for c in output_ddl(spec).split(", ")]
    return pa.schema([(name, _ARROW[kind]) for name, kind in pairs])


def output_ddl(spec: RecordSpec) -> str:
    """The Spark schema (DDL) of the pass's output rows."""
    cols = [
        "record bigint", "entry string", "ts bigint", "seq bigint", "op string",
        "unit_value string", "before_unit string", "after_unit string", "has_before boolean",
        "chk string", "split boolean", "value string", "cls string", "iv int",
    ]  # fmt: skip
    for i, q in enumerate(spec.queries):
        cols.append(f"f{i} {f_type(q)}")
        if isinstance(q, Sum):
            cols.append(f"nn{i} boolean")
    cols += [f"hv{i} string" for i in error_histograms(spec.queries)]
    for j in range(len(machines(spec.constraint))):
        cols += [f"st{j} string", f"comp{j} int"]
    for c in range(len(spec.wanted)):
        cols += [f"ah{c} boolean", f"bh{c} boolean"]
    return ", ".join(cols)


def _values_sql(spec: RecordSpec) -> tuple[str, str]:
    """(numbers, values): SQL select lists over a relation with ``after`` and ``before`` (the
    rows as JSON objects, or NULL) -- the finite numbers the sums read, then every per-row
    value of the output (f, non-numeric flags, unknown-key values, states, presence)."""
    from dpcr.bounding.sql import comp_sql, state_sql
    from dpcr.engines._fvalues import f_sql

    numbers = "".join(
        f", {finite_number_sql(json_path(q.column))} AS x{i}"
        for i, q in enumerate(spec.queries)
        if isinstance(q, Sum)
    )
    values = [f"{bounding_sql(spec.constraint).class_expr} AS cls"]
    for i, q in enumerate(spec.queries):
        values.append(f"{f_sql(q, f'x{i}')} AS f{i}")
        if isinstance(q, Sum):
            values.append(f"(after IS NOT NULL AND x{i} IS NULL) AS nn{i}")
    for i in error_histograms(spec.queries):
        q = spec.queries[i]
        assert isinstance(q, Histogram)
        values.append(f"json_extract_string(after, {json_path(q.column)}) AS hv{i}")
    for j, m in enumerate(machines(spec.constraint)):
        state = state_sql(m)
        values.append(f"{state} AS st{j}")
        values.append(f"CAST({comp_sql(m, state)} AS INTEGER) AS comp{j}")
    for c, column in enumerate(spec.wanted):
        p = json_path(column)
        values.append(f"coalesce(json_exists(after, {p}), FALSE) AS ah{c}")
        values.append(f"coalesce(json_exists(before, {p}), FALSE) AS bh{c}")
    return numbers, ", ".join(values)


def _stage_batch(
    con: duckdb.DuckDBPyConnection, spec: RecordSpec, table: pa.Table, workdir: Path
) -> Any:
    """Write ``table`` (without its record column) as a small source file in ``workdir`` and
    stage it; return the :class:`~dpcr.changelog._stage_rows.Staged`. JSON lines are written
    as the bytes they were read as, so the staging sets aside those that are not UTF-8 or too
    long, as it does for the whole file (its copy goes to ``workdir`` too)."""
    from dataclasses import replace

    from dpcr.changelog import stage

    data = table.drop_columns([RECORD])
    if isinstance(spec.source, JsonlSource):
        path = workdir / "batch.jsonl"
        lines = data.column("line").to_pylist()
        with path.open("wb") as f:
            for line in lines:
                f.write(line)
                f.write(b"\n")
    else:
        path = workdir / "batch.parquet"
        pq.write_table(data, path)
    temps: list[str] = []
    staged = stage(
        replace(spec.source, path=path), con, "_dpcr_b", spec.unit_column, temps, scratch=workdir
    )
    staged.temp_tables = temps
    return staged


def _drop(con: duckdb.DuckDBPyConnection, staged: Any) -> None:
    for t in staged.temp_tables:
        try:
            con.execute(f"DROP TABLE IF EXISTS {t}")
        except duckdb.CatalogException:  # the stager made it a view
            con.execute(f"DROP VIEW IF EXISTS {t}")


def _batches(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """Tables of ``rows`` rows (the last one shorter) from the incoming batches."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for b in batches:
        pending.append(b)
        count += b.num_rows
        while count >= rows:
            table = pa.Table.from_batches(pending)
            yield table.slice(0, rows)
            rest = table.slice(rows)
            pending, count = rest.to_batches(), rest.num_rows
    if count:
        yield pa.Table.from_batches(pending)


def _connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.execute("SET enable_progress_bar = false")
    con.execute("SET preserve_insertion_order = false")
    return con


def _global(records: np.ndarray, local: pa.Array) -> pa.Array:
    return pa.array(records[np.asarray(local.to_numpy(zero_copy_only=False)) - 1])


def _staged_batches(
    spec: RecordSpec, batches: Iterator[pa.RecordBatch]
) -> Iterator[tuple[duckdb.DuckDBPyConnection, np.ndarray, Any]]:
    """Each batch of the source staged by the DuckDB loader on an executor: (connection, the
    batch's global record numbers, the staged rows); the staged tables are dropped when the
    caller moves on, the connection and scratch folder at the end."""
    con = _connect()
    workdir = Path(tempfile.mkdtemp(prefix="dpcr-spark-"))
    try:
        for table in _batches(batches, spec.batch_rows):
            staged = _stage_batch(con, spec, table, workdir)
            yield con, table.column(RECORD).to_numpy(), staged
            _drop(con, staged)
    finally:
        con.close()
        shutil.rmtree(workdir, ignore_errors=True)


def record_pass(spec: RecordSpec) -> Any:
    """The function for ``mapInArrow``: batches of the source (with :data:`RECORD`) to batches of
    per-record results (:func:`output_ddl`)."""
    from dpcr.changelog import phase1_sql
    from dpcr.engines.base import numeric_columns

    numbers, values = _values_sql(spec)
    tokens = numeric_columns(spec.queries, spec.constraint)
    schema = output_schema(spec)
    times = np.asarray(spec.release_times, dtype=np.int64)
    t_n = int(times[-1]) if len(times) else None

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for con, records, staged in _staged_batches(spec, batches):
            p1 = phase1_sql(staged, spec.unit_column, numbers=tokens)
            out = con.sql(
                f"""
                SELECT record, seq_raw IS NULL AS seq_default, entry, ts, seq, op,
                       unit_value, before_unit, after_unit, has_before, chk, split,
                       CASE split_part(chk, ':', 2) WHEN 'op' THEN op_raw
                           WHEN 'entry' THEN entry WHEN 'ts' THEN ts_raw
                           WHEN 'seq' THEN seq_raw WHEN 'unit' THEN unit_value
                           WHEN 'before' THEN coalesce(before_text, before::VARCHAR)
                           WHEN 'after' THEN coalesce(after_text, after::VARCHAR)
                       END AS value, {values}
                FROM (
                    SELECT *{numbers} FROM (
                        SELECT p.*, r.before, r.after, r.before_text, r.after_text
                        FROM ({p1}) p JOIN {staged.table} r USING (record)
                    )
                )
                """
            ).to_arrow_table()
            # A missing seq is the record number: the global one, like the record's.
            globals_ = _global(records, out.column("record"))
            seq = pc.if_else(out.column("seq_default"), globals_, out.column("seq"))
            out = out.set_column(0, "record", globals_)
            out = out.set_column(out.schema.get_field_index("seq"), "seq", seq)
            ts = out.column("ts")
            known = ts.is_valid().to_numpy(zero_copy_only=False)
            tsv = pc.fill_null(ts, 0).to_numpy()
            iv = np.full(len(tsv), -1, dtype=np.int32)
            if t_n is not None:
                inside = known & (tsv <= t_n)
                iv[inside] = np.searchsorted(times, tsv[inside], side="left") + 1
            out = out.append_column("iv", pa.array(iv))
            yield from out.select(schema.names).cast(schema).to_batches()

    return run


def raw_pass(spec: RecordSpec) -> Any:
    """The function for ``mapInArrow`` giving ``(record, raw)``: each record as the quarantine
    file shows it (the loader's ``raw`` of the record)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for con, records, staged in _staged_batches(spec, batches):
            out = con.sql(
                f"SELECT record, raw::VARCHAR AS raw FROM ({staged.raw_sql}) "
                f"SEMI JOIN {staged.table} USING (record)"
            ).to_arrow_table()
            out = out.set_column(0, "record", _global(records, out.column("record")))
            yield from out.to_batches()

    return run
