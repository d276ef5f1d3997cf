"""PostgreSQL's built-in ``pgoutput`` plugin: the publication it reads, and its messages as
wal2json lines.

``pgoutput`` ships with PostgreSQL (10+), so it is there on managed databases that lack wal2json.
It streams the tables of a *publication* in the binary logical replication protocol. The capture
asks for protocol version 1 in text format with logical messages (the heartbeats)::

    {"proto_version": "1", "publication_names": "dpcr_<slot>", "messages": "true"}

:class:`PgoutputDecoder` turns each message into the JSON line wal2json ``format-version 2``
writes for the same change (``include-lsn``, ``include-timestamp``, ``include-xids``,
``include-transaction``, ``add-tables`` = the followed table), so a capture through either
plugin fills the same ``format = "wal2json"`` file:

======== ===================================================================================
message  line
======== ===================================================================================
Begin    ``{"action":"B","xid","timestamp","lsn"}``: ``lsn`` is the transaction's commit LSN,
         as wal2json writes it (wal2json's ``nextlsn`` is not in the message: left out)
Commit   ``{"action":"C","xid","timestamp","lsn","nextlsn"}``: commit LSN and end LSN
Insert   ``{"action":"I",...,"schema","table","columns":[{"name","value"}...]}``
Update   ``"U"`` with ``columns`` (the new row) and ``identity`` (the old row, when sent)
Delete   ``"D"`` with ``identity``
Truncate ``"T"`` for the followed table
Message  ``{"action":"M","xid","timestamp","lsn","transactional","prefix","content"}``
Relation remembered (the columns, their types and which are the replica identity); no line
Type,    no line
Origin
======== ===================================================================================

Every line carries the ``xid`` and commit ``timestamp`` of its transaction (from Begin; a
non-transactional message has ``null`` for both). The ``lsn`` of a change is the WAL position of
its record, which the server sends as the XLogData ``data_start`` of the message (wal2json
writes the same position). Values are typed as wal2json types them: ``int2``, ``int4``,
``int8``, ``oid``, ``float4``, ``float8`` and ``numeric`` as JSON numbers (the server's text,
digit for digit, never through a float; ``NaN`` and infinities as ``null``), ``bool`` as
``true``/``false``, ``bytea`` as its hex digits, everything else as a JSON string. An unchanged
TOASTed value (``'u'``) is left out of its row, as wal2json leaves it out; an old row sent as a
key (``'K'``, replica identity DEFAULT or USING INDEX) keeps only the identity columns.

Columns are ``{"name", "value"}``, as the capture's wal2json writes them (``include-types``
off): the loader reads no type.
"""

from __future__ import annotations

import datetime as dt
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

from dpcr.errors import ConfigError, DpcrError

__all__ = [
    "PgoutputDecoder",
    "check_publication",
    "drop_publication",
    "ensure_publication",
    "publication_name",
    "stream_options",
]

_PG_EPOCH = dt.datetime(2000, 1, 1)
_NUMBER_TYPES = frozenset({20, 21, 23, 26, 700, 701, 1700})  # int8 int2 int4 oid float4/8 numeric
_BOOL, _BYTEA = 16, 17
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_TEXT, _NUM, _BOOLEAN, _HEX = range(4)

_BEGIN = struct.Struct(">QqI")
_COMMIT = struct.Struct(">BQQq")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_ATT = struct.Struct(">Ii")
_MESSAGE = struct.Struct(">BQ")


def _lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def _timestamp(us: int) -> str:
    """µs since 2000-01-01 UTC as PostgreSQL prints a timestamptz in UTC (trailing zeros of the
    fraction dropped): ``2026-11-24 23:27:15.31688+00``."""
    t = _PG_EPOCH + dt.timedelta(microseconds=us)
    text = f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    if t.microsecond:
        text += "." + f"{t.microsecond:06d}".rstrip("0")
    return text + "+00"


def _value(kind: int, text: str) -> str:
    """The JSON token of a column's text value, typed as wal2json types it."""
    if kind == _TEXT:
        return encode_basestring(text)
    if kind == _NUM:
        if _NUMBER.fullmatch(text):
            return text
        if text.lower().lstrip("-+") in ("nan", "infinity"):
            return "null"
        return encode_basestring(text)  # not a number the server prints; never invalid JSON
    if kind == _BOOLEAN:
        return "true" if text == "t" else "false"
    return encode_basestring(text[2:] if text.startswith("\\x") else text)


