"""Quoting for the SQL dpcr generates (DuckDB dialect)."""

from __future__ import annotations

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
