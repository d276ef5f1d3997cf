"""dpcr.engines: where the changelog is loaded, bounded and aggregated.

An :class:`EngineConfig` names the engine of a release (``[engine]`` in the configuration);
:func:`get_engine` turns it into an :class:`~dpcr.engines.base.Engine`. ``"duckdb"`` (the
default) runs embedded; ``"spark"`` (extra ``[spark]``) runs on a Spark master, local or a
cluster, with the same results (docs/spark.md).

>>> get_engine(EngineConfig()).name
'duckdb'
>>> EngineConfig(name="spark", master="local[2]", conf={"spark.driver.memory": "2g"}).conf
mappingproxy({'spark.driver.memory': '2g'})
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from dpcr.errors import ConfigError
from dpcr.tomltable import likely_key

if TYPE_CHECKING:
    from dpcr.engines.base import Engine

__all__ = ["ENGINES", "EngineConfig", "get_engine"]

#: The engine names ``[engine] name`` accepts.
ENGINES: tuple[str, ...] = ("duckdb", "spark")

#: An amount of memory as DuckDB reads it.
_MEMORY = re.compile(r"[0-9]+(\.[0-9]+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Which engine aggregates: ``name`` (``"duckdb"`` or ``"spark"``); for Spark the ``master``
    (``"local[2]"``, ``"spark://host:7077"``, ``"yarn"``, ...) and ``conf``, Spark settings
    passed to the session as they are. The engine never changes what is released, so it is no
    part of a release's fingerprint."""

    name: str = "duckdb"
    master: str = "local[2]"
    conf: Mapping[str, str] = field(default_factory=dict)
    #: DuckDB's memory limit (``"1GB"``, ``"512MiB"``): past it, DuckDB writes its working
    #: data to the owner-only spill folder instead of growing; None: DuckDB's default (80 % of
    #: the machine's memory)
    memory_limit: str | None = None

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise ConfigError(f"engine.name must be one of {list(ENGINES)}, got {self.name!r}")
        if self.memory_limit is not None and (
            not isinstance(self.memory_limit, str)
            or not _MEMORY.fullmatch(self.memory_limit.strip())
        ):
            raise ConfigError(
                f"engine.memory_limit must be an amount of memory such as \"1GB\" or "
                f"\"512MiB\", got {self.memory_limit!r}"
            )
        if self.memory_limit is not None and self.name != "duckdb":
            raise ConfigError(
                "engine.memory_limit is DuckDB's; for Spark set spark.driver.memory and "
                "spark.executor.memory under [engine.spark]"
            )
        if not isinstance(self.master, str) or not self.master.strip():
            raise ConfigError(
                f"engine.spark.master must be a Spark master URL such as 'local[2]' or "
                f"'spark://host:7077', got {self.master!r}"
            )
        if not isinstance(self.conf, Mapping):
            raise ConfigError(f"engine.spark settings must be a table, got {self.conf!r}")
        conf: dict[str, str] = {}
        given: dict[Any, Any] = dict(self.conf)
        for key, value in given.items():
            if not isinstance(key, str) or isinstance(value, Mapping | list | tuple):
                raise ConfigError(
                    f"engine.spark.{key}: a Spark setting needs a string, number or boolean "
                    f"value, got {value!r}"
                )
            conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
        object.__setattr__(self, "conf", MappingProxyType(conf))
        if self.name == "duckdb" and (self.master != "local[2]" or conf):
            raise ConfigError(
                "[engine.spark] settings are given but engine.name is 'duckdb'; set "
                'name = "spark" under [engine], or remove [engine.spark]'
            )

    @classmethod
    def from_toml(cls, table: Mapping[str, Any]) -> EngineConfig:
        """From the ``[engine]`` table: ``name`` and the ``[engine.spark]`` sub-table
        (``master`` and any Spark setting, e.g. ``"spark.executor.memory" = "8g"``)."""
        if not isinstance(table, Mapping):
            raise ConfigError(f"[engine] must be a table, got {table!r}")
        unknown = sorted(set(table) - {"name", "memory_limit", "spark"})
        if unknown:
            match = likely_key(unknown[0], ["name", "memory_limit", "spark"])
            hint = f" (did you mean {match!r}?)" if match else ""
            raise ConfigError(
                f"[engine] key {unknown[0]!r} is not known{hint}; allowed: name, memory_limit, and "
                "the table [engine.spark] (master and Spark settings)"
            )
        spark = dict(table.get("spark", {}))
        if not isinstance(table.get("spark", {}), Mapping):
            raise ConfigError('[engine.spark] must be a table (master = "local[2]", ...)')
        master = spark.pop("master", "local[2]")
        return cls(name=table.get("name", "duckdb"), master=master, conf=_flatten(spark),
                   memory_limit=table.get("memory_limit"))  # fmt: skip


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML reads ``spark.executor.memory = "8g"`` (unquoted) as nested tables; Spark wants the
    dotted name."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


_SPARK_ENGINES: dict[tuple[str, tuple[tuple[str, str], ...]], Engine] = {}


def get_engine(spec: EngineConfig | str | None = None) -> Engine:
    """The engine named by ``spec`` (an :class:`EngineConfig`, a name, or None for DuckDB).
    Spark engines are kept per (master, settings), so one SparkSession serves every run of the
    process; importing Spark without the extra raises
    :class:`~dpcr.errors.MissingExtraError`."""
    if spec is None:
        spec = EngineConfig()
    elif isinstance(spec, str):
        spec = EngineConfig(name=spec)
    elif not isinstance(spec, EngineConfig):
        raise ConfigError(f"engine must be an EngineConfig or a name, got {spec!r}")
    if spec.name == "duckdb":
        from dpcr.engines.duckdb_step import DuckDBReleaseEngine

        return DuckDBReleaseEngine()
    key = (spec.master, tuple(sorted(spec.conf.items())))
    if key not in _SPARK_ENGINES:
        from dpcr.engines.spark import SparkEngine

        _SPARK_ENGINES[key] = SparkEngine(master=spec.master, conf=dict(spec.conf))
    return _SPARK_ENGINES[key]