@dataclass(frozen=True, slots=True)
class _Column:
    head: str  # '{"name":"id","value":'
    kind: int
    key: bool


@dataclass(frozen=True, slots=True)
class _Relation:
    head: str  # ',"schema":"public","table":"tickets"'
    columns: tuple[_Column, ...]
    followed: bool


class PgoutputDecoder:
    """Translate the pgoutput messages of one stream (protocol version 1, text values) into
    wal2json ``format-version 2`` lines of ``table`` (``schema.table``); changes of other
    tables give no line. Columns are ``{"name", "value"}`` (the capture's wal2json runs with
    ``include-types`` off).
    """

    def __init__(self, *, table: str) -> None:
        self._table = tuple(table.split(".", 1))
        self._relations: dict[int, _Relation] = {}
        self._txn: str | None = None  # '"xid":727,"timestamp":"..."' of the open transaction
        self._handlers: dict[int, Callable[[bytes, int], str | None]] = {
            ord("B"): self._begin, ord("C"): self._commit, ord("R"): self._relation,
            ord("I"): self._insert, ord("U"): self._update, ord("D"): self._delete,
            ord("T"): self._truncate, ord("M"): self._message, ord("Y"): _nothing,
            ord("O"): _nothing,
        }  # fmt: skip

    def decode(self, payload: bytes, data_start: int) -> str | None:
        """The wal2json line of one message (``data_start``: its XLogData WAL position), or
        None when the message makes no line."""
        if not payload:
            raise DpcrError("pgoutput sent an empty message")
        handler = self._handlers.get(payload[0])
        if handler is None:
            raise DpcrError(
                f"pgoutput sent a message of kind {chr(payload[0])!r}, which protocol version 1 "
                "without streaming or two-phase commit does not have"
            )
        try:
            return handler(payload, data_start)
        except (struct.error, IndexError, UnicodeDecodeError) as exc:
            raise DpcrError(
                f"pgoutput sent a malformed {chr(payload[0])!r} message ({exc}): "
                f"{payload[:80]!r}"
            ) from None

    # --- transactions ---------------------------------------------------------------------------

    def _begin(self, p: bytes, data_start: int) -> str:
        final_lsn, ts, xid = _BEGIN.unpack_from(p, 1)
        self._txn = f'"xid":{xid},"timestamp":"{_timestamp(ts)}"'
        return f'{{"action":"B",{self._txn},"lsn":"{_lsn(final_lsn)}"}}'

    def _commit(self, p: bytes, data_start: int) -> str:
        _, commit_lsn, end_lsn, _ = _COMMIT.unpack_from(p, 1)
        txn = self._open("C")
        self._txn = None
        return (
            f'{{"action":"C",{txn},"lsn":"{_lsn(commit_lsn)}","nextlsn":"{_lsn(end_lsn)}"}}'
        )

    def _open(self, kind: str) -> str:
        if self._txn is None:
            raise DpcrError(f"pgoutput sent a {kind!r} message outside a transaction")
        return self._txn

    def _message(self, p: bytes, data_start: int) -> str:
        flags, lsn = _MESSAGE.unpack_from(p, 1)
        prefix, pos = _cstring(p, 1 + _MESSAGE.size)
        (size,) = _U32.unpack_from(p, pos)
        content = p[pos + 4 : pos + 4 + size].split(b"\0", 1)[0]  # wal2json stops at a NUL
        transactional = bool(flags & 1)
        txn = self._open("M") if transactional else '"xid":null,"timestamp":null'
        return (
            f'{{"action":"M",{txn},"lsn":"{_lsn(lsn)}",'
            f'"transactional":{"true" if transactional else "false"},'
            f'"prefix":{encode_basestring(prefix)},'
            f'"content":{encode_basestring(content.decode("utf-8", "replace"))}}}'
        )

    # --- relations ------------------------------------------------------------------------------

    def _relation(self, p: bytes, data_start: int) -> None:
        (oid,) = _U32.unpack_from(p, 1)
        schema, pos = _cstring(p, 5)
        name, pos = _cstring(p, pos)
        schema = schema or "pg_catalog"  # the protocol sends pg_catalog as an empty name
        (count,) = _U16.unpack_from(p, pos + 1)  # after the replica identity setting
        pos += 3
        columns = []
        for _ in range(count):
            flags = p[pos]
            column, pos = _cstring(p, pos + 1)
            type_oid, _typmod = _ATT.unpack_from(p, pos)
            pos += _ATT.size
            kind = (_NUM if type_oid in _NUMBER_TYPES else _BOOLEAN if type_oid == _BOOL
                    else _HEX if type_oid == _BYTEA else _TEXT)  # fmt: skip
            head = f'{{"name":{encode_basestring(column)},"value":'
            columns.append(_Column(head=head, kind=kind, key=bool(flags & 1)))
        self._relations[oid] = _Relation(
            head=f',"schema":{encode_basestring(schema)},"table":{encode_basestring(name)}',
            columns=tuple(columns),
            followed=(schema, name) == self._table,
        )
        return None

    def _relation_of(self, p: bytes, kind: str) -> _Relation:
        (oid,) = _U32.unpack_from(p, 1)
        relation = self._relations.get(oid)
        if relation is None:
            raise DpcrError(
                f"pgoutput sent a {kind!r} message of relation {oid} before describing it "
                "(no Relation message)"
            )
        return relation

    # --- changes --------------------------------------------------------------------------------

    def _insert(self, p: bytes, data_start: int) -> str | None:
        relation = self._relation_of(p, "I")
        if not relation.followed:
            return None
        _expect(p, 5, b"N", "I")
        columns, _ = _tuple(p, 6, relation, key_only=False)
        return self._change("I", data_start, relation, f',"columns":[{columns}]')

    def _update(self, p: bytes, data_start: int) -> str | None:
        relation = self._relation_of(p, "U")
        if not relation.followed:
            return None
        pos, identity = 5, None
        _expect(p, pos, b"KON", "U")
        if p[pos] != ord("N"):
            identity, pos = _tuple(p, pos + 1, relation, key_only=p[pos] == ord("K"))
        _expect(p, pos, b"N", "U")
        columns, _ = _tuple(p, pos + 1, relation, key_only=False)
        if identity is None and any(c.key for c in relation.columns):
            # The key did not change: wal2json takes the identity from the new row.
            identity, _ = _tuple(p, pos + 1, relation, key_only=True)
        rows = f',"columns":[{columns}]'
        if identity is not None:
            rows += f',"identity":[{identity}]'
        return self._change("U", data_start, relation, rows)

    def _delete(self, p: bytes, data_start: int) -> str | None:
        relation = self._relation_of(p, "D")
        if not relation.followed:
            return None
        _expect(p, 5, b"KO", "D")
        identity, _ = _tuple(p, 6, relation, key_only=p[5] == ord("K"))
        return self._change("D", data_start, relation, f',"identity":[{identity}]')

    def _truncate(self, p: bytes, data_start: int) -> str | None:
        (count,) = _U32.unpack_from(p, 1)
        for i in range(count):
            (oid,) = _U32.unpack_from(p, 6 + 4 * i)
            relation = self._relations.get(oid)
            if relation is not None and relation.followed:
                return self._change("T", data_start, relation, "")
        return None

    def _change(self, action: str, lsn: int, relation: _Relation, rows: str) -> str:
        return (f'{{"action":"{action}",{self._open(action)},"lsn":"{_lsn(lsn)}"'
                f"{relation.head}{rows}}}")  # fmt: skip


