"""The incremental state file (:mod:`dpcr.engines.incremental`): its tables, its head, its
counters and the totals it keeps of the settled base intervals; what a run that reads no new
row needs of it (:func:`state_totals`, :func:`settle_unchanged`) without the engine that
bounds rows.

A settle commits; it does not checkpoint. The commit is durable in the state's write-ahead log
(replayed when the file is next attached), and DuckDB writes the log into the file once it
reaches its ``checkpoint_threshold`` (16 MiB by default) and when the state is detached (the
end of a run, or of a session): a long-running session's step pays for its own rows, not for
rewriting the file's changed row groups every time."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr._fs import ensure_dir, refuse_link
from dpcr._sql import insert_columns, lit
from dpcr.bounding.constraints import Constraint, Hybrid
from dpcr.engines.base import Aggregates, BoundingReport, open_columns
from dpcr.queries import GroupedSum, Histogram, Query, Sum, has_open_keys

if TYPE_CHECKING:  # (DuckDB is imported where SQL runs: the counters' arithmetic needs none)
    import duckdb

__all__ = [
    "DICT_BASE", "FORMAT", "SCHEMA", "SEP", "KeptRows", "StateHead", "add", "attach", "counters",
    "create_tables", "fetch", "frozen_points", "id_sql", "kept_totals", "merge_open",
    "nothing_pending", "own_id", "read_head", "seed_columns", "settle_unchanged",
    "state_load_report", "state_rows", "state_totals", "text_sql", "with_counters", "write_head",
]

SEP = "\x1f"  # between a reason and a move in a counter's name


def with_counters(
    dropped: dict[str, int], moves: dict[str, dict[str, int]], counters: dict[str, int]
) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """This run's dropped mutations per reason and per state-machine move, plus those the
    state's ``counters`` hold of the settled rows (``d:<reason>``, ``mv:<reason><SEP><move>``)."""
    dropped = dict(dropped)
    moves = {reason: dict(m) for reason, m in moves.items()}
    for k, v in counters.items():
        if k.startswith("d:"):
            dropped[k[2:]] = dropped.get(k[2:], 0) + v
        elif k.startswith("mv:"):
            reason, _, move = k[3:].partition(SEP)
            moves.setdefault(reason, {})[move] = moves.get(reason, {}).get(move, 0) + v
    return dropped, moves


#: The name the state file is attached under.
SCHEMA = "dpcr_state"
#: The state format; another value is rebuilt from the source. A change of the tables' layout
#: changes it: a state whose head resumes is trusted to hold the tables (none is created again).
FORMAT = "state4"

#: The ids of the state's dictionary (table ``names``) are ``DICT_BASE + 1, DICT_BASE + 2, ..``.
#: A unit or entry text that is the decimal form of an integer below it (``str(n)``: no sign
#: but a minus, no leading zero, no blank) is not in the dictionary: that integer is its id.
#: Integer keys, the usual ones, so need no look-up of their texts in the state.
DICT_BASE = 1 << 62


def own_id(text: str) -> int | None:
    """The id of ``text`` when it is the decimal form of an integer below :data:`DICT_BASE`
    (as :func:`id_sql`), else None (its id comes from the dictionary)."""
    if not 0 < len(text) <= 20 or not (text[0] == "-" or "0" <= text[0] <= "9"):
        return None
    try:
        n = int(text)
    except ValueError:
        return None
    return n if -(2**63) <= n < DICT_BASE and str(n) == text else None


def id_sql(text: str, n: str) -> str:
    """SQL of the id of the text column ``text`` when it is the decimal form of an integer
    below :data:`DICT_BASE`, else NULL (:func:`own_id`); ``n`` is ``try_cast(text AS
    BIGINT)`` (a column computed once)."""
    return f"CASE WHEN {n} < {DICT_BASE} AND {n}::VARCHAR = {text} THEN {n} END"


def text_sql(id_: str, name: str) -> str:
    """SQL of the text whose id is the column ``id_`` (the inverse of :func:`id_sql`): an id
    below :data:`DICT_BASE` is an integer's, its decimal form; another is the dictionary's,
    whose text is the column ``name`` (of table ``names``, joined on the id)."""
    return f"CASE WHEN {id_} < {DICT_BASE} THEN {id_}::VARCHAR ELSE {name} END"


