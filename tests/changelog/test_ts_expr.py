"""Timestamps parse the same whichever branch of ``ts_expr`` reads them: epoch integers by the
regular-expression rule (an optional sign and digits, blanks around) checked against Python's
``int`` on edge texts, for several units; the shortcut branches against the regular expressions
alone."""

from __future__ import annotations

import random
import re

import duckdb
import pytest

from dpcr._sql import lit
from dpcr.changelog import _sql as S
from dpcr.changelog._sql import MAX_US, MIN_US, ts_expr

TEXTS = [
    "0", "-0", "007", "+7", " 7", "7 ", "-7", "1735689600", "9223372036854775807",
    "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "253402300799999999", "253402300800000000", "-62135596800000000", "-62135596800000001",
    "1_000", "0x10", "١٢", "", " ", "+", "-", "--1", "1 2",
    # the ends of the range in seconds and milliseconds
    "253402300799", "253402300800", "-62135596800", "-62135596801",
    "253402300799999", "253402300800000", "-62135596800000", "-62135596800001",
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


def _regex_only(col: str, factor: int) -> str:
    """``ts_expr`` before its shortcuts: every text classified by the regular expressions."""
    c, in_range = col, f"BETWEEN {MIN_US} AND {MAX_US}"

    def within(expr: str) -> str:
        return f"(CASE WHEN {expr} {in_range} THEN {expr} END)"

    return (
        f"CASE WHEN {c} IS NULL THEN NULL "
        f"WHEN regexp_full_match({c}, {lit(S._INT)}) THEN (CASE WHEN "
        f"TRY_CAST(trim({c}) AS HUGEINT) * {factor} {in_range} "
        f"THEN (TRY_CAST(trim({c}) AS HUGEINT) * {factor})::BIGINT END) "
        f"WHEN regexp_full_match({c}, {lit(S._DECIMAL)}) THEN (CASE WHEN "
        f"round(TRY_CAST(trim({c}) AS DOUBLE) * {factor}) {in_range} "
        f"THEN round(TRY_CAST(trim({c}) AS DOUBLE) * {factor})::BIGINT END) "
        f"WHEN contains({c}, ':') AND regexp_matches({c}, {lit(S._ZONE)}) "
        f"THEN (CASE WHEN regexp_matches({c}, {lit(S._BAD_OFFSET)}) THEN NULL "
        f"ELSE {within(f'epoch_us(TRY_CAST({c} AS TIMESTAMPTZ))')} END) "
        f"ELSE {within(f'epoch_us(TRY_CAST({c} AS TIMESTAMP))')} END"
    )


ISO_TEXTS = [
    "2025-01-01T05:03:05.925Z", "2025-01-01T05:03:05Z", "2025-01-01 05:03:05.123456Z",
    "2025-01-01T05:03:05.1234567Z", "2025-01-01T05:03Z", "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z", "10000-01-01T00:00:00Z",
    "2025-13-01T00:00:00Z", "2025-02-30T00:00:00Z", "2025-01-01T24:00:00Z", "1:2Z", "12:3 Z",
    "x:9Z", "9:9z", "2025-01-01T05:03:05+01:00", "2025-01-01T05:03:05+15:00Z", "٣:٣Z",
    "2025-01-01T05:03:05.925Z ", " 2025-01-01T05:03:05Z", "2025-01-01T05:03:05UTC", "Z", ":Z",
    "1Z", "2025-01-01T05:03:05-0Z", "2025-01-01T05:03:05.Z", "2025-1-1T5:3:5Z",
]  # fmt: skip


def _random_texts(n: int) -> list[str]:
    rng = random.Random(20261125)
    alphabet = "0123456789:-TZ .+zU"
    texts = []
    for _ in range(n):
        base = rng.choice(ISO_TEXTS + TEXTS)
        chars = list(base)
        for _ in range(rng.randrange(4)):
            op, at = rng.randrange(3), rng.randrange(len(chars) + 1)
            if op == 0:
                chars.insert(at, rng.choice(alphabet))
            elif chars and at < len(chars):
                if op == 1:
                    del chars[at]
                else:
                    chars[at] = rng.choice(alphabet)
        texts.append("".join(chars))
    return texts


@pytest.mark.parametrize("factor", [1, 1000, 1_000_000])
def test_shortcuts_agree_with_the_regular_expressions(factor: int) -> None:
    """The branches that skip the regular expressions (integers that print as themselves,
    UTC times ending in a digit and Z) give what the expressions alone give, on edge texts and
    on 4,000 random edits of them."""
    con = duckdb.connect()
    texts = TEXTS + ISO_TEXTS + _random_texts(4000)
    con.execute("CREATE TABLE t (i INTEGER, c VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(texts)))
    rows = con.execute(
        f"SELECT c, {ts_expr('c', factor)}, {_regex_only('c', factor)} FROM t ORDER BY i"
    ).fetchall()
    differ = [(c, new, old) for c, new, old in rows if new != old]
    assert not differ, differ[:5]
    # The UTC shortcut is taken, and its texts parse.
    parsed = dict((c, new) for c, new, _ in rows)
    assert parsed["2025-01-01T05:03:05.925Z"] == 1735707785925000
