"""A clean-up after a failed DuckDB statement never hides the failure (:mod:`dpcr._duck`)."""

from __future__ import annotations

import ast
from pathlib import Path

import duckdb
import numpy as np
import pytest

from dpcr._duck import afterwards
from dpcr.engines.incremental import _one_writer

SRC = Path(__file__).resolve().parents[1] / "src" / "dpcr"


def _aborted() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (x INTEGER)")
    con.execute("BEGIN")
    return con


def test_the_blocks_error_propagates_when_the_clean_up_is_refused() -> None:
    con = _aborted()
    con.register("v", {"x": np.array([1])})
    with (
        pytest.raises(duckdb.InvalidInputException, match="boom"),
        afterwards(con, "SET threads = 1", lambda: con.unregister("v")),
    ):
        con.execute("INSERT INTO t SELECT error('boom')")
    with pytest.raises(duckdb.TransactionException):  # (the transaction was aborted)
        con.execute("SELECT 1")
    con.execute("ROLLBACK")
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_the_clean_up_runs_in_order_and_its_own_error_propagates() -> None:
    con = duckdb.connect()
    done: list[str] = []
    with afterwards(con, "CREATE TABLE a (x INTEGER)", lambda: done.append("b")):
        done.append("a")
    assert done == ["a", "b"]
    assert con.execute("SELECT count(*) FROM a").fetchone() == (0,)
    with (
        pytest.raises(duckdb.CatalogException),  # (nothing went wrong before it)
        afterwards(con, "DROP TABLE no_such_table"),
    ):
        pass


def test_a_state_append_that_fails_in_a_transaction_raises_its_own_error() -> None:
    """What a Ctrl-C in the append of the keys raised (CI, fuzz case 30/1741): the error of
    restoring the threads, refused in the aborted transaction, in place of the interrupt."""
    con = _aborted()
    with pytest.raises(duckdb.InvalidInputException, match="stopped"):
        _one_writer(con, "INSERT INTO t SELECT error('stopped')")
    con.execute("ROLLBACK")


def _cleanup_calls(node: ast.AST) -> list[int]:
    """Lines under ``node`` (in a ``finally``) that run SQL or unregister outside a suppress."""
    if isinstance(node, ast.With) and "suppress" in ast.unparse(node.items[0]):
        return []
    if isinstance(node, ast.Call):
        name = ast.unparse(node.func)
        if name.endswith((".execute", ".unregister", ".sql")) or name in ("_run", "run"):
            return [node.lineno]
    return [n for child in ast.iter_child_nodes(node) for n in _cleanup_calls(child)]


def test_no_finally_block_runs_sql_that_an_aborted_transaction_refuses() -> None:
    """A ``finally`` that runs SQL on the connection replaces the error that aborted the
    transaction (or a Ctrl-C) with DuckDB's refusal: use :func:`afterwards`, or a suppress."""
    found: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and node.finalbody:
                found += [f"{path.relative_to(SRC)}:{n}" for s in node.finalbody
                          for n in _cleanup_calls(s)]
    assert not found, found
