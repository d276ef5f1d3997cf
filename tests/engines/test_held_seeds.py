"""The held seeds' look-up of units (dpcr.engines.duckdb_held.Seeds.grow): integers looked up
by array give the ids their texts get, whichever way each unit was first seen."""

from __future__ import annotations

import random

import numpy as np

from dpcr.engines.duckdb_held import Seeds
from dpcr.engines.state import DICT_BASE, own_id


def test_integers_and_texts_get_one_id_per_unit() -> None:
    rng = random.Random(5)
    seeds = Seeds(1)
    index: dict[str, int] = {}  # the reference: text -> index, in order of first sight
    for _ in range(300):
        roll = rng.random()
        if roll < 0.5:  # integers, as the array read gives them (some beyond the table)
            top = rng.choice([50, 5000, 1 << 23])
            values = np.array([rng.randrange(top) for _ in range(rng.randint(0, 40))],
                              dtype=np.int64)  # fmt: skip
            texts = list(map(str, values.tolist()))
            got = seeds.grow(values)
        else:  # texts: integers' and others'
            texts = [rng.choice([str(rng.randrange(5000)), f"e{rng.randrange(30)}", "007", "-3"])
                     for _ in range(rng.randint(0, 40))]  # fmt: skip
            got = seeds.grow(texts)
        for t in texts:
            index.setdefault(t, len(index))
        assert got.tolist() == [index[t] for t in texts]
        assert seeds.keys == list(index)
        sid = seeds.sid[:len(seeds.keys)]
        own = [own_id(k) for k in seeds.keys]
        assert all(s == o for s, o in zip(sid.tolist(), own, strict=True) if o is not None)
        assert all(s > DICT_BASE for s, o in zip(sid.tolist(), own, strict=True) if o is None)
