"""Participation per query: each query accounted with the releases one unit can change through it.

A unit's loss is the composition, over queries, of the instances whose value its kept mutations
can change *through that query* (paper Thm 2.2 per query). A query's value changes only at the
mutations of the ops it is touched by (:meth:`dpcr.queries.Count.touched_by`), so it is
accounted under the constraint :func:`dpcr.bounding.touching.query_constraint` derives (at most
``k_q`` such mutations), and calibrated with that constraint's budgeting: a query touched by
fewer mutations gets less noise at the same total guarantee.

The composition is *flattened*: layer ``l`` of query ``q`` is one group of alike instances,
met ``counts_q[l]`` times by a unit of each class. When every query has the plan's own
participation (or the constraint gives no refinement: a time bound, ``on_exhausted =
"retire"``, whose retirement can change any query at any op; runs of explicit release times),
:func:`query_constraints` returns None and everything is accounted as one group per layer,
exactly as for all ops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dpcr.accounting.events import DpEvent
from dpcr.accounting.guarantee import Participation
from dpcr.bounding.touching import query_constraint
from dpcr.queries import Count, Exhausted, Histogram, Sum

if TYPE_CHECKING:
    from dpcr.bounding.constraints import Constraint
    from dpcr.release._settings import ReleaseSettings

__all__ = [
    "PerQuery",
    "effective_ops",
    "flatten",
    "query_constraints",
    "query_participation",
    "reads",
]

#: Per query name, per class of the constraint: the query's participation.
PerQuery = Mapping[str, Mapping[str, Participation]]


def query_constraints(settings: ReleaseSettings) -> dict[str, Constraint] | None:
    """Per query, the constraint it is accounted under; None when every query's is the
    release's own (then nothing is accounted per query)."""
    if settings.on_exhausted != "freeze":  # a retirement removes rows at any op
        return None
    unit_is_entry = settings.owner is None
    out = {
        q.name: query_constraint(
            settings.constraint, q.touched_by(), unit_is_entry=unit_is_entry, reads=reads(q)
        )
        for q in settings.queries
    }
    if all(c == settings.constraint for c in out.values()):
        return None
    plan = settings.plan
    full = plan.participation(settings.constraint, reporting=None)
    if any(p.runs is not None for p in full.values()):
        return None  # runs refine one layer of alike groups only: keep the plan's accounting
    return out


def reads(query: object) -> frozenset[str] | None:
    """The columns of the row a query of the live rows reads (its ``column`` and its
    ``where``); None for any other query (the exhausted count, event queries)."""
    if isinstance(query, Exhausted) or not isinstance(query, Count | Sum | Histogram):
        return None
    columns = {getattr(query, "column", None), getattr(query, "by", None)} - {None, ""}
    return frozenset(query.where) | frozenset(str(c) for c in columns)


def effective_ops(settings: ReleaseSettings, query: Any) -> frozenset[str]:
    """The ops that can change ``query`` under the settings' constraint: its ``touched_by``,
    without updates when every class's per-op limits declare all the columns it reads
    immutable."""
    from dpcr.bounding.constraints import Hybrid
    from dpcr.bounding.state_machine import OpLimits

    ops = frozenset(query.touched_by())
    cols = reads(query)
    con = settings.constraint
    classes = list(con.all_classes().values()) if isinstance(con, Hybrid) else [con]
    if cols is not None and settings.on_exhausted == "freeze" and all(
        isinstance(c, OpLimits) and cols <= frozenset(c.immutable) for c in classes
    ):
        return ops - {"update"}
    return ops


def query_participation(
    settings: ReleaseSettings,
    constraints: Mapping[str, Constraint] | None,
    reporting: int | None,
) -> dict[str, dict[str, Participation]] | None:
    """Per query and class, the participation among the first ``reporting`` releases (None:
    the whole plan); None when ``constraints`` is None (no per-query accounting)."""
    if constraints is None:
        return None
    out: dict[str, dict[str, Participation]] = {}
    for name, con in constraints.items():
        parts = settings.plan.participation(con, reporting=reporting)
        out[name] = {c: Participation(counts=p.counts) for c, p in parts.items()}
    return out


def flatten(
    instances: Sequence[Sequence[Mapping[str, DpEvent]]], per_query: PerQuery
) -> tuple[list[list[DpEvent]], dict[str, Participation]]:
    """``instances[l]``: the instances of layer ``l``, each a mapping query -> event. Returns
    one group per (layer, query) -- the events of that query in those instances -- and per
    class the participation of every group (``counts_q[l]``): the composition a unit of that
    class meets, query by query."""
    names = list(per_query)
    classes = list(per_query[names[0]]) if names else []
    groups: list[list[DpEvent]] = []
    counts: dict[str, list[int]] = {c: [] for c in classes}
    for layer, layer_instances in enumerate(instances):
        for q in names:
            groups.append([inst[q] for inst in layer_instances])
            for c in classes:
                p = per_query[q][c].counts
                counts[c].append(p[layer] if layer < len(p) else 0)
    return groups, {c: Participation(counts=tuple(v)) for c, v in counts.items()}
