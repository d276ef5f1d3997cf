"""Quoting for the SQL dpcr generates (DuckDB dialect)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dpcr.errors import ConfigError


def lit(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def num(value: float) -> str:
    """A SQL DOUBLE literal of ``value``, exact (the shortest decimal that reads back as the same
    double); infinities as DuckDB's ``'infinity'``. NaN has no place in generated SQL.

    >>> num(0.1), num(-2.0), num(float("-inf"))
    ("CAST('0.1' AS DOUBLE)", "CAST('-2.0' AS DOUBLE)", "CAST('-infinity' AS DOUBLE)")
    """
    import math

    x = float(value)
    if math.isnan(x):
        raise ConfigError("a NaN cannot be compared with; give a number")
    text = repr(x) if math.isfinite(x) else ("infinity" if x > 0 else "-infinity")
    return f"CAST('{text}' AS DOUBLE)"


def ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def json_path(name: str) -> str:
    """JSONPath literal selecting the key ``name`` of an object.

    >>> json_path("fare")
    '\\'$."fare"\\''
    """
    if '"' in name:
        raise ConfigError(f"column name {name!r} must not contain a double quote")
    return lit('$."' + name + '"')


def insert_columns(con: Any, table: str, columns: Sequence[tuple[Sequence[Any], str]]) -> None:
    """Insert into ``table`` the rows whose columns are ``columns`` (each its values and SQL
    type), in ONE statement: every column is bound as a list and the lists are unnested
    together. ``executemany`` runs one statement per row (365 rows: 0.2 s, and seconds when
    another thread holds the interpreter lock meanwhile)."""
    if not columns or not len(columns[0][0]):
        return
    select = ", ".join(f"unnest(?::{kind}[])" for _, kind in columns)
    con.execute(f"INSERT INTO {table} SELECT {select}", [list(values) for values, _ in columns])