@dataclass(frozen=True, slots=True)
class StateHead:
    """The store head a state belongs to and what the next run continues from: ``lines`` read
    (new records are numbered after them) and whether sequence numbers are ``explicit``."""

    records: int
    interval: int
    token: str
    lines: int
    explicit: bool
    fingerprint: str
    #: the configuration's columns were found in the source (checked once, on the first rows)
    columns_ok: bool = False


def fetch(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[Any]:
    return con.execute(sql, params).fetchall()


def attach(con: duckdb.DuckDBPyConnection, path: Path, *, fresh: bool) -> bool:
    """Attach the state file at ``path`` as :data:`SCHEMA`, created owner-only in an
    owner-only folder (emptied when ``fresh``; a symbolic link is refused); a no-op when it is
    attached already (a session's connection). True when it was attached now."""
    row = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = ?", [SCHEMA]
    ).fetchone()
    if row is not None:  # attached by an earlier run of the same session
        if not fresh and row[0] == str(path):
            return False
        con.execute(f"DETACH {SCHEMA}")
    ensure_dir(path.parent, 0o700)  # (the write-ahead log is created with the default mode)
    for p in (path, path.with_name(path.name + ".wal")):
        refuse_link(p)
        if fresh:
            p.unlink(missing_ok=True)
    mask = os.umask(0o077)  # DuckDB creates the file (and its WAL) itself, 0600
    try:
        con.execute(f"ATTACH {lit(str(path))} AS {SCHEMA}")
    finally:
        os.umask(mask)
    return True


def seed_columns(queries: int, machines: int,
                 text: Sequence[int] = ()) -> list[tuple[str, str, str]]:  # fmt: skip
    """The columns of table ``seeds`` after its keys ``u`` and ``e`` and before its version
    ``v``, in order: (name, type, what it belongs to: ``unit``, ``entry`` or ``live``). Per
    unit: settled rows ``n``, first time, class, each state machine's first failure; per
    (unit, entry): ``ne``, the last f per query (text for the queries numbered in ``text``,
    open histograms), the last state per machine; and its last settled insert or delete."""
    cols = [("n", "BIGINT", "unit"), ("first_ts", "BIGINT", "unit"), ("cls", "VARCHAR", "unit")]
    cols += [(f"cut{j}", "BIGINT", "unit") for j in range(machines)]
    cols += [("ne", "BIGINT", "entry")]
    cols += [(f"f{i}", "VARCHAR" if i in text else "BIGINT", "entry") for i in range(queries)]
    for j in range(machines):
        cols += [(f"st{j}", "VARCHAR", "entry"), (f"comp{j}", "INTEGER", "entry"),
                 (f"cn{j}", "BIGINT", "entry")]  # fmt: skip
    return [*cols, ("live", "BOOLEAN", "live"), ("record", "BIGINT", "live")]


def create_tables(con: duckdb.DuckDBPyConnection, queries: int, machines: int,
                  text: Sequence[int] = ()) -> None:  # fmt: skip
    """The state's tables for ``queries`` queries (those numbered in ``text``, open
    histograms, keep their keys as text) and ``machines`` state machines."""
    s = SCHEMA
    cols = "".join(f", {name} {kind}" for name, kind, _ in seed_columns(queries, machines, text))
    for sql in (
        "meta (key VARCHAR, value VARCHAR)",
        "pending (record BIGINT, part INTEGER, unit VARCHAR, entry VARCHAR, ts BIGINT, "
        "seq BIGINT, op VARCHAR, has_before BOOLEAN, after JSON, raw VARCHAR)",
        "names (id BIGINT, name VARCHAR)",
        f"seeds (u BIGINT, e BIGINT{cols}, v BIGINT)",
        "keys (unit VARCHAR, entry VARCHAR, seq BIGINT, record BIGINT)",
        "totals (q INTEGER, iv BIGINT, key INTEGER, value BIGINT)",
        # open histograms: their candidate keys (first base interval) and totals by key text
        "okeys (q INTEGER, key VARCHAR, iv BIGINT)",
        "ototals (q INTEGER, iv BIGINT, key VARCHAR, value BIGINT)",
        "clamps (q INTEGER, iv BIGINT, n BIGINT)",
        "qlines (record BIGINT, part INTEGER, line VARCHAR)",
        "counters (name VARCHAR, value BIGINT)",
    ):
        con.execute(f"CREATE TABLE IF NOT EXISTS {s}.{sql}")


