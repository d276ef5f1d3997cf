"""Bounding as DuckDB SQL: which mutations each privacy unit keeps, and why the others drop.

Input rows are the canonical changelog columns (record, unit, entry, ts, seq, op, before, after).
An entry's history is that of its (unit, entry) pair: every per-entry window below is partitioned
by (unit, entry), so a mutation's fate depends on its own unit's rows only (an update that moves
an entry to another unit arrives from :func:`dpcr.changelog.load` as a delete in the old unit
and an insert in the new one).

Bounding (per privacy unit, independent of every other unit):
  mutations are ranked within their unit by (ts, seq, entry, record); at-most-k keeps rank <= k,
  time-bounded keeps ts - first_ts <= B where first_ts is the unit's first mutation (its first
  insert), and a hybrid constraint picks one of these by the class column of that first row.
  A state machine (:class:`dpcr.bounding.state_machine.StateMachine`, an at-most-k with derived
  k) computes each row's state and, per (unit, entry), the previous row's state and how many of
  its rows so far lie in the same composite state; a row fails if its state is unknown, its
  move is not allowed (insert into a non-initial state or a second insert, delete from a
  non-terminal state, a move not in the transitions) or it exceeds its composite state's
  allowance. The unit keeps rank < (rank of its first failing row) and rank <= k, and every
  dropped row is counted under the reason of that first failure (or ``at_most_k``).
  All of these keep a prefix of each unit's history, hence of each (unit, entry)'s history: a
  dropped mutation leaves the entry in its last kept state, and so do all later ones.

:func:`bounding_sql` turns a constraint into a :class:`BoundingSql`; an engine materialises
:meth:`BoundingSql.ranked` (per-row rank, unit start, class and state-machine columns) and then
:meth:`BoundingSql.bounded` over it (``kept`` and ``reason`` per row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dpcr._sql import json_path, lit, num
from dpcr.bounding.constraints import AtMostK, Constraint, Hybrid, SimpleConstraint, TimeBounded
from dpcr.bounding.state_machine import LIVE, OpLimits, StateMachine

ORDER = "ts, seq, entry, record"  # the order of mutations within a unit and a (unit, entry)
BY_ENTRY = "PARTITION BY unit, entry"  # the window of one entry's history (within its unit)
BY_UNIT = f"(PARTITION BY unit ORDER BY {ORDER})"  # one unit's history, in order
#: The op of a valid mutation as a small integer (insert 0, update 1, delete 2), and back.
OP_CODE = "(CASE op WHEN 'insert' THEN 0 WHEN 'update' THEN 1 WHEN 'delete' THEN 2 END)::UTINYINT"
_OP_NAME = "CASE op_code WHEN 0 THEN 'insert' WHEN 1 THEN 'update' WHEN 2 THEN 'delete' END"


def by_unit(
    unit_is_entry: bool, *, seq: bool = True, record: bool = True, then: str = ""
) -> str:
    """:data:`BY_UNIT`; when every unit is one entry, without ``entry`` in the order (it is
    the same on every row of a unit), so that the window's sort does not carry it; without
    ``seq`` when every sequence number is the record number (``seq=False``: the same order);
    without ``record`` (``record=False``, with ``seq``) when the reader refuses the rows if
    two mutations of a history tie in (ts, seq) (:func:`dpcr.changelog.plain_break` with
    ``seq``): where none do, the order is the same. ``then``: further order keys after
    these (``", a, b"``), for columns that the sort should hold as keys rather than carry
    beside them; they order only rows the order above leaves tied."""
    if seq and not record:
        order = f"ts, seq{'' if unit_is_entry else ', entry'}"
    elif not seq:
        order = f"ts, {'' if unit_is_entry else 'entry, '}record"
    else:
        order = "ts, seq, record" if unit_is_entry else ORDER
    return f"(PARTITION BY unit ORDER BY {order}{then})"


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundingSql:
    """SQL pieces of the bounding rule (see :func:`bounding_sql`)."""

    class_expr: str
    keep: str
    reason: str
    window_cols: tuple[str, ...] = ()  # per-row window columns over the source rows
    row_cols: tuple[str, ...] = ()  # per-row columns over those (state-machine failure codes)
    unit_cols: tuple[str, ...] = ()  # per-unit windows over those (first failure)
    seeded_window_cols: tuple[str, ...] = ()  # window_cols continuing seeded histories
    seeded_unit_cols: tuple[str, ...] = ()  # unit_cols continuing seeded histories
    machines: int = 0  # state machines (each has seed columns s_st{j}, s_comp{j}, ...)
    uses_first_ts: bool = True  # keep/reason read first_ts (time-bounded)
    uses_cls: bool = True  # keep/reason read cls (hybrid)
    retire: str | None = None  # on_exhausted = "retire": the unit's retirement time (NULL: none)
    #: the row's move under its class's state machine, ``'from -> to'`` (NULL: no machine)
    move: str | None = None

    def ranked(
        self, *, source: str, columns: str, seeded: bool = False, unit_is_entry: bool = False,
        seq: bool = True, record: bool = True,
    ) -> str:
        """SELECT over ``source`` (a table or view, optionally followed by a WHERE clause)
        with a column ``deleted`` (``after IS NULL``, computed before the window so that the
        rows are not carried through its sort).

        Columns: record, unit, entry, ts, seq, ``op_code``, ``deleted``, the caller's
        ``columns``, ``rank_u`` (rank within the unit), ``first_ts``, ``cls`` (the class of the
        unit's first row) and the state machines' per-row columns. ``columns`` may use the window
        ``by_unit(unit_is_entry)`` (the unit's rows in order: the window of ``rank_u``, so it
        costs no second sort). ``seq=False``: every row's ``seq`` is its ``record`` (the unit's
        order leaves it out; ``columns`` then use ``by_unit(unit_is_entry, seq=False)``);
        ``record=False``: the order leaves out ``record`` (see :func:`by_unit`).

        The window's sort carries every column it passes on, and the table holding the result
        every column it has, so the rows are narrow: ``op`` (one of insert, update, delete in a
        valid changelog) is ``op_code``, a small integer; with ``unit_is_entry`` (every unit is
        one entry: ``entry`` equals ``unit``) there is no ``entry``; ``first_ts`` and ``cls``
        are there only when the rule reads them. :meth:`bounded` restores all four.

        ``seeded``: the rows continue histories whose earlier rows are summarised in the seed
        columns of ``source`` (NULL for a unit or entry without earlier rows; see
        :data:`SEED_COLUMNS`): every rank, first time, class, state and first failure is then
        that of the whole history. Earlier rows precede every row of ``source`` in the order.
        """
        windows = "".join(f", {c}" for c in self._windows(seeded))
        row_cols = "".join(f", {c}" for c in self.row_cols)
        first_ts = "min(ts) OVER (PARTITION BY unit)" if self.uses_first_ts else "NULL::BIGINT"
        window = by_unit(unit_is_entry, seq=seq, record=record)
        cls = f"first_value(cls_row) OVER {window}" if self.uses_cls else "''"
        # The class is read from ``after`` before the window, so that ``after`` is not carried
        # through its sort.
        cls_row = f", {self.class_expr} AS cls_row" if self.uses_cls else ""
        source = f"(SELECT *, {OP_CODE} AS op_code{cls_row} FROM {source})"
        rank = f"row_number() OVER {window}"
        if seeded:
            rank = f"{rank} + coalesce(s_n, 0)"
            first_ts = f"coalesce(s_first_ts, {first_ts})" if self.uses_first_ts else first_ts
            cls = f"coalesce(s_cls, {cls})" if self.uses_cls else cls
        passed = "" if unit_is_entry else ", entry"
        stored = (f", {first_ts} AS first_ts" if self.uses_first_ts else "") + (
            f", {cls} AS cls" if self.uses_cls else ""
        )
        return f"""
        SELECT *{row_cols} FROM (
            SELECT record, unit{passed}, ts, seq, op_code, deleted, {columns},
                   {rank} AS rank_u{stored}
                   {windows}
            FROM {source}
        )
        """

    def _windows(self, seeded: bool) -> tuple[str, ...]:
        return self.seeded_window_cols if seeded else self.window_cols

    def bounded(self, ranked: str, *, seeded: bool = False, unit_is_entry: bool = False) -> str:
        """SELECT of every column of the table ``ranked`` (see :meth:`ranked`, called with the
        same ``unit_is_entry``) with ``entry``, ``op``, ``first_ts`` and ``cls`` restored, and
        ``kept`` (the row is kept) and ``reason`` (why it is dropped); ``seeded`` as in
        :meth:`ranked`."""
        unit_cols = "".join(f", {c}" for c in (self.seeded_unit_cols if seeded else self.unit_cols))
        retire = "" if self.retire is None else f", {self.retire} AS retire_ts"
        entry, passed = ("unit AS entry", "") if unit_is_entry else ("entry", ", entry")
        constant = ("" if self.uses_first_ts else ", NULL::BIGINT AS first_ts") + (
            "" if self.uses_cls else ", '' AS cls"
        )
        return f"""
        SELECT record, unit, {entry}, ts, seq, {_OP_NAME} AS op,
               * EXCLUDE (record, unit{passed}, ts, seq, op_code),
               {self.keep} AS kept, {self.reason} AS reason{retire}
        FROM (SELECT *{constant}{unit_cols} FROM {ranked})
        """


def finite_number_sql(path: str) -> str:
    """SQL for the number at JSON ``path`` of ``after`` as a DOUBLE; NULL when it is missing, not
    a number, NaN or infinite (a value that cannot be ordered or clamped meaningfully)."""
    raw = f"TRY_CAST(json_extract(after, {path}) AS DOUBLE)"
    return f"(CASE WHEN isfinite({raw}) THEN {raw} END)"


# State-machine failure codes (code 0: the mutation follows the machine).
_SM_REASONS = {1: "state_transition", 2: "state_allowance", 3: "unknown_state"}


def state_sql(m: StateMachine) -> str:
    """SQL for the state of ``after`` (NULL: deleted or unknown state)."""
    if isinstance(m, OpLimits):  # one state for every live row, or its immutable values
        if not m.immutable:
            return f"CASE WHEN after IS NULL THEN NULL ELSE {lit(LIVE)} END"
        values = ", ".join(f"json_extract(after, {json_path(c)})" for c in m.immutable)
        return f"CASE WHEN after IS NULL THEN NULL ELSE json_array({values})::VARCHAR END"
    path = json_path(m.column)
    if m.buckets is not None:
        raw = finite_number_sql(path)
        cases = " ".join(
            f"WHEN {raw} >= {num(lo)} THEN {lit(s)}"
            for s, lo in reversed(list(m.buckets.items()))
        )
        return f"CASE {cases} ELSE NULL END"
    text = f"json_extract_string(after, {path})"
    if m.values is not None:
        cases = " ".join(f"WHEN {lit(v)} THEN {lit(s)}" for v, s in m.values.items())
    else:
        cases = " ".join(f"WHEN {lit(s)} THEN {lit(s)}" for s in m.states)
    return f"CASE {text} {cases} ELSE NULL END"


def _in_sql(expr: str, names: Sequence[str]) -> str:
    return f"{expr} IN ({', '.join(lit(n) for n in names)})" if names else "FALSE"


def comp_sql(m: StateMachine, state: str) -> str:
    """SQL for the index of the composite state of ``state`` (an SQL expression of
    :func:`state_sql`); NULL for a deleted row or an unknown state. Under per-op limits every
    live row is in composite state 0 (its states, the immutable values, are not listed)."""
    if isinstance(m, OpLimits):
        return f"CASE WHEN ({state}) IS NULL THEN NULL ELSE 0 END"
    cases = " ".join(f"WHEN {lit(s)} THEN {i}" for i, comp in enumerate(m.composites) for s in comp)
    return f"CASE {state} {cases} ELSE NULL END"


def _initial_sql(m: StateMachine, expr: str) -> str:
    """Whether the state ``expr`` may be inserted (per-op limits: any live state)."""
    return f"{expr} IS NOT NULL" if isinstance(m, OpLimits) else _in_sql(expr, m.initial)


def _terminal_sql(m: StateMachine, expr: str) -> str:
    """Whether the state ``expr`` may be deleted (per-op limits: any, when deletes = 1)."""
    if isinstance(m, OpLimits):
        return f"{expr} IS NOT NULL" if m.deletes else "FALSE"
    return _in_sql(expr, m.terminal)


def _machine_sql(
    m: StateMachine, j: int, *, seeded: bool = False
) -> tuple[tuple[str, ...], str, str]:
    """(window columns, failure-code column, first-failure column) of machine ``j``.

    Per (unit, entry) in (ts, seq) order: ``st{j}`` its state, ``pst{j}`` the previous
    mutation's state, ``cn{j}`` how many of its mutations so far are in the composite state of
    ``st{j}`` (an entry never returns to a composite state it left, so ``cn - 1`` counts the
    stays). ``bad{j}`` is the failure code; ``cut{j}`` is ``4 * rank_u + code`` of the unit's
    first failure.

    ``seeded``: the histories continue earlier rows summarised per (unit, entry) by ``s_st{j}``
    (the last earlier row's state), ``s_comp{j}`` and ``s_cn{j}`` (its composite state and
    that state's count), and per unit by ``s_cut{j}`` (the earlier rows' first failure). A
    composite state other than the last one cannot recur without a move the machine refuses
    (code 1, whatever the count), so the last composite state's count is all ``cn`` needs.
    """
    state = state_sql(m)
    comp = comp_sql(m, state)
    by_entry = f"OVER ({BY_ENTRY} ORDER BY {ORDER})"
    prev = f"lag({state}, 1, s_st{j})" if seeded else f"lag({state})"
    count = f"row_number() OVER ({BY_ENTRY}, {comp} ORDER BY {ORDER})"
    if seeded:
        count = f"{count} + CASE WHEN {comp} = s_comp{j} THEN s_cn{j} ELSE 0 END"
    windows = (
        f"{state} AS st{j}",
        f"{prev} {by_entry} AS pst{j}",
        f"{count} AS cn{j}",
        f"{comp} AS comp{j}",
    )
    st, pst = f"st{j}", f"pst{j}"
    moves = " OR ".join(f"({pst} = {lit(a)} AND {st} = {lit(b)})" for a, b in m.transitions)
    allowance = " ".join(
        f"WHEN {i} THEN {m.composite_allowance(i)}" for i in range(len(m.composites))
    )
    bad = f"""CASE
        WHEN NOT deleted AND {st} IS NULL THEN 3
        WHEN rank_e = 1 THEN CASE WHEN NOT deleted AND {_initial_sql(m, st)} THEN 0
                                  ELSE 1 END
        WHEN {pst} IS NULL THEN 1
        WHEN deleted THEN CASE WHEN {_terminal_sql(m, pst)} THEN 0 ELSE 1 END
        WHEN NOT ({pst} = {st}{" OR " + moves if moves else ""}) THEN 1
        WHEN cn{j} - 1 > (CASE comp{j} {allowance} END) THEN 2
        ELSE 0 END AS bad{j}"""
    first = f"min(CASE WHEN bad{j} > 0 THEN 4 * rank_u + bad{j} END) OVER (PARTITION BY unit)"
    if seeded:
        first = f"least({first}, s_cut{j})"
    return windows, bad, f"{first} AS cut{j}"


def _keep_sql(
    constraint: SimpleConstraint, machines: list[StateMachine], retire: bool = False
) -> str:
    # retire: the k-th mutation is the retirement itself (see _retire_rank), so k - 1 are kept
    le = "<" if retire else "<="
    if isinstance(constraint, StateMachine):
        j = machines.index(constraint)
        return f"(rank_u {le} {constraint.k} AND (cut{j} IS NULL OR rank_u < cut{j} // 4))"
    if isinstance(constraint, AtMostK):
        return f"rank_u {le} {constraint.k}"
    return f"ts - first_ts <= {constraint.bound}"


def _retire_rank(constraint: SimpleConstraint, machines: list[StateMachine]) -> str:
    """The unit rank of the mutation at which an at-most-k unit retires: its first failing
    mutation (state machine) or its k-th, whichever comes first; NULL for time-bounded."""
    if isinstance(constraint, StateMachine):
        j = machines.index(constraint)
        return f"least({constraint.k}, coalesce(cut{j} // 4, {constraint.k}))"
    if isinstance(constraint, AtMostK):
        return str(constraint.k)
    return "NULL"


def _retire_sql(constraint: Constraint, machines: list[StateMachine]) -> str:
    """The unit's retirement time under ``on_exhausted = "retire"`` (NULL: never), see
    docs/privacy.md section 10. At most k (and state machines): the time of the mutation at rank
    :func:`_retire_rank`, when the unit has one; B-time-bounded: ``first_ts + B``, the end of
    its window. Either lies within what the constraint already allows one unit to touch."""
    if isinstance(constraint, Hybrid):
        classes: dict[str, SimpleConstraint] = dict(constraint.classes)
        default = constraint.default
    else:
        classes, default = {}, constraint

    def by_class(expr: Callable[[SimpleConstraint], str]) -> str:
        if not classes:
            return expr(default) if default is not None else "NULL"
        cases = " ".join(f"WHEN {lit(n)} THEN {expr(c)}" for n, c in classes.items())
        other = expr(default) if default is not None else "NULL"
        return f"(CASE cls {cases} ELSE {other} END)"

    rank = by_class(lambda c: _retire_rank(c, machines))
    window = f"min(CASE WHEN rank_u = {rank} THEN ts END) OVER (PARTITION BY unit)"
    end = by_class(lambda c: "NULL" if isinstance(c, AtMostK) else f"first_ts + {c.bound}")
    return f"coalesce({end}, {window})"


def _reason(constraint: SimpleConstraint, machines: list[StateMachine]) -> str:
    if isinstance(constraint, StateMachine):
        j = machines.index(constraint)
        codes = " ".join(f"WHEN {c} THEN {lit(r)}" for c, r in _SM_REASONS.items())
        return (
            f"(CASE WHEN cut{j} IS NOT NULL AND cut{j} // 4 <= {constraint.k} "
            f"THEN CASE cut{j} % 4 {codes} END ELSE 'at_most_k' END)"
        )
    return lit("at_most_k" if isinstance(constraint, AtMostK) else "time_bounded")


def _move_sql(constraint: SimpleConstraint | None, machines: list[StateMachine]) -> str:
    """The row's move ``'previous -> state'`` under ``constraint``'s machine (``(none)``
    before an entry's first mutation, ``(deleted)`` for a delete, ``(unknown)`` for a value
    outside the machine); NULL without a machine."""
    if not isinstance(constraint, StateMachine):
        return "NULL"
    j = machines.index(constraint)
    return (
        f"(coalesce(pst{j}, '(none)') || ' -> ' || CASE WHEN deleted THEN '(deleted)' "
        f"ELSE coalesce(st{j}, '(unknown)') END)"
    )


def bounding_sql(constraint: Constraint, *, retire: bool = False) -> BoundingSql:
    """The class expression, keep and drop-reason expressions, and the columns they need;
    ``retire``: the rule of ``on_exhausted = "retire"`` (a ``retire_ts`` column)."""
    simple = (
        list(constraint.all_classes().values()) if isinstance(constraint, Hybrid) else [constraint]
    )
    machines: list[StateMachine] = []
    for c in simple:
        if isinstance(c, StateMachine) and c not in machines:
            machines.append(c)
    rank_e = f"row_number() OVER ({BY_ENTRY} ORDER BY {ORDER})"
    window_cols: list[str] = [f"{rank_e} AS rank_e"] if machines else []
    seeded_windows: list[str] = [f"{rank_e} + coalesce(s_ne, 0) AS rank_e"] if machines else []
    row_cols: list[str] = []
    unit_cols: list[str] = []
    seeded_units: list[str] = []
    for j, m in enumerate(machines):
        windows, bad, cut = _machine_sql(m, j)
        window_cols.extend(windows)
        row_cols.append(bad)
        unit_cols.append(cut)
        windows, _bad, cut = _machine_sql(m, j, seeded=True)
        seeded_windows.extend(windows)
        seeded_units.append(cut)
    extra: dict[str, Any] = {
        "window_cols": tuple(window_cols),
        "row_cols": tuple(row_cols),
        "unit_cols": tuple(unit_cols),
        "seeded_window_cols": tuple(seeded_windows),
        "seeded_unit_cols": tuple(seeded_units),
    }
    retire_expr = _retire_sql(constraint, machines) if retire else None
    if isinstance(constraint, Hybrid):
        path = json_path(constraint.column)
        class_expr = f"coalesce(json_extract_string(after, {path}), '')"
        keep_cases, reason_cases = [], []
        for name, c in constraint.classes.items():
            keep_cases.append(f"WHEN {lit(name)} THEN {_keep_sql(c, machines, retire)}")
            reason_cases.append(f"WHEN {lit(name)} THEN {_reason(c, machines)}")
        if constraint.default is not None:
            keep_else = _keep_sql(constraint.default, machines, retire)
            reason_else = _reason(constraint.default, machines)
        else:
            keep_else, reason_else = "FALSE", "'unknown_class'"
        keep = f"CASE cls {' '.join(keep_cases)} ELSE {keep_else} END"
        reason = f"CASE cls {' '.join(reason_cases)} ELSE {reason_else} END"
        move_cases = " ".join(f"WHEN {lit(n)} THEN {_move_sql(c, machines)}"
                              for n, c in constraint.classes.items())  # fmt: skip
        move = (f"CASE cls {move_cases} ELSE {_move_sql(constraint.default, machines)} END"
                if machines else None)  # fmt: skip
        return BoundingSql(
            class_expr=class_expr, keep=keep, reason=reason, **extra, retire=retire_expr,
            move=move,
            machines=len(machines), uses_first_ts=any(isinstance(c, TimeBounded) for c in simple),
        )  # fmt: skip
    if not isinstance(constraint, AtMostK | TimeBounded):
        raise TypeError(f"unsupported constraint {constraint!r}")
    return BoundingSql(
        class_expr="''",
        keep=_keep_sql(constraint, machines, retire),
        reason=_reason(constraint, machines),
        **extra,
        machines=len(machines),
        uses_first_ts=isinstance(constraint, TimeBounded),
        uses_cls=False,
        retire=retire_expr,
        move=_move_sql(constraint, machines) if machines else None,
    )
