"""``dpcr check CONFIG``: will a run take this configuration? Checked without a run.

The configuration is parsed and its plan calibrated (as ``dpcr plan`` does), then the head of
the source is read (:func:`dpcr.changelog.sample_columns`: at most its first 1,000 records, or
a Parquet file's schema) and every row column the configuration names (a sum's or histogram's
``column``, ``where`` keys, a hybrid constraint's or a state machine's ``column``, the unit
column, a Debezium or wal2json ``key``) is looked for in it; for a ``[follow]`` of PostgreSQL
given a connection string (``--dsn-file``, ``$DPCR_PG_DSN``, ``--dsn``), in the followed table's
columns in the catalog instead (a schema: every row has them). The store, when there is one, is
read (not opened for a run: no lock, nothing written) to tell whether a run would take the
configuration (:func:`check_store`).

A column found in no record read is

* an **error** when the records read are the whole source (or a schema every row follows), or
  when a column they hold is a likely spelling of it (:func:`dpcr.tomltable.likely_key`): a
  run would release nothing (it refuses a column that no row holds) or a wrong statistic;
* a **warning** otherwise (the column may first appear further on).

``dpcr plan`` runs the same column check when the source can be read (a source that does not
exist yet is not an error for ``dpcr plan``: it reads no data).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from dpcr.errors import ConfigError

__all__ = [
    "ColumnCheck",
    "check_columns",
    "check_store",
    "named_columns",
    "plan_warnings",
    "register",
]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "check",
        help="check a configuration before a run: parse it, calibrate its plan, look for every "
        "column it names in the source's first records and read the store's binding (writes "
        "nothing)",
        description="Parse the configuration, calibrate its plan, and read the head of the "
        "source (its first 1,000 records, or a Parquet file's schema) to find every column the "
        "configuration names. A column in none of them is an error when they are the whole "
        "source or hold a likely spelling of it, a warning otherwise. A store that holds "
        "releases of another configuration is refused, as a run would. Writes nothing.",
    )
    p.add_argument("config", help="TOML release configuration")
    p.add_argument("--dsn", help="a [follow] of PostgreSQL: check the columns in the followed "
                   "table (prefer --dsn-file or $DPCR_PG_DSN)")  # fmt: skip
    p.add_argument("--dsn-file", help="file holding the connection string")
    p.set_defaults(func=_cmd_check)


@dataclass(frozen=True, slots=True, kw_only=True)
class ColumnCheck:
    """What the head of the source says of the columns a configuration names: ``warnings``
    (one line each) and the ``records`` read (``complete``: the whole source)."""

    records: int
    complete: bool
    columns: tuple[str, ...]
    warnings: tuple[str, ...]


def named_columns(settings: Any) -> dict[str, str]:
    """Every row column the configuration names, with the key that names it (in the order
    they are named)."""
    from dpcr.bounding.constraints import Hybrid
    from dpcr.bounding.state_machine import StateMachine
    from dpcr.queries import GroupedSum, Histogram, Sum

    named: dict[str, str] = {}
    for q in settings.queries:
        if isinstance(q, Sum | Histogram):
            named.setdefault(q.column, f"the column of query {q.name!r}")
        if isinstance(q, GroupedSum):
            named.setdefault(q.by, f"the by column of query {q.name!r}")
        for column in q.where:
            named.setdefault(column, f"a where key of query {q.name!r}")
    constraint = settings.constraint
    if isinstance(constraint, Hybrid):
        named.setdefault(constraint.column, "[constraint] column")
    simple = (list(constraint.all_classes().values()) if isinstance(constraint, Hybrid)
              else [constraint])  # fmt: skip
    for c in simple:
        if isinstance(c, StateMachine):
            named.setdefault(c.column, "the state machine's column")
    if settings.unit_column is not None:
        named.setdefault(settings.unit_column, "[privacy] unit")
    key = getattr(settings.source, "key", None)
    for column in (key,) if isinstance(key, str) else key or ():
        named.setdefault(column, "[source] key")
    return named


def check_columns(settings: Any, *, missing_ok: bool = False) -> ColumnCheck | None:
    """Look for every column the configuration names in the head of its source. Raises one
    :class:`ConfigError` for a column that is surely missing or misspelt (module docstring),
    and for a source that cannot be read (``missing_ok``: returns None instead)."""
    from dpcr.changelog import sample_columns

    sample = sample_columns(settings.source, missing_ok=missing_ok)
    if sample is None:
        return None
    if not sample.records:
        return ColumnCheck(records=0, complete=sample.complete, columns=(), warnings=())
    read = (f"the whole source ({sample.records} records)" if sample.complete
            else f"the source's first {sample.records} records")  # fmt: skip
    named = named_columns(settings)
    warnings = judge_columns(named, sample.columns, complete=sample.complete, read=read)
    return ColumnCheck(records=sample.records, complete=sample.complete,
                       columns=tuple(named), warnings=warnings)  # fmt: skip


def judge_columns(
    named: dict[str, str], columns: frozenset[str], *, complete: bool, read: str
) -> tuple[str, ...]:
    """Every named column (with what names it) looked for in ``columns``, those of ``read``:
    one :class:`ConfigError` for the first that is surely missing or misspelt, warning lines
    for those that may appear further on (module docstring)."""
    from dpcr.tomltable import likely_key

    warnings = []
    for column, where in named.items():
        if column in columns:
            continue
        match = likely_key(column, columns)
        if match is not None:
            raise ConfigError(
                f"column {column!r} ({where}) is in no row of {read}; did you mean {match!r}? "
                f"Write {match!r} in the configuration: a run would refuse {column!r} (nothing "
                "is released)"
            )
        if complete:
            raise ConfigError(
                f"column {column!r} ({where}) is in no row of {read} (its rows have "
                f"{_listed(columns)}); fix the configuration: a run would refuse it "
                "(nothing is released)"
            )
        warnings.append(
            f"warning: column {column!r} ({where}) is in no row of {read} (they have "
            f"{_listed(columns)}); check the spelling: a run refuses a column that no "
            "row holds"
        )
    return tuple(warnings)


def plan_warnings(settings: Any) -> tuple[str, ...]:
    """``dpcr plan``'s column check: :func:`check_columns` when the source can be read (a plan
    reads no data, so a source that does not exist yet is no error); its warning lines."""
    found = check_columns(settings, missing_ok=True)
    return () if found is None else found.warnings


def _listed(columns: frozenset[str], most: int = 12) -> str:
    names = sorted(columns)
    if not names:
        return "no columns"
    more = f", ... ({len(names) - most} more)" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _cmd_check(args: argparse.Namespace) -> int:
    import sys

    from dpcr.config import load_config
    from dpcr.report.hints import noise_hint_lines

    settings = load_config(args.config)
    report = settings.explain()  # (calibrates every layer: a budget too small fails here)
    checked, warnings = _check_source(settings, _follow(args.config, settings), args)
    store = check_store(settings)
    for line in (*warnings, *noise_hint_lines(settings, report)):
        print(line, file=sys.stderr)
    print(f"{args.config}: the configuration is valid (plan {report.kind}); {checked}; {store}")
    return 0


def _follow(path: str, settings: Any) -> Any:
    """The ``[follow]`` table of the configuration (``dpcr follow``'s), or None."""
    import tomllib
    from pathlib import Path

    from dpcr.cdc.follow import parse_follow

    raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    return parse_follow(raw["follow"], settings.source) if "follow" in raw else None


def _check_source(
    settings: Any, follow: Any, args: argparse.Namespace
) -> tuple[str, tuple[str, ...]]:
    """The columns the configuration names, looked for in the source's head, or, for a
    follower of PostgreSQL given a connection string, in the followed table's columns. Returns
    what was checked (text) and the warnings."""
    import os

    from dpcr.commands.capture import DSN_ENV, connection_string

    named = named_columns(settings)
    listed = ", ".join(named) if named else "none"
    postgres = follow is not None and follow.capture == "postgres"
    if postgres and (args.dsn_file or args.dsn or os.environ.get(DSN_ENV)):
        from dpcr.cdc.catalog import table_columns

        read = f"the columns of {follow.table} in PostgreSQL"
        columns = frozenset(table_columns(connection_string(args), follow.table))
        warnings = judge_columns(named, columns, complete=True, read=read)
        return f"columns it names ({listed}) checked against {read}", warnings
    found = check_columns(settings, missing_ok=follow is not None)
    if found is None:
        also = f" (give --dsn-file or ${DSN_ENV} to check them in PostgreSQL)" if postgres else ""
        return f"the follower has not written the source yet: its columns are not checked{also}", ()
    if not found.records:
        return "the source holds no record yet, so its columns are not checked", ()
    read = (f"the whole source ({found.records} records)" if found.complete
            else f"its first {found.records} records")  # fmt: skip
    return f"columns it names ({listed}) checked against {read}", found.warnings


def check_store(settings: Any) -> str:
    """What a release run would find in the store (read only): refuses, as the run would, a
    store of a schema this dpcr does not read, or that holds releases of another plan or
    simulated noise; else says what it holds."""
    from dpcr.errors import StoreError
    from dpcr.store import SCHEMA_VERSION, read_binding

    path = settings.store_path
    binding = read_binding(path)
    if binding is None:
        return "no store yet (the first run creates it)"
    number = binding.schema or ""
    if number.isdigit() and int(number) > SCHEMA_VERSION:
        raise StoreError(f"{path}: store schema {number} was made by a newer dpcr; upgrade dpcr "
                         f"(this one reads schemas 1 to {SCHEMA_VERSION}; it changed nothing)")
    if number not in {str(n) for n in range(1, SCHEMA_VERSION + 1)}:
        raise StoreError(f"{path}: store schema {number} is not supported")
    if binding.mode != "release":
        raise StoreError(
            f"{path} holds {binding.mode} output; a release run cannot use it (simulated "
            "noise must never be published): point output.store at a new file"
        )
    if not binding.released:
        return "the store holds no release yet (its first release binds it to this config)"
    if binding.fingerprint != settings.fingerprint():
        raise StoreError(
            f"{path} holds releases of a different plan (fingerprint {binding.fingerprint}, "
            f"this config {settings.fingerprint()}): a run would refuse this config. Restore "
            "the config it was released with, or use a new output.dir (or output.store) for a "
            'new release (docs/store.md, "Binding to a plan")'
        )
    return "the store holds releases of this config"
