"""The durable release store: released values, the per-unit ledger of events, bounding state.

One SQLite file. A released value is written once, in a transaction together with its events,
and reused forever: a later run reads it back instead of drawing new noise (re-noising a value
would let an observer average the noise away). The store is bound to the fingerprint of the plan
of its first release and to its mode (release or simulation); a store of simulated noise is never
used for a real release. Until it holds a release (a run that failed, or that no interval had
closed for), a store opened with another plan's fingerprint is bound to that plan instead.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcr.errors import StoreError
from dpcr.store import _heads
from dpcr.store._alerts import read_alert_states, read_alerts, read_frozen, write_alerts
from dpcr.store._connect import connect
from dpcr.store._files import (
    Binding,
    acquire_lock,
    disk_full,
    edited_error,
    full_error,
    holds_release,
    prepare,
    read_binding,
)
from dpcr.store._heads import VERIFIED, file_key, files_state, unchanged_since
from dpcr.store._open_heads import (
    LEGACY_KEYS,
    chain_fault,
    chain_recorded,
    chain_start,
    has_legacy_layout,
    legacy_digest,
    migrate_legacy,
    newest_link,
    open_chain,
    write_open,
)
from dpcr.store._open_store import (
    OpenBlock,
    OpenKey,
    iter_open_values,
    open_blocks,
    read_open_keys,
    read_open_values,
    released_count,
    values_kept,
)
from dpcr.store._schema import (
    PUBLISHED,
    SCHEMA_VERSION,
    UNPUBLISHED,
    AlertRow,
    Node,
    NodeEvent,
    ReleasedNode,
    SourceState,
    check_schema,
    guarded,
    guarded_iter,
    has_table,
    migrate_from_1,
)

if TYPE_CHECKING:
    import numpy as np

#: The interval method (``dpcr.release._uncertainty.METHODS``) a store created now publishes
#: its rows with, kept in its meta table; a store that released before the key existed reads
#: "1". Published intervals never change, so a store keeps the method it began with.
INTERVAL_METHOD = "2"

#: The notices of the store (a store that held no release bound to a changed config).
_log = logging.getLogger("dpcr")


class Store:
    """Open (creating if needed) the store at ``path`` for a plan ``fingerprint`` and ``mode``.
    ``rebind``: a store that holds no release is bound to ``fingerprint`` when it was opened
    with another (False: refused instead, and nothing is changed; ``dpcr verify``).

    ``snapshot=True`` opens an existing store read-only, without its lock, as one consistent
    snapshot: every read sees the store as it was when it was opened, while a run (a follower's
    step) may commit beside it. A snapshot writes nothing (it rebinds nothing);
    :meth:`transaction` refuses."""

    ANY_THREAD = False  # (used from the thread that opened it; a session's: KeptStore)

    def __init__(
        self, path: str | Path, *, fingerprint: str, mode: str = "release", rebind: bool = True,
        snapshot: bool = False,
    ) -> None:  # fmt: skip
        if mode not in ("release", "simulation"):
            raise StoreError(f"store mode must be 'release' or 'simulation', got {mode!r}")
        self.path = Path(path)
        self.snapshot = snapshot
        self._head: str | None = None  # the content head, once verified or committed
        prepare(self.path, create=not snapshot)
        self._lock = None if snapshot else acquire_lock(self.path)
        self._closed_as = files_state(self.path)  # (before SQLite opens and touches them)
        try:
            self._con = connect(self.path, snapshot=snapshot, any_thread=self.ANY_THREAD)
        except BaseException:
            self._release_lock()
            raise
        try:
            self._open(fingerprint, mode, rebind and not snapshot)
        except BaseException:
            self.close()
            raise

    def _open(self, fingerprint: str, mode: str, rebind: bool) -> None:
        try:
            meta = self._meta()
        except sqlite3.DatabaseError as exc:
            if disk_full(exc):
                raise full_error(self.path) from None
            raise StoreError(
                f"{self.path}: not a usable dpcr store ({exc}); restore it from a backup "
                "(docs/store.md)"
            ) from None
        if not meta and self.snapshot:
            raise StoreError(f"{self.path} holds no release yet: run `dpcr run` first")
        if not meta:
            try:
                with self.transaction():
                    self._set_meta(schema=str(SCHEMA_VERSION), fingerprint=fingerprint, mode=mode,
                                   intervals=INTERVAL_METHOD)
            except sqlite3.Error as exc:
                if disk_full(exc):
                    raise full_error(self.path) from None
                raise
            meta = self._meta()
        check_schema(meta.get("schema"), self.path, writes=rebind)
        if meta.get("mode") != mode:
            raise StoreError(
                f"{self.path} holds {meta.get('mode')} output; a {mode} run cannot use it. "
                "Simulated noise must never be published: point output.store at a new file."
            )
        if meta.get("fingerprint") != fingerprint and not self._rebind(meta, fingerprint, rebind):
            raise StoreError(
                f"{self.path} holds releases of a different plan (fingerprint "
                f"{meta.get('fingerprint')}, this config {fingerprint}). Changing the plan, "
                "constraint, queries, mechanism or budget after releasing would break the "
                "accounting of what is already public: restore the original config, or use a "
                "new store path for a new release. (A config without [release] plan now means "
                "plan = \"auto\"; releases made with the former default need plan = "
                "\"disjoint\".)"
            )
        if meta.get("schema") == "1":
            with self.transaction() as con:
                migrate_from_1(con)
        if "intervals" not in meta and "content_head" not in meta and self.snapshot:
            meta["intervals"] = INTERVAL_METHOD  # (what a run would record: nothing released)
        elif "intervals" not in meta and "content_head" not in meta:  # nothing released yet
            with self.transaction():
                self._set_meta(intervals=INTERVAL_METHOD)
            meta["intervals"] = INTERVAL_METHOD
        self.mode = mode
        self.fingerprint = fingerprint
        #: how this store's published intervals are computed (``dpcr.release``): the method of
        #: dpcr when the store was created; "1" for a store that released before the key existed
        self.intervals = meta.get("intervals", "1")
        recorded = meta.get("content_head")
        self._head = recorded or None
        self._legacy = self._legacy_layout()
        self._same = bool(recorded and unchanged_since(self.path, self._closed_as, recorded))
        if recorded and not self._same and (
            self.content_head() != recorded or not self._candidates_intact(meta)
        ):
            raise edited_error(self.path)
        if self._legacy and rebind:  # (not a snapshot, nor `dpcr verify`, which write nothing)
            self._migrate_open(meta)
        elif rebind and self._meta().get("schema") != str(SCHEMA_VERSION):
            with self.transaction():  # (a store of schema 2 already in the key-id layout)
                self._set_meta(schema=str(SCHEMA_VERSION))

    @guarded
    def _legacy_layout(self) -> bool:
        return has_table(self._con, "open_keysets") and has_legacy_layout(self._con)

    @guarded
    def _candidates_intact(self, meta: dict[str, str]) -> bool:
        """Whether the candidates head recorded at the last commit matches the store (a store
        that recorded none keeps nothing of open histograms that a commit wrote)."""
        recorded = meta.get("candidates_head")
        if recorded and not self._legacy:  # (the newest link: :meth:`chain_fault` checks all)
            start = chain_start(meta.get("fingerprint"), meta.get("mode"))
            return recorded == newest_link(self._con, start, self._unpublished_digest)
        if recorded:
            return recorded == self.candidates_head()
        return self._legacy or not chain_recorded(self._con)

    @guarded
    def chain_fault(self) -> str | None:
        """The candidates head's whole chain checked (opening the store checks its newest link):
        one line naming the first difference, None when intact (or of the earlier layout)."""
        if self._legacy:
            return None
        meta = self._meta()
        start = chain_start(meta.get("fingerprint"), meta.get("mode"))
        return chain_fault(self._con, start, self._unpublished_digest,
                           meta.get("candidates_head"))  # fmt: skip

    def _migrate_open(self, meta: dict[str, str]) -> None:
        """Rewrite the open histograms' values of the earlier layout (a run's every key per key
        set) by key id, in one transaction, once the store's heads are checked."""
        with self.transaction() as con:
            head = migrate_legacy(
                con, int(meta.get("last_interval") or 0),
                chain_start(meta.get("fingerprint"), meta.get("mode")), self._unpublished_digest,
            )  # fmt: skip
            if head is not None:
                self._set_meta(candidates_head=head)
            self._set_meta(schema=str(SCHEMA_VERSION))
        self._legacy = False

    def _rebind(self, meta: dict[str, str], fingerprint: str, rebind: bool) -> bool:
        """Bind a store that holds no release to ``fingerprint`` (a config changed after a run
        that failed, or that no interval had closed for): the earlier plan's source position,
        per-unit state, alert states and run summaries are removed in one transaction, so the
        next run starts from the first record, as on a new store. A recorded head is checked
        first (a store whose released values were deleted is refused as edited), then recorded
        anew (the heads public files were written at stay held: they show no value). False,
        and nothing changed, when the store holds a release: it stays bound to its plan;
        without ``rebind``, a refusal that says the store holds no release."""
        recorded = meta.get("content_head")
        if recorded and self.content_head() != recorded:
            raise edited_error(self.path)
        if holds_release(self._con, meta):
            return False
        if not rebind:
            raise StoreError(
                f"{self.path} holds no release yet; it was opened last with another "
                f"configuration (fingerprint {meta.get('fingerprint')}, this config "
                f"{fingerprint}): the next `dpcr run` with this config takes it, as a store "
                "that holds no release is bound to no plan (docs/store.md, \"Binding to a plan\")"
            )
        with self.transaction() as con:
            for table in ("units", "frozen", "runs", "alert_state"):
                con.execute(f"DELETE FROM {table}")
            con.execute(
                "DELETE FROM meta WHERE key IN ('source_fingerprint', 'source_records', "
                "'last_interval', 't_last', 'source_digest')"
            )
            self._set_meta(fingerprint=fingerprint)
            if recorded:
                head = self.content_head()
                self._set_meta(content_head=head)
                con.execute("INSERT INTO heads (head) VALUES (?)", (head,))
        _log.warning(
            f"notice: {self.path} held no release of its earlier config (fingerprint "
            f"{meta.get('fingerprint')}): it is bound to this config ({fingerprint}) from now "
            "on, and its next run starts from the source's first record"
        )
        meta.update(self._meta())
        return True

    def close(self, *, verified: bool = True) -> None:
        """Close the store. ``verified=False``: without recording its head as verified (its
        files changed since it was last checked: the next opening checks its heads in full)."""
        if self.snapshot:
            with suppress(sqlite3.Error):
                self._con.execute("ROLLBACK")  # (the snapshot's read transaction)
            self._con.close()
            return
        self._con.close()
        if verified and self._head is not None:  # (after the close, which checkpoints the WAL)
            VERIFIED[file_key(self.path)] = (files_state(self.path), self._head)
        self._release_lock()

    def unlock(self) -> object:
        """Release the lock, the connection left open; returns the store's mark (its files'
        inode, size and modification time, and SQLite's ``data_version``, which another
        connection's commit changes) for :meth:`relock`."""
        mark = self._mark()
        self._release_lock()
        return mark

    def relock(self, mark: object) -> bool:
        """Take the lock again (refused while another run holds it); whether the store is as
        :meth:`unlock` left it (``mark``). If it is, it is as its last commit left it: the rows
        that commit hashed are the store's, and the next commit's head grows from them, as
        after an opening of a store this process closed (:func:`dpcr.store._heads.
        committed_head`)."""
        if self._lock is None:
            self._lock = acquire_lock(self.path)
        same = mark is not None and mark == self._mark()
        self._same = self._same or same
        return same

    def _mark(self) -> object:
        version = self._con.execute("PRAGMA data_version").fetchone()[0]
        return files_state(self.path), version

    def _release_lock(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()  # closing the file releases the flock

    @guarded
    def content_head(self) -> str:
        """SHA-256 over everything that fixes what was published and what it cost: every
        released value, every ledger row, the plan's fingerprint and the mode. Recorded at each
        commit and written into every output (``release-head.json``), so an edited, replaced,
        lost or restored store is noticed before anything more is released. The values of an
        open histogram's keys that are not published (yet) are left out: the head is public
        (``release-head.json``), a function of what is published only."""
        return _heads.content_head(self._con)

    @guarded
    def candidates_head(self) -> str:
        """SHA-256 over what the store keeps of open histograms and does not publish: the
        values of the candidate keys (:class:`OpenBlock`) and every candidate key's first and
        selection intervals, as a chain of the commits that wrote them
        (:mod:`dpcr.store._open_heads`: a commit hashes what it adds), recomputed here from
        every row ("" when a row no commit covers, or a commit's recorded link, differs).
        Operator-only: recorded at each commit; opening the store checks its newest link,
        :meth:`chain_fault` (``dpcr verify``) all of it."""
        if self._legacy:
            return legacy_digest(self._con, _heads.digest(self._con, (UNPUBLISHED, LEGACY_KEYS)))
        meta = self._meta()
        start = chain_start(meta.get("fingerprint"), meta.get("mode"))
        return open_chain(self._con, start, self._unpublished_digest) or ""

    def _unpublished_digest(self) -> str:
        return _heads.unpublished_digest(self._con)

    @guarded
    def holds(self, head: str) -> bool:
        """True when the store was at ``head`` after some commit (it holds everything
        published from that state: released values are never removed)."""
        if head == self._meta().get("content_head"):
            return True
        row = self._con.execute("SELECT 1 FROM heads WHERE head = ? LIMIT 1", (head,)).fetchone()
        return row is not None

    @guarded
    def recorded_head(self) -> str | None:
        """The head recorded at the last commit (None before the first)."""
        return self._meta().get("content_head") or None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All-or-nothing: either every write inside commits (durably) or none does."""
        if self.snapshot:
            raise StoreError(f"{self.path}: a read-only snapshot of the store cannot be written")
        self._con.execute("BEGIN IMMEDIATE")
        try:
            yield self._con
        except BaseException:
            if self._con.in_transaction:  # (SQLite may have rolled back already: a full disk)
                with suppress(sqlite3.Error):
                    self._con.execute("ROLLBACK")
            raise
        try:
            self._con.execute("COMMIT")
        except BaseException:
            if self._con.in_transaction:
                with suppress(sqlite3.Error):
                    self._con.execute("ROLLBACK")
            raise

    def _meta(self) -> dict[str, str]:
        return dict(self._con.execute("SELECT key, value FROM meta").fetchall())

    def _set_meta(self, **values: str) -> None:
        self._con.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            list(values.items()),
        )

    # --- reading -------------------------------------------------------------------------

    @guarded
    def source_state(self) -> SourceState:
        meta = self._meta()
        if "source_records" not in meta:
            return SourceState()
        t_last = meta.get("t_last")
        return SourceState(
            records=int(meta["source_records"]),
            interval=int(meta["last_interval"]),
            t_last=int(t_last) if t_last not in (None, "") else None,
            digest=meta.get("source_digest", ""),
        )

    @guarded
    def released(self, *, published: bool = False) -> list[ReleasedNode]:
        """Every released value, by query, key, layer and index (with the values of open
        histograms' keys kept columnar, one object each: for the operator and audits);
        ``published``: but the values of open histograms' keys that are not published."""
        where = f"WHERE {PUBLISHED}" if published and has_table(self._con, "open_keys") else ""
        rows = self._con.execute(
            f"SELECT layer, idx, t_lo, t_hi, query, key, value FROM released r {where} "
            "ORDER BY query, key, layer, idx"
        ).fetchall()
        out = [
            ReleasedNode(layer=lv, index=i, t_lo=lo, t_hi=hi, query=q, key=k, value=v)
            for lv, i, lo, hi, q, k, v in rows
        ]
        if published or not self._open_values_readable():
            return out
        have = {(r.query, r.key, r.layer, r.index) for r in out}
        out.extend(iter_open_values(self._con, have))
        out.sort(key=lambda x: (x.query, x.key, x.layer, x.index))
        return out

    @guarded
    def released_count(self) -> int:
        """How many values :meth:`released` gives, counted without reading them."""
        return released_count(self._con)

    def _open_values_readable(self) -> bool:
        """Whether the store keeps open histograms' values (refused in the earlier layout)."""
        return values_kept(self._con, legacy=self._legacy, path=self.path)

    @guarded
    def open_values(
        self, query: str, keys: Sequence[str], nodes: Sequence[Node]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The stored values (:class:`OpenBlock`) of ``keys`` of open histogram ``query`` at
        ``nodes``: (values, held), both of shape (len(nodes), len(keys)); ``held`` is False
        where the store has no value. A value stored twice is refused (a damaged store)."""
        return read_open_values(self._con, query, keys, nodes,
                                kept=self._open_values_readable())  # fmt: skip

    @guarded
    def open_value_blocks(
        self, query: str, keys: Sequence[str], nodes: Sequence[Node]
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """:meth:`open_values` a block of keys at a time: (positions in ``keys``, values, held)
        per block of key ids (:func:`dpcr.store._open_store.open_blocks`)."""
        blocks = open_blocks(self._con, query, keys, nodes, kept=self._open_values_readable())
        return guarded_iter(self.path, blocks)

    @guarded
    def open_keys(self) -> dict[str, dict[str, OpenKey]]:
        """Per open histogram, its candidate keys that are not declared (operator-only)."""
        return read_open_keys(self._con) if has_table(self._con, "open_keys") else {}

    @guarded
    def ledger(self) -> list[NodeEvent]:
        """(layer, index, query, event as dict) of every mechanism instance released."""
        return [
            (lv, i, q, json.loads(e))
            for lv, i, q, e in self._con.execute(
                "SELECT layer, idx, query, event FROM release_ledger ORDER BY layer, idx, query"
            ).fetchall()
        ]

    @guarded
    def runs(self) -> list[dict[str, Any]]:
        return [
            json.loads(s)
            for (s,) in self._con.execute("SELECT summary FROM runs ORDER BY run").fetchall()
        ]

    @guarded
    def last_run(self) -> dict[str, Any]:
        """The summary of the last run (empty before the first)."""
        row = self._con.execute("SELECT summary FROM runs ORDER BY run DESC LIMIT 1").fetchone()
        return dict(json.loads(row[0])) if row else {}

    # --- writing -------------------------------------------------------------------------

    @guarded
    def commit_release(
        self,
        *,
        values: Sequence[ReleasedNode],
        events: Sequence[NodeEvent],
        source: SourceState,
        summary: dict[str, Any],
        started: float,
        alerts: tuple[dict[str, dict[str, Any]], Sequence[AlertRow]] | None = None,
        frozen: Sequence[tuple[str, str, int]] = (),
        source_fingerprint: str | None = None,
        open_keys: Sequence[OpenKey] = (),
        open_blocks: Sequence[OpenBlock] = (),
    ) -> None:
        """Write new released values, their ledger rows, the source position, the frozen
        points and the run summary in one transaction. Refuses to overwrite a released value.

        ``alerts`` = (state per rule, new alert rows): the sparse-vector state (threshold noise,
        count of ⊤) is written in the same transaction, so a restart never re-noises.
        ``frozen`` = (unit, entry, record) of every (unit, entry) stopped at its first late
        record (records from that one on are left out): kept forever, never thawed.
        ``open_keys``: candidate keys of open histograms new to the store, and keys newly
        selected (a key's selection interval is written once, never changed)."""
        now = time.time()
        with self.transaction() as con:
            try:
                _insert_released(con, values, events, now)
                if alerts is not None:
                    write_alerts(con, *alerts)
                link = write_open(con, open_keys, open_blocks, self._meta(),
                                  self._unpublished_digest)  # fmt: skip
            except sqlite3.IntegrityError as exc:
                raise StoreError(
                    f"{self.path}: refusing to write a value that is already released ({exc})"
                ) from None
            con.executemany(
                "INSERT INTO frozen (unit, entry, record) VALUES (?, ?, ?) "
                "ON CONFLICT(unit, entry) DO NOTHING",
                [tuple(f) for f in frozen],
            )
            self._set_meta(
                source_fingerprint=source_fingerprint or "",
                source_records=str(source.records),
                last_interval=str(source.interval),
                t_last="" if source.t_last is None else str(source.t_last),
                source_digest=source.digest,
            )
            con.execute(
                "INSERT INTO runs (started, finished, summary) VALUES (?, ?, ?)",
                (started, now, json.dumps(summary, sort_keys=True, default=str)),
            )
            head = _heads.committed_head(con, self.path, self._head if self._same else None,
                                         values, events) or self.content_head()
            self._set_meta(content_head=head)
            if link is not None:  # (the commit's link of the candidates head's chain)
                self._set_meta(candidates_head=link(source.interval))
            con.execute("INSERT INTO heads (head) VALUES (?)", (head,))
        self._head = head

    @guarded
    def source_fingerprint(self) -> str | None:
        """The source's identity at the last commit (:func:`dpcr.release._loop.
        source_fingerprint`), or None."""
        return self._meta().get("source_fingerprint") or None

    @guarded
    def frozen(self) -> tuple[tuple[str, str, int], ...]:
        """(unit, entry, record) of every (unit, entry) frozen at its first late record."""
        return read_frozen(self._con)

    @guarded
    def alert_states(self) -> dict[str, dict[str, Any]]:
        """Sparse-vector state per alert rule (see dpcr.svt)."""
        return read_alert_states(self._con)

    @guarded
    def alerts(self) -> list[AlertRow]:
        """Every alert answer, by rule, interval and key."""
        return read_alerts(self._con)


def _insert_released(
    con: sqlite3.Connection, values: Sequence[ReleasedNode], events: Sequence[NodeEvent],
    now: float,
) -> None:
    """Insert released values and their ledger rows (released at ``now``); a value already
    released raises :class:`sqlite3.IntegrityError`."""
    con.executemany(
        "INSERT INTO released (layer, idx, t_lo, t_hi, query, key, value) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(n.layer, n.index, n.t_lo, n.t_hi, n.query, n.key, n.value) for n in values],
    )
    con.executemany(
        "INSERT INTO release_ledger (layer, idx, query, event, released_at) "
        "VALUES (?, ?, ?, ?, ?)",
        [(lv, i, q, json.dumps(e, sort_keys=True), now) for lv, i, q, e in events],
    )


__all__ = ["INTERVAL_METHOD", "SCHEMA_VERSION", "AlertRow", "Binding", "NodeEvent", "OpenBlock",
           "OpenKey", "ReleasedNode", "SourceState", "Store", "read_binding"]  # fmt: skip

