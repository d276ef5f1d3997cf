"""The durable release store: released values, the per-unit ledger of events, bounding state.

One SQLite file (:mod:`dpcr.store._store`). A released value is written once, in a transaction
together with its events, and reused forever; the store is bound to the plan of its first release
and to its mode (release or simulation). Operator-only: it holds exact per-unit state.
"""

from dpcr.store._kept import KeptStore
from dpcr.store._reading import reading
from dpcr.store._store import (
    INTERVAL_METHOD,
    SCHEMA_VERSION,
    AlertRow,
    Binding,
    NodeEvent,
    OpenBlock,
    OpenKey,
    ReleasedNode,
    SourceState,
    Store,
    read_binding,
)

__all__ = [
    "INTERVAL_METHOD", "SCHEMA_VERSION", "AlertRow", "Binding", "KeptStore", "NodeEvent",
    "OpenBlock", "OpenKey", "ReleasedNode", "SourceState", "Store", "read_binding", "reading",
]
