"""The columns a session holds of the incremental state and of a step
(:mod:`dpcr.engines.duckdb_held`): a step's new records (:class:`Batch`), the newest seed of
every unit by integer id (:class:`Seeds`), the records held pending (:class:`Later`), the
sequence numbers seen (:class:`Sequences`) and a step's bounding (:class:`Bounded`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcr.engines.state import DICT_BASE, own_id

if TYPE_CHECKING:
    pass

__all__ = [
    "Batch", "Bounded", "Carried", "Held", "Later", "Seeds", "Sequences", "Settled",
    "StepWindow",
]  # fmt: skip


#: The kind of each :class:`Batch` field (its metadata ``kind``): a column of one value a
#: row, a column of one value a query and a row (axis 1 the rows), or a count of what the
#: batch read (not of its rows).
ROW, QUERY_ROW, READ = "row", "query row", "read"


@dataclass(frozen=True, slots=True)
class Batch:
    """The new records of a step, in file order: entry text (or, when every entry is an
    integer, their values), ts (µs), op code (0 insert, 1 update, 2 delete) and per query the
    f of the row after. Each field names its kind (:data:`ROW`, :data:`QUERY_ROW`,
    :data:`READ`), by which :meth:`take` and :meth:`concat` carry it."""

    entries: list[str] | np.ndarray = field(metadata={"kind": ROW})
    ts: np.ndarray = field(metadata={"kind": ROW})
    op: np.ndarray = field(metadata={"kind": ROW})
    f: np.ndarray = field(metadata={"kind": QUERY_ROW})  # (queries, rows)
    #: a sum's row after without a number
    nn: np.ndarray = field(metadata={"kind": QUERY_ROW})  # (queries, rows)
    #: A source whose records carry sequence numbers of their own (wal2json): each row's
    #: sequence number and line number in the chunk (from 1), the chunk's records (rows and
    #: tombstones) and lines (None: one record and one line per row, numbered in order).
    seq: np.ndarray | None = field(default=None, metadata={"kind": ROW})
    line: np.ndarray | None = field(default=None, metadata={"kind": ROW})
    records: int | None = field(default=None, metadata={"kind": READ})
    tombstones: int = field(default=0, metadata={"kind": READ})
    lines: int | None = field(default=None, metadata={"kind": READ})
    #: Per row, whether its record gave the row before (wal2json: None otherwise).
    has_before: np.ndarray | None = field(default=None, metadata={"kind": ROW})

    def counts(self) -> tuple[int, int]:
        """The records and the lines the batch read."""
        rows = len(self.ts)
        return (rows if self.records is None else self.records,
                rows if self.lines is None else self.lines)  # fmt: skip

    def numbers(self, offset: int, rows: np.ndarray) -> np.ndarray:
        """The record numbers of the batch's rows ``rows`` (indices), lines numbered after
        ``offset``."""
        return offset + (rows + 1 if self.line is None else self.line[rows])

    def take(self, rows: np.ndarray) -> Batch:
        """The rows ``rows`` (a mask) of the batch, which keeps the records, tombstones and
        lines the batch read."""
        at = np.flatnonzero(rows)
        records, lines = self.counts()
        got: dict[str, Any] = {"records": records, "lines": lines}
        for name, kind in _kinds().items():
            value = getattr(self, name)
            if kind == READ:
                got.setdefault(name, value)
            elif value is None:
                got[name] = None
            elif kind == QUERY_ROW:
                got[name] = value[:, at]
            elif isinstance(value, np.ndarray):
                got[name] = value[at]
            else:
                got[name] = [value[i] for i in at.tolist()]
        return Batch(**got)

    def concat(self, other: Batch, offset: int) -> Batch:
        """The batch's rows (mutations held pending, whose line numbers count from ``offset``
        lines before ``other``'s first) then ``other``'s, with what ``other`` read (its
        records, tombstones and lines): the rows a step judges. A column one of them lacks
        (None) must be lacking in both, unless that one has no rows."""
        records, lines = other.counts()
        got: dict[str, Any] = {"records": records, "lines": lines}
        for name, kind in _kinds().items():
            mine, theirs = getattr(self, name), getattr(other, name)
            if kind == READ:
                got.setdefault(name, theirs)
            elif mine is None or theirs is None:  # (a batch without rows lacks nothing)
                lacking = (mine is None and len(self.ts)) or (theirs is None and len(other.ts))
                if lacking and (mine is not None or theirs is not None):
                    raise ValueError(f"internal error: the column {name} of one batch")
                if mine is None:
                    got[name] = theirs
                else:
                    got[name] = mine - offset if name == "line" else mine
            elif kind == QUERY_ROW:
                got[name] = np.concatenate([mine, theirs], axis=1)
            elif isinstance(mine, np.ndarray) and isinstance(theirs, np.ndarray):
                got[name] = np.concatenate([mine - offset if name == "line" else mine, theirs])
            else:  # (texts, or integers standing for their texts)
                got[name] = [*map(str, _listed(mine)), *map(str, _listed(theirs))]
        return Batch(**got)


@cache
def _kinds() -> dict[str, str]:
    """The kind of each :class:`Batch` field, by name (a field without one is refused)."""
    kinds = {f.name: f.metadata.get("kind") for f in fields(Batch)}
    lacking = [name for name, kind in kinds.items() if kind not in (ROW, QUERY_ROW, READ)]
    if lacking:
        raise TypeError(f"Batch fields without a kind: {lacking}")
    return kinds  # type: ignore[return-value]


def _listed(values: list[str] | np.ndarray) -> list[Any]:
    return values.tolist() if isinstance(values, np.ndarray) else values


class Seeds:
    """The newest seed of every unit of the state (each unit one entry), by integer id: the
    state's id of each (``sid``), whether the state counts it as a unit (``known``: it has
    settled rows), its settled rows, last f per query, liveness and that insert's or
    delete's record number, and the version of its newest row of table seeds (``v``)."""

    def __init__(self, queries: int) -> None:
        self._ids: dict[str, int] = {}
        self._keys: list[str] = []
        #: integers added by :meth:`_integer_ids` after ``_keys`` whose texts are not yet in
        #: ``_keys`` and ``_ids`` (added when either is read: most steps read neither)
        self._later: list[np.ndarray] = []
        self.size = 0  # the keys
        self.sid = np.zeros(0, dtype=np.int64)
        self.next_sid = DICT_BASE + 1
        self.known = np.zeros(0, dtype=bool)
        self.n = np.zeros(0, dtype=np.int64)
        self.f = np.zeros((queries, 0), dtype=np.int64)
        self.live = np.zeros(0, dtype=bool)
        self.record = np.zeros(0, dtype=np.int64)
        self.v = np.zeros(0, dtype=np.int64)
        #: per integer 0 .. len - 1, 1 + the index of the key that is its text (0: none),
        #: built on the first look-up of integers (:meth:`_integer_ids`)
        self._by_integer: np.ndarray | None = None

    @property
    def keys(self) -> list[str]:
        """The key (unit text) of each index."""
        self._texts()
        return self._keys

    @keys.setter
    def keys(self, keys: list[str]) -> None:
        self._keys, self._later, self.size = keys, [], len(keys)
        self._ids = {k: j for j, k in enumerate(keys)}

    @property
    def ids(self) -> dict[str, int]:
        """The index of each key."""
        self._texts()
        return self._ids

    def _texts(self) -> None:
        if self._later:
            texts = list(map(str, np.concatenate(self._later).tolist()))
            self._later = []
            start = len(self._keys)
            self._keys.extend(texts)
            self._ids.update(zip(texts, range(start, start + len(texts)), strict=True))

    def grow(self, names: Sequence[str] | np.ndarray) -> np.ndarray:
        """The ids of ``names`` (texts, or integers whose texts they stand for), new ones
        added (not live, no row, f 0; state ids after the state's). The columns may be longer
        than the keys (room for the next ones)."""
        if isinstance(names, np.ndarray):
            by_integer = self._integer_ids(names)
            if by_integer is not None:
                return by_integer
            names = list(map(str, names.tolist()))
        ids = self.ids
        got = list(map(ids.get, names))  # (one look-up a name: most are known)
        if None in got:
            keys = self.keys
            start = len(keys)
            # the new names, each once, in the order of their first row
            rows = [r for r, j in enumerate(got) if j is None]
            new = list(dict.fromkeys([names[r] for r in rows]))
            ids.update(zip(new, range(start, start + len(new)), strict=True))
            keys.extend(new)
            self.size = len(keys)
            for r in rows:
                got[r] = ids[names[r]]
            if len(keys) > len(self.n):
                self._reserve(max(len(keys), 2 * len(self.n)))
            for j in range(start, len(keys)):  # (an integer text is its own id)
                own = own_id(keys[j])
                if own is None:
                    own, self.next_sid = self.next_sid, self.next_sid + 1
                elif self._by_integer is not None and 0 <= own < len(self._by_integer):
                    self._by_integer[own] = j + 1
                self.sid[j] = own
        return np.array(got, dtype=np.int64)

    def _integer_ids(self, values: np.ndarray) -> np.ndarray | None:
        """:meth:`grow` of the texts of the integers ``values`` (each an integer's text is
        its own state id, :func:`~dpcr.engines.state.own_id`), by one array look-up; None when
        they are not all in ``0 .. 2**22`` or beyond four times the keys held."""
        if not len(values):
            return np.zeros(0, dtype=np.int64)
        low, high = int(values.min()), int(values.max())
        table = self._by_integer
        if low < 0 or high >= max(1 << 22, 4 * self.size):
            return None
        if table is None or high >= len(table):
            size = max(high + 1, 2 * len(table) if table is not None else 0)
            table = self._by_integer = self._integer_table(size)
        got = table[values] - 1
        new = got < 0
        if new.any():
            # the new integers, each once, in the order of their first row
            fresh, at = np.unique(values[new], return_index=True)
            fresh = fresh[np.argsort(at, kind="stable")]
            start = self.size
            self._later.append(fresh)
            self.size += len(fresh)
            if self.size > len(self.n):
                self._reserve(max(self.size, 2 * len(self.n)))
            self.sid[start:self.size] = fresh
            table[fresh] = np.arange(start + 1, self.size + 1)
            got = table[values] - 1
        out: np.ndarray = got.astype(np.int64, copy=False)
        return out

    def _integer_table(self, size: int) -> np.ndarray:
        """The look-up table of :attr:`_by_integer` over ``0 .. size - 1``, from the keys'
        state ids (an integer key's id is its value)."""
        table = np.zeros(size, dtype=np.int64)
        sid = self.sid[:self.size]
        held = np.flatnonzero((sid >= 0) & (sid < size))
        table[sid[held]] = held + 1
        return table

    def _reserve(self, size: int) -> None:
        added = size - len(self.n)
        self.n = np.concatenate([self.n, np.zeros(added, dtype=np.int64)])
        self.f = np.concatenate([self.f, np.zeros((self.f.shape[0], added), np.int64)], 1)
        self.live = np.concatenate([self.live, np.zeros(added, dtype=bool)])
        self.sid = np.concatenate([self.sid, np.zeros(added, dtype=np.int64)])
        self.known = np.concatenate([self.known, np.zeros(added, dtype=bool)])
        self.record = np.concatenate([self.record, np.zeros(added, dtype=np.int64)])
        self.v = np.concatenate([self.v, np.zeros(added, dtype=np.int64)])


