"""Epoch numbers written as integers parse the same whichever branch of ``ts_expr`` reads them:
the regular-expression rule (an optional sign and digits, blanks around) checked against
Python's ``int`` on edge texts, for several units."""

from __future__ import annotations

import re

import duckdb
import pytest

from dpcr.changelog._sql import MAX_US, MIN_US, ts_expr

TEXTS = [
    "0", "-0", "007", "+7", " 7", "7 ", "-7", "1735689600", "9223372036854775807",
    "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "253402300799999999", "253402300800000000", "-62135596800000000", "-62135596800000001",
    "1_000", "0x10", "١٢", "", " ", "+", "-", "--1", "1 2",
]  # fmt: skip


def _reference(text: str, factor: int) -> int | None:
    if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", text, flags=re.ASCII):
        return None
    value = int(text.strip()) * factor
    return value if MIN_US <= value <= MAX_US else None


@pytest.mark.parametrize("factor", [1, 1000, 1_000_000])
def test_integer_texts(factor: int) -> None:
    con = duckdb.connect()
    for text in TEXTS:
        got = con.execute(f"SELECT {ts_expr('c', factor)} FROM (SELECT ?::VARCHAR AS c)",
                          [text]).fetchone()  # fmt: skip
        assert got is not None
        assert got[0] == _reference(text, factor), (text, factor)
