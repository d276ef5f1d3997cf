"""Changelog sources for the Python API: ``dpcr.sources.Jsonl(path=...)`` and friends, one per
``[source] format``: ``Jsonl``, ``Csv``, ``Parquet``, ``Sqlite``, ``Debezium`` (what ``dpcr capture
kafka`` writes) and ``Wal2json`` (what ``dpcr capture postgres`` writes, with either plugin).

Each is a frozen value naming where the changelog is and how its fields are called
(docs/changelog.md); :func:`dpcr.changelog.load` reads any of them.
"""

from dpcr.changelog import (
    CsvSource as Csv,
)
from dpcr.changelog import (
    DebeziumSource as Debezium,
)
from dpcr.changelog import (
    JsonlSource as Jsonl,
)
from dpcr.changelog import (
    ParquetSource as Parquet,
)
from dpcr.changelog import (
    SourceConfig,
)
from dpcr.changelog import (
    SqliteSource as Sqlite,
)
from dpcr.changelog import (
    Wal2jsonSource as Wal2json,
)

__all__ = ["Csv", "Debezium", "Jsonl", "Parquet", "SourceConfig", "Sqlite", "Wal2json"]