@dataclass(frozen=True, slots=True, kw_only=True)
class StepWindow:
    """The intervals of a step: base intervals ``lo .. hi`` to total, those settled before
    the step and after it, the release times ``times`` (t_1 .. , as far as the step reads),
    the public clock and the end of the last interval the step releases."""

    lo: int
    hi: int
    settled_old: int
    settled_new: int
    times: list[int]
    clock: int
    settle_at: int | None


@dataclass(slots=True)
class Held:
    """The incremental state as its last settle left it: head, counters, seeds, totals."""

    head: Any  # dpcr.engines.state.StateHead
    counters: dict[str, int]
    seeds: Seeds
    totals: dict[int, dict[int, int]]  # query -> base interval -> exact change (key 0)
    rows: int  # rows of table seeds in the state file
    #: the steps settled since the state file was last written (:func:`write_held`)
    pending: list[Settled] = field(default_factory=list)
    #: with explicit sequence numbers: the highest of each entry that table keys holds
    sequences: Sequences | None = None
    #: the mutations the state keeps pending, held (None: none)
    later: Later | None = None
    #: the rows of the state file's table pending, as :func:`read_held` read them (for
    #: :mod:`dpcr.engines.duckdb_memory` to hold as :attr:`later`), or None
    stored: list[tuple[Any, ...]] | None = None
    #: the seeds hold every row of the state file's table seeds that a rewrite keeps (the
    #: newest of each unit, each column as the table holds it): a write rewrites the table
    #: from them (:attr:`Settled.newest`)
    whole: bool = False
    #: of the first ``s`` steps of :attr:`pending`: (``s``, the rows of table seeds after
    #: them, its rows after its last rewrite), or None (:func:`dpcr.engines.duckdb_held.write_held`)
    tally: tuple[int, int, int | None] | None = None


