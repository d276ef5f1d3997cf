"""The SQL of phase 3 (liveness) that :mod:`dpcr.changelog._load` and
:mod:`dpcr.changelog._increment` share; the rule and its proofs are in
:mod:`dpcr.changelog._load`'s docstring."""

from __future__ import annotations

#: Phase 3's verdict on a mutation from ``prev`` (the last insert or delete before it, a struct
#: ``{live, record}``, NULL when none): ``chk`` and ``other`` (the record that decided it).
LIVENESS_VERDICT = """CASE
        WHEN op = 'insert' AND coalesce(prev.live, FALSE) THEN 'double_insert:op'
        WHEN op = 'update' AND NOT coalesce(prev.live, FALSE) THEN 'update_before_insert:op'
        WHEN op = 'delete' AND NOT coalesce(prev.live, FALSE) THEN 'delete_before_insert:op'
    END AS chk, prev.record AS other"""

_LAST_INSERT_OR_DELETE = """last_value(CASE WHEN op <> 'update'
        THEN {'live': op = 'insert', 'record': record} END IGNORE NULLS) OVER (
            PARTITION BY %s ORDER BY ts, seq, record
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"""

#: The last insert or delete before each mutation of its (unit, entry), as ``{live, record}``.
LAST_INSERT_OR_DELETE = _LAST_INSERT_OR_DELETE % "unit, entry"

#: The same when every mutation's unit is its entry (the (unit, entry) is the entry).
LAST_INSERT_OR_DELETE_BY_ENTRY = _LAST_INSERT_OR_DELETE % "entry"

#: The histories (``{key}``: ``unit, entry`` or ``entry``) of table ``{rows}`` that are not
#: plain (see the module docstring): only their mutations go through the liveness window.
#: ``{inserts}``: the number of inserts of a plain history (1; 0 for one that continues an
#: earlier live state).
NOT_PLAIN_SQL = """SELECT {key} FROM {rows} GROUP BY {key} HAVING NOT coalesce(
        count(*) FILTER (WHERE op = 'insert') = {inserts}
        AND count(*) FILTER (WHERE op = 'delete') <= 1
        AND coalesce(min(ts) FILTER (WHERE op <> 'insert')
                     > min(ts) FILTER (WHERE op = 'insert'), TRUE)
        AND coalesce(max(ts) FILTER (WHERE op <> 'delete')
                     < max(ts) FILTER (WHERE op = 'delete'), TRUE), FALSE)"""


def plain_break(
    window: str, *, op_code: str = "op_code", seq: bool = False,
    lags: tuple[str, str, str | None] | None = None,
) -> str:  # fmt: skip
    """SQL true on a mutation that makes its history not plain, false on every other: the
    same verdict per history as :data:`NOT_PLAIN_SQL` (``inserts`` = 1), read from one
    window over each history in (ts, seq, record) order (``window``: ``(PARTITION BY ...
    ORDER BY ...)``; ``op_code``: 0 for an insert, 1 an update, 2 a delete).

    In that order a history is plain exactly when its first mutation is an insert dated
    strictly before the next, no other mutation is an insert, and a delete is the last
    mutation, dated strictly after the one before it. (Plain: the insert is dated before
    every other mutation, so it comes first, and the one delete after every other, so it
    comes last. Conversely the insert is then the only one, the delete the only one, and
    the times rise from the insert's to the delete's, strictly at both ends.) So a mutation
    breaks its history when it is the first and not an insert, or a later insert, or it
    follows a delete, or it is dated as the one before it while that one is an insert or
    it is a delete. Every time must be given (phase 1 rejects a record without one).

    ``seq``: the sequence numbers (column ``seq``, never NULL) are explicit and phase 2 (no
    two mutations of a history share one) was left to this check too: a mutation whose
    ``seq`` is not above the one before it breaks its history as well. Where each is above
    the one before, the numbers of a history all differ, so phase 2 finds nothing in it.

    ``lags``: the previous mutation's op code, ts and (with ``seq``) seq as the caller has
    them (NULL op code: no previous mutation), instead of lags over ``window``."""
    w, op = window, op_code
    prev, prev_ts, prev_seq = lags or (f"lag({op}) OVER {w}", f"lag(ts) OVER {w}",
                                       f"lag(seq) OVER {w}")  # fmt: skip
    rises = f" OR {prev_seq} >= seq" if seq else ""
    return (
        f"CASE WHEN {prev} IS NULL THEN {op} <> 0 "
        f"ELSE {op} = 0 OR {prev} = 2 "
        f"OR ({prev_ts} >= ts AND ({op} = 2 OR {prev} = 0)){rises} END"
    )
