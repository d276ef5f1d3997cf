"""What PostgreSQL's catalog says of a followed table, read without capturing anything
(``dpcr check``)."""

from __future__ import annotations

from dpcr.cdc.postgres import connect, psycopg2_module, split_table
from dpcr.errors import ConfigError, DpcrError

__all__ = ["table_columns"]


def table_columns(dsn: str, table: str) -> tuple[str, ...]:
    """The columns of ``table`` (``schema.table``) in PostgreSQL's catalog, in order, read in
    a read-only transaction (``dpcr check``: what a capture of the table will write)."""
    schema, name = split_table(table)
    conn = connect(dsn)
    try:
        conn.set_session(readonly=True)
        with conn.cursor() as cur:
            cur.execute(
                "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND "
                "c.relname = %s AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT "
                "a.attisdropped ORDER BY a.attnum",
                (schema, name),
            )
            columns = tuple(str(r[0]) for r in cur.fetchall())
    except psycopg2_module().Error as exc:
        raise DpcrError(f"cannot read the columns of {table} in PostgreSQL: "
                        f"{str(exc).strip().splitlines()[0]}") from None  # fmt: skip
    finally:
        conn.close()
    if not columns:
        raise ConfigError(
            f"table {table} does not exist in this database; check [source] table (or "
            "follow.table)"
        )
    return columns
