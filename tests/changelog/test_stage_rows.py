"""SQL helpers of the rows table (dpcr.changelog._stage_rows)."""

from __future__ import annotations

import duckdb

from dpcr.changelog._stage_rows import _given_text


def test_given_text_is_the_text_unless_blank_or_null() -> None:
    texts = [None, "", " ", "  \t", "null", " null ", "\tnull", "nul", "nulll", "{", "{}",
             '{"a":1}', ' {"a":1}', "{ null", "[1]", "1", '"null"']  # fmt: skip
    con = duckdb.connect()
    got = con.execute(
        f"SELECT t, {_given_text('t')} FROM unnest(?::VARCHAR[]) u(t)", [texts]
    ).fetchall()
    # The plain definition: NULL when the text is NULL, or blank or null once trimmed.
    want = con.execute(
        "SELECT t, CASE WHEN t IS NULL OR trim(t) IN ('', 'null') THEN NULL ELSE t END "
        "FROM unnest(?::VARCHAR[]) u(t)",
        [texts],
    ).fetchall()
    assert got == want
    assert dict(got)["{ null"] == "{ null" and dict(got)[" null "] is None
