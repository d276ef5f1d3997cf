"""Clean-up on a DuckDB connection that never hides the error it follows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


@contextmanager
def afterwards(
    con: duckdb.DuckDBPyConnection, *steps: str | Callable[[], object]
) -> Iterator[None]:
    """Run ``steps`` (SQL on ``con``, or calls such as ``con.unregister``) when the block ends,
    in order. When the block ends by an exception they run too, but a step that fails is
    skipped: an error or Ctrl-C inside a transaction aborts it, DuckDB then refuses every
    statement until the rollback (an unregister, a ``SET`` or a ``DROP`` included), and the
    block's own exception, which says what went wrong, is the one that must propagate. The
    caller's rollback undoes the block's work; a skipped ``SET`` stays as the block left it.

    >>> import duckdb
    >>> con = duckdb.connect()
    >>> with afterwards(con, "SET threads = 2"):
    ...     con.execute("SET threads = 1")  # doctest: +ELLIPSIS
    <...>
    >>> con.execute("SELECT current_setting('threads')").fetchone()
    (2,)
    """
    try:
        yield
    except BaseException:
        import duckdb

        for step in steps:
            with suppress(duckdb.Error):
                _do(con, step)
        raise
    for step in steps:
        _do(con, step)


@contextmanager
def one_thread(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The block's statements on one DuckDB thread; the connection's setting is restored when
    the block ends (:func:`afterwards`).

    >>> import duckdb
    >>> con = duckdb.connect()
    >>> _ = con.execute("SET threads = 3")
    >>> with one_thread(con):
    ...     con.execute("SELECT current_setting('threads')").fetchone()
    (1,)
    >>> con.execute("SELECT current_setting('threads')").fetchone()
    (3,)
    """
    row = con.execute("SELECT current_setting('threads')").fetchone()
    con.execute("SET threads = 1")
    with afterwards(con, f"SET threads = {int(row[0]) if row else 1}"):
        yield


def _do(con: duckdb.DuckDBPyConnection, step: str | Callable[[], object]) -> None:
    if isinstance(step, str):
        con.execute(step)
    else:
        step()