def _nothing(p: bytes, data_start: int) -> None:
    return None


def _cstring(p: bytes, pos: int) -> tuple[str, int]:
    end = p.index(b"\0", pos)
    return p[pos:end].decode("utf-8"), end + 1


def _expect(p: bytes, pos: int, allowed: bytes, kind: str) -> None:
    """Refuse a tuple marker at ``pos`` that is not one of ``allowed``."""
    if p[pos] not in allowed:
        raise DpcrError(
            f"pgoutput sent a {kind!r} message with {chr(p[pos])!r} where one of "
            f"{', '.join(map(repr, allowed.decode()))} was expected"
        )


def _tuple(p: bytes, pos: int, relation: _Relation, *, key_only: bool) -> tuple[str, int]:
    """The ``[...]`` body of a row at ``pos`` and the position after it."""
    (count,) = _U16.unpack_from(p, pos)
    pos += 2
    columns = relation.columns
    if count != len(columns):
        raise DpcrError(
            f"pgoutput sent a row of {count} columns for a relation of {len(columns)}"
        )
    out = []
    for column in columns:
        kind = p[pos]
        if kind == 0x74:  # 't': text
            (size,) = _U32.unpack_from(p, pos + 1)
            end = pos + 5 + size
            if not key_only or column.key:
                text = p[pos + 5 : end].decode("utf-8")
                out.append(f"{column.head}{_value(column.kind, text)}}}")
            pos = end
        elif kind == 0x6E:  # 'n': null
            if not key_only or column.key:
                out.append(f"{column.head}null}}")
            pos += 1
        elif kind == 0x75:  # 'u': an unchanged TOASTed value, left out as wal2json does
            pos += 1
        else:
            raise DpcrError(
                f"pgoutput sent a column value of kind {chr(kind)!r}; the capture asks for "
                "text values ('t'), nulls ('n') and unchanged TOAST ('u') only"
            )
    return ",".join(out), pos


