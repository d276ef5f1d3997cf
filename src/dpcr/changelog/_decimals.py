"""Refuse Debezium decimals that arrived without their scale instead of summing them as 0.

With ``decimal.handling.mode=precise`` and schemas disabled, a NUMERIC(p, s) column arrives as a
bare base64 string (``"fare": "APo="``): the scale is nowhere in the event. dpcr decodes such
values only for the columns whose scale ``[source] decimal_scales`` declares; it never guesses
one. A column a query reads as a number that still holds base64 text after loading would count
every value as non-numeric (0 in a sum): :func:`check_decimals` makes that an error naming the
column and the configuration key, for the release to call with the columns its sums read.
"""

from __future__ import annotations

from collections.abc import Iterable

import duckdb

from dpcr._sql import ident, json_path, lit
from dpcr.changelog._sources import DebeziumSource, SourceConfig, describe
from dpcr.errors import ChangelogError

__all__ = ["check_decimals"]

# Base64 of 1 to 16 bytes (the unscaled integers dpcr decodes), padding included.
_BASE64 = r"^(?:[A-Za-z0-9+/]{4}){0,5}(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$"


def check_decimals(
    con: duckdb.DuckDBPyConnection,
    source: SourceConfig,
    columns: Iterable[str],
    *,
    table: str = "changelog",
) -> None:
    """Raise :class:`~dpcr.errors.ChangelogError` when one of ``columns`` (read as numbers by
    the release) holds, in a row of the loaded ``table``, base64 text that is not a number: an
    undeclared Debezium decimal. Does nothing for other sources."""
    if not isinstance(source, DebeziumSource):
        return
    declared = set(source.decimal_scales or {})
    for column in columns:
        if column in declared:
            continue
        path = json_path(column)
        rows = con.execute(
            f"SELECT record, v FROM (SELECT record, json_extract_string(r, {path}) AS v, "
            f"json_type(r, {path}) AS t FROM (SELECT record, after AS r FROM {ident(table)} "
            f"UNION ALL SELECT record, before FROM {ident(table)})) "
            f"WHERE t = 'VARCHAR' AND TRY_CAST(v AS DOUBLE) IS NULL "
            f"AND regexp_matches(v, {lit(_BASE64)}) ORDER BY record LIMIT 1"
        ).fetchall()
        if rows:
            record, value = rows[0]
            raise ChangelogError(
                f"{describe(source)}: record {record}: column {column!r} holds {value!r}, "
                "base64 text where a number is read: a Debezium decimal sent without its "
                "schema (decimal.handling.mode=precise). dpcr does not guess its scale: declare "
                f"it in [source] decimal_scales (for NUMERIC(p, 2): decimal_scales = "
                f"{{ {column} = 2 }}), or have the converter send schemas "
                "(value.converter.schemas.enable=true) or use decimal.handling.mode=string",
                record=int(record),
                field=column,
                reason="bad_json",
            )
