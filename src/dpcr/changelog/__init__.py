"""The changelog: a database as an append-only stream of immutable mutations.

A mutation is (privacy unit, entry, ts, seq, op, before, after) in the value-change format:
``op`` is ``insert`` (``before`` is null), ``update`` or ``delete`` (``after`` is null);
``before``/``after`` are the entry's row as a JSON object. :func:`load` reads any source into
the canonical DuckDB table the engine works on, validating every record; ``docs/changelog.md``
describes the formats and the reasons a record is rejected.

>>> import duckdb, json, tempfile, os
>>> from dpcr.changelog import JsonlSource, load
>>> path = os.path.join(tempfile.mkdtemp(), "c.jsonl")
>>> with open(path, "w") as f:
...     _ = f.write(json.dumps({"entry": "t1", "ts": "2025-01-01T08:00:00Z", "op": "insert",
...                             "after": {"zone": "A"}}) + "\\n")
>>> con = duckdb.connect()
>>> load(JsonlSource(path=path), con).valid
1
>>> con.execute("SELECT entry, ts, op, after FROM changelog").fetchall()
[('t1', 1735718400000000, 'insert', '{"zone":"A"}')]
"""

from typing import TYPE_CHECKING

from dpcr._lazy import exports

if TYPE_CHECKING:
    from dpcr.changelog._canonical import (
        NotPlain,
        mark_checked,
        mark_unchecked,
        ts_source,
        typed_rejects,
        typed_seq,
        typed_source,
        unchecked,
    )
    from dpcr.changelog._columns import ColumnSample, sample_columns
    from dpcr.changelog._decimals import UndeclaredDecimal, check_decimals, undeclared_decimals
    from dpcr.changelog._increment import Increment, NeedsFullRead, Prior, load_increment
    from dpcr.changelog._liveness import plain_break
    from dpcr.changelog._load import load
    from dpcr.changelog._messages import field_label, message, quarantine_line
    from dpcr.changelog._phase1 import phase1_sql
    from dpcr.changelog._progress import Report, Steps
    from dpcr.changelog._raw_lines import ensure_raw
    from dpcr.changelog._report import REASONS, LoadReport, OnError
    from dpcr.changelog._resume import (
        FrozenPoint,
        check_frozen,
        check_late,
        consumed_record,
        log_digest,
        raw_digest,
    )
    from dpcr.changelog._sources import (
        EPOCH_FACTORS,
        CsvSource,
        DebeziumSource,
        JsonlSource,
        ParquetSource,
        SourceConfig,
        SqliteSource,
        Wal2jsonSource,
        check_load_options,
        check_unit_column,
        describe,
        from_config,
    )
    from dpcr.changelog._sqlite import CLOCK_TABLE, install_triggers
    from dpcr.changelog._stage import stage
    from dpcr.changelog._stage_rows import Staged

#: Each name is imported from its module when first used (:mod:`dpcr._lazy`).
__getattr__, __dir__ = exports(
    "dpcr.changelog",
    {
        "dpcr.changelog._canonical": [
            "NotPlain", "mark_checked", "mark_unchecked", "ts_source", "typed_rejects",
            "typed_seq", "typed_source", "unchecked",
        ],
        "dpcr.changelog._liveness": ["plain_break"],
        "dpcr.changelog._columns": ["ColumnSample", "sample_columns"],
        "dpcr.changelog._decimals": ["UndeclaredDecimal", "check_decimals", "undeclared_decimals"],
        "dpcr.changelog._increment": [
            "Increment", "NeedsFullRead", "Prior", "load_increment",
        ],
        "dpcr.changelog._load": ["load"],
        "dpcr.changelog._messages": ["field_label", "message", "quarantine_line"],
        "dpcr.changelog._phase1": ["phase1_sql"],
        "dpcr.changelog._progress": ["Report", "Steps"],
        "dpcr.changelog._raw_lines": ["ensure_raw"],
        "dpcr.changelog._report": ["REASONS", "LoadReport", "OnError"],
        "dpcr.changelog._resume": [
            "FrozenPoint", "check_frozen", "check_late", "consumed_record", "log_digest",
            "raw_digest",
        ],
        "dpcr.changelog._sources": [
            "EPOCH_FACTORS", "CsvSource", "DebeziumSource", "JsonlSource", "ParquetSource",
            "SourceConfig", "SqliteSource", "Wal2jsonSource", "check_load_options",
            "check_unit_column", "describe", "from_config",
        ],
        "dpcr.changelog._sqlite": ["CLOCK_TABLE", "install_triggers"],
        "dpcr.changelog._stage": ["stage"],
        "dpcr.changelog._stage_rows": ["Staged"],
    },
)  # fmt: skip

__all__ = [
    "CLOCK_TABLE",
    "EPOCH_FACTORS",
    "REASONS",
    "ColumnSample",
    "CsvSource",
    "DebeziumSource",
    "FrozenPoint",
    "Increment",
    "JsonlSource",
    "LoadReport",
    "NeedsFullRead",
    "NotPlain",
    "OnError",
    "ParquetSource",
    "Prior",
    "Report",
    "SourceConfig",
    "SqliteSource",
    "Staged",
    "Steps",
    "UndeclaredDecimal",
    "Wal2jsonSource",
    "check_decimals",
    "check_frozen",
    "check_late",
    "check_load_options",
    "check_unit_column",
    "consumed_record",
    "describe",
    "ensure_raw",
    "field_label",
    "from_config",
    "install_triggers",
    "load",
    "load_increment",
    "log_digest",
    "mark_checked",
    "mark_unchecked",
    "message",
    "phase1_sql",
    "plain_break",
    "quarantine_line",
    "raw_digest",
    "sample_columns",
    "stage",
    "ts_source",
    "typed_rejects",
    "typed_seq",
    "typed_source",
    "unchecked",
    "undeclared_decimals",
]
