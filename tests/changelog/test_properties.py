"""The SQL validator agrees with a sequential Python validator on random small changelogs.

The changelogs mix entries, operations (including unknown ones), equal and out-of-order
timestamps, given, missing and repeated sequence numbers, missing entry ids and lines that are not
JSON; this exercises the window formulation of liveness (see ``dpcr.changelog._load``) and the
order of the checks.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcr.changelog import DebeziumSource, JsonlSource, load

from .helpers import quarantine, reference, write_jsonl

ROW = {"id": 1, "fare": 1.5}


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any] | str:
    if draw(st.integers(0, 30)) == 0:
        return "not json"
    op = draw(st.sampled_from(["insert", "update", "delete", "i", "u", "d", "c", "r", "x"]))
    out: dict[str, Any] = {
        "entry": draw(st.sampled_from(["a", "b", "c", "a", "b", ""])),
        "ts": draw(st.integers(0, 5)),
        "op": op,
        "before": None if op in ("insert", "i", "c", "r") else ROW,
        "after": None if op in ("delete", "d") else ROW,
    }
    seq = draw(st.one_of(st.none(), st.integers(0, 6)))
    if seq is not None:
        out["seq"] = seq
    return out


@st.composite
def changelogs(draw: st.DrawFn) -> list[dict[str, Any] | str]:
    """Several small changelogs with disjoint entry ids, concatenated: one load checks them all
    (validation is per entry), which keeps the test fast."""
    out: list[dict[str, Any] | str] = []
    for i in range(draw(st.integers(1, 8))):
        for r in draw(st.lists(records(), max_size=25)):
            if isinstance(r, dict) and r["entry"]:
                r = dict(r, entry=f"{i}{r['entry']}")
            out.append(r)
    return out


@st.composite
def nearly_plain(draw: st.DrawFn) -> list[dict[str, Any] | str]:
    """Histories that are mostly an insert, updates and a delete in time order (the plain
    histories the loader validates without a window), some with a tie in time, a second insert
    or delete, a missing insert or a mutation dated before the insert."""
    out: list[dict[str, Any] | str] = []
    for i in range(draw(st.integers(1, 10))):
        t = draw(st.integers(0, 3))
        history = [{"entry": f"e{i}", "ts": t, "op": "insert", "before": None, "after": ROW}]
        for _ in range(draw(st.integers(0, 3))):
            t += draw(st.integers(0, 2))
            history.append({"entry": f"e{i}", "ts": t, "op": "update", "before": ROW,
                            "after": ROW})  # fmt: skip
        if draw(st.booleans()):
            t += draw(st.integers(0, 2))
            history.append({"entry": f"e{i}", "ts": t, "op": "delete", "before": ROW,
                            "after": None})  # fmt: skip
        if draw(st.integers(0, 3)) == 0:  # a flaw somewhere in the history
            op = draw(st.sampled_from(["insert", "update", "delete"]))
            history.insert(draw(st.integers(0, len(history))), {
                "entry": f"e{i}", "ts": draw(st.integers(0, t + 1)), "op": op,
                "before": None if op == "insert" else ROW,
                "after": None if op == "delete" else ROW,
            })  # fmt: skip
        if draw(st.integers(0, 5)) == 0:
            history.pop(0)  # no insert
        out.extend(draw(st.permutations(history)))
    return out


def _sql_result(records: list[dict[str, Any] | str], fmt: str) -> tuple[list[int], dict[int, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.jsonl"
        q = Path(tmp) / "q.jsonl"
        con = duckdb.connect()
        if fmt == "debezium":  # the same records as Debezium envelopes (ts in milliseconds)
            envelopes: list[dict[str, Any] | str] = []
            for r in records:
                if isinstance(r, str):
                    envelopes.append(r)
                    continue
                after = r["after"] and dict(r["after"], id=r["entry"])
                before = r["before"] and dict(r["before"], id=r["entry"])
                envelopes.append(
                    {"payload": {"op": r["op"], "before": before, "after": after,
                                 "source": {"ts_ms": r["ts"] * 1000, "lsn": r.get("seq")}}}
                )  # fmt: skip
            write_jsonl(path, envelopes)
            source: JsonlSource | DebeziumSource = DebeziumSource(path=path, key="id")
        else:
            write_jsonl(path, records)
            source = JsonlSource(path=path)
        report = load(source, con, on_error="quarantine", quarantine_path=q)
        rows = con.execute("SELECT record FROM changelog ORDER BY ts, seq, record").fetchall()
        valid = [r[0] for r in rows]
        bad = {line["record"]: line["reason"] for line in quarantine(q)}
        assert report.records == len(records) == report.valid + report.invalid
        return valid, bad


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changelogs())
def test_sql_validator_matches_sequential_validator(records: list[dict[str, Any] | str]) -> None:
    assert _sql_result(records, "jsonl") == reference(records)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nearly_plain())
def test_plain_histories_validate_as_the_sequential_validator(
    records: list[dict[str, Any] | str],
) -> None:
    # Most histories are plain (no window); ties in time and flaws send some through the window.
    assert _sql_result(records, "jsonl") == reference(records)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changelogs())
def test_debezium_envelopes_validate_the_same(records: list[dict[str, Any] | str]) -> None:
    # Debezium knows c/u/d/r; map the canonical-only spellings so both see the same ops.
    ops = {"insert": "c", "i": "c", "update": "u", "delete": "d"}
    mapped = [r if isinstance(r, str) else dict(r, op=ops.get(r["op"], r["op"])) for r in records]
    assert _sql_result(mapped, "debezium") == reference(mapped)


@pytest.mark.parametrize(
    "records",
    [
        # An invalid insert (double) does not end the entry's life; an invalid delete does not
        # start it: the states after them are the same as before.
        [{"entry": "a", "ts": 0, "op": "insert", "after": ROW},
         {"entry": "a", "ts": 1, "op": "insert", "after": ROW},
         {"entry": "a", "ts": 2, "op": "update", "before": ROW, "after": ROW},
         {"entry": "a", "ts": 3, "op": "delete", "before": ROW},
         {"entry": "a", "ts": 4, "op": "delete", "before": ROW},
         {"entry": "a", "ts": 5, "op": "insert", "after": ROW}],
        # Out of order: the delete is written first but happens last.
        [{"entry": "a", "ts": 9, "op": "delete", "before": ROW},
         {"entry": "a", "ts": 1, "op": "insert", "after": ROW}],
    ],
)  # fmt: skip
def test_known_histories(records: list[dict[str, Any]]) -> None:
    valid, bad = _sql_result(records, "jsonl")  # type: ignore[arg-type]
    assert (valid, bad) == reference(records)  # type: ignore[arg-type]
