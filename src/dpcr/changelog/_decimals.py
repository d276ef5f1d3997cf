"""Base64 text where a Debezium source's number is read: an undeclared decimal, or a value.

With ``decimal.handling.mode=precise`` and schemas disabled, a NUMERIC(p, s) column arrives as a
bare base64 string (``"fare": "APo="``): the scale is nowhere in the event. dpcr decodes such
values only for the columns whose scale ``[source] decimal_scales`` declares; it never guesses
one. A column a query reads as a number that still holds base64 text after loading counts
that value as non-numeric (0 in a sum), as any text: a whole column of them is a source
configured wrongly, but one record's text (``"none"`` is base64 too) is only a value.
:func:`undeclared_decimals` finds them (the release reports them to the operator, and goes
on); :func:`check_decimals` refuses them (``on_error = "raise"``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import duckdb

from dpcr._sql import ident, json_path, lit
from dpcr.changelog._sources import DebeziumSource, SourceConfig, describe
from dpcr.errors import ChangelogError

__all__ = ["UndeclaredDecimal", "check_decimals", "undeclared_decimals"]

# Base64 of 1 to 16 bytes (the unscaled integers dpcr decodes), padding included.
_BASE64 = r"^(?:[A-Za-z0-9+/]{4}){0,5}(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$"


@dataclass(frozen=True, slots=True, kw_only=True)
class UndeclaredDecimal:
    """Column ``column`` holds base64 text in ``rows`` rows, the first in record ``record``
    (``value``)."""

    column: str
    rows: int
    record: int
    value: str

    def warning(self, source: SourceConfig) -> str:
        """The operator's line: what was found, what it counts as, and the fix if it is a
        decimal."""
        return (
            f"{describe(source)}: column {self.column!r} holds base64 text where a number is "
            f"read in {self.rows} row(s) (first record {self.record}: {self.value!r}), counted "
            "as non-numeric (0 in its sums). If it is a Debezium decimal sent without its "
            "schema (decimal.handling.mode=precise), declare its scale in [source] "
            f"decimal_scales (for NUMERIC(p, 2): decimal_scales = {{ {self.column} = 2 }})"
        )


def undeclared_decimals(
    con: duckdb.DuckDBPyConnection,
    source: SourceConfig,
    columns: Iterable[str],
    *,
    table: str = "changelog",
) -> list[UndeclaredDecimal]:
    """The columns of ``columns`` (read as numbers by the release) whose values, in the rows
    of the loaded ``table``, include base64 text that is not a number, which an undeclared
    Debezium decimal is. Empty for other sources."""
    if not isinstance(source, DebeziumSource):
        return []
    declared = set(source.decimal_scales or {})
    found = []
    for column in dict.fromkeys(columns):
        if column in declared:
            continue
        path = json_path(column)
        rows, record, value = con.execute(
            f"SELECT count(*), min(record), arg_min(v, record) FROM ("
            f"SELECT record, json_extract_string(r, {path}) AS v, json_type(r, {path}) AS t "
            f"FROM (SELECT record, after AS r FROM {ident(table)} "
            f"UNION ALL SELECT record, before FROM {ident(table)})) "
            f"WHERE t = 'VARCHAR' AND TRY_CAST(v AS DOUBLE) IS NULL "
            f"AND regexp_matches(v, {lit(_BASE64)})"
        ).fetchall()[0]
        if rows:
            found.append(
                UndeclaredDecimal(
                    column=column, rows=int(rows), record=int(record), value=str(value)
                )
            )
    return found


def check_decimals(
    con: duckdb.DuckDBPyConnection,
    source: SourceConfig,
    columns: Iterable[str],
    *,
    table: str = "changelog",
) -> None:
    """Raise :class:`~dpcr.errors.ChangelogError` when one of ``columns`` (read as numbers by
    the release) holds, in a row of the loaded ``table``, base64 text that is not a number: an
    undeclared Debezium decimal (:func:`undeclared_decimals`). Does nothing for other
    sources."""
    for found in undeclared_decimals(con, source, columns, table=table)[:1]:
        column = found.column
        raise ChangelogError(
            f"{describe(source)}: record {found.record}: column {column!r} holds "
            f"{found.value!r}, base64 text where a number is read: a Debezium decimal sent "
            "without its schema (decimal.handling.mode=precise). dpcr does not guess its "
            "scale: declare it in [source] decimal_scales (for NUMERIC(p, 2): decimal_scales = "
            f"{{ {column} = 2 }}), or have the converter send schemas "
            "(value.converter.schemas.enable=true) or use decimal.handling.mode=string",
            record=found.record,
            field=column,
            reason="bad_json",
        )
