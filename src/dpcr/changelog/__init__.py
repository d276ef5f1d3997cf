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
    from dpcr.changelog._canonical import typed_source
    from dpcr.changelog._decimals import UndeclaredDecimal, check_decimals, undeclared_decimals
    from dpcr.changelog._load import REASONS, LoadReport, OnError, load
    from dpcr.changelog._phase1 import phase1_sql
    from dpcr.changelog._resume import FrozenPoint, consumed_record, raw_digest
    from dpcr.changelog._sources import (
        CsvSource,
        DebeziumSource,
        JsonlSource,
        ParquetSource,
        SourceConfig,
        SqliteSource,
        Wal2jsonSource,
        check_unit_column,
        describe,
        from_config,
    )
    from dpcr.changelog._sqlite import CLOCK_TABLE, install_triggers

#: Each name is imported from its module when first used (:mod:`dpcr._lazy`).
__getattr__, __dir__ = exports(
    "dpcr.changelog",
    {
        "dpcr.changelog._canonical": ["typed_source"],
        "dpcr.changelog._decimals": ["UndeclaredDecimal", "check_decimals", "undeclared_decimals"],
        "dpcr.changelog._load": ["REASONS", "LoadReport", "OnError", "load"],
        "dpcr.changelog._phase1": ["phase1_sql"],
        "dpcr.changelog._resume": ["FrozenPoint", "consumed_record", "raw_digest"],
        "dpcr.changelog._sources": [
            "CsvSource", "DebeziumSource", "JsonlSource", "ParquetSource", "SourceConfig",
            "SqliteSource", "Wal2jsonSource", "check_unit_column", "describe", "from_config",
        ],
        "dpcr.changelog._sqlite": ["CLOCK_TABLE", "install_triggers"],
    },
)  # fmt: skip

__all__ = [
    "CLOCK_TABLE",
    "REASONS",
    "CsvSource",
    "DebeziumSource",
    "FrozenPoint",
    "JsonlSource",
    "LoadReport",
    "OnError",
    "ParquetSource",
    "SourceConfig",
    "SqliteSource",
    "UndeclaredDecimal",
    "Wal2jsonSource",
    "check_decimals",
    "check_unit_column",
    "consumed_record",
    "describe",
    "from_config",
    "install_triggers",
    "load",
    "phase1_sql",
    "raw_digest",
    "typed_source",
    "undeclared_decimals",
]
