"""Quoting for the SQL dpcr generates (DuckDB dialect)."""

from __future__ import annotations

from dpcr.errors import ConfigError


def lit(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


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
