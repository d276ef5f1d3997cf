"""Source configurations: where a changelog comes from and how its fields are named.

One small frozen type per format (no bag of options with exclusion rules):

* :class:`JsonlSource`, :class:`CsvSource`, :class:`ParquetSource` -- the canonical changelog, one
  mutation per line/row with fields ``entry``, ``ts``, ``seq`` (optional), ``op``, ``before``,
  ``after`` and optionally ``unit``; every field name can be renamed.
* :class:`DebeziumSource` -- Debezium JSON change events, one envelope per line.
* :class:`Wal2jsonSource` -- PostgreSQL logical decoding output of wal2json (format-version 2),
  one message per line, as ``dpcr capture postgres`` or ``pg_recvlogical`` write it.
* :class:`SqliteSource` -- the log table that :func:`dpcr.changelog.install_triggers` fills.

:func:`from_config` builds one of them from the TOML ``[source]`` table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from dpcr.errors import ConfigError
from dpcr.tomltable import likely_key

EpochUnit = Literal["s", "ms", "us"]
EPOCH_FACTORS: Mapping[str, int] = {"s": 1_000_000, "ms": 1_000, "us": 1}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: The default largest record of a text source, in bytes (16 MiB): DuckDB's JSON reader's own
#: default object size, so every record DuckDB's fast readers ever took is still taken; a longer
#: record is quarantined (``too_long``, docs/changelog.md).
MAX_RECORD_BYTES = 16 * 1024 * 1024
#: The range of ``max_record_bytes``: room for a small record, and at most 1 GiB.
_RECORD_BYTES_RANGE = (64, 1 << 30)


def check_record_bytes(value: object) -> None:
    """``max_record_bytes``: an integer number of bytes in :data:`_RECORD_BYTES_RANGE`."""
    low, high = _RECORD_BYTES_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(
            f"[source] max_record_bytes must be a whole number of bytes from {low} to {high} "
            f"(the longest record read; longer ones are quarantined), got {value!r}"
        )


def check_field_name(value: object, *, key: str) -> str:
    """A JSON/CSV field or row column name: a non-empty string without quotes or backslashes."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"[source] {key} must be a non-empty field name (a string), got {value!r}"
        )
    if '"' in value or "\\" in value:
        raise ConfigError(
            f"[source] {key} = {value!r}: field names with double quotes or backslashes are not "
            "supported; rename the field in the data"
        )
    return value


def check_unit_column(value: object) -> str:
    """The column of the rows naming the privacy unit (``[privacy] unit``): checked on every
    load path, before any SQL names it."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"[privacy] unit (a unit column) must be 'entry' or a column name, got {value!r}"
        )
    if '"' in value or "\\" in value:
        raise ConfigError(
            f"[privacy] unit = {value!r}: a unit column whose name holds a double quote or a "
            "backslash is not supported; rename the column in the data (or copy it under "
            "another name)"
        )
    return value


def check_identifier(value: object, *, key: str) -> str:
    """A SQL identifier dpcr creates or reads (tables): letters, digits and underscores."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ConfigError(
            f"{key} must be a plain SQL identifier (letters, digits, underscores, not starting "
            f"with a digit), got {value!r}"
        )
    return value


