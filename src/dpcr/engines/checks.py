"""What the DuckDB engine checks of a changelog before it releases: every column the
configuration names appears in some row, a histogram with ``unknown = "error"`` sees only
its keys, and a Debezium decimal a sum reads has a known scale."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import duckdb

from dpcr._sql import ident, json_path
from dpcr.bounding.constraints import Constraint
from dpcr.engines.base import referenced_columns
from dpcr.errors import ChangelogError
from dpcr.queries import Histogram, Query

if TYPE_CHECKING:
    from dpcr.engines.base import AggregateRequest

__all__ = ["check_histogram_keys", "decimal_warnings", "missing_columns"]


def missing_columns(
    con: duckdb.DuckDBPyConnection,
    *,
    table: str,
    queries: Sequence[Query],
    constraint: Constraint,
) -> list[str]:
    """Every column the queries (``column``, ``where`` keys) or the constraint (a hybrid's class
    column, a state machine's column) read that appears in no row, before or after, of
    ``table`` -- usually a typo in the configuration, which would otherwise release zeros.

    Columns are listed once each, in the order the queries and then the constraint name them.
    """
    wanted = referenced_columns(queries, constraint)
    if not wanted:
        return []
    # EXISTS stops at the first row that has the column (usually among the first rows), so a
    # configuration without typos costs almost nothing; a missing column scans the table.
    present = ", ".join(
        f"EXISTS (SELECT 1 FROM {ident(table)} WHERE json_exists(after, {json_path(c)}) "
        f"OR json_exists(before, {json_path(c)}))"
        for c in wanted
    )
    row = con.execute(f"SELECT {present}").fetchone()
    found = row if row is not None else (False,) * len(wanted)
    return [c for c, ok in zip(wanted, found, strict=True) if not ok]


def check_histogram_keys(
    con: duckdb.DuckDBPyConnection, queries: Sequence[Query], source: str
) -> None:
    """Refuse, with its record, the first kept value of a histogram with ``unknown = "error"``
    that is not among its keys (read from ``_dpcr_bounded``, then ``source`` for the value)."""
    for i, q in enumerate(queries):
        if isinstance(q, Histogram) and q.unknown == "error":
            # (the source, which may be a view over a file, is read only for a refusal)
            first = con.execute(
                f"SELECT record, unit FROM _dpcr_bounded WHERE kept AND f{i} = -2 "
                "ORDER BY record LIMIT 1"
            ).fetchone()
            row = None if first is None else con.execute(
                f"SELECT record, json_extract_string(after, {json_path(q.column)}) "
                f"FROM {source} WHERE record = ? AND unit = ? AND after IS NOT NULL LIMIT 1",
                list(first),
            ).fetchone()  # fmt: skip
            if row is not None:
                raise ChangelogError(
                    f"record {row[0]}: field {q.column!r} has value {row[1]!r}, which is not "
                    f"among the keys of histogram {q.name!r} {list(q.categories)}; add it to "
                    "keys, or remove unknown = 'error' from the query (the default, 'drop', "
                    "counts such values nowhere and reports them; 'other' counts them under "
                    "the key 'other')",
                    record=int(row[0]),
                    field=q.column,
                    reason="unknown_key",
                )


def decimal_warnings(
    request: AggregateRequest, con: duckdb.DuckDBPyConnection, *, table: str = "changelog"
) -> tuple[str, ...]:
    """Base64 text in a column a sum reads, from a Debezium source (an undeclared decimal, or
    just a value such as ``"none"``): refused with ``on_error = "raise"``; otherwise counted as
    non-numeric like any text, and told to the operator (one record's value never stops a
    release)."""
    from dpcr.changelog import check_decimals, undeclared_decimals
    from dpcr.queries import Sum

    sums = [q.column for q in request.queries if isinstance(q, Sum)]
    if request.on_error == "raise":
        check_decimals(con, request.source, sums, table=table)
        return ()
    found = undeclared_decimals(con, request.source, sums, table=table)
    return tuple(f.warning(request.source) for f in found)
