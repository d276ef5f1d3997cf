"""A step's batch of rows (dpcr.engines.held_columns.Batch): :meth:`~Batch.take` and
:meth:`~Batch.concat` carry every field by the kind it declares, so that a field added to the
dataclass is carried by both (or refused, when it declares no kind)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from dpcr.engines.held_columns import QUERY_ROW, READ, ROW, Batch


def _batch(rows: int, start: int, *, entries: str = "texts") -> Batch:
    """A batch of ``rows`` rows of two queries, every field set (no default), each row's
    values distinct from the others' (``start``: the first row's number)."""
    values: dict[str, Any] = {}
    numbers = np.arange(start, start + rows, dtype=np.int64)
    for f in dataclasses.fields(Batch):
        kind = f.metadata.get("kind")
        if kind == ROW:
            values[f.name] = [f"e{n}" for n in numbers.tolist()] if f.name == "entries" \
                and entries == "texts" else numbers * 10 + len(values)  # fmt: skip
        elif kind == QUERY_ROW:
            values[f.name] = np.stack([numbers * 100 + len(values), -numbers])
        elif kind == READ:
            values[f.name] = 1000 + start + len(values)
        else:
            pytest.fail(f"the Batch field {f.name} declares no kind (ROW, QUERY_ROW, READ)")
    return Batch(**values)


def test_every_field_declares_its_kind() -> None:
    kinds = {f.name: f.metadata.get("kind") for f in dataclasses.fields(Batch)}
    assert all(kind in (ROW, QUERY_ROW, READ) for kind in kinds.values()), kinds
    assert kinds["line"] == ROW and kinds["f"] == QUERY_ROW and kinds["records"] == READ


@pytest.mark.parametrize("entries", ["texts", "integers"])
def test_take_carries_every_field(entries: str) -> None:
    batch = _batch(6, 1, entries=entries)
    mask = np.array([True, False, True, True, False, False])
    got = batch.take(mask)
    at = np.flatnonzero(mask)
    for f in dataclasses.fields(Batch):
        value, taken = getattr(batch, f.name), getattr(got, f.name)
        kind = f.metadata["kind"]
        if kind == ROW:
            assert list(np.asarray(value)[at]) == list(taken), f.name
        elif kind == QUERY_ROW:
            assert np.array_equal(value[:, at], taken), f.name
        else:  # (what the batch read: kept)
            assert taken == value, f.name
    assert got.counts() == batch.counts()


def test_take_keeps_the_counts_of_a_batch_of_one_record_a_row() -> None:
    batch = dataclasses.replace(_batch(4, 1), records=None, lines=None)
    got = batch.take(np.array([False, True, False, False]))
    assert got.counts() == (4, 4) and len(got.ts) == 1


def test_concat_carries_every_field() -> None:
    held, new = _batch(3, 1), _batch(4, 50)
    got = held.concat(new, 7)
    for f in dataclasses.fields(Batch):
        mine, theirs, joined = getattr(held, f.name), getattr(new, f.name), \
            getattr(got, f.name)  # fmt: skip
        kind = f.metadata["kind"]
        if kind == ROW:
            first = np.asarray(mine) - 7 if f.name == "line" else mine
            assert list(joined) == [*list(first), *list(theirs)], f.name
        elif kind == QUERY_ROW:
            assert np.array_equal(joined, np.concatenate([mine, theirs], axis=1)), f.name
        else:  # (what the new records' lines read)
            assert joined == theirs, f.name


def test_concat_of_nothing_new_keeps_the_held_rows() -> None:
    held = _batch(3, 1)
    empty = np.zeros(0, dtype=np.int64)
    nothing = Batch([], empty, empty.astype(np.int8), np.zeros((2, 0), np.int64),
                    np.zeros((2, 0), bool))  # fmt: skip
    got = held.concat(nothing, 5)
    assert got.counts() == (0, 0) and got.tombstones == 0
    assert held.line is not None and got.line is not None
    assert got.line.tolist() == (held.line - 5).tolist()
    assert list(got.entries) == list(held.entries)
    with pytest.raises(ValueError, match="column seq"):
        dataclasses.replace(held, seq=None).concat(_batch(2, 9), 0)