def read_head(con: duckdb.DuckDBPyConnection) -> StateHead | None:
    """The head of the attached state, or None when it has none or another format."""
    import duckdb

    try:
        meta = dict(fetch(con, f"SELECT key, value FROM {SCHEMA}.meta"))
    except duckdb.Error:
        return None
    if meta.get("format") != FORMAT:
        return None
    return StateHead(
        records=int(meta["records"]), interval=int(meta["interval"]), token=meta["token"],
        lines=int(meta["lines"]), explicit=meta["explicit"] == "1",
        fingerprint=meta["fingerprint"], columns_ok=meta.get("columns_ok") == "1",
    )  # fmt: skip


def counters(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return {str(k): int(v) for k, v in fetch(con, f"SELECT name, value FROM {SCHEMA}.counters")}


def state_totals(
    con: duckdb.DuckDBPyConnection,
    *,
    queries: Sequence[Query],
    constraint: Constraint,
    lo: int,
    hi: int,
    settled: int,
    new: Aggregates | None = None,
    added: tuple[int, dict[str, int]] = (0, {}),
) -> Aggregates:
    """Totals of base intervals ``lo .. hi``: those up to ``settled`` (the settled base
    intervals) from the state attached to ``con``, the later ones from ``new``, the aggregation
    of this run's rows (None: the run has no row, and those totals are zero); the bounding
    report is the state's counters plus ``new``'s, with ``added`` the units the state does not
    hold yet (in all, and per hybrid class). :func:`kept_totals` of the state's rows."""
    return kept_totals(counters(con), state_rows(con), queries=queries, constraint=constraint,
                       span=(lo, hi, settled), new=new, added=added)  # fmt: skip


#: ``rows(table, q, lo, first, hi)``: what a state keeps of query number ``q`` in ``table``:
#: of ``totals`` and ``ototals`` (interval, key, total), of ``clamps`` (interval, count), each
#: of an interval ``lo <= iv < first``, ``iv <= hi``; of ``okeys`` every (key, first interval).
KeptRows = Callable[[str, int, int, int, int], Iterable[Any]]

_KEPT = {"totals": "iv, key, value", "clamps": "iv, n", "ototals": "iv, key, value"}


def state_rows(con: duckdb.DuckDBPyConnection) -> KeptRows:
    """The :data:`KeptRows` of the state attached to ``con``."""

    def rows(table: str, q: int, lo: int, first: int, hi: int) -> Iterable[Any]:
        if table == "okeys":
            return fetch(con, f"SELECT key, iv FROM {SCHEMA}.okeys WHERE q = ?", [q])
        return fetch(con, f"SELECT {_KEPT[table]} FROM {SCHEMA}.{table} WHERE q = ? "
                     "AND iv >= ? AND iv < ? AND iv <= ?", [q, lo, first, hi])  # fmt: skip

    return rows


def kept_totals(
    c: dict[str, int], rows: KeptRows, *, queries: Sequence[Query], constraint: Constraint,
    span: tuple[int, int, int], new: Aggregates | None = None,
    added: tuple[int, dict[str, int]] = (0, {}),
) -> Aggregates:
    """:func:`state_totals` of a state whose counters are ``c`` and whose kept rows ``rows``
    gives (the state file's, or a summary of it); ``span``: (lo, hi, settled)."""
    lo, hi, settled = span
    r = new.report if new is not None else BoundingReport(units=0, mutations=0, kept=0,
                                                          dropped={})  # fmt: skip
    first = settled + 1
    new_units, new_by_class = added
    values: dict[str, np.ndarray] = {}
    clamps: dict[str, np.ndarray] = {}
    width = max(0, hi - lo + 1)
    candidates: dict[str, dict[str, int]] = {}
    for i, q in enumerate(queries):
        if has_open_keys(q):
            known = {str(k): int(iv) for k, iv in rows("okeys", i, lo, first, hi)}
            candidates[q.name], values[q.name] = merge_open(
                q, known, rows("ototals", i, lo, first, hi),
                new.candidates.get(q.name, {}) if new is not None else {},
                new.values[q.name] if new is not None else None, lo=lo, hi=hi, first=first,
            )  # fmt: skip
            continue
        out = np.zeros((width, len(q.keys)), dtype=np.int64)
        per = np.zeros(width, dtype=np.int64)
        for iv, key, value in rows("totals", i, lo, first, hi):
            out[int(iv) - lo, int(key)] = int(value)
        for iv, count in rows("clamps", i, lo, first, hi):
            per[int(iv) - lo] = int(count)
        a, b = max(lo, first), hi  # rows of this run's aggregation
        if new is not None and a <= b:
            out[a - lo:b - lo + 1] = new.values[q.name][a - first:b - first + 1]
            if q.name in new.clamps:
                per[a - lo:b - lo + 1] = new.clamps[q.name][a - first:b - first + 1]
        values[q.name] = out
        if per.any():
            clamps[q.name] = per
    dropped, moves = with_counters(r.dropped, r.dropped_moves, c)
    by_class: dict[str, dict[str, int]] = {}
    if isinstance(constraint, Hybrid):
        old_units = {k[2:]: v for k, v in c.items() if k.startswith("u:")}
        classes = set(r.by_class) | set(old_units)
        for cls in sorted(classes):
            old = r.by_class.get(cls, {})
            by_class[cls] = {
                "units": int(old_units.get(cls, 0)) + int(new_by_class.get(cls, 0)),
                "kept": c.get(f"c:kept:{cls}", 0) + old.get("kept", 0),
                "dropped": c.get(f"c:dropped:{cls}", 0) + old.get("dropped", 0),
            }
    report = BoundingReport(
        units=c.get("units", 0) + new_units,
        mutations=c.get("mutations", 0) + r.mutations,
        kept=c.get("kept", 0) + r.kept,
        dropped={k: v for k, v in sorted(dropped.items()) if v},
        dropped_moves={k: dict(sorted(m.items())) for k, m in sorted(moves.items())},
        clamped={q.name: int(clamps[q.name].sum()) for q in queries if q.name in clamps},
        non_numeric=_plus(c, "nn:", r.non_numeric, queries, Sum),
        unknown_keys=_plus(c, "uk:", r.unknown_keys, queries, (Histogram, GroupedSum)),
        by_class=by_class,
    )
    return Aggregates(first_interval=lo, last_interval=hi, values=values, report=report,
                      clamps=clamps, candidates=candidates)  # fmt: skip


def merge_open(
    q: Query, known: Mapping[str, int], settled: Iterable[tuple[int, str, int]],
    fresh: Mapping[str, int], values: np.ndarray | None, *, lo: int, hi: int, first: int,
) -> tuple[dict[str, int], np.ndarray]:
    """An open query's candidate keys and its totals of base intervals ``lo .. hi``, from
    what an incremental state keeps and what a step aggregated (every engine's). ``known``:
    the state's candidate keys (first interval); ``settled``: its (interval, key, total) of
    the settled base intervals (before ``first``); ``fresh`` and ``values``: the step's
    candidate keys and totals of intervals ``first ..`` (columns :func:`open_columns` of
    ``fresh``; None: the step read no row). The candidates are those first held by ``hi``,
    by first interval and key; the totals' columns are their :func:`open_columns`."""
    found = dict(known)
    for k, iv in fresh.items():
        found[k] = min(iv, found.get(k, iv))
    # (keys first held after ``hi``, by rows the step bounds to settle them, are not yet)
    candidates = {k: iv for k, iv in sorted(found.items(), key=lambda kv: (kv[1], kv[0]))
                  if iv <= hi}  # fmt: skip
    columns = open_columns(q, candidates)
    column_of = {k: j for j, k in enumerate(columns)}
    out = np.zeros((max(0, hi - lo + 1), len(columns)), dtype=np.int64)
    for iv, key, value in settled:
        if lo <= iv < first and iv <= hi:
            out[int(iv) - lo, column_of[str(key)]] = int(value)
    a, b = max(lo, first), hi  # rows of this run's aggregation
    if values is not None and a <= b:
        rows = values[a - first:b - first + 1]
        for j, key in enumerate(open_columns(q, fresh)):
            if key in column_of:
                out[a - lo:b - lo + 1, column_of[key]] = rows[:, j]
    return candidates, out


def state_load_report(
    source: Any, c: Mapping[str, int], quarantine_path: Path | None, *,
    new: Mapping[str, int] | None = None, quarantined: Mapping[str, int] | None = None,
    frozen: tuple[tuple[str, str, int], ...] = (),
) -> Any:
    """The load report of a step (:class:`dpcr.changelog.LoadReport`): the state's counters
    ``c`` plus what the step read (``new``: its records, valid, tombstones, split and late
    records; ``quarantined``: per reason), the freeze points ``frozen``; ``quarantine_path``:
    the quarantine file (None: bad records are not quarantined)."""
    from dpcr.changelog import REASONS, LoadReport, describe

    more = new or {}
    bad = {k[2:]: v for k, v in c.items() if k.startswith("q:")}
    for k, v in (quarantined or {}).items():
        bad[k] = bad.get(k, 0) + v

    def total(name: str) -> int:
        return c.get(name, 0) + more.get(name, 0)

    return LoadReport(
        source=describe(source), records=total("records"), valid=total("valid"),
        quarantined={r: bad[r] for r in REASONS if bad.get(r)}, quarantine_path=quarantine_path,
        tombstones=total("tombstones"), split=total("split"), late=total("late"), frozen=frozen,
    )  # fmt: skip


def frozen_points(frozen: Iterable[tuple[str, str, int]]) -> tuple[tuple[str, str, int], ...]:
    """The freeze points of a step that reads no record: one per (unit, entry), its lowest
    record, in key order."""
    points: dict[tuple[str, str], int] = {}
    for unit, entry, record in frozen:
        points[unit, entry] = min(record, points.get((unit, entry), record))
    return tuple((u, e, r) for (u, e), r in sorted(points.items()))


def _plus(c: dict[str, int], prefix: str, new: dict[str, int], queries: Sequence[Query],
          kind: type | tuple[type, ...]) -> dict[str, int]:  # fmt: skip
    out = {}
    for q in queries:
        if isinstance(q, kind):
            total = c.get(prefix + q.name, 0) + new.get(q.name, 0)
            if total:
                out[q.name] = total
    return out


def nothing_pending(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the attached state keeps no pending mutation."""
    row = con.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {SCHEMA}.pending)").fetchone()
    return bool(row and row[0])


def settle_unchanged(con: duckdb.DuckDBPyConnection, head: StateHead) -> None:
    """:func:`settle` for a run that read no new record and whose state keeps no pending
    mutation: no row settles and every count stays (but the seed version, which every settle
    advances); the state records ``head``."""
    con.execute("BEGIN TRANSACTION")
    try:
        c = counters(con)
        c["version"] = c.get("version", 0) + 1
        write_head(con, c, head)
    except BaseException:
        import duckdb

        with suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise


def write_head(con: duckdb.DuckDBPyConnection, c: dict[str, int], head: StateHead) -> None:
    """Replace the counters by ``c`` and the head by ``head``, and commit."""
    s = SCHEMA
    con.execute(f"DELETE FROM {s}.counters")
    items = sorted(c.items())
    insert_columns(con, f"{s}.counters", [([k for k, _ in items], "VARCHAR"),
                                          ([v for _, v in items], "BIGINT")])
    con.execute(f"DELETE FROM {s}.meta")
    meta = {"format": FORMAT, "records": head.records, "interval": head.interval,
            "token": head.token, "lines": head.lines, "explicit": int(head.explicit),
            "fingerprint": head.fingerprint, "columns_ok": int(head.columns_ok)}  # fmt: skip
    insert_columns(con, f"{s}.meta", [(list(meta), "VARCHAR"),
                                      ([str(v) for v in meta.values()], "VARCHAR")])
    con.execute("COMMIT")


def add(c: dict[str, int], key: str, value: int) -> None:
    c[key] = c.get(key, 0) + int(value)