def _coerce_path(obj: object, value: object) -> None:
    if isinstance(value, str) and value:
        object.__setattr__(obj, "path", Path(value))
    elif not isinstance(value, Path):
        raise ConfigError(f"[source] path must be a file path, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class _CanonicalSource:
    """Field names of the canonical changelog (shared by JSONL, CSV and Parquet).

    ``seq = None`` ignores any sequence field (ties in ``ts`` are then broken by the record
    number, which is also the fallback for records whose ``seq`` is missing or null).
    ``unit`` names a field of the *record* holding the privacy unit id; to take the unit from a
    column of the *row*, pass ``unit_column`` to :func:`dpcr.changelog.load` instead.
    ``epoch_unit`` is the unit of numeric timestamps (seconds by default).
    """

    path: Path | str  # (a Path once built)
    entry: str = "entry"
    ts: str = "ts"
    seq: str | None = "seq"
    op: str = "op"
    before: str = "before"
    after: str = "after"
    unit: str | None = None
    epoch_unit: EpochUnit = "s"

    def __post_init__(self) -> None:
        _coerce_path(self, self.path)
        for key in ("entry", "ts", "op", "before", "after"):
            check_field_name(getattr(self, key), key=key)
        for key in ("seq", "unit"):
            if getattr(self, key) is not None:
                check_field_name(getattr(self, key), key=key)
        if self.epoch_unit not in EPOCH_FACTORS:
            raise ConfigError(
                f"[source] epoch_unit must be 's', 'ms' or 'us' (the unit of numeric timestamps), "
                f"got {self.epoch_unit!r}"
            )

    def field_names(self) -> dict[str, str | None]:
        return {
            "entry": self.entry,
            "ts": self.ts,
            "seq": self.seq,
            "op": self.op,
            "before": self.before,
            "after": self.after,
            "unit": self.unit,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonlSource(_CanonicalSource):
    """Canonical changelog as JSON Lines: one JSON object per line; blank lines are skipped.

    ``before``/``after`` are JSON objects (or null); ``ts`` an ISO 8601 string or an epoch number.
    """

    #: The longest record (line, without its line end) read; a longer one is quarantined.
    max_record_bytes: int = MAX_RECORD_BYTES
    format: ClassVar[str] = "jsonl"

    def __post_init__(self) -> None:
        _CanonicalSource.__post_init__(self)
        check_record_bytes(self.max_record_bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class CsvSource(_CanonicalSource):
    """Canonical changelog as CSV with a header row; ``before``/``after`` hold JSON text."""

    delimiter: str = ","
    #: The longest record (row, without its line end) read; a longer one is quarantined.
    max_record_bytes: int = MAX_RECORD_BYTES
    format: ClassVar[str] = "csv"

    def __post_init__(self) -> None:
        _CanonicalSource.__post_init__(self)
        check_record_bytes(self.max_record_bytes)
        if not isinstance(self.delimiter, str) or len(self.delimiter) != 1:
            raise ConfigError(
                f"[source] delimiter must be one character such as ',' or ';', "
                f"got {self.delimiter!r}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ParquetSource(_CanonicalSource):
    """Canonical changelog as Parquet; ``ts`` may be a timestamp, number or string column and
    ``before``/``after`` JSON text or struct columns."""

    format: ClassVar[str] = "parquet"


def _check_key(obj: object, key: object) -> None:
    """``key``: one column name or a non-empty list/tuple of them (stored as a tuple)."""
    if isinstance(key, list):
        key = tuple(key)
        object.__setattr__(obj, "key", key)
    if isinstance(key, tuple):
        if not key:
            raise ConfigError("[source] key must name at least one primary-key column")
        for k in key:
            check_field_name(k, key="key")
    else:
        check_field_name(key, key="key")


@dataclass(frozen=True, slots=True, kw_only=True)
class DebeziumSource:
    """Debezium JSON change events, one envelope per line (``{"payload": {...}}`` or bare).

    ``key`` names the primary-key column(s) of the row: their value is the entry id (a composite
    key becomes a JSON array such as ``[7,"x"]``). Ops ``c``/``r`` are inserts, ``u`` updates,
    ``d`` deletes; tombstones (``null``, or a null ``payload``) are skipped and counted.

    Decimals (``decimal.handling.mode=precise``) are decoded from the envelope's schema when it
    carries one; ``decimal_scales`` (column -> scale) declares the scale of the bare base64
    values of envelopes sent without a schema (``value.converter.schemas.enable=false``).
    """

    path: Path | str  # (a Path once built)
    key: str | tuple[str, ...]
    decimal_scales: Mapping[str, int] | None = None
    #: The longest record (line, without its line end) read; a longer one is quarantined.
    max_record_bytes: int = MAX_RECORD_BYTES
    format: ClassVar[str] = "debezium"
    #: Debezium's change times (``source.ts_ms``, ``ts_ms``) are epoch milliseconds.
    epoch_unit: ClassVar[EpochUnit] = "ms"

    def __post_init__(self) -> None:
        _coerce_path(self, self.path)
        _check_key(self, self.key)
        check_record_bytes(self.max_record_bytes)
        scales = self.decimal_scales
        if scales is not None:
            if not isinstance(scales, Mapping):
                raise ConfigError(
                    "[source] decimal_scales maps column names to their decimal scale, for "
                    f"example decimal_scales = {{ fare = 2 }}; got {scales!r}"
                )
            for column, scale in scales.items():
                check_field_name(column, key="decimal_scales")
                if isinstance(scale, bool) or not isinstance(scale, int) or not -64 <= scale <= 64:
                    raise ConfigError(
                        f"[source] decimal_scales.{column} must be an integer scale (digits "
                        f"after the decimal point, as in NUMERIC(p, scale)), got {scale!r}"
                    )
            object.__setattr__(self, "decimal_scales", MappingProxyType(dict(scales)))

    @property
    def key_columns(self) -> tuple[str, ...]:
        return self.key if isinstance(self.key, tuple) else (self.key,)


_TABLE_NAME = re.compile(r"[^.\"\\]+\.[^.\"\\]+")


@dataclass(frozen=True, slots=True, kw_only=True)
class Wal2jsonSource:
    """wal2json ``format-version 2`` messages, one JSON object per line.

    ``action`` ``I``/``U``/``D`` are inserts, updates and deletes with ``columns`` the row after
    and ``identity`` the row before (all columns under ``REPLICA IDENTITY FULL``); ``lsn`` is
    the sequence number (``include-lsn``; a repeated LSN of an entry is a duplicate) and
    ``timestamp`` the commit time (``include-timestamp``). ``B``/``C`` (begin/commit) and ``M``
    (logical messages) are skipped and counted with the tombstones; ``T`` (truncate) names no
    rows and is rejected (``unknown_op``). ``key`` names the primary-key column(s): the entry id.
    ``table`` (``"schema.table"``) keeps only that table's messages; without it every table's
    are read (their keys must then not collide).
    """

    path: Path | str  # (a Path once built)
    key: str | tuple[str, ...]
    table: str | None = None
    #: The longest record (line, without its line end) read; a longer one is quarantined.
    max_record_bytes: int = MAX_RECORD_BYTES
    format: ClassVar[str] = "wal2json"
    #: wal2json writes ISO 8601 text; a number (never written by wal2json) is epoch seconds.
    epoch_unit: ClassVar[EpochUnit] = "s"

    def __post_init__(self) -> None:
        _coerce_path(self, self.path)
        _check_key(self, self.key)
        check_record_bytes(self.max_record_bytes)
        if self.table is not None and (
            not isinstance(self.table, str) or not _TABLE_NAME.fullmatch(self.table)
        ):
            raise ConfigError(
                '[source] table must be "schema.table" as wal2json names it, for example '
                f'table = "public.tickets"; got {self.table!r}'
            )

    @property
    def key_columns(self) -> tuple[str, ...]:
        return self.key if isinstance(self.key, tuple) else (self.key,)


@dataclass(frozen=True, slots=True, kw_only=True)
class SqliteSource:
    """The change-log ``table`` of a SQLite database, as filled by
    :func:`dpcr.changelog.install_triggers` (its ``log_table``)."""

    path: Path | str  # (a Path once built)
    table: str = "dpcr_changelog"
    format: ClassVar[str] = "sqlite"

    def __post_init__(self) -> None:
        _coerce_path(self, self.path)
        check_identifier(self.table, key="[source] table")


SourceConfig = (
    JsonlSource | CsvSource | ParquetSource | DebeziumSource | Wal2jsonSource | SqliteSource
)
_FORMATS: Mapping[str, type[SourceConfig]] = {
    "jsonl": JsonlSource,
    "csv": CsvSource,
    "parquet": ParquetSource,
    "debezium": DebeziumSource,
    "wal2json": Wal2jsonSource,
    "sqlite": SqliteSource,
}
_HINTS = {
    "jsonl": 'format = "jsonl", path = "changelog.jsonl"',
    "csv": 'format = "csv", path = "changelog.csv"',
    "parquet": 'format = "parquet", path = "changelog.parquet"',
    "debezium": 'format = "debezium", path = "events.jsonl", key = "id"',
    "wal2json": 'format = "wal2json", path = "changes.wal2json.jsonl", key = "id"',
    "sqlite": 'format = "sqlite", path = "app.sqlite", table = "dpcr_changelog"',
}


def describe(source: SourceConfig) -> str:
    """Short name used in messages and reports, e.g. ``jsonl file 'data/changelog.jsonl'``."""
    if isinstance(source, SqliteSource):
        return f"sqlite table {source.table!r} in '{source.path}'"
    return f"{source.format} file '{source.path}'"


def from_config(mapping: Mapping[str, Any], *, base_dir: Path | None = None) -> SourceConfig:
    """Build a source from the TOML ``[source]`` table.

    ``format`` picks the type; ``path`` is resolved against ``base_dir`` when relative; every
    other key is an option of that format (see the classes above).

    >>> from_config({"format": "jsonl", "path": "c.jsonl", "ts": "time"}).ts
    'time'
    """
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"[source] must be a table, got {mapping!r}")
    options = dict(mapping)
    fmt = options.pop("format", None)
    if fmt is None:
        typo = [k for k in options if likely_key(k, ["format"])]
        if typo:
            raise ConfigError(f"unknown key {typo[0]!r} in [source]: did you mean 'format'?")
        raise ConfigError(
            "[source] needs format: one of "
            + ", ".join(repr(f) for f in _FORMATS)
            + ' (for example format = "jsonl")'
        )
    if not isinstance(fmt, str) or fmt not in _FORMATS:
        raise ConfigError(
            f"[source] format = {fmt!r} is not supported; use one of "
            + ", ".join(repr(f) for f in _FORMATS)
        )
    cls = _FORMATS[fmt]
    allowed = [f.name for f in fields(cls)]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        match = likely_key(unknown[0], allowed)
        hint = f" (did you mean {match!r}?)" if match else ""
        raise ConfigError(
            f"[source] key {unknown[0]!r} is not an option of format {fmt!r}{hint}; "
            f"allowed keys: format, {', '.join(allowed)}"
        )
    if "path" not in options:
        raise ConfigError(f"[source] needs path (the {fmt} input); for example {_HINTS[fmt]}")
    path = options["path"]
    if not isinstance(path, str | Path) or not str(path):
        raise ConfigError(f"[source] path must be a file path string, got {path!r}")
    path = Path(path)
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    options["path"] = path
    if fmt in ("debezium", "wal2json") and "key" not in options:
        raise ConfigError(
            f'[source] format "{fmt}" needs key: the primary-key column(s) of the row '
            'that identify an entry, e.g. key = "id" or key = ["order_id", "line"]'
        )
    try:
        return cls(**options)
    except TypeError as exc:  # a wrong value type that the dataclass did not catch
        raise ConfigError(f"[source] {exc}") from exc


def check_load_options(
    source: SourceConfig,
    table: str,
    on_error: str,
    quarantine_path: Path | None,
    unit_column: str | None,
) -> None:
    """Refuse arguments of :func:`dpcr.changelog.load` that cannot work, naming the fix."""
    if not isinstance(source, JsonlSource | CsvSource | ParquetSource | DebeziumSource
                      | Wal2jsonSource | SqliteSource):  # fmt: skip
        raise ConfigError(
            f"source must be a source configuration (JsonlSource, CsvSource, ParquetSource, "
            f"DebeziumSource or SqliteSource; see dpcr.changelog.from_config), got {source!r}"
        )
    check_identifier(table, key="table")
    if on_error not in ("raise", "quarantine"):
        raise ConfigError(f"on_error must be 'raise' or 'quarantine', got {on_error!r}")
    if on_error == "quarantine" and quarantine_path is None:
        raise ConfigError(
            "on_error = 'quarantine' needs a quarantine_path: the JSONL file that receives "
            "every rejected record"
        )
    if unit_column is not None:
        check_unit_column(unit_column)
        if isinstance(source, JsonlSource | CsvSource | ParquetSource) and source.unit:
            raise ConfigError(
                f"the privacy unit is given twice: by the record field {source.unit!r} "
                f"([source] unit) and by the row column {unit_column!r}; keep one"
            )