@dataclass(frozen=True, slots=True)
class Later:
    """The mutations a step leaves pending (valid, dated after the last released interval:
    the rows of the state's table ``pending``), held: as the rows of a batch whose ``line``
    is each one's record number, and per row what table ``pending`` holds of it beside: the
    JSON text of its row after (``after``) and of its record (``raw``), or, for a record read
    from memory, its line (``text``), which :func:`write_held` has DuckDB stage as the SQL
    step stages it (``source``: the source, ``scratch``: the owner-only folder of the copy)."""

    rows: Batch
    after: list[str | None]
    raw: list[str | None]
    text: list[bytes | None]
    source: Any
    scratch: Path | None


@dataclass(frozen=True, slots=True)
class Carried:
    """What a settle of a step that did not settle all its rows needs beside them: the new
    records' rows ``new`` and their ids (each new mutation's sequence number goes to table
    ``keys`` whether it settles or not) and the rows it leaves pending."""

    new: Batch
    ids: np.ndarray
    later: Later | None


class Sequences:
    """Per unit of the seeds (by index; each unit one entry), the highest sequence number
    the state's table ``keys`` holds of it; and, by text, those of the entries the seeds lack
    (mutations the state holds no row of: quarantined ones)."""

    NONE = np.iinfo(np.int64).min

    def __init__(self, top: np.ndarray, other: dict[str, int]) -> None:
        self.top = top
        self.other = other

    def _fit(self, size: int) -> None:
        if len(self.top) < size:
            added = max(size, 2 * len(self.top)) - len(self.top)
            self.top = np.concatenate([self.top, np.full(added, self.NONE, dtype=np.int64)])

    def of(self, seeds: Seeds, ids: np.ndarray) -> np.ndarray:
        """The highest sequence number held of each unit of ``ids`` (:data:`NONE`: none)."""
        self._fit(seeds.size)
        got: np.ndarray = self.top[ids]
        if self.other:
            keys = seeds.keys
            for r in np.flatnonzero(got == self.NONE).tolist():
                j = int(ids[r])
                seq = self.other.pop(keys[j], None)
                if seq is not None:
                    self.top[j] = got[r] = seq
        return got

    def unseen(self, seeds: Seeds, ids: np.ndarray, seq: np.ndarray) -> bool:
        """Whether no row's (entry ``ids``, sequence number ``seq``) is a duplicate (the
        loader's phase 2): none repeats one of the rows, and each is above the highest its
        entry has in the state."""
        pairs = np.lexsort((seq, ids))
        same = (ids[pairs][1:] == ids[pairs][:-1]) & (seq[pairs][1:] == seq[pairs][:-1])
        return not same.any() and bool(np.all(seq > self.of(seeds, ids)))

    def advance(self, size: int, ids: np.ndarray, seq: np.ndarray) -> None:
        """Hold the sequence numbers ``seq`` of the units ``ids`` too."""
        self._fit(size)
        np.maximum.at(self.top, ids, seq)


@dataclass(frozen=True, slots=True)
class Bounded:
    """A batch bounded continuing every history: ``ids`` per row, the rows in history
    order ``order``, per row its rank in its unit, kept, and per query the previous f; the
    units new to the state; per unit whose rows hold an insert or a delete, the last one
    (``changed``: the ids, ``live``: an insert, ``record``: its record number)."""

    ids: np.ndarray
    order: np.ndarray
    rank: np.ndarray
    kept: np.ndarray
    prev: np.ndarray  # (queries, rows)
    new_units: int
    changed: np.ndarray
    live: np.ndarray
    record: np.ndarray


@dataclass(frozen=True, slots=True)
class Settled:
    """The rows a step settled from memory appends to the state file: per table, its
    columns (in the table's order)."""

    version: int
    distinct: int  # the keys of table seeds after the step
    ids: np.ndarray  # the unit id of each row of table seeds
    rows: dict[str, dict[str, np.ndarray]]
    #: when the step's settle rewrites table seeds and the seeds are :attr:`Held.whole`: the
    #: table's rows after it (the newest row of each unit, columns as ``rows["seeds"]``)
    newest: dict[str, np.ndarray] | None = None