# --- the publication ------------------------------------------------------------------------------


def publication_name(slot: str) -> str:
    """The publication a pgoutput slot reads: ``dpcr_<slot>``."""
    return f"dpcr_{slot}"


def stream_options(slot: str) -> dict[str, str]:
    """The ``start_replication`` options of a pgoutput slot."""
    return {"proto_version": "1", "publication_names": publication_name(slot), "messages": "true"}


def _comment(slot: str) -> str:
    return f"created by dpcr capture for replication slot {slot}"


def ensure_publication(cur: Any, *, slot: str, table: str) -> None:
    """Create publication ``dpcr_<slot>`` of ``table`` when it does not exist (marked as
    dpcr's, so :func:`drop_publication` may drop it), then check it."""
    name = publication_name(slot)
    if len(name) > 63:
        raise ConfigError(
            f"with the pgoutput plugin the slot name is at most 58 characters (its publication "
            f"is {name!r}, and PostgreSQL names have at most 63); got {slot!r}"
        )
    cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,))
    if cur.fetchone() is None:
        schema, rel = table.split(".", 1)
        cur.execute(f'CREATE PUBLICATION "{name}" FOR TABLE "{schema}"."{rel}"')
        cur.execute(f"COMMENT ON PUBLICATION \"{name}\" IS %s", (_comment(slot),))
    check_publication(cur, slot=slot, table=table)


def check_publication(cur: Any, *, slot: str, table: str) -> None:
    """Refuse a publication ``dpcr_<slot>`` that is missing, does not publish every insert,
    update, delete and truncate of ``table``, or filters its rows or columns."""
    name = publication_name(slot)
    schema, rel = table.split(".", 1)
    create = f'CREATE PUBLICATION "{name}" FOR TABLE "{schema}"."{rel}";'
    cur.execute(
        "SELECT pubinsert AND pubupdate AND pubdelete AND pubtruncate FROM pg_publication "
        "WHERE pubname = %s",
        (name,),
    )
    row = cur.fetchone()
    if row is None:
        raise ConfigError(
            f"publication {name!r} does not exist; the pgoutput slot {slot!r} reads it. "
            f"Create it with `{create}` (dpcr capture postgres --create-slot --plugin pgoutput "
            "does, when the role may)"
        )
    if not row[0]:
        raise ConfigError(
            f"publication {name!r} does not publish every insert, update, delete and truncate; "
            f"run `ALTER PUBLICATION \"{name}\" SET (publish = 'insert, update, delete, "
            "truncate');`"
        )
    cur.execute("SELECT * FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s "
                "AND tablename = %s", (name, schema, rel))  # fmt: skip
    found = cur.fetchone()
    if found is None:
        raise ConfigError(
            f"publication {name!r} does not publish {table}; run "
            f'`ALTER PUBLICATION "{name}" ADD TABLE "{schema}"."{rel}";`'
        )
    published = dict(zip([d[0] for d in cur.description], found, strict=True))
    cur.execute(
        "SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute WHERE attrelid = "
        "%s::regclass AND attnum > 0 AND NOT attisdropped",
        (f'"{schema}"."{rel}"',),
    )
    columns = cur.fetchone()[0]
    if published.get("rowfilter") is not None or (
        "attnames" in published and list(published["attnames"] or []) != list(columns or [])
    ):
        raise ConfigError(
            f"publication {name!r} publishes only some rows or columns of {table} (a WHERE "
            f'filter or a column list); run `ALTER PUBLICATION "{name}" SET TABLE '
            f'"{schema}"."{rel}";`'
        )


def drop_publication(cur: Any, *, slot: str) -> bool:
    """Drop publication ``dpcr_<slot>`` when :func:`ensure_publication` created it; return
    whether it did."""
    name = publication_name(slot)
    cur.execute(
        "SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname = %s",
        (name,),
    )
    row = cur.fetchone()
    if row is None or row[0] != _comment(slot):
        return False
    cur.execute(f'DROP PUBLICATION "{name}"')
    return True
