"""A first load of a JSON-lines file parsed once (dpcr.changelog._once): DuckDB's JSON reader
feeds phase 1's narrow table directly, a clean file's integer entries become integer keys, and
every other file gets the verdicts, messages and quarantine lines of the usual staging (which
reads the reader's rows into a table first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

import dpcr
import dpcr.changelog._stage as stage_mod
from dpcr.changelog import Prior, load_increment
from dpcr.engines import state as inc_state


def _load(
    path: Path,
    tmp: Path,
    *,
    once: bool,
    on_error: Any = "quarantine",
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    """A first load of ``path`` (an empty state), parsed once or staged as usual."""
    with monkeypatch.context() as m:
        if not once:
            m.setattr(stage_mod, "_unnumbered_records", lambda *args: None)
        con = duckdb.connect()
        inc_state.attach(con, tmp / "state" / "s.duckdb", fresh=True)
        inc_state.create_tables(con, 1, 0)
        source = dpcr.sources.Jsonl(path=path)
        prior = Prior(schema=inc_state.SCHEMA, last_record=0, t_last=None, seen=0, empty=True)
        inc = load_increment(
            source,
            con,
            prior,
            record_offset=0,
            on_error=on_error,
            unit_column=None,
            full_source=source,
            temps=[],
            numbers=("v",),
        )
        valid = f"SELECT record, part, unit, entry, ts, seq, op, after, _num0 FROM {inc.valid}"
        return {
            "valid": con.execute(
                f"SELECT * REPLACE (unit::VARCHAR AS unit, entry::VARCHAR AS "
                f"entry) FROM ({valid}) ORDER BY record"
            ).fetchall(),
            "types": dict(
                con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {valid})").fetchall()
            ),
            "bad": con.execute(
                f"SELECT * EXCLUDE (line) FROM {inc.bad}_lines ORDER BY record, part"
            ).fetchall(),
            "lines": con.execute(
                f"SELECT line FROM {inc.bad}_lines ORDER BY record, part"
            ).fetchall(),
            "counts": (inc.records, inc.quarantined, inc.explicit, inc.lines, inc.plain),
        }


def _but_types(loaded: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in loaded.items() if k != "types"}


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


CLEAN = [
    '{"entry": 7, "ts": 1000000, "op": "insert", "after": {"v": 1.5}}',
    '{"entry": 8, "ts": 2000000, "op": "insert", "after": {"v": 2}}',
    '{"entry": 7, "ts": 3000000, "op": "update", "before": {"v": 1.5}, "after": {"v": 4}}',
    '{"entry": 8, "ts": 4000000, "op": "delete", "before": {"v": 2}}',
]


def test_a_clean_file_with_integer_entries_is_keyed_by_integers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "log.jsonl", CLEAN)
    once = _load(path, tmp_path / "a", once=True, monkeypatch=monkeypatch)
    assert once["types"]["entry"] == "BIGINT" and once["types"]["unit"] == "BIGINT"
    usual = _load(path, tmp_path / "b", once=False, monkeypatch=monkeypatch)
    assert usual["types"]["entry"] == "VARCHAR"
    assert _but_types(once) == _but_types(usual)
    assert [r[3] for r in once["valid"]] == ["7", "8", "7", "8"]


@pytest.mark.parametrize(
    ("name", "lines"),
    [
        # an entry that is not an integer's canonical text keeps its text
        (
            "text entries",
            [*CLEAN, '{"entry": "007", "ts": 5000000, "op": "insert", "after": {"v": 1}}'],
        ),
        ("a null line", [*CLEAN[:2], "null", "{}", *CLEAN[2:]]),
        ("a bad row after", [*CLEAN, '{"entry": 9, "ts": 5, "op": "insert", "after": 5}']),
        (
            "a bad op and time",
            [
                *CLEAN,
                '{"entry": 9, "ts": "x", "op": "upsert", "after": {}}',
                '{"entry": 9, "ts": "y", "op": "insert", "after": {}}',
            ],
        ),
        (
            "sequence numbers",
            [x.replace('"op"', f'"seq": {9 - i}, "op"') for i, x in enumerate(CLEAN)],
        ),
        (
            "a bad sequence number",
            [*CLEAN, '{"entry": 9, "ts": 5, "seq": "z", "op": "insert", "after": {"v": 1}}'],
        ),
        ("a double insert", [*CLEAN, CLEAN[0].replace("1000000", "5000000")]),
        ("a NaN", [*CLEAN, '{"entry": 9, "ts": 5, "op": "insert", "after": {"v": NaN}}']),
        ("a line the reader refuses", [*CLEAN, "[1, 2]"]),
        ("a blank line read as a row", [*CLEAN[:2], " ", *CLEAN[2:]]),
    ],
)
def test_other_files_load_as_with_the_usual_staging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, lines: list[str]
) -> None:
    path = _write(tmp_path / "log.jsonl", lines)
    once = _load(path, tmp_path / "a", once=True, monkeypatch=monkeypatch)
    usual = _load(path, tmp_path / "b", once=False, monkeypatch=monkeypatch)
    # (the keys are integers where no record is rejected in phase 1: a double insert)
    assert _but_types(once) == _but_types(usual), name


def test_the_first_bad_record_is_named_as_with_the_usual_staging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "log.jsonl", [*CLEAN, "null", '{"entry": 9, "ts": "x"}'])
    messages = []
    for once in (True, False):
        with pytest.raises(dpcr.DpcrError) as info:
            _load(path, tmp_path / str(once), once=once, on_error="raise", monkeypatch=monkeypatch)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "record 5" in messages[0]


def _tables(path: Path, tmp: Path, liveness: Any) -> tuple[set[str], Any]:
    """The temporary tables a first load of ``path`` leaves (their names without the load's
    prefix), and its increment."""
    con = duckdb.connect()
    inc_state.attach(con, tmp / "state" / f"{path.stem}-{liveness}.duckdb", fresh=True)
    inc_state.create_tables(con, 1, 0)
    source = dpcr.sources.Jsonl(path=path)
    prior = Prior(schema=inc_state.SCHEMA, last_record=0, t_last=None, seen=0, empty=True)
    inc = load_increment(source, con, prior, record_offset=0, on_error="quarantine",
                         unit_column=None, full_source=source, temps=[], numbers=("v",),
                         liveness=liveness)  # fmt: skip
    names = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE temporary"
    ).fetchall()
    return {str(n).split("_", 3)[-1] for (n,) in names}, inc


def test_a_first_load_with_sequence_numbers_copies_no_more_than_one_without(
    tmp_path: Path,
) -> None:
    """With explicit sequence numbers, a deferred first load leaves phase 2 to the reader
    (``unchecked``) and makes the tables a load without them makes: no copy of the keys or
    of the rows per mutation (at 10^7 mutations those copies, and the correlated filters
    that read the rows through them, held 4.9 GB where the load without needs 1.25)."""
    lines = [
        f'{{"entry": {e}, "ts": {1_735_689_600 + 10 * r}, "seq": {100 + 3 * r}, '
        f'"op": "{op}", "after": {{"v": {r}}}}}'
        for r, (e, op) in enumerate([(1, "insert"), (2, "insert"), (1, "update"), (2, "update")])
    ]
    with_seq, without = tmp_path / "with.jsonl", tmp_path / "without.jsonl"
    with_seq.write_text("\n".join(lines) + "\n")
    without.write_text("\n".join(line.replace('"seq"', '"s"') for line in lines) + "\n")
    tables, inc = _tables(with_seq, tmp_path, "defer")
    assert inc.unchecked and inc.explicit and inc.keys is not None
    assert tables == _tables(without, tmp_path, "defer")[0]
    checked = _tables(with_seq, tmp_path, "check")[1]  # (phase 2 here: nothing to find)
    assert not checked.unchecked and checked.explicit
